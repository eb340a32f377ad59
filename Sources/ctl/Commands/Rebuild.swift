import Arguments

/// `evctl rebuild`: recomputes every projection from the log.
struct Rebuild: Command {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "rebuild",
            abstract: "Recompute every entity's state from the log (--verify: only compare).",
            discussion: """
                The projections are kept up to date with each append; a rebuild folds the whole \
                log again. With --verify the result is compared with the stored projections and \
                nothing is written: any difference is listed and evctl exits with 1.
                """,
            arguments: [.flag("verify", help: "Compare with the stored projections instead of replacing them.")])
    }

    var global: GlobalOptions
    var verify: Bool

    init(_ arguments: ParsedArguments) {
        global = GlobalOptions(arguments)
        verify = arguments.flag("verify")
    }

    func run() throws {
        var params = JSONObjectWriter()
        if verify { params.add("verify", true) }
        let reply = try global.connect().call("rebuild", params)
        let result = reply.result as? [String: Any] ?? [:]
        let mismatched = result["mismatched"] as? [String] ?? []
        let digestMismatch = result["digest_mismatch"] as? Bool ?? false
        let unsequenced = result["unsequenced"] as? Int ?? 0
        var output = StandardOutput()
        if global.json {
            output.line(bytes: reply.resultBytes)
        } else {
            let entities = Format.count(result["entities"] as? Int ?? 0, "entity", "entities")
            let events = Format.count(result["events"] as? Int ?? 0, "event")
            if verify {
                output.line(
                    "verified \(entities) from \(events): "
                        + (mismatched.isEmpty && !digestMismatch && unsequenced == 0
                            ? "the projections match the log" : "MISMATCH"))
            } else {
                output.line("rebuilt \(entities) from \(events)")
            }
            if !mismatched.isEmpty {
                output.line(
                    (verify ? "differ from a rebuild: " : "differed from the rebuild and were replaced: ")
                        + mismatched.joined(separator: ", "))
            }
            if digestMismatch { output.line("the stored state digest differs from the rebuilt one") }
            if unsequenced > 0 {
                output.line(
                    "\(Format.count(unsequenced, "event")) held without a seq: the store is damaged; restore a backup")
            }
        }
        output.flush()
        if verify, !mismatched.isEmpty || digestMismatch || unsequenced > 0 {
            throw CommandFailure(exitCode: ExitStatus.failed, nil)
        }
    }
}
