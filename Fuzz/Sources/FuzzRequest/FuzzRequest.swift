import Foundation
import FuzzDriver
import FuzzEntries

/// The request fuzzer: one request line per input, parsed and dispatched as a connection
/// does, against a real store (see `FuzzDispatcher`).
@main
enum FuzzRequest {
    /// The stores live in a directory of this process under $TMPDIR, removed at exit.
    static let dispatcher: FuzzDispatcher = {
        let directory = NSTemporaryDirectory() + "/evstore-fuzz-request-\(getpid())"
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            return try FuzzDispatcher(directory: directory)
        } catch {
            fatalError("cannot make the fuzzer's store directory \(directory): \(error)")
        }
    }()

    static func main() {
        _ = dispatcher
        atexit {
            FuzzRequest.dispatcher.stop()
            try? FileManager.default.removeItem(atPath: FuzzRequest.dispatcher.directory)
        }
        FuzzDriver.run { data, size in
            let line = FuzzDriver.bytes(data, size)
            // A connection splits lines at newlines and skips blank ones: so does the fuzzer.
            guard !line.contains(0x0A), !line.allSatisfy({ $0 == 0x20 || $0 == 0x09 || $0 == 0x0D }) else {
                return 0
            }
            do {
                _ = try FuzzRequest.dispatcher.respond(to: line)
            } catch {
                fatalError("the fuzzer's store failed: \(error)")
            }
            return 0
        }
    }
}
