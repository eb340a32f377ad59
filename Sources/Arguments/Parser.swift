/// What a command line asks for, once parsed.
public struct Invocation {
    public enum Action: Equatable {
        case run
        /// `--help`, `-h` or `help COMMAND`: show the help of the last command in `path`.
        case help
        case version
    }

    /// The root command first, then each subcommand named on the line.
    public var path: [any Command.Type]
    public var arguments: ParsedArguments
    public var action: Action

    /// The names of the commands in `path`, e.g. `["evctl", "get"]`.
    public var names: [String] { path.map { $0.configuration.name } }
}

/// A usage error together with the command it concerns, so its usage can be shown.
public struct ParseError: Error {
    public var path: [any Command.Type]
    public var error: UsageError
}

/// Reads a command line against a command tree.
///
/// Options may come before or after positional arguments; `--name=value` and `--name value`
/// are the same; `--` ends the options; options of a command are also accepted after its
/// subcommand's name. `--help` (or `-h`) anywhere wins over every other error, so a user
/// who got something wrong can always ask.
public enum Parser {
    public static func parse(_ words: [String], root: any Command.Type) throws(ParseError) -> Invocation {
        var path: [any Command.Type] = [root]
        var result = ParsedArguments()
        var options = root.configuration.options
        var positionalWords: [String] = []
        var firstError: UsageError?
        var action = Invocation.Action.run
        var optionsEnded = false
        var index = 0

        func fail(_ message: String) {
            if firstError == nil { firstError = UsageError(message) }
        }

        while index < words.count {
            let word = words[index]
            index += 1
            let configuration = path.last!.configuration
            if !optionsEnded, word == "--" {
                optionsEnded = true
            } else if !optionsEnded, word == "--help" || word == "-h" {
                action = .help
            } else if !optionsEnded, word == "--version", path.count == 1, configuration.version != nil {
                if action == .run { action = .version }
            } else if !optionsEnded, isOptionLike(word) {
                let (spelled, attached) = split(word)
                guard let option = find(spelled, in: options) else {
                    fail(unknownOptionMessage(spelled, known: options))
                    continue
                }
                switch option.kind {
                case .flag:
                    if attached != nil { fail("\(spelled) takes no value") }
                    result.flags[option.name, default: 0] += 1
                case .option:
                    var value = attached
                    if value == nil, index < words.count, !isOptionLike(words[index]) {
                        value = words[index]
                        index += 1
                    }
                    guard let value else {
                        fail("\(spelled) needs a value")
                        continue
                    }
                    result.options[option.name, default: []].append(value)
                case .positional:
                    break
                }
            } else if !configuration.subcommands.isEmpty, positionalWords.isEmpty {
                if word == "help", path.count == 1 {
                    // `help COMMAND...`: the help of the command those words name.
                    action = .help
                    continue
                }
                guard let subcommand = configuration.subcommands.first(where: { $0.configuration.name == word })
                else {
                    fail("unknown command '\(word)'")
                    positionalWords.append(word)
                    continue
                }
                path.append(subcommand)
                options += subcommand.configuration.options
            } else {
                positionalWords.append(word)
            }
        }

        let leaf = path.last!.configuration
        for option in options {
            if let value = option.defaultValue { result.defaults[option.name] = value }
        }
        if action != .run {
            return Invocation(path: path, arguments: result, action: action)
        }
        if let firstError { throw ParseError(path: path, error: firstError) }
        if !leaf.subcommands.isEmpty {
            throw ParseError(path: path, error: UsageError("a command is required"))
        }
        do {
            result.positionals = try assign(positionalWords, to: leaf.positionals)
        } catch {
            throw ParseError(path: path, error: error)
        }
        return Invocation(path: path, arguments: result, action: .run)
    }

    /// Hands the positional words to the declared positionals in order; a repeating one takes
    /// what is left after the required ones behind it.
    static func assign(_ words: [String], to positionals: [Argument]) throws(UsageError) -> [String: [String]] {
        var assigned: [String: [String]] = [:]
        var remaining = words[...]
        for (position, argument) in positionals.enumerated() {
            guard case .positional(let optional, let repeating) = argument.kind else { continue }
            let requiredAfter = positionals[(position + 1)...].filter {
                if case .positional(false, _) = $0.kind { return true }
                return false
            }.count
            // A required one takes the next word; the others leave enough for the required ones behind.
            let available = optional || repeating ? max(0, remaining.count - requiredAfter) : remaining.count
            let take = repeating ? available : min(1, available)
            if take == 0 {
                if optional { continue }
                throw UsageError("missing \(argument.name)")
            }
            assigned[argument.name] = Array(remaining.prefix(take))
            remaining = remaining.dropFirst(take)
        }
        if let extra = remaining.first {
            throw UsageError("unexpected argument '\(extra)'")
        }
        return assigned
    }

    /// A word that names an option: it starts with a dash, and is not `-` alone (standard
    /// input, by habit) nor a negative number.
    static func isOptionLike(_ word: String) -> Bool {
        guard word.hasPrefix("-"), word.count > 1 else { return false }
        let second = word[word.index(after: word.startIndex)]
        return !(second.isASCII && second.isNumber)
    }

    /// `--name=value` → ("--name", "value"); anything else → (word, nil).
    static func split(_ word: String) -> (String, String?) {
        guard word.hasPrefix("--"), let equals = word.firstIndex(of: "=") else { return (word, nil) }
        return (String(word[..<equals]), String(word[word.index(after: equals)...]))
    }

    static func find(_ spelled: String, in options: [Argument]) -> Argument? {
        if spelled.hasPrefix("--") {
            let name = spelled.dropFirst(2)
            return options.last { $0.name == name }
        }
        guard spelled.count == 2, let letter = spelled.last else { return nil }
        return options.last { $0.short == letter }
    }

    static func unknownOptionMessage(_ spelled: String, known options: [Argument]) -> String {
        let names = options.map { "--" + $0.name } + ["--help"]
        let close = names.map { (name: $0, distance: editDistance($0, spelled)) }
            .filter { $0.distance <= 2 }
            .min { $0.distance < $1.distance }
        if let close { return "unknown option '\(spelled)' (did you mean '\(close.name)'?)" }
        return "unknown option '\(spelled)'"
    }

    /// The Levenshtein distance between two short words.
    static func editDistance(_ a: String, _ b: String) -> Int {
        let a = Array(a)
        let b = Array(b)
        guard !a.isEmpty else { return b.count }
        guard !b.isEmpty else { return a.count }
        var previous = Array(0...b.count)
        for i in 1...a.count {
            var current = [i] + Array(repeating: 0, count: b.count)
            for j in 1...b.count {
                let substitution = previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)
                current[j] = min(previous[j] + 1, current[j - 1] + 1, substitution)
            }
            previous = current
        }
        return previous[b.count]
    }
}
