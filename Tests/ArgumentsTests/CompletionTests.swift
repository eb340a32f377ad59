import Testing

@testable import Arguments

/// A tool whose arguments say what the shell may offer.
struct Completing: Command {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "tool", abstract: "A tool for completion tests.",
            arguments: [
                .option("socket", value: "PATH", completion: .files, help: "Where the daemon listens."),
                .flag("json", help: "Print JSON."),
            ],
            subcommands: [Run.self, Peer.self], version: "1.0")
    }
    init(_ arguments: ParsedArguments) {}

    /// Names that depend on the line: the socket given so far shows in the answer.
    static func completions(_ provider: String, arguments: ParsedArguments) -> [String] {
        switch provider {
        case "peer": return ["hq", "hub", "van-\(arguments["socket"] ?? "none")"]
        case "entity": return ["job/", "site/"]
        default: return []
        }
    }

    struct Run: Command {
        static var configuration: CommandConfiguration {
            CommandConfiguration(
                name: "run", abstract: "Run.",
                arguments: [
                    .option("mode", value: "MODE", completion: .words(["fast", "full"]), help: "How."),
                    .option("out", short: "o", value: "DIR", completion: .directories, help: "Where."),
                    .positional("ENTITY", completion: .dynamic("entity"), help: "What."),
                    .positional("OPERATION", completion: .words(["add", "remove"]), help: "Which."),
                    .positional("ARGUMENT", optional: true, repeating: true, help: "Free text."),
                ])
        }
        init(_ arguments: ParsedArguments) {}
    }

    struct Peer: Command {
        static var configuration: CommandConfiguration {
            CommandConfiguration(name: "peer", abstract: "Peers.", subcommands: [Remove.self])
        }
        init(_ arguments: ParsedArguments) {}
    }

    struct Remove: Command {
        static var configuration: CommandConfiguration {
            CommandConfiguration(
                name: "remove", abstract: "Remove.",
                arguments: [.positional("NAME", repeating: true, completion: .dynamic("peer"), help: "A peer.")])
        }
        init(_ arguments: ParsedArguments) {}
    }
}

@Suite struct CompletionTests {
    func complete(_ words: String...) -> CompletionResult {
        Completer.complete(words, root: Completing.self)
    }

    @Test func commandsAtTheTopAndBelow() {
        #expect(complete("") == CompletionResult(["run", "peer", "help"]))
        #expect(complete("p") == CompletionResult(["peer"]))
        #expect(complete("peer", "") == CompletionResult(["remove"]))
        #expect(complete("help", "r") == CompletionResult(["run"]), "`help COMMAND` names a command")
        #expect(complete("nothing", "") == CompletionResult([]), "an unknown command offers nothing")
    }

    @Test func optionsOfTheCommandAndItsParents() {
        #expect(complete("-") == CompletionResult(["--socket", "--json", "--help", "--version"]))
        #expect(complete("run", "--") == CompletionResult(["--socket", "--json", "--mode", "--out", "--help"]))
        #expect(complete("run", "--m") == CompletionResult(["--mode"]))
        #expect(complete("run", "--", "-") == CompletionResult([]), "after --, a dash is an argument")
    }

    @Test func optionValues() {
        #expect(complete("run", "--mode", "f") == CompletionResult(["fast", "full"]))
        #expect(complete("run", "--mode=fa") == CompletionResult(["--mode=fast"]))
        #expect(complete("run", "-o", "") == CompletionResult([], .directories))
        #expect(complete("--socket", "") == CompletionResult([], .files))
        #expect(complete("--socket=/r") == CompletionResult([], .files))
        #expect(complete("run", "--json=x") == CompletionResult([]), "a flag takes no value")
    }

    @Test func positionalsInTheirPlaces() {
        #expect(complete("run", "") == CompletionResult(["job/", "site/"], .noSpace))
        #expect(complete("run", "s") == CompletionResult(["site/"], .noSpace))
        #expect(complete("run", "job/1", "") == CompletionResult(["add", "remove"]))
        #expect(
            complete("run", "--mode", "fast", "job/1", "r") == CompletionResult(["remove"]), "option values skipped")
        #expect(complete("run", "job/1", "add", "") == CompletionResult([]), "free text")
        #expect(complete("peer", "remove", "hq", "h") == CompletionResult(["hq", "hub"]), "a repeating one goes on")
    }

    @Test func dynamicValuesSeeTheLineSoFar() {
        #expect(complete("--socket", "/s", "peer", "remove", "v") == CompletionResult(["van-/s"]))
        #expect(complete("peer", "remove", "v") == CompletionResult(["van-none"]))
    }

    @Test func theTextTheShellScriptsRead() {
        #expect(CompletionResult(["a", "b"], .noSpace).text == "a\nb\n:nospace\n")
        #expect(CompletionResult([]).text == ":plain\n")
    }
}
