import Arguments
import JSONRPCClient

/// evctl's exit statuses (the 6x–7x ones are sysexits.h's).
enum ExitStatus {
    static let ok: Int32 = 0
    static let failed: Int32 = 1
    static let notFound: Int32 = 2
    static let conflict: Int32 = 3
    static let usage: Int32 = 64
    static let invalidInput: Int32 = 65
    static let noInput: Int32 = 66
    static let unavailable: Int32 = 69
    static let storageFull: Int32 = 74
    static let forbidden: Int32 = 77

    /// The table at the end of `evctl --help`.
    static let helpText = """
          0   ok
          1   failed (e.g. a sync failed, rebuild --verify found a mismatch, or an
              internal error), or `evctl attention` listed something
          2   not found (no such entity or peer)
          3   conflict: --if-match did not match, the entity is deleted, or a peer's
              name is taken
         64   usage: the command line is wrong (the usage is printed)
         65   invalid input: an event, a field value or an input line the daemon cannot take
         66   the --file input cannot be read
         69   the daemon is unreachable (not running, or it went away), or unavailable
         74   the store is full (disk or map size)
         77   forbidden: no permission to open the socket, or the daemon refused
              (read-only access, no access, or a peer defined in the config file)
        """
}

/// An error reply of the daemon (the JSON-RPC client's), as evctl reports it.
typealias RPCError = RemoteError

extension RemoteError {
    /// The exit status for this error: by `data.reason`, and by the JSON-RPC code only for
    /// the protocol errors that carry no reason.
    var exitStatus: Int32 {
        switch reason {
        case "not_found": return ExitStatus.notFound
        case "conflict", "deleted": return ExitStatus.conflict
        case "invalid_event", "too_large", "invalid_params": return ExitStatus.invalidInput
        case "storage_full": return ExitStatus.storageFull
        case "unavailable": return ExitStatus.unavailable
        case "forbidden": return ExitStatus.forbidden
        case .some: return ExitStatus.failed
        case nil:
            switch code {
            case -32700, -32600, -32602: return ExitStatus.invalidInput
            default: return ExitStatus.failed
            }
        }
    }

    /// Invalid params are a value from the command line the daemon cannot use (a peer's
    /// name or URL): a usage error, with the daemon's reason.
    var usageError: UsageError? {
        guard code == -32602 else { return nil }
        let prefix = "invalid params: "
        return UsageError(message.hasPrefix(prefix) ? String(message.dropFirst(prefix.count)) : message)
    }

    /// The daemon's sentence, with the reason after it when there is one.
    var description: String {
        reason.map { "\(message) (\($0))" } ?? message
    }
}
