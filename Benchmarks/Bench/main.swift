// evstore-bench: in-process figures for the storage core on the field workload, with the
// bare-LMDB ceiling measured in the same run. Prints a table and writes JSON.
//
//   evstore-bench --workload events.ndjson [--single N] [--repeat N] [--dir DIR] [--json FILE]
//   evstore-bench --workload events.ndjson --table-stats [--dir DIR]
//
// Throughput figures that are compared with each other (evstore against the ceiling) are
// measured --repeat times, alternating, and the medians are reported, so a noisy machine
// shifts both sides alike.
import EventStore
import Foundation
import Projections

struct Arguments {
    var workload = ""
    var single = 5000
    var directory = FileManager.default.temporaryDirectory.appendingPathComponent("evstore-bench").path
    var json: String?
    var repeats = 3
    /// Only the batched append, once: for profilers (`perf stat`, `perf record`, callgrind).
    var profileAppend = false
    /// Where to write the stored events' canonical JSON, one per line in id order: the
    /// input of the C ceiling in Benchmarks/baselines.
    var canonicalOut: String?
    /// Only the store's bytes, table by table, after the batched append: what each table's
    /// trees take (with the trees of `dupSort` values that `mdb_stat` leaves out).
    var tableStats = false

    init() {
        var args = CommandLine.arguments.dropFirst().makeIterator()
        while let arg = args.next() {
            switch arg {
            case "--workload": workload = args.next() ?? ""
            case "--single": single = Int(args.next() ?? "") ?? single
            case "--dir": directory = args.next() ?? directory
            case "--json": json = args.next()
            case "--repeat": repeats = max(1, Int(args.next() ?? "") ?? repeats)
            case "--profile-append": profileAppend = true
            case "--canonical-out": canonicalOut = args.next()
            case "--table-stats": tableStats = true
            default:
                FileHandle.standardError.write(
                    Data(
                        "usage: evstore-bench --workload FILE [--single N] [--repeat N] [--dir DIR] [--json FILE] [--profile-append] [--canonical-out FILE] [--table-stats]\n"
                            .utf8))
                exit(64)
            }
        }
        guard !workload.isEmpty else {
            FileHandle.standardError.write(Data("--workload FILE is required (fieldops.py output)\n".utf8))
            exit(64)
        }
    }
}

struct Row {
    var name: String
    var value: Double
    var unit: String
    var note: String = ""
}

func seconds(_ duration: Duration) -> Double {
    Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
}

func fresh(_ path: String) -> String {
    try? FileManager.default.removeItem(atPath: path)
    return path
}

func fileSize(_ path: String) -> Int {
    ((try? FileManager.default.attributesOfItem(atPath: path)[.size]) as? Int) ?? 0
}

let arguments = Arguments()
let lines: [[UInt8]] = try String(contentsOfFile: arguments.workload, encoding: .utf8)
    .split(separator: "\n").map { Array($0.utf8) }
let count = lines.count
try FileManager.default.createDirectory(atPath: arguments.directory, withIntermediateDirectories: true)
var rows: [Row] = []
let clock = ContinuousClock()
print("workload: \(count) events from \(arguments.workload)")

// 1. Batched append, 1000 per transaction. Decoding the NDJSON input and appending the
//    decoded batch are timed apart: in the daemon they run on different threads (decoding
//    on each client's connection, appending on the writer), and the ceiling below does
//    not parse JSON either. Dictionary training is timed on its own: it runs once.
struct BatchedRun {
    var decodeSeconds: Double
    var appendSeconds: Double
    var trainingSeconds: Double
    var appendRate: Double { Double(count) / appendSeconds }
    var decodeRate: Double { Double(count) / decodeSeconds }
    var combinedRate: Double { Double(count) / (appendSeconds + decodeSeconds) }
}

func batchedAppend(directory: String, trainAt: Int?) throws -> (BatchedRun, EventLog) {
    var options = StoreOptions()
    options.trainsDictionaryAutomatically = false
    let log = try EventLog.open(directory: fresh(directory), options: options)
    var decoding = Duration.zero
    var appending = Duration.zero
    var training = Duration.zero
    var start = 0
    while start < lines.count {
        let end = min(start + 1000, lines.count)
        var batch: [InputEvent] = []
        decoding += try clock.measure {
            batch.reserveCapacity(end - start)
            for line in lines[start..<end] { batch.append(try EventCodec.decodeInput(line)) }
        }
        appending += try clock.measure { _ = try log.append(batch) }
        if let trainAt, start < trainAt, end >= trainAt {
            training += try clock.measure { _ = try log.trainDictionary() }
        }
        start = end
    }
    let run = BatchedRun(
        decodeSeconds: seconds(decoding), appendSeconds: seconds(appending), trainingSeconds: seconds(training))
    return (run, log)
}

func median(_ values: [Double]) -> Double {
    let sorted = values.sorted()
    return sorted.count % 2 == 1
        ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
}

/// The ceiling: the same events' canonical JSON, zstd with a dictionary, under time-ordered
/// keys in a bare LMDB database; no index, no projection; 1000 per durable transaction.
struct Ceiling {
    let canonical: [(key: [UInt8], json: [UInt8])]
    let dictionary: CompressionDictionary
    let compressor = Compressor(level: 3)

    init(from log: EventLog) throws {
        var canonical: [(key: [UInt8], json: [UInt8])] = []
        var after: ULID?
        repeat {
            let page = try log.events(after: after, limit: 5000)
            canonical += page.events.map { ($0.id.bytes, EventCodec.encodeStored($0)) }
            after = page.next
        } while after != nil
        self.canonical = canonical
        dictionary = try CompressionDictionary(
            bytes: try DictionaryTrainer.train(
                samples: Array(canonical.prefix(20_000).map(\.json)), capacity: 32 * 1024),
            level: 3)
    }

    func run(directory: String) throws -> (rate: Double, bytes: Int) {
        let environment = try Environment(directory: fresh(directory), options: EnvironmentOptions())
        let db = try environment.openDatabase("events", flags: [.create])
        var bytes = 0
        let elapsed = try clock.measure {
            var index = 0
            while index < canonical.count {
                let end = min(index + 1000, canonical.count)
                try environment.write { txn in
                    for item in canonical[index..<end] {
                        let value = try compressor.compress(item.json, dictionary: dictionary)
                        bytes += value.count
                        try txn.put(db, item.key, value, flags: .append)
                    }
                }
                index = end
            }
        }
        return (Double(canonical.count) / seconds(elapsed), bytes)
    }
}

if arguments.profileAppend {
    let (run, _) = try batchedAppend(directory: arguments.directory + "/profile", trainAt: 10_000)
    print("append \(Int(run.appendRate)) events/s, decode \(Int(run.decodeRate)) events/s")
    exit(0)
}

if arguments.tableStats {
    try printTableStats()
    exit(0)
}

var runs: [BatchedRun] = []
var ceilingRates: [Double] = []
var ratios: [Double] = []
var combinedRatios: [Double] = []
var ceiling: Ceiling!
var ceilingBytes = 0
var log: EventLog!
var batchedDirectory = ""
for round in 0..<arguments.repeats {
    // Each round its own directory; only the last round's store is kept open.
    log = nil
    batchedDirectory = arguments.directory + "/batched-\(round + 1)"
    let (run, roundLog) = try batchedAppend(directory: batchedDirectory, trainAt: 10_000)
    log = roundLog
    if ceiling == nil {
        ceiling = try Ceiling(from: roundLog)
        if let path = arguments.canonicalOut {
            var text: [UInt8] = []
            for item in ceiling.canonical {
                text += item.json
                text.append(UInt8(ascii: "\n"))
            }
            try Data(text).write(to: URL(fileURLWithPath: path))
        }
    }
    let (ceilingRate, bytes) = try ceiling.run(directory: arguments.directory + "/ceiling")
    ceilingBytes = bytes
    runs.append(run)
    ceilingRates.append(ceilingRate)
    ratios.append(run.appendRate / ceilingRate * 100)
    combinedRatios.append(run.combinedRate / ceilingRate * 100)
    print(
        "round \(round + 1): append \(Int(run.appendRate)) events/s, decode \(Int(run.decodeRate)) events/s, ceiling \(Int(ceilingRate)) events/s"
    )
}
let batchedRate = median(runs.map(\.appendRate))
let repeats = "median of \(arguments.repeats)"
rows.append(Row(name: "append, 1000 per txn, decoded input", value: batchedRate, unit: "events/s", note: repeats))
rows.append(Row(name: "decode NDJSON input", value: median(runs.map(\.decodeRate)), unit: "events/s", note: repeats))
rows.append(
    Row(name: "decode + append, one thread", value: median(runs.map(\.combinedRate)), unit: "events/s", note: repeats))
rows.append(
    Row(
        name: "first dictionary training (once, at 10k events)", value: median(runs.map(\.trainingSeconds)) * 1000,
        unit: "ms"))
let (plain, plainLog) = try batchedAppend(directory: arguments.directory + "/plain", trainAt: nil)
rows.append(Row(name: "append, 1000 per txn, no dictionary", value: plain.appendRate, unit: "events/s"))

// 2. One event per durable transaction.
do {
    let single = try EventLog.open(directory: fresh(arguments.directory + "/single"))
    let n = min(arguments.single, count)
    let inputs = try lines.prefix(n).map { try EventCodec.decodeInput($0) }
    let elapsed = try clock.measure {
        for input in inputs { _ = try single.append([input]) }
    }
    rows.append(
        Row(name: "append, 1 per txn (durable), first \(n)", value: Double(n) / seconds(elapsed), unit: "events/s"))
}

// 2b. The same single-event batches, 16 to a group commit (what the daemon does for 16
//     clients appending one event each): one transaction and one fsync per group.
do {
    let grouped = try EventLog.open(directory: fresh(arguments.directory + "/grouped"))
    let n = min(arguments.single, count)
    let inputs = try lines.prefix(n).map { try EventCodec.decodeInput($0) }
    let elapsed = try clock.measure {
        var index = 0
        while index < inputs.count {
            let end = min(index + 16, inputs.count)
            _ = try grouped.commit(inputs[index..<end].map { AppendJob([$0]) })
            index = end
        }
    }
    rows.append(
        Row(
            name: "append, 1-event batches, 16 per group commit", value: Double(n) / seconds(elapsed),
            unit: "events/s"))
}

// 3. Bytes, before anything rewrites the store.
let breakdown = try log.storageBreakdown()
let plainBreakdown = try plainLog.storageBreakdown()
let dataFile = fileSize(batchedDirectory + "/data.mdb")
let highWater = try log.statistics().bytesUsed
rows.append(
    Row(
        name: "bytes on disk per event (data.mdb)", value: Double(dataFile) / Double(count), unit: "B",
        note: "pages up to the high-water mark: \(highWater / count) B/event"))
rows.append(
    Row(
        name: "bytes on disk per event, no dictionary",
        value: Double(fileSize(arguments.directory + "/plain/data.mdb")) / Double(count), unit: "B"))
rows.append(
    Row(
        name: "event value per event, with dictionary", value: Double(breakdown.eventValueBytes) / Double(count),
        unit: "B"))
rows.append(
    Row(
        name: "event value per event, no dictionary", value: Double(plainBreakdown.eventValueBytes) / Double(count),
        unit: "B"))
rows.append(
    Row(name: "canonical JSON per event", value: Double(breakdown.canonicalJSONBytes) / Double(count), unit: "B"))
let ratio = Double(breakdown.eventValueBytes) / Double(breakdown.canonicalJSONBytes)
rows.append(
    Row(name: "event values / canonical JSON, with dictionary", value: ratio * 100, unit: "%", note: "goal ≤ 50 %"))
rows.append(
    Row(
        name: "event values / canonical JSON, no dictionary",
        value: Double(plainBreakdown.eventValueBytes) / Double(plainBreakdown.canonicalJSONBytes) * 100, unit: "%"))
for table in breakdown.tables where table.bytes > 0 {
    rows.append(
        Row(
            name: "  table \(table.name) (main tree)", value: Double(table.bytes) / Double(count), unit: "B/event",
            note: "\(table.entries) entries"))
}

// 3b. Reads: the whole log by seq, in pages of 1000 (what `log` and a consumer do), and
//     single events by id at random (an entity's history, a peer's request), each the
//     median of --repeat passes.
do {
    var ids: [ULID] = []
    var logRates: [Double] = []
    for _ in 0..<arguments.repeats {
        var after: UInt64 = 0
        var read = 0
        var seen: [ULID] = []
        let elapsed = try clock.measure {
            while true {
                let page = try log.feed(after: after, limit: 1000, scanLimit: 1000)
                read += page.events.count
                if ids.isEmpty { seen += page.events.map(\.event.id) }
                guard let next = page.next else { break }
                after = next
            }
        }
        if ids.isEmpty { ids = seen }
        logRates.append(Double(read) / seconds(elapsed))
    }
    rows.append(
        Row(
            name: "log by seq, pages of 1000", value: median(logRates), unit: "events/s",
            note: "the whole store, \(repeats)"))
    var generator = SystemRandomNumberGenerator()
    let picks = (0..<20_000).map { _ in ids[Int.random(in: 0..<ids.count, using: &generator)] }
    var idRates: [Double] = []
    for _ in 0..<arguments.repeats {
        let elapsed = try clock.measure {
            for id in picks { _ = try log.event(id) }
        }
        idRates.append(Double(picks.count) / seconds(elapsed))
    }
    let cached = log.blockCacheStatistics
    rows.append(
        Row(
            name: "one event by id, at random", value: median(idRates), unit: "reads/s",
            note:
                "20000 ids of the store, \(repeats); block cache \(cached.bytes >> 20) MiB of \(cached.maxBytes >> 20)")
    )
    // The same reads with no block kept: each decompresses its block, as a read of a store
    // far larger than the cache does.
    log.setBlockCacheBytes(0)
    var uncachedRates: [Double] = []
    for _ in 0..<arguments.repeats {
        let elapsed = try clock.measure {
            for id in picks { _ = try log.event(id) }
        }
        uncachedRates.append(Double(picks.count) / seconds(elapsed))
    }
    log.setBlockCacheBytes(cached.maxBytes)
    rows.append(
        Row(
            name: "one event by id, at random, no block cache", value: median(uncachedRates), unit: "reads/s",
            note: "each read decompresses its block"))
}

// 4. Full rebuild of every projection from the log (after the byte counts: it frees pages).
do {
    let elapsed = try clock.measure { _ = try log.rebuild() }
    rows.append(Row(name: "rebuild all projections", value: Double(count) / seconds(elapsed), unit: "events/s"))
}

// 5. Against the ceiling, measured alternately with evstore above.
rows.append(
    Row(
        name: "ceiling: bare LMDB + zstd dictionary, 1000 per txn", value: median(ceilingRates), unit: "events/s",
        note: "median of \(arguments.repeats)"))
rows.append(
    Row(name: "append / ceiling", value: median(ratios), unit: "%", note: "median of per-round ratios; goal ≥ 25 %"))
rows.append(
    Row(name: "decode + append / ceiling", value: median(combinedRatios), unit: "%", note: "median of per-round ratios")
)
rows.append(Row(name: "ceiling value per event", value: Double(ceilingBytes) / Double(count), unit: "B"))

print("")
let width = rows.map(\.name.count).max() ?? 40
for row in rows {
    let value = row.value >= 100 ? String(format: "%.0f", row.value) : String(format: "%.1f", row.value)
    print(
        row.name.padding(toLength: width + 2, withPad: " ", startingAt: 0) + value.leftPadded(12) + " " + row.unit
            + (row.note.isEmpty ? "" : "   (\(row.note))"))
}
if let path = arguments.json {
    let object: [String: Any] = [
        "events": count,
        "results": rows.map {
            ["name": $0.name.trimmingCharacters(in: .whitespaces), "value": $0.value, "unit": $0.unit, "note": $0.note]
        },
    ]
    try JSONSerialization.data(withJSONObject: object, options: [.prettyPrinted, .sortedKeys]).write(
        to: URL(fileURLWithPath: path))
    print("\nwrote \(path)")
}

/// `--table-stats`: loads the workload as the batched append does (dictionary at 10,000
/// events), then prints each table's `mdb_stat` and the bytes it takes with all its trees
/// (`EventLog.tableBytes`).
func printTableStats() throws {
    let directory = arguments.directory + "/tables"
    let (_, log) = try batchedAppend(directory: directory, trainAt: 10_000)
    let breakdown = try log.storageBreakdown()
    let (bytes, compactBytes) = try log.tableBytes(scratch: arguments.directory + "/tables-scratch")
    let n = Double(count)
    let file = fileSize(directory + "/data.mdb")
    print("store format \(EventLog.formatVersion), \(count) events, \(try log.statistics().entities) entities")
    print(
        "data.mdb \(file) B (\(String(format: "%.1f", Double(file) / n)) B/event), "
            + "compacted \(compactBytes) B (\(String(format: "%.1f", Double(compactBytes) / n)) B/event), "
            + "event values \(String(format: "%.1f", Double(breakdown.eventValueBytes) / n)) B/event")
    let header = ["table", "entries", "depth", "branch", "leaf", "overflow", "main B", "all B", "B/event"]
    var table: [[String]] = [header]
    var sum = 0
    for stat in breakdown.tables {
        let all = bytes[stat.name] ?? 0
        sum += all
        table.append([
            stat.name, "\(stat.entries)", "\(stat.depth)", "\(stat.branchPages)", "\(stat.leafPages)",
            "\(stat.overflowPages)", "\(stat.bytes)", "\(all)", String(format: "%.1f", Double(all) / n),
        ])
    }
    table.append(["sum", "", "", "", "", "", "", "\(sum)", String(format: "%.1f", Double(sum) / n)])
    let widths = header.indices.map { column in table.map { $0[column].count }.max() ?? 0 }
    for row in table {
        print(
            row.enumerated().map { column, cell in
                column == 0
                    ? cell.padding(toLength: widths[0], withPad: " ", startingAt: 0) : cell.leftPadded(widths[column])
            }.joined(separator: "  "))
    }
}

extension String {
    func leftPadded(_ width: Int) -> String {
        count >= width ? self : String(repeating: " ", count: width - count) + self
    }
}
