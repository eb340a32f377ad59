/// What the shell may offer for an argument's value.
public enum CompletionValues: Sendable, Equatable {
    /// Free text: nothing to offer.
    case none
    /// A path: the shell completes file names.
    case files
    /// A directory: the shell completes directory names.
    case directories
    /// One of these words.
    case words([String])
    /// Values only the tool knows at the time (peer names, entity types): the root command's
    /// `completions(_:arguments:)` is asked by this name.
    case dynamic(String)
}

/// The answer to one completion request: the candidates for the word under the cursor, and
/// what the shell should do besides.
public struct CompletionResult: Sendable, Equatable {
    public enum Directive: String, Sendable {
        /// Offer the candidates, a space after the chosen one.
        case plain
        /// Offer the candidates without a space after them (a prefix such as `job/`).
        case noSpace = "nospace"
        /// Let the shell complete file names.
        case files
        /// Let the shell complete directory names.
        case directories
    }

    public var candidates: [String]
    public var directive: Directive

    public init(_ candidates: [String], _ directive: Directive = .plain) {
        self.candidates = candidates
        self.directive = directive
    }

    /// What `TOOL __complete WORD...` prints: one candidate a line, then `:directive`.
    /// The shell scripts in completion/ read this.
    public var text: String {
        candidates.map { $0 + "\n" }.joined() + ":\(directive.rawValue)\n"
    }
}

/// Shell completion from the same command tree that drives parsing and `--help`, so the
/// three cannot disagree. The shell scripts are thin: they run `TOOL __complete` with the
/// words of the line (the last one being completed, maybe empty) and offer what it prints
/// (the shape of the `__complete` command of Go's cobra, used by kubectl and gh).
public enum Completer {
    /// The hidden first word that asks for completion instead of running a command.
    public static let requestWord = "__complete"

    public static func complete(_ words: [String], root: any Command.Type) -> CompletionResult {
        let current = words.last ?? ""
        let before = words.dropLast()
        var path: [any Command.Type] = [root]
        var options = root.configuration.options
        var parsed = ParsedArguments()
        var positionalWords: [String] = []
        var optionsEnded = false
        var awaitingValue: Argument?

        var index = before.startIndex
        while index < before.endIndex {
            let word = before[index]
            index += 1
            if !optionsEnded, word == "--" {
                optionsEnded = true
                continue
            }
            if !optionsEnded, Parser.isOptionLike(word) {
                let (spelled, attached) = Parser.split(word)
                guard let option = Parser.find(spelled, in: options) else { continue }
                switch option.kind {
                case .flag:
                    parsed.flags[option.name, default: 0] += 1
                case .option:
                    if let attached {
                        parsed.options[option.name, default: []].append(attached)
                    } else if index < before.endIndex {
                        parsed.options[option.name, default: []].append(before[index])
                        index += 1
                    } else {
                        awaitingValue = option
                    }
                case .positional:
                    break
                }
                continue
            }
            let configuration = path.last!.configuration
            if !configuration.subcommands.isEmpty, positionalWords.isEmpty {
                if word == "help", path.count == 1 { continue }
                if let subcommand = configuration.subcommands.first(where: { $0.configuration.name == word }) {
                    path.append(subcommand)
                    options += subcommand.configuration.options
                    continue
                }
            }
            positionalWords.append(word)
        }

        if let awaitingValue {
            return values(awaitingValue.completion, prefix: current, root: root, parsed: parsed)
        }
        if !optionsEnded, current.hasPrefix("--"), let equals = current.firstIndex(of: "=") {
            let spelled = String(current[..<equals])
            guard let option = Parser.find(spelled, in: options), option.takesValue else {
                return CompletionResult([])
            }
            let typed = String(current[current.index(after: equals)...])
            var result = values(option.completion, prefix: typed, root: root, parsed: parsed)
            result.candidates = result.candidates.map { "\(spelled)=\($0)" }
            return result
        }
        if !optionsEnded, current.hasPrefix("-") {
            var names = options.map { "--" + $0.name } + ["--help"]
            if path.count == 1, root.configuration.version != nil { names.append("--version") }
            // A value-taking option is offered as one word; the shell adds the space.
            return CompletionResult(unique(names).filter { $0.hasPrefix(current) })
        }
        let configuration = path.last!.configuration
        if !configuration.subcommands.isEmpty, positionalWords.isEmpty {
            let names = configuration.subcommands.map { $0.configuration.name } + (path.count == 1 ? ["help"] : [])
            return CompletionResult(names.filter { $0.hasPrefix(current) })
        }
        guard let argument = positional(at: positionalWords.count, of: configuration.positionals) else {
            return CompletionResult([])
        }
        return values(argument.completion, prefix: current, root: root, parsed: parsed)
    }

    /// The declared positional that the word at `position` fills: the one in that place, or a
    /// repeating last one.
    static func positional(at position: Int, of positionals: [Argument]) -> Argument? {
        if position < positionals.count { return positionals[position] }
        guard let last = positionals.last, case .positional(_, true) = last.kind else { return nil }
        return last
    }

    static func values(
        _ completion: CompletionValues, prefix: String, root: any Command.Type, parsed: ParsedArguments
    ) -> CompletionResult {
        switch completion {
        case .none:
            return CompletionResult([])
        case .files:
            return CompletionResult([], .files)
        case .directories:
            return CompletionResult([], .directories)
        case .words(let words):
            return CompletionResult(words.filter { $0.hasPrefix(prefix) })
        case .dynamic(let provider):
            let found = root.completions(provider, arguments: parsed).filter { $0.hasPrefix(prefix) }
            // A prefix such as `job/` is not a whole word: the user goes on typing after it.
            let partial = found.contains { $0.hasSuffix("/") }
            return CompletionResult(found, partial ? .noSpace : .plain)
        }
    }

    static func unique(_ words: [String]) -> [String] {
        var seen = Set<String>()
        return words.filter { seen.insert($0).inserted }
    }
}
