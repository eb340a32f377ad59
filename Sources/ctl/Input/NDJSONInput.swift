import Arguments
import Projections
import UnixSocket

/// The events of an NDJSON input, checked: each non-blank line one JSON object.
struct NDJSONInput {
    /// One event line: its number in the input (from 1) and where its bytes are.
    struct Line {
        var number: Int
        var range: Range<Int>
    }

    var bytes: [UInt8]
    /// The event lines after the skipped ones.
    var lines: [Line]
    /// How many non-blank lines were skipped (--skip).
    var skipped: Int

    /// Reads the file (or standard input for `-`) whole.
    static func read(_ path: String) throws(CommandFailure) -> [UInt8] {
        if path == "-" {
            do {
                return try FileDescriptor.readToEnd(FileDescriptor.standardInput)
            } catch {
                throw CommandFailure(exitCode: ExitStatus.noInput, "cannot read standard input: \(error.message)")
            }
        }
        guard let info = System.status(path) else {
            throw CommandFailure(exitCode: ExitStatus.noInput, "\(path): no such file.")
        }
        guard !System.isDirectory(info) else {
            throw CommandFailure(exitCode: ExitStatus.noInput, "\(path) is a directory; give an NDJSON file.")
        }
        guard let bytes = System.contents(path) else {
            throw CommandFailure(exitCode: ExitStatus.noInput, "\(path) cannot be read; check its permissions.")
        }
        return bytes
    }

    /// Splits and checks every line; the first bad one is an error naming its number, and
    /// saying that nothing was `done` ("appended", "imported").
    init(bytes: [UInt8], skip: Int, done: String = "appended") throws(CommandFailure) {
        self.bytes = bytes
        lines = []
        skipped = 0
        var start = 0
        var number = 0
        while start < bytes.count {
            let newline = bytes[start...].firstIndex(of: 0x0A) ?? bytes.count
            number += 1
            var end = newline
            if end > start, bytes[end - 1] == 0x0D { end -= 1 }
            let range = start..<end
            start = newline + 1
            guard bytes[range].contains(where: { $0 != 0x20 && $0 != 0x09 && $0 != 0x0D }) else { continue }
            if skipped < skip {
                skipped += 1
                continue
            }
            do {
                try NDJSONInput.check(Array(bytes[range]))
            } catch {
                throw CommandFailure(
                    exitCode: ExitStatus.invalidInput, "line \(number): \(error.description); nothing was \(done).")
            }
            lines.append(Line(number: number, range: range))
        }
    }

    /// Checks that `line` is one JSON object.
    static func check(_ line: [UInt8]) throws(JSONError) {
        var scanner = JSONScanner(line)
        guard scanner.peek() == UInt8(ascii: "{") else {
            throw JSONError(meaning: "not a JSON object; each line holds one event, {...}", at: 0)
        }
        try scanner.readObject { (_, scanner) throws(JSONError) in try scanner.skipValue() }
        try scanner.expectEnd()
    }
}
