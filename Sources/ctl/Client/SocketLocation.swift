/// Where the daemon's socket is: `--socket`, else `EVSTORE_SOCKET`, else the first of the
/// default locations that exists (the first of them when none does, for the message).
enum SocketLocation {
    static func resolve(option: String?, environment: [String: String] = System.environment)
        -> String
    {
        if let option, !option.isEmpty { return option }
        if let variable = environment["EVSTORE_SOCKET"], !variable.isEmpty { return variable }
        let candidates = defaultCandidates(environment: environment)
        return candidates.first { System.exists($0) } ?? candidates[0]
    }

    static func defaultCandidates(environment: [String: String]) -> [String] {
        var candidates: [String] = []
        if let runtime = environment["XDG_RUNTIME_DIR"], !runtime.isEmpty {
            candidates.append(runtime + "/evstore/evstored.sock")
        }
        candidates.append("/run/evstore/evstored.sock")
        candidates.append("./.evstore/evstored.sock")
        return candidates
    }
}
