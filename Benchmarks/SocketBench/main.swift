// evstore-socket-bench: the daemon's figures over its Unix socket, each with a baseline
// measured in the same run. Prints a table and writes JSON.
//
//   evstore-socket-bench --bin DIR --workload events.ndjson [--large events.ndjson]
//                        [--dir DIR] [--json FILE] [--seconds S] [--only SECTIONS]
//
// --only takes a comma-separated list of sections: bulk, watch, appends, get, getsync, sync, saturated, large.
//
// - bulk `evctl append --file` of the workload, against the daemon's own commit rate
//   for the same events in large batches (what the writer alone can do);
// - the same bulk append with a client watching every event, against none, alternately;
// - 16 clients each appending one durable event at a time, against 1 such client;
// - `get` round trips, p50/p99, 1 and 8 clients, against a request the daemon answers
//   without touching the store (the transport's floor), and against Redis's HGETALL of
//   a hash holding the same entity's fields (redis-server on the same CPU, when installed);
// - `get` with `sync: true` (per-item sync status) p50/p99, 1 client, against plain `get`
//   of the same entities, with two configured peers that hold everything;
// - a saturated queue: the workload appended while the node's peer is down, then the
//   one background session that delivers it when the peer returns, against bulk append
//   of the same events in the same run;
// - with --large (1M events): resident memory after loading them, and start to READY
//   on that store (READY as systemd's NOTIFY_SOCKET receives it).
import Foundation
import UnixSocket

struct Options {
    var bin = ".build/release"
    var workload = ""
    var large: String?
    var directory = FileManager.default.temporaryDirectory.appendingPathComponent("evstore-socket-bench").path
    var json: String?
    var seconds = 5.0
    /// The sections to run; all when empty.
    var only: Set<String> = []
    static let sections: Set<String> = ["bulk", "watch", "appends", "get", "getsync", "sync", "saturated", "large"]

    init() {
        var args = CommandLine.arguments.dropFirst().makeIterator()
        while let arg = args.next() {
            switch arg {
            case "--bin": bin = args.next() ?? bin
            case "--workload": workload = args.next() ?? ""
            case "--large": large = args.next()
            case "--dir": directory = URL(fileURLWithPath: args.next() ?? directory).standardizedFileURL.path
            case "--json": json = args.next()
            case "--seconds": seconds = Double(args.next() ?? "") ?? seconds
            case "--only":
                only = Set((args.next() ?? "").split(separator: ",").map(String.init))
                guard only.isSubset(of: Options.sections) else { Options.usage() }
            default: Options.usage()
            }
        }
        guard !workload.isEmpty else {
            FileHandle.standardError.write(Data("--workload FILE is required (fieldops.py output)\n".utf8))
            exit(64)
        }
    }

    static func usage() -> Never {
        FileHandle.standardError.write(
            Data(
                ("usage: evstore-socket-bench --bin DIR --workload FILE [--large FILE] [--dir DIR] [--json FILE]"
                    + " [--seconds S] [--only bulk,watch,appends,get,getsync,sync,saturated,large]\n").utf8))
        exit(64)
    }

    func runs(_ section: String) -> Bool { only.isEmpty || only.contains(section) }
}

struct Row {
    var name: String
    var value: Double
    var unit: String
    var note = ""
}

struct BenchError: Error, CustomStringConvertible {
    var description: String
}

/// What the block device holding a directory has written since boot, from /proc/diskstats:
/// 512-byte sectors and write requests completed. It counts every writer of that device
/// (the file system's journal as well), so it is read over a run with nothing else writing.
/// `/proc/PID/io`'s `write_bytes` cannot stand in for it: it counts each page-cache folio a
/// write dirties whole, and on file systems with large folios (ext4 from Linux 6.16) that
/// is up to several times the pages that reach the device.
struct DeviceWrites {
    var sectors = 0
    var requests = 0

    /// The counters of the device holding `path`; nil when it is not a block device's
    /// (tmpfs, overlay) or /proc/diskstats does not list it.
    init?(holding path: String) {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        let device = UInt64(info.st_dev)
        let major = ((device >> 8) & 0xfff) | ((device >> 32) & ~0xfff)
        let minor = (device & 0xff) | ((device >> 12) & ~0xff)
        guard major != 0, let table = try? String(contentsOfFile: "/proc/diskstats", encoding: .utf8) else {
            return nil
        }
        for line in table.split(separator: "\n") {
            // major minor name reads merged sectors ms writes merged sectors ...
            let fields = line.split(separator: " ")
            guard fields.count > 9, UInt64(fields[0]) == major, UInt64(fields[1]) == minor,
                let requests = Int(fields[7]), let sectors = Int(fields[9])
            else { continue }
            self.sectors = sectors
            self.requests = requests
            return
        }
        return nil
    }

    private init(sectors: Int, requests: Int) {
        self.sectors = sectors
        self.requests = requests
    }

    /// What was written between `earlier` and `later`; nil when either could not be read.
    static func between(_ earlier: DeviceWrites?, _ later: DeviceWrites?) -> DeviceWrites? {
        guard let earlier, let later else { return nil }
        return DeviceWrites(sectors: later.sectors - earlier.sectors, requests: later.requests - earlier.requests)
    }
}

/// A daemon started for one measurement.
final class Daemon {
    let process = Process()
    let socket: String
    let root: String
    /// Seconds from spawn to READY=1 on the notify socket.
    private(set) var secondsToReady = 0.0

    init(bin: String, root: String, extra: [String] = [], cpu: Int = 0) throws {
        self.root = root
        socket = root + "/evstored.sock"
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        let notify = try DatagramReceiver(path: root + "/notify-\(UUID().uuidString.prefix(6)).sock")
        let arguments = ["--data-dir", root + "/data", "--socket", socket] + extra
        if Daemon.pinned {
            // The daemon on CPU 0; `make bench` runs this process (the clients) on CPU 1.
            process.executableURL = URL(fileURLWithPath: "/usr/bin/taskset")
            process.arguments = ["-c", "\(cpu)", bin + "/evstored"] + arguments
        } else {
            process.executableURL = URL(fileURLWithPath: bin + "/evstored")
            process.arguments = arguments
        }
        var environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("EVSTORE_") }
        environment["NOTIFY_SOCKET"] = notify.path
        process.environment = environment
        process.standardError = FileHandle(forWritingAtPath: "/dev/null")
        let start = ContinuousClock.now
        try process.run()
        while true {
            guard let message = try notify.receive(timeout: 120) else {
                throw BenchError(description: "no READY in 120 s")
            }
            if String(decoding: message, as: UTF8.self).contains("READY=1") { break }
        }
        secondsToReady = seconds(ContinuousClock.now - start)
    }

    /// Whether the daemon runs on a CPU of its own (taskset, two CPUs or more).
    static let pinned =
        FileManager.default.isExecutableFile(atPath: "/usr/bin/taskset")
        && ProcessInfo.processInfo.activeProcessorCount >= 2

    /// Resident memory of the daemon, from /proc.
    var residentBytes: Int { status("VmRSS:") }

    /// Its anonymous resident memory (heap and stacks, not the store's mapped pages).
    var anonymousBytes: Int { status("RssAnon:") }

    /// A field of /proc/PID/status given in kB, in bytes.
    func status(_ field: String) -> Int {
        guard let status = try? String(contentsOfFile: "/proc/\(process.processIdentifier)/status", encoding: .utf8)
        else { return 0 }
        for line in status.split(separator: "\n") where line.hasPrefix(field) {
            return (Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0) * 1024
        }
        return 0
    }

    /// Bytes the daemon has caused to be written to the disk, and the CPU time it has
    /// used (and of it, in the kernel), from /proc.
    var ioAndCPU: (writeBytes: Int, cpuSeconds: Double, systemSeconds: Double) {
        let pid = process.processIdentifier
        var written = 0
        if let io = try? String(contentsOfFile: "/proc/\(pid)/io", encoding: .utf8) {
            for line in io.split(separator: "\n") where line.hasPrefix("write_bytes:") {
                written = Int(line.split(separator: " ").last ?? "") ?? 0
            }
        }
        var cpu = 0.0
        var kernel = 0.0
        if let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        {
            // After the command's closing parenthesis: fields 3 on; utime and stime are 14, 15.
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            if fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) {
                cpu = (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
                kernel = system / Double(sysconf(Int32(_SC_CLK_TCK)))
            }
        }
        return (written, cpu, kernel)
    }

    func stop() {
        process.terminate()
        process.waitUntilExit()
    }
}

/// A blocking JSON-RPC client: one request, one response line.
final class Client {
    let connection: UnixConnection
    var reader = LineReader(limit: 1 << 30)

    init(_ path: String) throws {
        connection = try UnixConnection.connect(to: path)
    }

    /// The `result` of a call, as a JSON object.
    func call(_ method: String, _ params: String = "{}") throws -> [String: Any] {
        let line = try roundTrip(
            Array(#"{"jsonrpc":"2.0","id":1,"method":"\#(method)","params":\#(params)}"#.utf8) + [0x0A])
        guard let object = try JSONSerialization.jsonObject(with: Data(line)) as? [String: Any],
            let result = object["result"] as? [String: Any]
        else { throw BenchError(description: "\(method) failed: \(String(decoding: line, as: UTF8.self))") }
        return result
    }

    /// The events the daemon holds, by its status; -1 when it does not answer.
    func events() -> Int {
        ((try? call("status"))?["events"] as? Int) ?? -1
    }

    /// Syncs with `peer`; its entry of the answer, checked for success.
    func sync(_ peer: String) throws -> (outcome: [String: Any], seconds: Double) {
        let start = ContinuousClock.now
        let result = try call("sync", #"{"peer":"\#(peer)"}"#)
        let elapsed = seconds(ContinuousClock.now - start)
        guard let outcome = (result["peers"] as? [[String: Any]])?.first, outcome["error"] is NSNull else {
            throw BenchError(description: "sync failed: \(result)")
        }
        return (outcome, elapsed)
    }

    func roundTrip(_ line: [UInt8]) throws -> [UInt8] {
        try connection.write(line)
        switch try reader.next(reading: { buffer, count in try connection.read(into: &buffer, count: count) }) {
        case .line(let bytes): return bytes
        default: throw BenchError(description: "the daemon closed the connection")
        }
    }
}

func seconds(_ duration: Duration) -> Double {
    Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
}

func percentile(_ sorted: [Double], _ p: Double) -> Double {
    guard !sorted.isEmpty else { return 0 }
    return sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]
}

func runEvctl(_ bin: String, socket: String, _ arguments: [String]) throws -> Double {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: bin + "/evctl")
    process.arguments = ["--socket", socket] + arguments
    process.standardOutput = FileHandle(forWritingAtPath: "/dev/null")
    // Timed to its exit as the child-exit signal reports it: `waitUntilExit` polls every
    // 50 ms here, which rounded a one-second load up to the next twentieth of a second.
    let exited = DispatchSemaphore(value: 0)
    process.terminationHandler = { _ in exited.signal() }
    let start = ContinuousClock.now
    try process.run()
    exited.wait()
    let elapsed = ContinuousClock.now - start
    guard process.terminationStatus == 0 else {
        throw BenchError(description: "evctl \(arguments.joined(separator: " ")) exited \(process.terminationStatus)")
    }
    return seconds(elapsed)
}

/// Round-trip latencies in µs: `clients` threads, 20,000 requests in all; `connect`
/// makes each thread's client and returns its round trip for request number n.
func latencies(clients: Int, connect: @escaping @Sendable () throws -> (Int) throws -> Void) throws -> [Double] {
    let counter = Counter()
    let group = DispatchGroup()
    let perClient = 20_000 / clients
    for index in 0..<clients {
        group.enter()
        Thread.detachNewThread {
            defer { group.leave() }
            guard let roundTrip = try? connect() else { return }
            var samples: [Double] = []
            samples.reserveCapacity(perClient)
            for n in 0..<perClient {
                let start = ContinuousClock.now
                guard (try? roundTrip(index * perClient + n)) != nil else { return }
                samples.append(seconds(ContinuousClock.now - start) * 1e6)
            }
            counter.add(samples: samples)
        }
    }
    group.wait()
    return counter.sorted
}

/// A redis-server on a Unix socket, pinned like the daemon, without persistence: the
/// baseline for a read of one entity.
final class Redis {
    let process = Process()
    let socket: String

    /// Nil when redis-server is not installed.
    init?(root: String) throws {
        guard
            let server = ["/usr/bin/redis-server", "/usr/local/bin/redis-server"].first(where: {
                FileManager.default.isExecutableFile(atPath: $0)
            })
        else { return nil }
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        socket = root + "/redis.sock"
        let arguments = [
            "--port", "0", "--unixsocket", socket, "--unixsocketperm", "700", "--save", "", "--appendonly", "no",
            "--dir", root, "--daemonize", "no",
        ]
        if Daemon.pinned {
            process.executableURL = URL(fileURLWithPath: "/usr/bin/taskset")
            process.arguments = ["-c", "0", server] + arguments
        } else {
            process.executableURL = URL(fileURLWithPath: server)
            process.arguments = arguments
        }
        process.standardOutput = FileHandle(forWritingAtPath: "/dev/null")
        try process.run()
        let deadline = ContinuousClock.now + .seconds(20)
        while (try? UnixConnection.connect(to: socket)) == nil {
            guard ContinuousClock.now < deadline, process.isRunning else {
                throw BenchError(description: "redis-server did not start")
            }
            Thread.sleep(forTimeInterval: 0.02)
        }
    }

    func stop() {
        process.terminate()
        process.waitUntilExit()
    }
}

/// A blocking RESP client: commands out, whole replies in (their bytes are counted, not
/// decoded).
final class RedisClient {
    let connection: UnixConnection
    var buffer: [UInt8] = []

    init(_ path: String) throws {
        connection = try UnixConnection.connect(to: path)
    }

    /// Sends one command and reads its reply; the reply's size in bytes.
    func call(_ arguments: [String]) throws -> Int {
        try connection.write(RedisClient.encode(arguments))
        return try reply()
    }

    /// Sends the commands in one write, then reads their replies.
    func pipeline(_ commands: [[String]]) throws {
        try connection.write(commands.flatMap(RedisClient.encode))
        for _ in commands { _ = try reply() }
    }

    static func encode(_ arguments: [String]) -> [UInt8] {
        var out = Array("*\(arguments.count)\r\n".utf8)
        for argument in arguments {
            let bytes = Array(argument.utf8)
            out += Array("$\(bytes.count)\r\n".utf8) + bytes + [0x0D, 0x0A]
        }
        return out
    }

    private func reply() throws -> Int {
        while true {
            if let end = RedisClient.end(of: buffer, from: 0) {
                if end.error { throw BenchError(description: String(decoding: buffer[..<end.offset], as: UTF8.self)) }
                buffer.removeFirst(end.offset)
                return end.offset
            }
            guard try connection.read(into: &buffer, count: 1 << 16) > 0 else {
                throw BenchError(description: "redis closed the connection")
            }
        }
    }

    /// Where the reply starting at `start` ends, when the buffer holds all of it.
    static func end(of buffer: [UInt8], from start: Int) -> (offset: Int, error: Bool)? {
        guard start < buffer.count else { return nil }
        var lineEnd = start
        while lineEnd + 1 < buffer.count, !(buffer[lineEnd] == 0x0D && buffer[lineEnd + 1] == 0x0A) { lineEnd += 1 }
        guard lineEnd + 1 < buffer.count else { return nil }
        let number = Int(String(decoding: buffer[(start + 1)..<lineEnd], as: UTF8.self)) ?? -1
        let next = lineEnd + 2
        switch buffer[start] {
        case UInt8(ascii: "$"):
            if number < 0 { return (next, false) }
            return next + number + 2 <= buffer.count ? (next + number + 2, false) : nil
        case UInt8(ascii: "*"):
            var offset = next
            for _ in 0..<max(0, number) {
                guard let element = end(of: buffer, from: offset) else { return nil }
                offset = element.offset
            }
            return (offset, false)
        default:
            return (next, buffer[start] == UInt8(ascii: "-"))
        }
    }
}

/// Each entity of the workload as a hash: its edited fields (last write wins), its status
/// and its sets' elements, what a `get` of it shows.
func redisHashes(_ lines: [String]) -> [(key: String, fields: [(String, String)])] {
    var hashes: [String: [String: String]] = [:]
    for line in lines {
        guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
            let entity = object["entity"] as? String
        else { continue }
        var hash = hashes[entity] ?? [:]
        switch object["kind"] as? String {
        case "edit":
            for (name, value) in object["fields"] as? [String: Any] ?? [:] { hash[name] = "\(value)" }
        case "status":
            hash["status"] = object["status"] as? String ?? ""
        case "add":
            if let set = object["set"] as? String, let element = object["element"] as? String {
                hash["set:" + set] = (hash["set:" + set].map { $0 + "," } ?? "") + element
            }
        default:
            break
        }
        hash["by"] = object["by"] as? String ?? ""
        hashes[entity] = hash
    }
    return hashes.sorted { $0.key < $1.key }.map { (key: $0.key, fields: $0.value.sorted { $0.key < $1.key }) }
}

let options = Options()
// The idle-connections measurement holds 1,000 sockets here and in the daemon (which
// inherits the limit): the soft descriptor limit up to the hard one.
do {
    var limit = rlimit()
    getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    limit.rlim_cur = limit.rlim_max
    setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
}
let bin = options.bin
try? FileManager.default.removeItem(atPath: options.directory)
try FileManager.default.createDirectory(atPath: options.directory, withIntermediateDirectories: true)
let lines = try String(contentsOfFile: options.workload, encoding: .utf8).split(separator: "\n").map(String.init)
let entities = Array(
    Set(
        lines.compactMap { line -> String? in
            guard let range = line.range(of: #""entity":""#) else { return nil }
            return String(line[range.upperBound...].prefix { $0 != "\"" })
        })
).sorted()
var rows: [Row] = []
print(
    "workload: \(lines.count) events, \(entities.count) entities; "
        + (Daemon.pinned ? "evstored pinned to CPU 0" : "no CPU pinning (taskset missing or one CPU)"))

// 1. Bulk append over the socket with evctl, against the writer's own rate for the same
//    events sent in batches of 1000 by a client that does nothing else.
if options.runs("bulk") {
    let bulk = try Daemon(bin: bin, root: options.directory + "/bulk")
    let deviceBefore = DeviceWrites(holding: bulk.root)
    let elapsed = try runEvctl(bin, socket: bulk.socket, ["append", "--file", options.workload])
    let device = DeviceWrites.between(deviceBefore, DeviceWrites(holding: bulk.root))
    bulk.stop()
    if let device {
        // Write amplification: what reached the device per byte of the NDJSON loaded.
        let input = (try? FileManager.default.attributesOfItem(atPath: options.workload)[.size] as? Int) ?? 0
        rows.append(
            Row(
                name: "bulk load: device bytes written per byte of input",
                value: Double(device.sectors * 512) / Double(max(input, 1)),
                unit: "x", note: "/proc/diskstats, \(input) bytes of NDJSON"))
    }
    let direct = try Daemon(bin: bin, root: options.directory + "/direct")
    let client = try Client(direct.socket)
    var requests: [[UInt8]] = []
    for start in stride(from: 0, to: lines.count, by: 1000) {
        let batch = lines[start..<min(start + 1000, lines.count)].joined(separator: ",")
        requests.append(
            Array(#"{"jsonrpc":"2.0","id":1,"method":"append","params":{"events":[\#(batch)]}}"#.utf8) + [0x0A])
    }
    let start = ContinuousClock.now
    for request in requests { _ = try client.roundTrip(request) }
    let directSeconds = seconds(ContinuousClock.now - start)
    direct.stop()
    let bulkRate = Double(lines.count) / elapsed
    let directRate = Double(lines.count) / directSeconds
    rows.append(
        Row(
            name: "bulk evctl append --file", value: bulkRate, unit: "events/s",
            note: "whole process, \(lines.count) events"))
    rows.append(Row(name: "baseline: 1000-event requests, one at a time", value: directRate, unit: "events/s"))
    rows.append(Row(name: "bulk evctl / baseline", value: bulkRate / directRate, unit: "x"))
}

// 1b. The same bulk append with a client watching every event (the writer publishes each
//     committed event to it from memory), against none: three alternating rounds, a fresh
//     daemon each, medians kept. "Delivered" is until the watcher has read the last event.
final class Watcher: @unchecked Sendable {
    private let client: Client
    private let finished = DispatchSemaphore(value: 0)
    private var count = 0

    init(socket: String) throws {
        client = try Client(socket)
        // The answer to watch is one line; what follows is one line per event.
        _ = try client.call("watch", "{}")
    }

    /// Reads notifications on a thread of its own until `expected` events have come. It
    /// only counts line ends: a watcher that parsed each line would take the CPU the
    /// appending client shares with it, and this measures the daemon.
    func start(expecting expected: Int) {
        Thread.detachNewThread { [self] in
            defer { finished.signal() }
            var buffer: [UInt8] = []
            while count < expected {
                buffer.removeAll(keepingCapacity: true)
                guard let read = try? client.connection.read(into: &buffer, count: 1 << 20), read > 0 else { return }
                for byte in buffer where byte == 0x0A { count += 1 }
            }
        }
    }

    /// Whether every expected event arrived within `seconds`.
    func wait(seconds: Double) -> Bool { finished.wait(timeout: .now() + seconds) == .success }
}

if options.runs("watch") {
    var without: [Double] = []
    var with: [Double] = []
    var delivered: [Double] = []
    for round in 0..<3 {
        let plain = try Daemon(bin: bin, root: options.directory + "/watch-none-\(round)")
        without.append(
            Double(lines.count) / (try runEvctl(bin, socket: plain.socket, ["append", "--file", options.workload])))
        plain.stop()
        let watched = try Daemon(bin: bin, root: options.directory + "/watch-one-\(round)")
        let watcher = try Watcher(socket: watched.socket)
        watcher.start(expecting: lines.count)
        let start = ContinuousClock.now
        with.append(
            Double(lines.count) / (try runEvctl(bin, socket: watched.socket, ["append", "--file", options.workload])))
        guard watcher.wait(seconds: 300) else { throw BenchError(description: "the watcher did not get every event") }
        delivered.append(Double(lines.count) / seconds(ContinuousClock.now - start))
        watched.stop()
        try? FileManager.default.removeItem(atPath: options.directory + "/watch-none-\(round)")
        try? FileManager.default.removeItem(atPath: options.directory + "/watch-one-\(round)")
    }
    let median = { (values: [Double]) in values.sorted()[values.count / 2] }
    rows.append(
        Row(name: "bulk evctl append --file, no watcher", value: median(without), unit: "events/s", note: "median of 3")
    )
    rows.append(
        Row(name: "bulk evctl append --file, one watcher", value: median(with), unit: "events/s", note: "median of 3"))
    rows.append(
        Row(
            name: "the same, until the watcher has every event", value: median(delivered), unit: "events/s",
            note: "median of 3"))
    rows.append(
        Row(
            name: "bulk append with a watcher / without", value: median(with) / median(without), unit: "x",
            note: "goal ≥ 0.9"))
}

// 2. Durable single-event appends: 16 clients against 1, with what each commit costs the
//    daemon: events per commit (the writer's counter), pages per commit as write_bytes in
//    /proc/PID/io counts them (whole page-cache folios, see `DeviceWrites`), the 4 KiB
//    blocks and write requests the store's device took per commit (/proc/diskstats: the
//    pages LMDB wrote, its meta page, and any journal writes), and the daemon's CPU time
//    per event (/proc/PID/stat).
struct CommitCost {
    var rate = 0.0
    var eventsPerCommit = 0.0
    var pagesPerCommit = 0.0
    var deviceBlocksPerCommit: Double?
    var deviceRequestsPerCommit: Double?
    var cpuMicrosecondsPerEvent = 0.0
    /// Of it, in the kernel: the sockets, the wake-ups, the writes and flushes.
    var systemMicrosecondsPerEvent = 0.0
}

func singleEventRate(clients: Int, root: String) throws -> CommitCost {
    let daemon = try Daemon(bin: bin, root: root)
    defer { daemon.stop() }
    let socket = daemon.socket
    let counter = Counter()
    let probe = try Client(socket)
    let before = (try probe.call("status"), daemon.ioAndCPU)
    let deviceBefore = DeviceWrites(holding: root)
    let deadline = ContinuousClock.now + .seconds(options.seconds)
    let group = DispatchGroup()
    for index in 0..<clients {
        group.enter()
        Thread.detachNewThread {
            defer { group.leave() }
            guard let client = try? Client(socket) else { return }
            var sent = 0
            while ContinuousClock.now < deadline {
                let line = lines[(index * 7919 + sent) % lines.count]
                let request =
                    Array(#"{"jsonrpc":"2.0","id":1,"method":"append","params":{"events":[\#(line)]}}"#.utf8) + [0x0A]
                guard (try? client.roundTrip(request)) != nil else { return }
                sent += 1
            }
            counter.add(sent)
        }
    }
    group.wait()
    let after = (try probe.call("status"), daemon.ioAndCPU)
    let device = DeviceWrites.between(deviceBefore, DeviceWrites(holding: root))
    func commits(_ status: [String: Any]) -> Int { (status["writer"] as? [String: Any])?["commits"] as? Int ?? 0 }
    let made = max(1, commits(after.0) - commits(before.0))
    let events = max(1, counter.value)
    return CommitCost(
        rate: Double(counter.value) / options.seconds, eventsPerCommit: Double(events) / Double(made),
        pagesPerCommit: Double(after.1.writeBytes - before.1.writeBytes) / 4096 / Double(made),
        deviceBlocksPerCommit: device.map { Double($0.sectors) / 8 / Double(made) },
        deviceRequestsPerCommit: device.map { Double($0.requests) / Double(made) },
        cpuMicrosecondsPerEvent: (after.1.cpuSeconds - before.1.cpuSeconds) * 1e6 / Double(events),
        systemMicrosecondsPerEvent: (after.1.systemSeconds - before.1.systemSeconds) * 1e6 / Double(events))
}

final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var total = 0
    private var samples: [Double] = []
    func add(_ n: Int) { lock.withLock { total += n } }
    func add(samples more: [Double]) { lock.withLock { samples += more } }
    var value: Int { lock.withLock { total } }
    var sorted: [Double] { lock.withLock { samples.sorted() } }
}

if options.runs("appends") {
    let one = try singleEventRate(clients: 1, root: options.directory + "/single-1")
    let sixteen = try singleEventRate(clients: 16, root: options.directory + "/single-16")
    rows.append(Row(name: "durable single-event appends, 1 client", value: one.rate, unit: "events/s"))
    rows.append(Row(name: "durable single-event appends, 16 clients", value: sixteen.rate, unit: "events/s"))
    rows.append(
        Row(name: "16 clients / 1 client (group commit)", value: sixteen.rate / one.rate, unit: "x", note: "goal ≥ 8"))
    for (label, cost) in [("1 client", one), ("16 clients", sixteen)] {
        rows.append(Row(name: "events per commit, \(label)", value: cost.eventsPerCommit, unit: ""))
        rows.append(
            Row(
                name: "pages written per commit, \(label)", value: cost.pagesPerCommit, unit: "4 KiB",
                note: "write_bytes / commits (whole folios)"))
        if let blocks = cost.deviceBlocksPerCommit, let requests = cost.deviceRequestsPerCommit {
            rows.append(
                Row(
                    name: "device blocks written per commit, \(label)", value: blocks, unit: "4 KiB",
                    note: "/proc/diskstats"))
            rows.append(Row(name: "device write requests per commit, \(label)", value: requests, unit: ""))
        }
        rows.append(Row(name: "daemon CPU per event, \(label)", value: cost.cpuMicrosecondsPerEvent, unit: "µs"))
        rows.append(
            Row(
                name: "of it in the kernel, \(label)", value: cost.systemMicrosecondsPerEvent, unit: "µs",
                note: "system time: sockets, wake-ups, writes, flushes"))
    }
}

// 3. get round trips for random entities, against a request answered without the store,
//    and against Redis answering HGETALL for a hash of the same entity's fields.
if options.runs("get") {
    let daemon = try Daemon(bin: bin, root: options.directory + "/get")
    _ = try runEvctl(bin, socket: daemon.socket, ["append", "--file", options.workload])
    let socket = daemon.socket
    let names = entities
    let get: @Sendable (Int) -> [UInt8] = { n in
        let entity = names[(n &* 2_654_435_761) % names.count]
        return Array(#"{"jsonrpc":"2.0","id":1,"method":"get","params":{"entity":"\#(entity)"}}"#.utf8) + [0x0A]
    }
    let floor: @Sendable (Int) -> [UInt8] = { _ in
        Array(#"{"jsonrpc":"2.0","id":1,"method":"no_such_method"}"#.utf8) + [0x0A]
    }
    var getBytes = 0
    do {
        let client = try Client(socket)
        for n in 0..<100 { getBytes += try client.roundTrip(get(n)).count }
        getBytes /= 100
    }
    for clients in [1, 8] {
        let gets = try latencies(clients: clients) {
            let client = try Client(socket)
            return { n in _ = try client.roundTrip(get(n)) }
        }
        let floors = try latencies(clients: clients) {
            let client = try Client(socket)
            return { n in _ = try client.roundTrip(floor(n)) }
        }
        rows.append(
            Row(
                name: "get p50, \(clients) client(s)", value: percentile(gets, 0.5), unit: "µs",
                note: clients == 1 ? "\(getBytes) bytes per response" : ""))
        rows.append(Row(name: "get p99, \(clients) client(s)", value: percentile(gets, 0.99), unit: "µs"))
        rows.append(
            Row(
                name: "baseline: no-store request p50, \(clients) client(s)", value: percentile(floors, 0.5), unit: "µs"
            ))
        rows.append(
            Row(
                name: "baseline: no-store request p99, \(clients) client(s)", value: percentile(floors, 0.99),
                unit: "µs"))
    }
    // The same with 1,000 idle connections open as well (each answered once, then silent):
    // what connections that do nothing cost the ones that work. A p99 of 20,000 requests
    // follows whatever else the machine does from one measurement to the next (the writeback
    // of what the sections before wrote, above all), so three rounds each measure with the
    // idle connections and then, once they are closed, without: the ratio is the median of
    // the rounds' ratios, each from a back-to-back pair.
    func getP99(clients: Int) throws -> Double {
        percentile(
            try latencies(clients: clients) {
                let client = try Client(socket)
                return { n in _ = try client.roundTrip(get(n)) }
            }, 0.99)
    }
    var idleRounds: [Int: [(with: Double, ratio: Double)]] = [1: [], 8: []]
    for _ in 0..<3 {
        var idle: [Client] = []
        for _ in 0..<1000 {
            let client = try Client(socket)
            _ = try client.roundTrip(floor(0))
            idle.append(client)
        }
        let withIdle = try [1, 8].map(getP99)
        idle.removeAll()
        // The daemon has closed them before the next request is timed.
        Thread.sleep(forTimeInterval: 0.2)
        for (clients, with) in zip([1, 8], withIdle) {
            idleRounds[clients, default: []].append((with, with / max(try getP99(clients: clients), 1e-9)))
        }
    }
    for clients in [1, 8] {
        let rounds = idleRounds[clients] ?? []
        let median = { (values: [Double]) in values.sorted()[values.count / 2] }
        let ratios = rounds.map(\.ratio)
        rows.append(
            Row(
                name: "get p99, \(clients) client(s), 1,000 idle connections", value: median(rounds.map(\.with)),
                unit: "µs", note: "median of \(rounds.count) rounds"))
        rows.append(
            Row(
                name: "get p99 with 1,000 idle connections / without, \(clients) client(s)", value: median(ratios),
                unit: "x",
                note:
                    "goal ≤ 1.2; median of the rounds' \(ratios.map { String(format: "%.2f", $0) }.joined(separator: ", "))"
            ))
    }
    daemon.stop()

    if let redis = try Redis(root: options.directory + "/redis") {
        let hashes = redisHashes(lines)
        let loader = try RedisClient(redis.socket)
        for start in stride(from: 0, to: hashes.count, by: 1000) {
            let part = hashes[start..<min(start + 1000, hashes.count)]
            try loader.pipeline(part.map { ["HSET", $0.key] + $0.fields.flatMap { [$0.0, $0.1] } })
        }
        let hgetall: @Sendable (Int) -> [String] = { n in ["HGETALL", names[(n &* 2_654_435_761) % names.count]] }
        var redisBytes = 0
        for n in 0..<100 { redisBytes += try loader.call(hgetall(n)) }
        redisBytes /= 100
        let redisSocket = redis.socket
        for clients in [1, 8] {
            let reads = try latencies(clients: clients) {
                let client = try RedisClient(redisSocket)
                return { n in _ = try client.call(hgetall(n)) }
            }
            let getP99 = rows.first { $0.name == "get p99, \(clients) client(s)" }?.value ?? 0
            rows.append(
                Row(
                    name: "baseline: Redis HGETALL p50, \(clients) client(s)", value: percentile(reads, 0.5),
                    unit: "µs",
                    note: clients == 1 ? "\(redisBytes) bytes per response" : ""))
            rows.append(
                Row(
                    name: "baseline: Redis HGETALL p99, \(clients) client(s)", value: percentile(reads, 0.99),
                    unit: "µs"))
            rows.append(
                Row(
                    name: "get p99 / Redis HGETALL p99, \(clients) client(s)",
                    value: getP99 / max(percentile(reads, 0.99), 1e-9), unit: "x", note: "goal ≤ 1"))
        }
        redis.stop()
    } else {
        print("redis-server not found: no Redis baseline for get")
    }
}

// 3a. get with sync: true, against plain get of the same entities, with two peers
//     configured and synced (both hold every event: each of an entity's events is checked).
if options.runs("getsync") {
    let daemon = try Daemon(
        bin: bin, root: options.directory + "/getsync",
        extra: ["--sync-interval-s", "86400", "--backoff-base-s", "86400", "--backoff-cap-s", "86400"])
    let peers = try (1...2).map { try Daemon(bin: bin, root: options.directory + "/getsync-peer-\($0)", cpu: 1) }
    _ = try runEvctl(bin, socket: daemon.socket, ["append", "--file", options.workload])
    let client = try Client(daemon.socket)
    for (index, peer) in peers.enumerated() {
        _ = try client.call("peers.add", #"{"name":"peer-\#(index + 1)","url":"unix://\#(peer.socket)"}"#)
        _ = try client.sync("peer-\(index + 1)")
    }
    let check = try client.call("get", #"{"entity":"\#(entities[0])","sync":true}"#)
    guard (check["sync"] as? [String: String])?.values.allSatisfy({ $0 == "synced" }) == true else {
        throw BenchError(description: "get with sync after the syncs: \(check["sync"] ?? "none")")
    }
    let socket = daemon.socket
    let names = entities
    func request(sync: Bool) -> @Sendable (Int) -> [UInt8] {
        { n in
            let entity = names[(n &* 2_654_435_761) % names.count]
            return Array(
                #"{"jsonrpc":"2.0","id":1,"method":"get","params":{"entity":"\#(entity)"\#(sync ? #","sync":true"# : "")}}"#
                    .utf8) + [0x0A]
        }
    }
    let plain = request(sync: false)
    let withSync = request(sync: true)
    let plainTimes = try latencies(clients: 1) {
        let client = try Client(socket)
        return { n in _ = try client.roundTrip(plain(n)) }
    }
    let syncTimes = try latencies(clients: 1) {
        let client = try Client(socket)
        return { n in _ = try client.roundTrip(withSync(n)) }
    }
    rows.append(Row(name: "get with sync p50, 2 peers", value: percentile(syncTimes, 0.5), unit: "µs"))
    rows.append(Row(name: "get with sync p99, 2 peers", value: percentile(syncTimes, 0.99), unit: "µs"))
    rows.append(Row(name: "baseline: plain get p50, same entities", value: percentile(plainTimes, 0.5), unit: "µs"))
    rows.append(Row(name: "baseline: plain get p99, same entities", value: percentile(plainTimes, 0.99), unit: "µs"))
    rows.append(
        Row(
            name: "get with sync p99 / plain get p99",
            value: percentile(syncTimes, 0.99) / max(percentile(plainTimes, 0.99), 1e-9),
            unit: "x"))
    daemon.stop()
    for peer in peers { peer.stop() }
}

// 3b. Replication: a full sync of the workload between two daemons (each on a CPU of its
//     own) against bulk append of the same events in the same round, three rounds (a
//     fresh source loaded and a fresh target each), the median of the rounds' ratios kept:
//     one sync takes half a second, and one stall of the machine moved a single round's
//     ratio by a fifth. Then a sync with nothing new; bytes on the wire per event against
//     bytes stored per event.
if options.runs("sync") {
    struct SyncRound {
        var source: Daemon
        var target: Daemon
        var sent = 0
        var bytesSent = 0
        var syncRate = 0.0
        var bulkRate = 0.0
        var loadCPU = 0.0
        var senderCPU = 0.0
        var receiverCPU = 0.0
        var fullSeconds = 0.0
        var ratio: Double { syncRate / bulkRate }
    }
    var rounds: [SyncRound] = []
    for round in 1...3 {
        let source = try Daemon(bin: bin, root: options.directory + "/sync-source-\(round)", cpu: 0)
        let loadSeconds = try runEvctl(bin, socket: source.socket, ["append", "--file", options.workload])
        let target = try Daemon(bin: bin, root: options.directory + "/sync-target-\(round)", cpu: 1)
        var measured = SyncRound(source: source, target: target)
        measured.loadCPU = source.ioAndCPU.cpuSeconds
        let targetCPU = target.ioAndCPU.cpuSeconds
        let (full, fullSeconds) = try Client(source.socket).sync("unix://\(target.socket)")
        measured.sent = full["sent"] as? Int ?? 0
        measured.bytesSent = full["bytes_sent"] as? Int ?? 0
        measured.fullSeconds = fullSeconds
        measured.bulkRate = Double(lines.count) / loadSeconds
        measured.syncRate = Double(measured.sent) / fullSeconds
        measured.senderCPU = source.ioAndCPU.cpuSeconds - measured.loadCPU
        measured.receiverCPU = target.ioAndCPU.cpuSeconds - targetCPU
        rounds.append(measured)
    }
    // The round whose ratio is the median gives the rates and the CPU; its daemons stay
    // for the no-op syncs.
    let ratios = rounds.map(\.ratio)
    let middle = rounds.sorted { $0.ratio < $1.ratio }[rounds.count / 2]
    for other in rounds where other.source !== middle.source {
        other.source.stop()
        other.target.stop()
    }
    let (source, target, sent) = (middle.source, middle.target, middle.sent)
    let client = try Client(source.socket)
    rows.append(
        Row(
            name: "full sync between two daemons", value: middle.syncRate, unit: "events/s",
            note: "\(sent) events; the median round"))
    rows.append(
        Row(name: "baseline: bulk evctl append --file, same events", value: middle.bulkRate, unit: "events/s"))
    rows.append(
        Row(
            name: "full sync / bulk append", value: middle.ratio, unit: "x",
            note:
                "goal >= 1.2; median of the rounds' \(ratios.map { String(format: "%.2f", $0) }.joined(separator: ", "))"
        ))
    // Where each side's CPU went, per event: a daemon busy all the time the sync ran is the
    // one that bounds it.
    let perEvent = { (seconds: Double) in seconds * 1e6 / Double(max(1, sent)) }
    rows.append(
        Row(name: "bulk append: daemon CPU per event, from its start", value: perEvent(middle.loadCPU), unit: "µs"))
    rows.append(Row(name: "full sync: sender CPU per event", value: perEvent(middle.senderCPU), unit: "µs"))
    rows.append(
        Row(
            name: "full sync: receiver CPU per event", value: perEvent(middle.receiverCPU), unit: "µs",
            note: String(format: "busy %.0f %% of the sync", middle.receiverCPU / middle.fullSeconds * 100)))
    var noop: [Double] = []
    var noopBytes = 0
    for _ in 0..<5 {
        let (again, againSeconds) = try client.sync("unix://\(target.socket)")
        noop.append(againSeconds * 1000)
        noopBytes = (again["bytes_sent"] as? Int ?? 0) + (again["bytes_received"] as? Int ?? 0)
    }
    rows.append(Row(name: "no-op sync wall time", value: noop.sorted()[2], unit: "ms", note: "median of 5, goal < 20"))
    rows.append(
        Row(
            name: "no-op sync bytes on the wire", value: Double(noopBytes), unit: "bytes",
            note: "both ways, goal < 2048"))
    let status = try Client(target.socket).call("status")
    let storedPerEvent = Double(status["bytes"] as? Int ?? 0) / Double(max(1, status["events"] as? Int ?? 1))
    rows.append(
        Row(name: "wire bytes per event sent", value: Double(middle.bytesSent) / Double(max(1, sent)), unit: "bytes"))
    rows.append(Row(name: "baseline: store bytes per event (whole store)", value: storedPerEvent, unit: "bytes"))
    source.stop()
    target.stop()
}

// 3c. A saturated queue: the workload appended while the peer is down (the node retries
//     every second), then the peer starts and one background session delivers it all. The
//     pass is timed from the peer's READY to its last event, so it includes up to a second
//     of waiting for the node's next attempt; status is polled meanwhile, and how often
//     `pending` was seen between 0 and all (counting down batch by batch) is reported.
if options.runs("saturated") {
    let root = options.directory + "/saturated-node"
    let peerRoot = options.directory + "/saturated-peer"
    try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
    let peers = #"[{"name":"hq","url":"unix://\#(peerRoot)/evstored.sock"}]"#
    let config = #"{"peers":\#(peers),"sync_interval_s":1,"backoff_base_s":1,"backoff_cap_s":1}"#
    try config.write(toFile: root + "/evstored.json", atomically: true, encoding: .utf8)
    let node = try Daemon(bin: bin, root: root, extra: ["--config", root + "/evstored.json"], cpu: 0)
    let loadSeconds = try runEvctl(bin, socket: node.socket, ["append", "--file", options.workload])
    let client = try Client(node.socket)
    let total = client.events()
    let peer = try Daemon(bin: bin, root: peerRoot, cpu: 1)
    let peerClient = try Client(peer.socket)
    // The pass is timed from the first event's arrival (the session's start); the wait
    // before it is the node's backoff (1 s here) and is reported apart. Status is polled
    // every 100 ms: each call counts what the peer lacks, on the node's CPU.
    let returned = ContinuousClock.now
    var firstArrival: ContinuousClock.Instant?
    var between = 0
    while true {
        let held = peerClient.events()
        if held > 0, firstArrival == nil { firstArrival = ContinuousClock.now }
        if held >= total { break }
        if firstArrival != nil {
            let peers = (try? client.call("status"))?["peers"] as? [[String: Any]] ?? []
            if let pending = peers.first?["pending"] as? Int, pending > 0, pending < total { between += 1 }
        }
        if seconds(ContinuousClock.now - returned) > 3600 {
            throw BenchError(description: "the saturated pass took an hour")
        }
        usleep(firstArrival == nil ? 5_000 : 100_000)
    }
    let finished = ContinuousClock.now
    let passSeconds = seconds(finished - (firstArrival ?? returned))
    let passRate = Double(total) / passSeconds
    let bulkRate = Double(lines.count) / loadSeconds
    rows.append(
        Row(
            name: "saturated queue: background pass after the peer returns", value: passRate, unit: "events/s",
            note: "\(total) events, from the first arrival; pending seen between 0 and all \(between) times"))
    rows.append(
        Row(
            name: "saturated queue: from the peer's return to the first arrival",
            value: seconds((firstArrival ?? finished) - returned) * 1000, unit: "ms", note: "backoff 1 s"))
    rows.append(Row(name: "baseline: bulk evctl append --file, same run", value: bulkRate, unit: "events/s"))
    rows.append(Row(name: "saturated pass / bulk append", value: passRate / bulkRate, unit: "x"))
    node.stop()
    peer.stop()
}

// 4. The 1M-event store: memory after the load, start to READY (median of 3), against
//    start to READY on an empty store.
if let large = options.large, options.runs("large") {
    let root = options.directory + "/large"
    let daemon = try Daemon(bin: bin, root: root)
    let loadSeconds = try runEvctl(bin, socket: daemon.socket, ["append", "--file", large])
    let count = try String(contentsOfFile: large, encoding: .utf8).split(separator: "\n").count
    rows.append(
        Row(
            name: "bulk evctl append --file, large store", value: Double(count) / loadSeconds, unit: "events/s",
            note: "\(count) events"))
    rows.append(Row(name: "daemon RSS after the load", value: Double(daemon.residentBytes) / 1_048_576, unit: "MiB"))
    daemon.stop()
    var ready: [Double] = []
    var empty: [Double] = []
    for round in 0..<3 {
        let again = try Daemon(bin: bin, root: root)
        ready.append(again.secondsToReady * 1000)
        if round == 0 {
            rows.append(
                Row(
                    name: "daemon RSS after start, large store", value: Double(again.residentBytes) / 1_048_576,
                    unit: "MiB"))
            // Idle once it has served: a status, and a few seconds for its threads to settle.
            _ = try Client(again.socket).call("status")
            Thread.sleep(forTimeInterval: 3)
            rows.append(
                Row(
                    name: "idle daemon RssAnon, large store", value: Double(again.anonymousBytes) / 1_048_576,
                    unit: "MiB", note: "goal ≤ 30"))
        }
        again.stop()
        let fresh = try Daemon(bin: bin, root: options.directory + "/empty-\(round)")
        empty.append(fresh.secondsToReady * 1000)
        fresh.stop()
    }
    rows.append(
        Row(
            name: "start to READY, \(count)-event store", value: ready.sorted()[1], unit: "ms",
            note: "median of 3, goal < 200"))
    rows.append(
        Row(name: "baseline: start to READY, empty store", value: empty.sorted()[1], unit: "ms", note: "median of 3"))

    // A peer that holds the large store too, then 1000 new events on the large one.
    let largeSource = try Daemon(bin: bin, root: root, cpu: 0)
    let peer = try Daemon(bin: bin, root: options.directory + "/large-peer", cpu: 1)
    let client = try Client(largeSource.socket)
    let (full, fullSeconds) = try client.sync("unix://\(peer.socket)")
    rows.append(
        Row(
            name: "full sync, large store", value: Double(full["sent"] as? Int ?? 0) / fullSeconds, unit: "events/s",
            note: "\(full["sent"] as? Int ?? 0) events"))
    let fresh = (0..<1000).map { #"{"entity":"job/new-\#($0)","kind":"status","status":"assigned"}"# }.joined(
        separator: ",")
    _ = try client.call("append", #"{"events":[\#(fresh)]}"#)
    let (delta, deltaSeconds) = try client.sync("unix://\(peer.socket)")
    rows.append(
        Row(
            name: "sync of 1000 new events, large store", value: deltaSeconds * 1000, unit: "ms",
            note:
                "\(delta["sent"] as? Int ?? 0) events, \((delta["bytes_sent"] as? Int ?? 0) + (delta["bytes_received"] as? Int ?? 0)) bytes on the wire"
        ))
    let (noop, noopSeconds) = try client.sync("unix://\(peer.socket)")
    rows.append(
        Row(
            name: "no-op sync, large store", value: noopSeconds * 1000, unit: "ms",
            note: "\((noop["bytes_sent"] as? Int ?? 0) + (noop["bytes_received"] as? Int ?? 0)) bytes on the wire"))
    largeSource.stop()
    peer.stop()
}

print("")
let width = rows.map(\.name.count).max() ?? 0
for row in rows {
    let value = row.value >= 100 ? String(format: "%.0f", row.value) : String(format: "%.2f", row.value)
    print(
        row.name.padding(toLength: width + 2, withPad: " ", startingAt: 0)
            + value.padding(toLength: 12, withPad: " ", startingAt: 0)
            + row.unit.padding(toLength: 10, withPad: " ", startingAt: 0)
            + row.note)
}
if let path = options.json {
    let object = rows.map { ["name": $0.name, "value": $0.value, "unit": $0.unit, "note": $0.note] as [String: Any] }
    try JSONSerialization.data(withJSONObject: object, options: [.prettyPrinted, .sortedKeys]).write(
        to: URL(fileURLWithPath: path))
}
