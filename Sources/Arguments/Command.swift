import UnixSocket

#if canImport(Glibc)
    import Glibc
#endif

/// A command of a command-line tool: its configuration (name, help, arguments,
/// subcommands), how it reads its parsed arguments, and what it does.
///
/// `main()` parses the command line, builds the command the words select, calls
/// `validate()` and then `run()`. Usage errors (from parsing, `init` or `validate`) print
/// the message and the usage on standard error and exit 64; `CommandFailure` exits with
/// its code; any other error exits 1.
public protocol Command: SendableMetatype {
    static var configuration: CommandConfiguration { get }

    /// Reads the values this command needs; throws `UsageError` for a value it cannot use.
    init(_ arguments: ParsedArguments) throws

    /// Checks the arguments against each other; throws `UsageError`.
    mutating func validate() throws

    func run() throws

    /// The values of a `.dynamic(provider)` completion (peer names, entity types), asked of
    /// the root command; `arguments` holds what the line gave so far (e.g. `--socket`).
    static func completions(_ provider: String, arguments: ParsedArguments) -> [String]
}

extension Command {
    public mutating func validate() throws {}

    public static func completions(_ provider: String, arguments: ParsedArguments) -> [String] { [] }

    /// A command with subcommands runs only through one of them.
    public func run() throws {
        throw UsageError("a command is required")
    }

    /// Parses the process's arguments, runs the selected command, and exits.
    public static func main() -> Never {
        exit(main(Array(CommandLine.arguments.dropFirst())))
    }

    /// Parses `words`, runs the selected command, and returns the exit status.
    ///
    /// Two hidden first words serve the build and the shell rather than people:
    /// `__complete WORD...` prints the completions of the last word (see `Completer`), and
    /// `--generate-manual` prints the manual page in scdoc (see `Manual`).
    public static func main(_ words: [String]) -> Int32 {
        if words.first == Completer.requestWord {
            writeStandardOutput(Completer.complete(Array(words.dropFirst()), root: Self.self).text)
            return 0
        }
        if words == [Manual.requestWord] {
            writeStandardOutput(Manual.scdoc(Self.self))
            return 0
        }
        let invocation: Invocation
        do {
            invocation = try Parser.parse(words, root: Self.self)
        } catch {
            return reportUsage(error.error, path: error.path)
        }
        switch invocation.action {
        case .help:
            writeStandardOutput(Help.text(invocation.path))
            return 0
        case .version:
            writeStandardOutput("\(configuration.name) \(configuration.version ?? "")\n")
            return 0
        case .run:
            break
        }
        do {
            var command = try invocation.path.last!.init(invocation.arguments)
            try command.validate()
            try command.run()
            return 0
        } catch let error as UsageError {
            return reportUsage(error, path: invocation.path)
        } catch let failure as CommandFailure {
            if let message = failure.message { writeStandardError("\(configuration.name): \(message)\n") }
            return failure.exitCode
        } catch {
            writeStandardError("\(configuration.name): \(error)\n")
            return 1
        }
    }

    static func reportUsage(_ error: UsageError, path: [any Command.Type]) -> Int32 {
        let name = path.map { $0.configuration.name }.joined(separator: " ")
        writeStandardError("\(name): \(error.message)\n\(Help.usage(path))\nSee '\(name) --help'.\n")
        return 64
    }
}

/// The usage exit status (`EX_USAGE` of sysexits.h).
public let usageExitCode: Int32 = 64

func writeStandardOutput(_ text: String) {
    try? FileDescriptor.write(text, to: FileDescriptor.standardOutput)
}

func writeStandardError(_ text: String) {
    try? FileDescriptor.write(text, to: FileDescriptor.standardError)
}
