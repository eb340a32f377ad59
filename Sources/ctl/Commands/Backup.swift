import Arguments

/// `evctl backup PATH`: a consistent copy of the store, written by the daemon.
struct Backup: Command {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "backup",
            abstract: "Write a consistent, compacted copy of the store to PATH while the daemon keeps serving.",
            discussion: """
                The daemon writes the copy, so PATH must be writable by the daemon's user. PATH \
                must not exist (it is made with mode 0700), or be an empty directory of the \
                daemon's user with mode 0700; it may not be a symbolic link, and with backup_dir \
                set it must lie under that directory. A relative PATH is taken from evctl's \
                working directory.
                """,
            arguments: [.positional("PATH", completion: .directories, help: "Where the copy goes (a directory).")])
    }

    var global: GlobalOptions
    var path: String

    init(_ arguments: ParsedArguments) {
        global = GlobalOptions(arguments)
        path = Backup.absolute(arguments["PATH"] ?? "")
    }

    static func absolute(_ path: String) -> String {
        System.absolutePath(path)
    }

    func run() throws {
        var params = JSONObjectWriter()
        params.add("path", path)
        let reply = try global.connect().call("backup", params)
        var output = StandardOutput()
        if global.json {
            output.line(bytes: reply.resultBytes)
        } else {
            let result = reply.result as? [String: Any] ?? [:]
            output.line(
                "backed up \(Format.bytes(result["bytes"] as? Int ?? 0)) to \(result["path"] as? String ?? path)")
        }
        output.flush()
    }
}
