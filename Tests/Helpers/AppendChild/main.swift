// Appends batches to a store until killed, printing each acknowledged batch as it returns:
//   ack <batch> <id> <id> ...
// Crash tests kill it with SIGKILL at random moments and check that every acknowledged
// event is still there after reopening.
import EventStore
import Foundation
import Projections

let arguments = CommandLine.arguments
guard arguments.count >= 3, let batchSize = Int(arguments[2]) else {
    FileHandle.standardError.write(Data("usage: evstore-append-child DIR BATCH_SIZE [MAP_BYTES]\n".utf8))
    exit(64)
}
var options = StoreOptions()
options.dictionaryTrainingThreshold = 400
if arguments.count > 3, let mapBytes = Int(arguments[3]) { options.environment.initialMapSize = mapBytes }
let log = try EventLog.open(directory: arguments[1], options: options)
let statuses = ["assigned", "en_route", "on_site", "done"]
var batch = 0
while true {
    var events: [InputEvent] = []
    for i in 0..<batchSize {
        let job = "job/c\(batch % 97)-\(i % 13)"
        let line: String
        switch i % 3 {
        case 0:
            line = #"{"entity":"\#(job)","kind":"edit","fields":{"n":\#(batch),"note":"batch \#(batch) item \#(i)"}}"#
        case 1: line = #"{"entity":"\#(job)","kind":"status","status":"\#(statuses[(batch + i) % 4])"}"#
        default: line = #"{"entity":"\#(job)","kind":"add","set":"parts","element":"p\#(i % 7)"}"#
        }
        events.append(try EventCodec.decodeInput(Array(line.utf8)))
    }
    let result = try log.append(events)
    // Unbuffered: the line is out before the next batch starts.
    FileHandle.standardOutput.write(
        Data(("ack \(batch) " + result.ids.map(\.description).joined(separator: " ") + "\n").utf8))
    batch += 1
}
