#if canImport(Glibc)
    import Glibc
#endif

/// Splits a byte stream into newline-terminated lines, each at most `limit` bytes.
///
/// A line longer than the limit is not kept: its bytes are dropped as they arrive, up to
/// and including its newline, and the reader reports `.tooLong` in its place, so a
/// hostile client cannot make the reader hold more than `limit` bytes.
public struct LineReader {
    public enum Line: Equatable {
        /// A complete line without its newline (a trailing "\r" is kept).
        case line([UInt8])
        /// A line that went over the limit; `bytes` is its length, as far as it was read.
        case tooLong(bytes: Int)
        /// The stream ended; a last line without a newline comes before this.
        case end
    }

    public var limit: Int
    var buffer: [UInt8] = []
    /// Where the unread part of `buffer` starts.
    var start = 0
    /// Where the search for a newline resumes (everything before it is searched).
    var scanned = 0
    /// Bytes of an over-long line dropped so far; nil while not dropping.
    var dropping: Int?
    var ended = false
    let chunk: Int

    public init(limit: Int, chunk: Int = 64 * 1024) {
        self.limit = limit
        self.chunk = chunk
    }

    /// The next line, reading more from `read` (which appends up to `count` bytes to the
    /// buffer and returns how many, 0 at the end) when the buffer holds no whole line.
    public mutating func next(
        reading read: (inout [UInt8], _ count: Int) throws -> Int
    ) rethrows -> Line {
        try nextLine(reading: { buffer, count, _ in try read(&buffer, count) })
    }

    /// `next(reading:)`, telling `read` whether a line is begun (some of it read, or an
    /// over-long one being dropped): a caller bounds how long a line may take.
    public mutating func nextLine(
        reading read: (inout [UInt8], _ count: Int, _ midLine: Bool) throws -> Int
    ) rethrows -> Line {
        while true {
            if let newline = LineReader.firstNewline(in: buffer, from: scanned) {
                let length = newline - start
                defer {
                    start = newline + 1
                    scanned = start
                }
                if let dropped = dropping {
                    dropping = nil
                    return .tooLong(bytes: dropped + length)
                }
                if length > limit { return .tooLong(bytes: length) }
                return .line(Array(buffer[start..<newline]))
            }
            scanned = buffer.count
            if dropping != nil || buffer.count - start > limit {
                // Over the limit: what is read of the line is dropped at once, and so is
                // the buffer it grew (a client must not make every connection hold
                // `limit` bytes).
                dropping = (dropping ?? 0) + buffer.count - start
                let keep = buffer.capacity <= 2 * chunk
                release { $0.removeAll(keepingCapacity: keep) }
                start = 0
                scanned = 0
            }
            if ended {
                if let dropped = dropping {
                    dropping = nil
                    let length = dropped + buffer.count - start
                    start = buffer.count
                    scanned = start
                    return .tooLong(bytes: length)
                }
                if start < buffer.count {
                    let line = Array(buffer[start...])
                    start = buffer.count
                    scanned = start
                    return .line(line)
                }
                return .end
            }
            if start > 0, start >= buffer.count / 2 {
                if buffer.capacity > 4 * chunk {
                    // A long line grew the buffer: give that memory back.
                    let begin = start
                    release { $0 = Array($0[begin...]) }
                } else {
                    buffer.removeFirst(start)
                }
                scanned -= start
                start = 0
            }
            if try read(&buffer, chunk, dropping != nil || start < buffer.count) == 0 { ended = true }
        }
    }

    /// Whether a line is begun: some of it read, or an over-long one being dropped.
    public var isMidLine: Bool { dropping != nil || start < buffer.count }

    /// Gives back the buffer's memory when it holds nothing unread: an idle connection
    /// then costs no buffer at all (an event loop holds thousands).
    public mutating func shrinkIfEmpty() {
        guard dropping == nil, start >= buffer.count, buffer.capacity > 0 else { return }
        buffer = []
        start = 0
        scanned = 0
    }

    /// The room the buffer keeps, in bytes.
    public var capacity: Int { buffer.capacity }

    /// Replaces the buffer through `shrink` (the closure must not touch the reader).
    mutating func release(_ shrink: (inout [UInt8]) -> Void) {
        shrink(&buffer)
    }

    /// The bytes read but not yet returned as lines, handed over to whoever reads the
    /// stream next (the reader is empty afterwards).
    public mutating func takeBuffered() -> [UInt8] {
        let rest = Array(buffer[start...])
        buffer.removeAll()
        start = 0
        scanned = 0
        return rest
    }

    /// The index of the first "\n" at or after `start` (memchr: lines can be megabytes).
    static func firstNewline(in buffer: [UInt8], from start: Int) -> Int? {
        guard start < buffer.count else { return nil }
        return buffer.withUnsafeBytes { raw -> Int? in
            guard let found = memchr(raw.baseAddress! + start, 0x0A, raw.count - start) else { return nil }
            return raw.baseAddress!.distance(to: UnsafeRawPointer(found))
        }
    }
}
