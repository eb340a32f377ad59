import UnixSocket

#if canImport(Glibc)
    import Glibc
#endif

// What evctl asks of the system, from libc. evctl imports no Foundation, not even
// FoundationEssentials: linked statically, FoundationEssentials alone made the binary
// 6 MiB larger (docs/packaging.md), for a clock, the environment, a few file checks and a
// timestamp parser.

/// A moment of the wall clock, in seconds since 1970-01-01 UTC (what evctl needed of Date).
struct WallTime: Comparable, Sendable {
    var timeIntervalSince1970: Double

    /// Now, by CLOCK_REALTIME.
    init() {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        timeIntervalSince1970 = Double(spec.tv_sec) + Double(spec.tv_nsec) / 1e9
    }

    init(timeIntervalSince1970: Double) {
        self.timeIntervalSince1970 = timeIntervalSince1970
    }

    /// Seconds from `other` to this moment (negative when `other` is later).
    func timeIntervalSince(_ other: WallTime) -> Double {
        timeIntervalSince1970 - other.timeIntervalSince1970
    }

    static func < (left: WallTime, right: WallTime) -> Bool {
        left.timeIntervalSince1970 < right.timeIntervalSince1970
    }

    /// An RFC 3339 time as the daemon writes it: `2026-03-01T12:00:00Z`, with or without
    /// fractional seconds, `Z` or a numeric offset (`+02:00`). Nil for anything else.
    init?(rfc3339 text: String) {
        let bytes = Array(text.utf8)
        var index = 0
        func digits(_ count: Int) -> Int? {
            guard index + count <= bytes.count else { return nil }
            var value = 0
            for byte in bytes[index..<index + count] {
                guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
                value = value * 10 + Int(byte - UInt8(ascii: "0"))
            }
            index += count
            return value
        }
        func expect(_ characters: String) -> Bool {
            guard index < bytes.count, characters.utf8.contains(bytes[index]) else { return false }
            index += 1
            return true
        }
        guard let year = digits(4), expect("-"), let month = digits(2), expect("-"), let day = digits(2),
            expect("Tt "), let hour = digits(2), expect(":"), let minute = digits(2), expect(":"),
            let second = digits(2),
            (1...12).contains(month), (1...WallTime.days(inMonth: month, of: year)).contains(day),
            hour < 24, minute < 60, second < 61
        else { return nil }
        var fraction = 0.0
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            index += 1
            var scale = 0.1
            let start = index
            while index < bytes.count, bytes[index] >= UInt8(ascii: "0"), bytes[index] <= UInt8(ascii: "9") {
                fraction += Double(bytes[index] - UInt8(ascii: "0")) * scale
                scale /= 10
                index += 1
            }
            guard index > start else { return nil }
        }
        var offset = 0
        if !expect("Zz") {
            let sign = index < bytes.count && bytes[index] == UInt8(ascii: "-") ? -1 : 1
            guard expect("+-"), let hours = digits(2), expect(":"), let minutes = digits(2), hours < 24, minutes < 60
            else { return nil }
            offset = sign * (hours * 3600 + minutes * 60)
        }
        guard index == bytes.count else { return nil }
        let seconds =
            WallTime.daysSince1970(year: year, month: month, day: day) * 86400
            + hour * 3600 + minute * 60 + second - offset
        timeIntervalSince1970 = Double(seconds) + fraction
    }

    /// Days from 1970-01-01 to the given day of the proleptic Gregorian calendar (Howard
    /// Hinnant's `days_from_civil`).
    static func daysSince1970(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146097 + dayOfEra - 719468
    }

    static func days(inMonth month: Int, of year: Int) -> Int {
        switch month {
        case 2: return year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }
}

enum System {
    /// The value of an environment variable.
    static func environment(_ name: String) -> String? {
        getenv(name).map { String(cString: $0) }
    }

    /// The whole environment, `NAME=value` split at the first `=`.
    static var environment: [String: String] {
        var variables: [String: String] = [:]
        var entry = environ
        while let pointer = entry.pointee {
            let text = String(cString: pointer)
            if let equals = text.firstIndex(of: "=") {
                variables[String(text[..<equals])] = String(text[text.index(after: equals)...])
            }
            entry += 1
        }
        return variables
    }

    /// What `stat` says of `path` (following symbolic links), or nil when it cannot.
    static func status(_ path: String) -> stat? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return info
    }

    /// What `fstat` says of the open `descriptor`, or nil when it cannot.
    static func status(descriptor: Int32) -> stat? {
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { return nil }
        return info
    }

    static func exists(_ path: String) -> Bool { status(path) != nil }

    static func isDirectory(_ info: stat) -> Bool { info.st_mode & S_IFMT == S_IFDIR }

    /// The whole content of a file, or nil when it cannot be opened or read.
    static func contents(_ path: String) -> [UInt8]? {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        return try? FileDescriptor.readToEnd(descriptor)
    }

    /// The name of a group, or nil when it has none (an id the group database lacks).
    static func groupName(_ id: gid_t) -> String? {
        var group = group()
        var result: UnsafeMutablePointer<group>?
        var buffer = [CChar](repeating: 0, count: 4096)
        guard getgrgid_r(id, &group, &buffer, buffer.count, &result) == 0, result != nil else { return nil }
        return String(cString: group.gr_name)
    }

    /// The working directory, or nil when it cannot be had (deleted, or too long).
    static func currentDirectory() -> String? {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        guard getcwd(&buffer, buffer.count) != nil else { return nil }
        let length = buffer.firstIndex(of: 0) ?? buffer.count
        return String(decoding: buffer[..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// `path` made absolute (against the working directory) with `.`, `..` and repeated
    /// slashes taken out, as URL's standardized path does; symbolic links are left alone.
    static func absolutePath(_ path: String) -> String {
        let full = path.hasPrefix("/") ? path : (currentDirectory() ?? "/") + "/" + path
        var components: [Substring] = []
        for component in full.split(separator: "/") {
            switch component {
            case ".": continue
            case "..": _ = components.popLast()
            default: components.append(component)
            }
        }
        return "/" + components.joined(separator: "/")
    }

    /// `count` random lower-case hexadecimal digits.
    static func randomHex(_ count: Int) -> String {
        let digits = Array("0123456789abcdef")
        return String((0..<count).map { _ in digits[Int.random(in: 0..<16)] })
    }
}
