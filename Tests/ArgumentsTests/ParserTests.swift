import Testing

@testable import Arguments

/// A tool in the shape of evctl: global options, subcommands with options and positionals.
struct Tool: Command {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "tool", abstract: "A tool for tests.",
            arguments: [
                .option("socket", value: "PATH", help: "Where the daemon listens."),
                .flag("json", help: "Print JSON."),
            ],
            subcommands: [Get.self, Append.self, Daemon.self], version: "1.2.3",
            sections: [HelpSection("exit status", "0 ok\n\n  64  usage")])
    }
    init(_ arguments: ParsedArguments) {}
}

struct Get: Command {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "get", abstract: "Show an entity.",
            arguments: [
                .flag("history", help: "Also list the status history."),
                .option("limit", short: "n", value: "N", default: "100", help: "At most N."),
                .positional("ENTITY", help: "The entity, TYPE/ID."),
            ])
    }
    let arguments: ParsedArguments
    init(_ arguments: ParsedArguments) { self.arguments = arguments }
}

struct Append: Command {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "append", abstract: "Append events.",
            usage: ["ENTITY OPERATION [ARGUMENT...]", "--file PATH"],
            arguments: [
                .option("key", value: "K", repeating: true, help: "An idempotency key."),
                .option("file", value: "PATH", help: "Read events from PATH, or - for standard input."),
                .positional("ENTITY", optional: true, help: "The entity."),
                .positional("OPERATION", optional: true, help: "What to do."),
                .positional("ARGUMENT", optional: true, repeating: true, help: "Its arguments."),
            ])
    }
    init(_ arguments: ParsedArguments) {}
}

/// A flat command: options only, no subcommands (the daemon's shape).
struct Daemon: Command {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "daemon", abstract: "Run the daemon.",
            arguments: [
                .option("data-dir", value: "DIR", help: "Where the store lives."),
                .positional("FIRST", help: "Required first."),
                .positional("REST", optional: true, repeating: true, help: "The rest."),
                .positional("LAST", help: "Required last."),
            ])
    }
    init(_ arguments: ParsedArguments) {}
}

@Suite struct ParserTests {
    func parse(_ words: String) throws(ParseError) -> Invocation {
        try Parser.parse(words.split(separator: " ").map(String.init), root: Tool.self)
    }

    func usageError(_ words: String) -> String? {
        do {
            _ = try parse(words)
            return nil
        } catch {
            return error.error.message
        }
    }

    @Test func selectsSubcommandAndReadsItsArguments() throws {
        let invocation = try parse("--socket /tmp/s get --history job/42 --json")
        #expect(invocation.names == ["tool", "get"])
        #expect(invocation.action == .run)
        #expect(invocation.arguments["socket"] == "/tmp/s")
        #expect(invocation.arguments.flag("json"))
        #expect(invocation.arguments.flag("history"))
        #expect(invocation.arguments["ENTITY"] == "job/42")
        #expect(invocation.arguments["limit"] == "100")
        #expect(!invocation.arguments.contains("limit"))
    }

    @Test(arguments: [
        "get --limit 7 job/1", "get --limit=7 job/1", "get -n 7 job/1", "get job/1 --limit 7",
        "get --limit 3 --limit 7 job/1",
    ])
    func optionValueForms(_ words: String) throws {
        let invocation = try parse(words)
        #expect(try invocation.arguments.integer("limit") == 7)
        #expect(invocation.arguments["ENTITY"] == "job/1")
    }

    @Test func repeatedOptionsKeepEveryValue() throws {
        let invocation = try parse("append --key a --key=b job/1 delete")
        #expect(invocation.arguments.values("key") == ["a", "b"])
        #expect(invocation.arguments["key"] == "b")
    }

    @Test func doubleDashEndsOptions() throws {
        let invocation = try parse("append job/1 status -- --weird -x")
        #expect(invocation.arguments.values("ARGUMENT") == ["--weird", "-x"])
    }

    @Test func dashAloneAndNegativeNumbersAreValues() throws {
        let invocation = try parse("append --file - job/1 set n:=-3 -4")
        #expect(invocation.arguments["file"] == "-")
        #expect(invocation.arguments.values("ARGUMENT") == ["n:=-3", "-4"])
    }

    @Test func positionalsFillInOrderAroundARepeatingOne() throws {
        var invocation = try parse("daemon a b c d")
        #expect(invocation.arguments.values("FIRST") == ["a"])
        #expect(invocation.arguments.values("REST") == ["b", "c"])
        #expect(invocation.arguments.values("LAST") == ["d"])
        invocation = try parse("daemon a d")
        #expect(invocation.arguments.values("REST") == [])
        #expect(invocation.arguments["LAST"] == "d")
    }

    @Test(arguments: [
        ("get", "missing ENTITY"),
        ("get a b", "unexpected argument 'b'"),
        ("get --histroy a", "unknown option '--histroy' (did you mean '--history'?)"),
        ("get --zzz a", "unknown option '--zzz'"),
        ("get a --limit", "--limit needs a value"),
        ("get a --limit --json", "--limit needs a value"),
        ("get --history=yes a", "--history takes no value"),
        ("frobnicate", "unknown command 'frobnicate'"),
        ("", "a command is required"),
        ("--json", "a command is required"),
        ("--history get a", "unknown option '--history'"),
        ("daemon a", "missing LAST"),
    ])
    func usageErrors(_ words: String, _ message: String) {
        #expect(usageError(words) == message)
    }

    @Test(arguments: ["--help", "-h", "get --help", "get -h x y z", "get --nonsense --help", "help get", "help"])
    func helpWinsEverywhere(_ words: String) throws {
        let invocation = try parse(words)
        #expect(invocation.action == .help)
        #expect(invocation.names.last == (words.contains("get") ? "get" : "tool"))
    }

    @Test func helpAfterDoubleDashIsAWord() throws {
        let invocation = try parse("append job/1 status -- --help")
        #expect(invocation.action == .run)
        #expect(invocation.arguments.values("ARGUMENT") == ["--help"])
    }

    @Test func versionOnlyAtTheRoot() throws {
        #expect(try parse("--version").action == .version)
        #expect(usageError("get --version a") == "unknown option '--version'")
    }

    @Test(arguments: [
        ("12", 12 as Int?, nil as String?),
        ("0", nil, "--limit must be from 1 to 10000, not 0"),
        ("x", nil, "--limit wants a whole number, not 'x'"),
        ("20000", nil, "--limit must be from 1 to 10000, not 20000"),
    ])
    func integers(_ text: String, _ value: Int?, _ message: String?) throws {
        let arguments = try parse("get --limit \(text) a").arguments
        do {
            #expect(try arguments.integer("limit", in: 1...10000) == value)
        } catch {
            #expect(error.message == message)
        }
    }
}

@Suite struct HelpTests {
    @Test func subcommandHelpListsArgumentsOptionsAndGlobals() {
        let text = Help.text([Tool.self, Get.self])
        #expect(text.hasPrefix("Show an entity.\n"))
        #expect(text.contains("usage: tool get [--history] [--limit N] ENTITY\n"))
        #expect(text.contains("arguments:\n  ENTITY                  The entity, TYPE/ID.\n"))
        #expect(text.contains("  -n, --limit N           At most N. (default: 100)\n"))
        #expect(text.contains("  -h, --help              Show this help.\n"))
        #expect(text.contains("global options:\n  --socket PATH           Where the daemon listens.\n"))
        #expect(!text.contains("--version"))
    }

    @Test func rootHelpListsCommandsAndSections() {
        let text = Help.text([Tool.self])
        #expect(text.contains("usage: tool [--socket PATH] [--json] COMMAND\n"))
        #expect(text.contains("commands:\n  get                     Show an entity.\n"))
        #expect(text.contains("--version"))
        #expect(text.hasSuffix("exit status:\n  0 ok\n\n    64  usage\n"))
    }

    @Test func aFlatToolHasNoCommandsNorGlobalOptions() {
        let text = Help.text([Daemon.self])
        #expect(text.contains("usage: daemon [--data-dir DIR] FIRST [REST...] LAST\n"))
        #expect(text.contains("options:\n  --data-dir DIR          Where the store lives.\n  -h, --help "))
        #expect(!text.contains("global options:") && !text.contains("commands:"))
    }

    struct Wide: Command {
        static var configuration: CommandConfiguration {
            CommandConfiguration(
                name: "wide", abstract: "Many options.",
                arguments: (1...8).map { .option("option-\($0)", value: "VALUE", help: "Option \($0).") })
        }
        init(_ arguments: ParsedArguments) {}
    }

    @Test func longUsageLinesContinueIndented() {
        let lines = Help.usage([Tool.self, Wide.self]).split(separator: "\n")
        #expect(lines.count > 1)
        #expect(lines[0].hasPrefix("usage: tool wide [--option-1 VALUE]"))
        for line in lines {
            #expect(line.count <= Help.width)
        }
        for line in lines.dropFirst() {
            #expect(line.hasPrefix(String(repeating: " ", count: "usage: tool wide ".count) + "[--option-"))
        }
    }

    @Test func explicitUsageForms() {
        #expect(
            Help.usage([Tool.self, Append.self])
                == "usage: tool append ENTITY OPERATION [ARGUMENT...]\n       tool append --file PATH")
    }

    @Test func longHelpWraps() {
        let words = Array(repeating: "word", count: 40).joined(separator: " ")
        let table = Help.table([("--option", words)])
        for line in table.split(separator: "\n") {
            #expect(line.count <= Help.width)
            #expect(line.hasPrefix("  --option") || line.hasPrefix(String(repeating: " ", count: Help.labelWidth)))
        }
    }

    @Test(arguments: [("kitten", "sitting", 3), ("", "abc", 3), ("--histroy", "--history", 2), ("same", "same", 0)])
    func editDistance(_ a: String, _ b: String, _ distance: Int) {
        #expect(Parser.editDistance(a, b) == distance)
    }
}

@Suite struct MainTests {
    struct Failing: Command {
        static var configuration: CommandConfiguration {
            CommandConfiguration(
                name: "failing", abstract: "Fails as told.",
                arguments: [
                    .option("code", value: "N", help: "Exit status."), .flag("usage", help: "Fail validation."),
                ])
        }
        let code: Int?
        let usage: Bool
        init(_ arguments: ParsedArguments) throws {
            code = try arguments.integer("code")
            usage = arguments.flag("usage")
        }
        func validate() throws {
            if usage { throw UsageError("bad combination") }
        }
        func run() throws {
            if let code { throw CommandFailure(exitCode: Int32(code), nil) }
        }
    }

    static let statuses: [([String], Int32)] = [
        ([], 0), (["--code", "3"], 3), (["--code", "x"], 64), (["--usage"], 64), (["--help"], 0), (["x"], 64),
    ]

    @Test(arguments: statuses)
    func exitStatus(_ words: [String], _ status: Int32) {
        #expect(Failing.main(words) == status)
    }
}
