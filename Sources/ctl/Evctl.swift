import Arguments
import Version

/// `evctl`: the command line of an evstore daemon.
struct Evctl: Command {
    static let version = EvstoreVersion.current

    static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "evctl",
            abstract: "Talk to the evstore daemon: append events, read entities, the log and the store's state, sync.",
            discussion: """
                evctl finds the daemon's socket from --socket, else EVSTORE_SOCKET, else the first \
                of these that exists: $XDG_RUNTIME_DIR/evstore/evstored.sock, \
                /run/evstore/evstored.sock, ./.evstore/evstored.sock.

                Output is for people; with --json it is the daemon's JSON reply, one line (NDJSON \
                for streams of events). Field values follow HTTPie's habit: name=text is a string, \
                name:=JSON is any JSON value.

                  evctl new job
                  evctl append job/42 status en_route
                  evctl append job/42 set address="12 Main St" floor:=3
                  evctl append --file events.ndjson
                  evctl get job/42
                """,
            usage: ["[--socket PATH] [--json] COMMAND [ARGUMENT...]"],
            arguments: [
                .option(
                    "socket", value: "PATH", completion: .files, help: "The daemon's socket (also EVSTORE_SOCKET)."),
                .flag("json", help: "Print JSON for scripts instead of text for people."),
            ],
            subcommands: [
                New.self, Append.self, Get.self, List.self, Types.self, Log.self, Consumers.self, Status.self,
                Attention.self,
                Metrics.self, Conflicts.self, Resolve.self, DeadLetters.self, Rebuild.self, Backup.self, Export.self,
                Import.self, Sync.self, Peers.self, Blob.self,
                SyncServe.self,
            ],
            version: version,
            sections: [HelpSection("exit status", ExitStatus.helpText)],
            manualSections: [
                HelpSection(
                    "environment",
                    """
                    EVSTORE_SOCKET is the daemon's socket when --socket is not given. USER names \
                    the author (`by`) of appended events unless --by says otherwise.
                    """),
                HelpSection(
                    "files",
                    """
                      /run/evstore/evstored.sock
                          the socket of the system daemon (evstored.service)
                      $XDG_RUNTIME_DIR/evstore/evstored.sock
                          the socket of a daemon run by the user
                      /usr/share/bash-completion/completions/evctl, /usr/share/zsh/vendor-completions/_evctl
                          shell completion of commands, options, peer names and entity types
                    """),
                HelpSection("see also", "evstored(8)"),
            ])
    }

    init(_ arguments: ParsedArguments) {}
}

/// The options every command shares.
struct GlobalOptions {
    var socketOption: String?
    var json: Bool

    init(_ arguments: ParsedArguments) {
        socketOption = arguments["socket"]
        json = arguments.flag("json")
    }

    /// The socket's path, resolved now.
    var socketPath: String { SocketLocation.resolve(option: socketOption) }

    func connect() throws(CommandFailure) -> Connection {
        try Connection.open(socketPath)
    }
}

extension GlobalOptions {
    /// Calls `method` on a connection of its own; an `invalid_params` answer is a usage error
    /// (exit 64), any other error exits with its reason's status.
    func call(_ method: String, _ params: JSONObjectWriter = JSONObjectWriter()) throws -> Reply {
        let reply = try connect().exchange(method, params)
        if let error = reply.error {
            if let usage = error.usageError { throw usage }
            throw CommandFailure(exitCode: error.exitStatus, error.description)
        }
        return reply
    }

    /// Calls `method` and prints its answer: as the daemon sent it with --json, else the
    /// lines `text` makes of its result.
    func printResult(
        of method: String, _ params: JSONObjectWriter = JSONObjectWriter(), text: ([String: Any]) -> [String]
    ) throws {
        let reply = try call(method, params)
        var output = StandardOutput()
        if json {
            output.line(bytes: reply.resultBytes)
        } else {
            for line in text(reply.result as? [String: Any] ?? [:]) { output.line(line) }
        }
        output.flush()
    }
}
