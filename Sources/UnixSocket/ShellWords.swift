/// Splits a command line into words as a POSIX shell does before it expands anything.
///
/// Unquoted spaces, tabs and newlines separate words. Single quotes keep everything up to
/// the next single quote literal. Double quotes keep everything literal except a backslash
/// before `"`, `\`, `$`, `` ` `` or a newline. An unquoted backslash keeps the next character
/// literal. A backslash before a newline, quoted by double quotes or not, continues the line:
/// both disappear. `''` and `""` make an empty word; `a''b` is the word `ab`.
///
/// Nothing is expanded or interpreted: `$HOME`, `*`, `~` and `` `cmd` `` stay as written, and
/// `;`, `|`, `&`, `<`, `>`, `(`, `)` and `#` are ordinary characters, not operators or comments.
/// (POSIX.1-2017, Shell Command Language, 2.2 Quoting and 2.3 Token Recognition.)
public enum ShellWords {
    /// The words of `command`; an unclosed quote or a backslash at the end is an error.
    public static func split(_ command: String) throws(ShellWordsError) -> [String] {
        var words: [String] = []
        var word = String.UnicodeScalarView()
        // Whether a word has begun: a quote alone begins one, so `''` is an empty word.
        var inWord = false
        var scalars = Array(command.unicodeScalars).enumerated().makeIterator()
        while let (offset, scalar) = scalars.next() {
            switch scalar {
            case " ", "\t", "\n":
                if inWord { words.append(String(word)) }
                word.removeAll()
                inWord = false
            case "\\":
                guard let (_, next) = scalars.next() else {
                    throw ShellWordsError(.trailingBackslash, offset: offset)
                }
                if next == "\n" { continue }
                word.append(next)
                inWord = true
            case "'":
                inWord = true
                while true {
                    guard let (_, quoted) = scalars.next() else {
                        throw ShellWordsError(.unterminatedSingleQuote, offset: offset)
                    }
                    if quoted == "'" { break }
                    word.append(quoted)
                }
            case "\"":
                inWord = true
                while true {
                    guard let (_, quoted) = scalars.next() else {
                        throw ShellWordsError(.unterminatedDoubleQuote, offset: offset)
                    }
                    if quoted == "\"" { break }
                    guard quoted == "\\" else {
                        word.append(quoted)
                        continue
                    }
                    guard let (_, escaped) = scalars.next() else {
                        throw ShellWordsError(.unterminatedDoubleQuote, offset: offset)
                    }
                    switch escaped {
                    case "\n": break
                    case "\"", "\\", "$", "`": word.append(escaped)
                    default:
                        word.append(quoted)
                        word.append(escaped)
                    }
                }
            default:
                word.append(scalar)
                inWord = true
            }
        }
        if inWord { words.append(String(word)) }
        return words
    }
}

/// A command line `ShellWords` cannot split: where it went wrong and how to fix it.
public struct ShellWordsError: Error, CustomStringConvertible, Equatable, Sendable {
    public enum Reason: Equatable, Sendable {
        /// A `'` without the `'` that closes it.
        case unterminatedSingleQuote
        /// A `"` without the `"` that closes it.
        case unterminatedDoubleQuote
        /// The command ends with an unquoted `\`, which escapes nothing.
        case trailingBackslash
    }

    public var reason: Reason
    /// Where the unclosed quote or the last backslash is, counted in Unicode scalars from 0.
    public var offset: Int

    public init(_ reason: Reason, offset: Int) {
        self.reason = reason
        self.offset = offset
    }

    public var description: String {
        switch reason {
        case .unterminatedSingleQuote:
            return "the single quote at offset \(offset) is never closed; add the closing ' or write it as \\'"
        case .unterminatedDoubleQuote:
            return "the double quote at offset \(offset) is never closed; add the closing \" or write it as \\\""
        case .trailingBackslash:
            return "the command ends with a backslash at offset \(offset), which escapes nothing; "
                + "remove it or write it as \\\\"
        }
    }
}
