// evstore-bench: in-process figures for the storage core on the field workload, with the
// bare-LMDB ceiling measured in the same run. Prints a table and writes JSON.
//
//   evstore-bench --workload events.ndjson [--single N] [--dir DIR] [--json FILE]
import EventStore
import Foundation
import Projections

struct Arguments {
    var workload = ""
    var single = 5000
    var directory = FileManager.default.temporaryDirectory.appendingPathComponent("evstore-bench").path
    var json: String?

    init() {
        var args = CommandLine.arguments.dropFirst().makeIterator()
        while let arg = args.next() {
            switch arg {
            case "--workload": workload = args.next() ?? ""
            case "--single": single = Int(args.next() ?? "") ?? single
            case "--dir": directory = args.next() ?? directory
            case "--json": json = args.next()
            default:
                FileHandle.standardError.write(
                    Data("usage: evstore-bench --workload FILE [--single N] [--dir DIR] [--json FILE]\n".utf8))
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

// 1. Batched append, 1000 per transaction, decoding included (what a daemon does).
//    Dictionary training is timed on its own: it runs once, off the append path.
func batchedAppend(directory: String, trainAt: Int?) throws -> (log: EventLog, rate: Double, training: Double) {
    var options = StoreOptions()
    options.trainsDictionaryAutomatically = false
    let log = try EventLog.open(directory: fresh(directory), options: options)
    var appending = Duration.zero
    var training = Duration.zero
    var batch: [InputEvent] = []
    batch.reserveCapacity(1000)
    for (index, line) in lines.enumerated() {
        appending += try clock.measure {
            batch.append(try EventCodec.decodeInput(line))
            if batch.count == 1000 || index == lines.count - 1 {
                _ = try log.append(batch)
                batch.removeAll(keepingCapacity: true)
            }
        }
        if index + 1 == trainAt {
            training += try clock.measure { _ = try log.trainDictionary() }
        }
    }
    return (log, Double(count) / seconds(appending), seconds(training))
}

let (log, batchedRate, trainingSeconds) = try batchedAppend(
    directory: arguments.directory + "/batched", trainAt: 10_000)
rows.append(Row(name: "append, 1000 per txn (dictionary from 10k)", value: batchedRate, unit: "events/s"))
rows.append(Row(name: "dictionary training (once, 20k samples)", value: trainingSeconds * 1000, unit: "ms"))
let (plainLog, plainRate, _) = try batchedAppend(directory: arguments.directory + "/plain", trainAt: nil)
rows.append(Row(name: "append, 1000 per txn, no dictionary", value: plainRate, unit: "events/s"))

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

// 3. Full rebuild of every projection from the log.
do {
    let elapsed = try clock.measure { _ = try log.rebuild() }
    rows.append(Row(name: "rebuild all projections", value: Double(count) / seconds(elapsed), unit: "events/s"))
}

// 4. Bytes.
let breakdown = try log.storageBreakdown()
let plainBreakdown = try plainLog.storageBreakdown()
let dataFile = fileSize(arguments.directory + "/batched/data.mdb")
let usedBytes = breakdown.tables.reduce(0) { $0 + $1.bytes }
rows.append(
    Row(
        name: "bytes on disk per event (pages in use)", value: Double(usedBytes) / Double(count), unit: "B",
        note: "data.mdb file: \(dataFile / count) B/event"))
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
            name: "  table \(table.name)", value: Double(table.bytes) / Double(count), unit: "B/event",
            note: "\(table.entries) entries"))
}

// 5. The ceiling: the same events' canonical JSON, zstd with a dictionary, under
//    time-ordered keys in a bare LMDB database; no index, no projection; 1000 per txn.
do {
    var canonical: [(key: [UInt8], json: [UInt8])] = []
    var after: ULID?
    repeat {
        let page = try log.events(after: after, limit: 5000)
        canonical += page.events.map { ($0.id.bytes, EventCodec.encodeStored($0)) }
        after = page.next
    } while after != nil
    let dictionary = try CompressionDictionary(
        bytes: try DictionaryTrainer.train(samples: Array(canonical.suffix(20_000).map(\.json)), capacity: 32 * 1024),
        level: 3)
    let compressor = Compressor(level: 3)
    let environment = try Environment(directory: fresh(arguments.directory + "/ceiling"), options: EnvironmentOptions())
    let db = try environment.openDatabase("events", flags: [.create])
    var ceilingBytes = 0
    let elapsed = try clock.measure {
        var index = 0
        while index < canonical.count {
            let end = min(index + 1000, canonical.count)
            try environment.write { txn in
                for item in canonical[index..<end] {
                    let value = try compressor.compress(item.json, dictionary: dictionary)
                    ceilingBytes += value.count
                    try txn.put(db, item.key, value, flags: .append)
                }
            }
            index = end
        }
    }
    let ceilingRate = Double(canonical.count) / seconds(elapsed)
    rows.append(Row(name: "ceiling: bare LMDB + zstd dictionary, 1000 per txn", value: ceilingRate, unit: "events/s"))
    rows.append(
        Row(name: "batched append / ceiling", value: batchedRate / ceilingRate * 100, unit: "%", note: "goal ≥ 25 %"))
    rows.append(Row(name: "ceiling value per event", value: Double(ceilingBytes) / Double(canonical.count), unit: "B"))
}

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

extension String {
    func leftPadded(_ width: Int) -> String {
        count >= width ? self : String(repeating: " ", count: width - count) + self
    }
}
