import UnixSocket

#if canImport(Glibc)
    import Glibc
#endif

/// Standard output, buffered: written out when the buffer is large and by `flush()`.
/// `line` writes at once when `immediately` is set (followed output, acknowledgements a
/// watching process must see before evctl ends).
struct StandardOutput {
    private var buffer: [UInt8] = []

    mutating func line(_ text: String, immediately: Bool = false) {
        buffer += Array(text.utf8)
        buffer.append(0x0A)
        if immediately || buffer.count >= 64 * 1024 { flush() }
    }

    mutating func line(bytes: [UInt8], immediately: Bool = false) {
        buffer += bytes
        buffer.append(0x0A)
        if immediately || buffer.count >= 64 * 1024 { flush() }
    }

    mutating func flush() {
        guard !buffer.isEmpty else { return }
        StandardOutput.write(buffer)
        buffer.removeAll(keepingCapacity: true)
    }

    /// Writes to standard output at once. When the reader has gone (`evctl log | head` with
    /// SIGPIPE ignored), evctl ends quietly, as it would by the signal.
    static func write(_ bytes: [UInt8]) {
        do {
            try FileDescriptor.write(bytes, to: FileDescriptor.standardOutput)
        } catch {
            exit(ExitStatus.failed)
        }
    }
}

enum Terminal {
    /// Whether standard error is a terminal (progress lines are shown only there).
    static var standardErrorIsTerminal: Bool { isatty(2) == 1 }

    /// Writes `evctl: text` and a newline to standard error.
    static func note(_ text: String) {
        try? FileDescriptor.write("evctl: \(text)\n", to: FileDescriptor.standardError)
    }

    /// Writes to standard error as it is (progress lines).
    static func writeError(_ text: String) {
        try? FileDescriptor.write(text, to: FileDescriptor.standardError)
    }
}

enum Format {
    /// Bytes in binary units: `812 B`, `1.2 MiB`.
    static func bytes(_ count: Int) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]
        var value = Double(count)
        var unit = 0
        while value >= 1024, unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        if unit == 0 { return "\(count) B" }
        return fixed(value, decimals: value < 10 ? 1 : 0) + " " + units[unit]
    }

    /// Milliseconds as a person reads a duration: `850 ms`, `2.5 s`, `3 min`, `2.0 h`.
    static func milliseconds(_ ms: Int) -> String {
        if ms < 1000 { return "\(ms) ms" }
        let seconds = Double(ms) / 1000
        if seconds < 60 { return fixed(seconds, decimals: 1) + " s" }
        if seconds < 3600 { return fixed(seconds / 60, decimals: 0) + " min" }
        if seconds < 86400 { return fixed(seconds / 3600, decimals: 1) + " h" }
        return fixed(seconds / 86400, decimals: 1) + " days"
    }

    /// `value` with `decimals` digits after the point, rounded as printf's `%.Nf` rounds.
    static func fixed(_ value: Double, decimals: Int) -> String {
        guard value.isFinite else { return "\(value)" }
        var buffer = [CChar](repeating: 0, count: 512)
        let written = withVaList([value]) { vsnprintf(&buffer, buffer.count, "%.\(decimals)f", $0) }
        guard written >= 0, Int(written) < buffer.count else { return "\(value)" }
        return String(decoding: buffer[..<Int(written)].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// A span of time to the second, as a person says it: `14 s`, `3 min`, `2 h`, `5 days`.
    static func span(_ seconds: Double) -> String {
        let whole = Int(max(0, seconds).rounded(.up))
        if whole < 60 { return "\(whole) s" }
        if whole < 3600 { return "\(whole / 60) min" }
        if whole < 86400 { return "\(whole / 3600) h" }
        return count(whole / 86400, "day")
    }

    /// An RFC 3339 time as the daemon writes it (UTC, with or without fractional seconds).
    static func date(_ text: String) -> WallTime? {
        WallTime(rfc3339: text)
    }

    /// `1 event`, `3 events`.
    static func count(_ n: Int, _ singular: String, _ plural: String? = nil) -> String {
        "\(n) " + (n == 1 ? singular : plural ?? singular + "s")
    }

    /// Rows in columns two spaces apart, each column as wide as its widest cell; the last
    /// column is not padded.
    static func table(_ rows: [[String]]) -> [String] {
        guard let columns = rows.map(\.count).max() else { return [] }
        var widths = Array(repeating: 0, count: columns)
        for row in rows {
            for (column, cell) in row.enumerated() { widths[column] = max(widths[column], cell.count) }
        }
        return rows.map { row in
            var line = ""
            for (column, cell) in row.enumerated() {
                if column == row.count - 1 {
                    line += cell
                } else {
                    line += cell + String(repeating: " ", count: widths[column] - cell.count + 2)
                }
            }
            return line
        }
    }
}

extension Duration {
    /// The duration in seconds, for "in 1.25 s" in a summary.
    var seconds: Double {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }
}
