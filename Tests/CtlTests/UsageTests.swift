import Foundation
import Projections
import Testing

/// evctl without a daemon: help, usage errors, `new`, an absent daemon, bad input files.
@Suite struct UsageTests {
    static let commands = [
        "new", "append", "get", "list", "types", "log", "status", "metrics", "conflicts", "resolve", "dead-letters",
        "rebuild", "backup", "sync", "peers", "sync-serve",
    ]

    @Test func rootHelpListsCommandsAndExitStatuses() throws {
        let result = try evctl("--help")
        #expect(result.status == 0)
        #expect(result.stdout.contains("usage: evctl [--socket PATH] [--json] COMMAND"))
        for command in UsageTests.commands {
            #expect(result.stdout.contains("\n  \(command) "), "\(command) is listed")
        }
        let exitSection = try #require(result.stdout.range(of: "exit status:"))
        let table = result.stdout[exitSection.upperBound...]
        for status in ["0", "1", "2", "3", "64", "65", "69", "74", "77"] {
            #expect(table.contains("\n  \(status.count == 1 ? "  " : " ")\(status)   "), "exit status \(status)")
        }
        #expect(result.stderr.isEmpty)
    }

    @Test(arguments: commands)
    func everyCommandHasHelp(_ command: String) throws {
        for flag in ["--help", "-h"] {
            let result = try evctl(command, flag)
            #expect(result.status == 0, "\(result)")
            #expect(result.stdout.contains("usage: evctl \(command)"))
            #expect(result.stdout.contains("-h, --help"))
            #expect(result.stdout.contains("global options:\n  --socket PATH"))
            #expect(result.stderr.isEmpty)
        }
        #expect(try evctl("help", command).stdout == evctl(command, "--help").stdout)
    }

    @Test func helpWinsOverOtherMistakes() throws {
        let result = try evctl("get", "--no-such-option", "a", "b", "--help")
        #expect(result.status == 0)
        #expect(result.stdout.contains("usage: evctl get [--history] [--sync] ENTITY"))
    }

    @Test func version() throws {
        let result = try evctl("--version")
        #expect(result.status == 0)
        #expect(result.stdout.hasPrefix("evctl "))
    }

    @Test(arguments: [
        ([], "a command is required"),
        (["frobnicate"], "unknown command 'frobnicate'"),
        (["get"], "missing ENTITY"),
        (["get", "job/1", "job/2"], "unexpected argument 'job/2'"),
        (["get", "--histroy", "job/1"], "did you mean '--history'?"),
        (["list", "--limit", "many"], "--limit wants a whole number, not 'many'"),
        (["list", "--limit", "0"], "--limit must be from 1 to 10000, not 0"),
        (["log", "--after"], "--after needs a value"),
        (["append"], "missing ENTITY (or --file PATH)"),
        (["append", "job/1"], "missing OPERATION"),
        (["append", "job/1", "jump"], "unknown operation 'jump'"),
        (["append", "job/1", "status"], "status takes one STATUS"),
        (["append", "job/1", "set"], "set needs at least one NAME=TEXT or NAME:=JSON"),
        (["append", "job/1", "set", "address"], "'address' is not NAME=TEXT or NAME:=JSON"),
        (["append", "job/1", "set", "floor:={3"], "the value of floor is not JSON"),
        (["append", "job/1", "set", "9lives=x"], "'9lives' is not a field name"),
        (["append", "job/1", "set", "a=1", "a=2"], "the field a is given twice"),
        (["append", "job/1", "add", "parts"], "add takes SET ELEMENT"),
        (["append", "job/1", "add", "parts", ":=[1,"], "the value of the element is not JSON"),
        (["append", "job/1", "delete", "now"], "delete takes no arguments"),
        (["append", "--file", "x.ndjson", "job/1", "delete"], "give either --file or ENTITY OPERATION"),
        (["append", "--file", "x.ndjson", "--key", "k"], "with --file, put key, by and if_match in each line"),
        (["append", "job/1", "delete", "--skip", "3"], "--batch and --skip go with --file"),
        (["append", "--file", "x.ndjson", "--batch", "0"], "--batch must be from 1 to 100000, not 0"),
        (["new"], "missing TYPE"),
        (["new", "Job"], "an entity type starts with a lower-case letter"),
        (["new", "job/1"], "an entity type has only a-z, 0-9, _ and -"),
        (["resolve", "job/1"], "give the values to keep"),
        (["backup"], "missing PATH"),
        (["status", "now"], "unexpected argument 'now'"),
        (["sync", "http://hq.example.net"], "'http://hq.example.net' is not a peer URL"),
        (["peers"], "a command is required"),
        (["peers", "show"], "missing NAME"),
        (["peers", "inspect"], "unknown command 'inspect'"),
        (["peers", "add", "hq"], "missing URL"),
        (["peers", "add", "hq", "hq.example.net"], "'hq.example.net' is not a peer URL"),
        (["peers", "remove"], "missing NAME"),
        (["peers", "list", "hq"], "unexpected argument 'hq'"),
    ])
    func usageErrorsExit64WithTheUsage(_ arguments: [String], _ message: String) throws {
        let result = try evctl(arguments, socket: "/nonexistent/evstored.sock")
        #expect(result.status == 64, "\(result)")
        #expect(result.stderr.contains(message), "\(result)")
        #expect(result.stderr.contains("usage: evctl"))
        #expect(result.stdout.isEmpty)
    }

    @Test func newPrintsAFreshULID() throws {
        let before = UInt64(Date().timeIntervalSince1970 * 1000)
        let first = try evctl("new", "job")
        let second = try evctl("new", "work_order-2")
        let after = UInt64(Date().timeIntervalSince1970 * 1000)
        #expect(first.status == 0 && second.status == 0)
        let text = first.stdout
        #expect(text.hasPrefix("job/") && text.hasSuffix("\n") && text.count == 4 + 26 + 1, "\(text)")
        let id = try #require(ULID(text.dropFirst(4).dropLast()))
        #expect(id.timestamp >= before && id.timestamp <= after)
        #expect(second.stdout.hasPrefix("work_order-2/"))
        #expect(first.stdout.dropFirst(4) != second.stdout.dropFirst(13))

        let json = try evctl("--json", "new", "job").json()
        let entity = try #require(json["entity"] as? String)
        #expect(entity.hasPrefix("job/") && ULID(entity.dropFirst(4)) != nil)
    }

    static let notListening =
        "Start it with `evstored` (or `systemctl start evstored`), "
        + "or point evctl at its socket with --socket or EVSTORE_SOCKET."

    @Test(arguments: ["status", "get job/1", "list", "types", "append job/1 status x", "log --follow"])
    func anAbsentDaemonExits69(_ command: String) throws {
        let directory = try makeTemporaryDirectory("evctl-none")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let socket = directory + "/evstored.sock"
        let words = command.split(separator: " ").map(String.init)

        var result = try evctl(words, socket: socket)
        #expect(result.status == 69, "\(result)")
        #expect(result.stderr == "evctl: no evstore daemon is listening on \(socket). \(UsageTests.notListening)\n")
        #expect(result.stdout.isEmpty)

        result = try evctl(words, environment: ["EVSTORE_SOCKET": socket])
        #expect(result.status == 69)
        #expect(result.stderr.contains("listening on \(socket)."))
    }

    @Test func aStaleSocketExits69() throws {
        let directory = try makeTemporaryDirectory("evctl-stale")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let socket = directory + "/evstored.sock"
        // A socket file nobody listens on: what a crashed daemon leaves.
        let python = Process()
        python.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        python.arguments = [
            "python3", "-c", "import socket,sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])", socket,
        ]
        try python.run()
        python.waitUntilExit()
        try #require(python.terminationStatus == 0 && FileManager.default.fileExists(atPath: socket))

        let result = try evctl(["status"], socket: socket)
        #expect(result.status == 69)
        #expect(result.stderr == "evctl: no evstore daemon is listening on \(socket). \(UsageTests.notListening)\n")
    }

    @Test(.enabled(if: !FileManager.default.fileExists(atPath: "/run/evstore/evstored.sock")))
    func theDefaultSocketIsUnderXDGRuntimeDir() throws {
        let directory = try makeTemporaryDirectory("evctl-xdg")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let result = try evctl(["status"], environment: ["XDG_RUNTIME_DIR": directory])
        #expect(result.status == 69)
        #expect(result.stderr.contains("listening on \(directory)/evstore/evstored.sock."))
    }

    @Test(arguments: [
        ("{\"entity\":\"a/1\",\"kind\":\"delete\"}\n\n{\"entity\":\"a/1\" \"kind\":\"delete\"}\n", 3),
        ("{\"entity\":\"a/1\",\"kind\":\"delete\"}\n[1,2]\n", 2),
        ("\n\n   \n{} trailing\n", 4),
        ("{\"entity\":\"a/1\",\"kind\":\"delete\"}\r\n{\"a\":1,\"a\":2}\r\n", 2),
        ("{\"entity\":\"a/1\",\"kind\":\"delete\"}\n{\"entity\":\"a/1\",\"kind\":\"delete\"", 2),
        ("\"just a string\"", 1),
    ])
    func badInputLinesExit65WithTheLineNumber(_ input: String, _ line: Int) throws {
        let directory = try makeTemporaryDirectory("evctl-bad")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let file = directory + "/events.ndjson"
        try input.write(toFile: file, atomically: true, encoding: .utf8)
        // No daemon: the input is checked whole before evctl connects.
        let socket = directory + "/none.sock"
        for result in [
            try evctl(["append", "--file", file], socket: socket),
            try evctl(["append", "--file", "-"], socket: socket, stdin: input),
        ] {
            #expect(result.status == 65, "\(result)")
            #expect(result.stderr.hasPrefix("evctl: line \(line): "), "\(result)")
            #expect(result.stderr.contains("nothing was appended"))
        }
    }

    @Test func aMissingInputFileExits66() throws {
        let result = try evctl(["append", "--file", "/nonexistent/events.ndjson"], socket: "/nonexistent/s.sock")
        #expect(result.status == 66)
        #expect(result.stderr == "evctl: /nonexistent/events.ndjson: no such file.\n")
    }
}
