/// One thing a command accepts on its command line: an option that takes a value, a flag,
/// or a positional argument. A command lists these in its `CommandConfiguration`; the
/// same list drives parsing and the `--help` text.
public struct Argument: Sendable, Equatable {
    public enum Kind: Sendable, Equatable {
        /// `--name VALUE` or `--name=VALUE`; `repeating` keeps every occurrence.
        case option(valueName: String, repeating: Bool)
        /// `--name`, no value.
        case flag
        /// A word in its place among the positional arguments. A repeating one takes the
        /// rest, so it comes last.
        case positional(optional: Bool, repeating: Bool)
    }

    /// The long name without dashes (`socket` for `--socket`), or the positional's name as
    /// shown in help (`ENTITY`). Also the key in `ParsedArguments`.
    public var name: String
    /// The one-letter name (`-n`), when there is one.
    public var short: Character?
    public var kind: Kind
    public var help: String
    /// The value when the option is not given; shown in help.
    public var defaultValue: String?
    /// What the shell offers when completing the argument's value.
    public var completion: CompletionValues

    public init(
        name: String, short: Character? = nil, kind: Kind, help: String, defaultValue: String? = nil,
        completion: CompletionValues = .none
    ) {
        self.name = name
        self.short = short
        self.kind = kind
        self.help = help
        self.defaultValue = defaultValue
        self.completion = completion
    }

    /// An option that takes a value: `--name VALUE`, `--name=VALUE`, or `-s VALUE`.
    public static func option(
        _ name: String, short: Character? = nil, value valueName: String = "VALUE", repeating: Bool = false,
        default defaultValue: String? = nil, completion: CompletionValues = .none, help: String
    ) -> Argument {
        Argument(
            name: name, short: short, kind: .option(valueName: valueName, repeating: repeating), help: help,
            defaultValue: defaultValue, completion: completion)
    }

    /// A flag: `--name` or `-s`, present or not.
    public static func flag(_ name: String, short: Character? = nil, help: String) -> Argument {
        Argument(name: name, short: short, kind: .flag, help: help)
    }

    /// A positional argument, shown in help and usage as `name`.
    public static func positional(
        _ name: String, optional: Bool = false, repeating: Bool = false, completion: CompletionValues = .none,
        help: String
    ) -> Argument {
        Argument(
            name: name, kind: .positional(optional: optional, repeating: repeating), help: help,
            completion: completion)
    }

    public var isPositional: Bool {
        if case .positional = kind { return true }
        return false
    }

    public var takesValue: Bool {
        if case .option = kind { return true }
        return false
    }

    /// How the argument is written in a usage line: `--limit N`, `--json`, `[TYPE]`, `FIELD...`.
    var synopsis: String {
        switch kind {
        case .option(let valueName, _): return "--\(name) \(valueName)"
        case .flag: return "--\(name)"
        case .positional(let optional, let repeating):
            let word = repeating ? "\(name)..." : name
            return optional ? "[\(word)]" : word
        }
    }

    /// How the argument is named in the help's left column: `-n, --limit N`.
    var helpLabel: String {
        switch kind {
        case .positional: return name
        default: return short.map { "-\($0), " + synopsis } ?? synopsis
        }
    }
}

/// Extra text at the end of a command's help, under its own heading.
public struct HelpSection: Sendable, Equatable {
    public var title: String
    public var body: String

    public init(_ title: String, _ body: String) {
        self.title = title
        self.body = body
    }
}

/// What a command is called, what it does, and what it accepts.
public struct CommandConfiguration {
    /// The word that selects the command (the program's name for the root command).
    public var name: String
    /// One line: what the command does.
    public var abstract: String
    /// More paragraphs, shown in `--help` after the abstract.
    public var discussion: String
    /// Usage lines, each after the command's path; empty to derive one from `arguments`.
    public var usage: [String]
    public var arguments: [Argument]
    public var subcommands: [any Command.Type]
    /// Shown by `--version` (the root command only); nil when there is no such option.
    public var version: String?
    /// Shown at the end of the help.
    public var sections: [HelpSection]
    /// The root command's manual page: its section ("1" for commands, "8" for daemons) and the
    /// sections only the page has (ENVIRONMENT, FILES, SEE ALSO).
    public var manualSection: String
    public var manualSections: [HelpSection]

    public init(
        name: String, abstract: String, discussion: String = "", usage: [String] = [], arguments: [Argument] = [],
        subcommands: [any Command.Type] = [], version: String? = nil, sections: [HelpSection] = [],
        manualSection: String = "1", manualSections: [HelpSection] = []
    ) {
        self.name = name
        self.abstract = abstract
        self.discussion = discussion
        self.usage = usage
        self.arguments = arguments
        self.subcommands = subcommands
        self.version = version
        self.sections = sections
        self.manualSection = manualSection
        self.manualSections = manualSections
    }

    var options: [Argument] { arguments.filter { !$0.isPositional } }
    var positionals: [Argument] { arguments.filter(\.isPositional) }
}
