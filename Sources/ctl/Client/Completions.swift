import Arguments
import Projections

/// The values of evctl's dynamic completions, asked of the daemon: peer names (`sync`,
/// `peers remove`), consumer names, entity types (`new`, `list`) and `TYPE/` prefixes for entities. A
/// completion must never hang a shell: the daemon gets one second, and any failure offers
/// nothing.
enum Completions {
    static let timeout = 1.0

    static func values(_ provider: String, arguments: ParsedArguments) -> [String] {
        let global = GlobalOptions(arguments)
        switch provider {
        case "peer":
            return names(of: "peers", from: "peers.list", member: "name", global: global)
        case "consumer":
            return names(of: "consumers", from: "consumers.list", member: "name", global: global)
        case "type":
            return names(of: "types", from: "types", member: nil, global: global)
        case "entity":
            return names(of: "types", from: "types", member: nil, global: global).map { $0 + "/" }
        default:
            return []
        }
    }

    /// The strings of `result[items]`, or of each item's `member`; empty on any failure.
    static func names(of items: String, from method: String, member: String?, global: GlobalOptions) -> [String] {
        do {
            let connection = try global.connect()
            defer { connection.close() }
            try? connection.socket.setTimeouts(read: timeout, write: timeout)
            let reply = try connection.exchange(method)
            let list = (reply.result as? [String: Any])?[items] as? [Any] ?? []
            guard let member else { return list.compactMap { $0 as? String } }
            return list.compactMap { ($0 as? [String: Any])?[member] as? String }
        } catch {
            return []
        }
    }
}

extension Evctl {
    static func completions(_ provider: String, arguments: ParsedArguments) -> [String] {
        Completions.values(provider, arguments: arguments)
    }
}
