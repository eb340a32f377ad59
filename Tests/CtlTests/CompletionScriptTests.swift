import Foundation
import TestSupport
import Testing

/// Shell completion end to end: `evctl __complete` against a real daemon (peer names and
/// entity types), and the bash and zsh scripts in completion/ driving it as the shells do.
@Suite(.serialized, .enabled(if: RunningDaemon.isAvailable, "evstored is not built"))
struct CompletionScriptTests {
    static let scripts = ManualPageTests.root.appendingPathComponent("completion").path

    /// The shell finds `evctl` on PATH, as an installed one would be.
    static func environment(socket: String?) throws -> [String: String] {
        let bin = try builtBinary("evctl").deletingLastPathComponent().path
        var environment = ["PATH": bin + ":/usr/bin:/bin"]
        if let socket { environment["EVSTORE_SOCKET"] = socket }
        return environment
    }

    /// Candidates and directive from `evctl __complete WORDS`.
    static func complete(_ words: [String], socket: String? = nil) throws -> (candidates: [String], directive: String) {
        let result = try runProgram(
            try builtBinary("evctl").path, ["__complete"] + words, environment: try environment(socket: socket))
        #expect(result.status == 0, "\(result)")
        var lines = result.lines
        let directive = lines.popLast() ?? ""
        return (lines, directive)
    }

    /// A daemon holding entities of types job, site and job-x, with peers hq and van-2.
    static func populatedDaemon() throws -> RunningDaemon {
        let daemon = try RunningDaemon()
        for entity in ["job/1", "site/north", "job-x/a/b"] {
            #expect(try evctl(["append", entity, "status", "open"], socket: daemon.socketPath).status == 0)
        }
        for (name, path) in [("hq", "/nonexistent/hq.sock"), ("van-2", "/nonexistent/van.sock")] {
            let added = try evctl(["peers", "add", name, "unix://" + path], socket: daemon.socketPath)
            #expect(added.status == 0, "\(added)")
        }
        return daemon
    }

    @Test func commandsAreTheOnesHelpLists() throws {
        let help = HelpText(try evctl(["--help"]).stdout)
        let offered = try CompletionScriptTests.complete([""])
        #expect(offered.candidates == help.names(in: "commands") + ["help"])
        #expect(offered.directive == ":plain")
        #expect(try CompletionScriptTests.complete(["peers", ""]).candidates == ["add", "remove", "list", "show"])
        let options = try CompletionScriptTests.complete(["log", "--"]).candidates
        for option in HelpText(try evctl(["log", "--help"]).stdout).longOptions(in: "options") {
            #expect(options.contains(option), "\(option)")
        }
        #expect(options.contains("--socket"), "the global options too")
    }

    @Test func peerNamesAndEntityTypesComeFromTheDaemon() throws {
        let daemon = try CompletionScriptTests.populatedDaemon()
        defer { daemon.remove() }
        let socket = daemon.socketPath
        #expect(try CompletionScriptTests.complete(["sync", ""], socket: socket).candidates == ["hq", "van-2"])
        #expect(try CompletionScriptTests.complete(["peers", "remove", "v"], socket: socket).candidates == ["van-2"])
        #expect(
            try CompletionScriptTests.complete(["new", ""], socket: socket).candidates == ["job", "job-x", "site"])
        let entity = try CompletionScriptTests.complete(["get", "j"], socket: socket)
        #expect(entity.candidates == ["job/", "job-x/"])
        #expect(entity.directive == ":nospace", "the user goes on typing the id")
        // --socket on the line wins over the environment, as it does when running.
        let named = try CompletionScriptTests.complete(["--socket", socket, "list", "s"], socket: "/nonexistent")
        #expect(named.candidates == ["site"])
        #expect(try CompletionScriptTests.complete(["append", "job/1", "st"], socket: socket).candidates == ["status"])
        #expect(try CompletionScriptTests.complete(["backup", ""], socket: socket).directive == ":directories")
    }

    @Test func noDaemonOffersNothingAndFailsNothing() throws {
        let answer = try CompletionScriptTests.complete(["sync", ""], socket: "/nonexistent/evstored.sock")
        #expect(answer.candidates.isEmpty)
        #expect(answer.directive == ":plain")
    }

    /// Runs `_evctl` in bash for the line `line` (the cursor at its end), with or without the
    /// bash-completion package loaded, and returns COMPREPLY.
    static func bash(_ line: String, socket: String?, withPackage: Bool) throws -> [String] {
        let words = line.split(separator: " ", omittingEmptySubsequences: false).map(String.init)
        let quoted = words.map { "'\($0)'" }.joined(separator: " ")
        let package = withPackage ? "source /usr/share/bash-completion/bash_completion;" : ""
        let script = """
            \(package) source '\(scripts)/evctl.bash'
            COMP_WORDS=(\(quoted)); COMP_CWORD=\(words.count - 1); COMP_LINE='\(line)'; COMP_POINT=\(line.utf8.count)
            _evctl; printf '%s\\n' "${COMPREPLY[@]}"
            """
        let result = try runProgram("/bin/bash", ["-c", script], environment: try environment(socket: socket))
        #expect(result.status == 0, "\(result)")
        return result.lines
    }

    @Test(arguments: [false, true])
    func bashOffersWhatEvctlAnswers(withPackage: Bool) throws {
        // bash-completion is what most installs load first; `make deps` installs it, so its
        // absence is a broken test machine, not a reason to pass.
        if withPackage {
            try #require(
                FileManager.default.fileExists(atPath: "/usr/share/bash-completion/bash_completion"),
                "bash-completion is not installed: install it (`make deps` does, or `apt-get install bash-completion`)")
        }
        let daemon = try CompletionScriptTests.populatedDaemon()
        defer { daemon.remove() }
        let socket = daemon.socketPath
        let bash = { (line: String) in try CompletionScriptTests.bash(line, socket: socket, withPackage: withPackage) }
        #expect(try bash("evctl pe") == ["peers"])
        #expect(try bash("evctl sync ") == ["hq", "van-2"])
        #expect(try bash("evctl get s") == ["site/"])
        #expect(try bash("evctl append job/1 re") == ["remove", "restore"])
        #expect(try bash("evctl log --fo") == ["--follow"])
        // Files: the shell lists them.
        let directory = try makeTemporaryDirectory("cmp")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        #expect(FileManager.default.createFile(atPath: directory + "/events.ndjson", contents: Data()))
        #expect(try bash("evctl append --file \(directory)/ev") == [directory + "/events.ndjson"])
    }

    /// Runs `_evctl` in zsh for `words` with the completion system's builtins replaced by
    /// functions that print what they were asked to offer.
    static func zsh(_ words: [String], prefix: String? = nil, socket: String?) throws -> [String] {
        let quoted = words.map { "'\($0)'" }.joined(separator: " ")
        let script = """
            compadd() { print -r -- "compadd $*" }
            _files() { print -r -- "_files $*" }
            compset() { print -r -- "compset $*"; return 0 }
            compdef() { : }
            source '\(scripts)/_evctl'
            words=(\(quoted)); CURRENT=\(words.count); PREFIX='\(prefix ?? words.last ?? "")'
            _evctl
            """
        let result = try runProgram("/usr/bin/zsh", ["-f", "-c", script], environment: try environment(socket: socket))
        #expect(result.status == 0, "\(result)")
        return result.lines
    }

    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/zsh"), "zsh is not installed"))
    func zshOffersWhatEvctlAnswers() throws {
        let daemon = try CompletionScriptTests.populatedDaemon()
        defer { daemon.remove() }
        let socket = daemon.socketPath
        #expect(try CompletionScriptTests.zsh(["evctl", "pe"], socket: socket) == ["compadd -- peers"])
        #expect(try CompletionScriptTests.zsh(["evctl", "sync", ""], socket: socket) == ["compadd -- hq van-2"])
        #expect(try CompletionScriptTests.zsh(["evctl", "get", "j"], socket: socket) == ["compadd -S  -- job/ job-x/"])
        #expect(try CompletionScriptTests.zsh(["evctl", "backup", ""], socket: socket) == ["_files -/"])
        #expect(
            try CompletionScriptTests.zsh(["evctl", "--socket=/tm"], socket: socket) == ["compset -P *=", "_files "])
    }

    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/zsh"), "zsh is not installed"))
    func theZshScriptParses() throws {
        let result = try runProgram("/usr/bin/zsh", ["-n", CompletionScriptTests.scripts + "/_evctl"])
        #expect(result.status == 0, "\(result)")
    }
}
