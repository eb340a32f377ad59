/// The values given on a command line, by argument name, for a command to read in its
/// `init(_:)`. Options of the commands above it (e.g. the root's `--socket`) are here too.
public struct ParsedArguments: Sendable, Equatable {
    /// Every value given to each option, in order.
    public var options: [String: [String]] = [:]
    /// How many times each flag was given.
    public var flags: [String: Int] = [:]
    /// The words taken by each positional argument, in order.
    public var positionals: [String: [String]] = [:]
    /// The declared defaults of options that have one.
    public var defaults: [String: String] = [:]

    public init() {}

    /// The last value of an option, its default, or the positional's (first) word.
    public subscript(_ name: String) -> String? {
        options[name]?.last ?? positionals[name]?.first ?? defaults[name]
    }

    /// Every value of a repeating option or positional, in order.
    public func values(_ name: String) -> [String] {
        options[name] ?? positionals[name] ?? []
    }

    /// Whether a flag was given.
    public func flag(_ name: String) -> Bool {
        (flags[name] ?? 0) > 0
    }

    /// Whether the option or positional was given on the command line (a default does not count).
    public func contains(_ name: String) -> Bool {
        options[name] != nil || positionals[name] != nil || flags[name] != nil
    }

    /// The option's value as a whole number within `range`; nil when absent with no default.
    public func integer(_ name: String, in range: ClosedRange<Int> = Int.min...Int.max) throws(UsageError) -> Int? {
        guard let text = self[name] else { return nil }
        let label = positionals[name] == nil ? "--\(name)" : name
        guard let value = Int(text) else {
            throw UsageError("\(label) wants a whole number, not '\(text)'")
        }
        guard range.contains(value) else {
            let bounds =
                range.upperBound == Int.max
                ? "at least \(range.lowerBound)" : "from \(range.lowerBound) to \(range.upperBound)"
            throw UsageError("\(label) must be \(bounds), not \(value)")
        }
        return value
    }
}

/// A command line that does not fit the command: what was wrong, in words. The command's
/// usage is printed after it and the program exits with 64.
public struct UsageError: Error, Equatable, CustomStringConvertible {
    public var message: String

    public init(_ message: String) {
        self.message = message
    }

    public var description: String { message }
}

/// A command that failed: the message for standard error (after the program's name) and
/// the exit status.
public struct CommandFailure: Error, CustomStringConvertible {
    public var exitCode: Int32
    /// Nil when the command already said what went wrong.
    public var message: String?

    public init(exitCode: Int32, _ message: String?) {
        self.exitCode = exitCode
        self.message = message
    }

    public var description: String { message ?? "failed with status \(exitCode)" }
}
