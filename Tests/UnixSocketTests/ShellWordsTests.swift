import Testing
import UnixSocket

@Suite("ShellWords")
struct ShellWordsTests {
    /// Command lines and the words `sh` makes of them (checked with `sh -c 'printf "<%s>" ...'`).
    static let table: [(String, [String])] = [
        ("", []),
        ("   \t\n ", []),
        ("ssh host evctl sync-serve", ["ssh", "host", "evctl", "sync-serve"]),
        ("  a \t b\nc  ", ["a", "b", "c"]),
        ("'a b' c", ["a b", "c"]),
        (#"'a "b" \n $x'"#, [#"a "b" \n $x"#]),
        (#""a 'b' $x `y`""#, ["a 'b' $x `y`"]),
        (#""\" \\ \$ \` \a \n""#, [#"" \ $ ` \a \n"#]),
        (#"a\ b \'c \"d \\e"#, ["a b", "'c", #""d"#, #"\e"#]),
        ("a\\\nb", ["ab"]),
        ("\"a\\\nb\"", ["ab"]),
        ("'a\\\nb'", ["a\\\nb"]),
        ("\"a\nb\"", ["a\nb"]),
        ("\\\n", []),
        ("''", [""]),
        (#""""#, [""]),
        (#"'' "" x"#, ["", "", "x"]),
        (#"a''b c""d"#, ["ab", "cd"]),
        (#"pre'mid'"post"end"#, ["premidpostend"]),
        ("a;b|c>d&e #f $(g) ~ *", ["a;b|c>d&e", "#f", "$(g)", "~", "*"]),
        ("'é ü' 日本", ["é ü", "日本"]),
        ("a\rb", ["a\rb"]),
    ]

    @Test("splits as a POSIX shell does, without expansion", arguments: table)
    func splits(command: String, words: [String]) throws {
        #expect(try ShellWords.split(command) == words)
    }

    static let errors: [(String, ShellWordsError)] = [
        ("'abc", ShellWordsError(.unterminatedSingleQuote, offset: 0)),
        (#"a "b"#, ShellWordsError(.unterminatedDoubleQuote, offset: 2)),
        (#"a "b\""#, ShellWordsError(.unterminatedDoubleQuote, offset: 2)),
        (#""b\"#, ShellWordsError(.unterminatedDoubleQuote, offset: 0)),
        (#"'a'"b"'c"#, ShellWordsError(.unterminatedSingleQuote, offset: 6)),
        (#"abc\"#, ShellWordsError(.trailingBackslash, offset: 3)),
    ]

    @Test("an unclosed quote or a trailing backslash is an error saying where", arguments: errors)
    func fails(command: String, error: ShellWordsError) {
        #expect(throws: error) { try ShellWords.split(command) }
    }

    @Test("error messages name the problem and the fix")
    func messages() {
        #expect(
            ShellWordsError(.unterminatedSingleQuote, offset: 4).description
                == "the single quote at offset 4 is never closed; add the closing ' or write it as \\'")
        #expect(ShellWordsError(.unterminatedDoubleQuote, offset: 0).description.contains("double quote at offset 0"))
        #expect(ShellWordsError(.trailingBackslash, offset: 3).description.contains("ends with a backslash"))
    }
}
