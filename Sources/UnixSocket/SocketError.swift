#if canImport(Glibc)
    import Glibc
#endif

/// A failed socket call: the operation, the path it concerned and the errno it set.
public struct SocketError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The system call that failed, e.g. "connect".
    public var operation: String
    /// The socket path concerned, when there is one.
    public var path: String?
    /// The errno value; 0 when the error is not a system call's.
    public var code: Int32
    /// What went wrong, in words; the system's own text when it is a system call's error.
    public var message: String

    public init(_ operation: String, path: String? = nil, code: Int32, message: String? = nil) {
        self.operation = operation
        self.path = path
        self.code = code
        self.message = message ?? String(cString: strerror(code))
    }

    /// The error of the system call that just failed, from `errno`.
    static func last(_ operation: String, path: String? = nil) -> SocketError {
        SocketError(operation, path: path, code: errno)
    }

    /// Nobody listens on the socket (it is stale or the daemon is gone).
    public var isConnectionRefused: Bool { code == ECONNREFUSED }
    /// The socket file does not exist.
    public var isMissing: Bool { code == ENOENT }
    /// The caller may not open the socket (its mode or group).
    public var isPermissionDenied: Bool { code == EACCES || code == EPERM }
    /// A read or write timed out.
    public var isTimeout: Bool { code == EAGAIN || code == EWOULDBLOCK }

    public var description: String {
        if let path { return "\(operation) \(path): \(message)" }
        return "\(operation): \(message)"
    }
}

/// The id of the group named `name` (or given as a number), nil when there is none.
/// The corresponding C function is `getgrnam_r`.
public func groupID(named name: String) -> UInt32? {
    if let number = UInt32(name) { return number }
    var group = group()
    var result: UnsafeMutablePointer<group>?
    var buffer = [CChar](repeating: 0, count: 16 * 1024)
    let status = getgrnam_r(name, &group, &buffer, buffer.count, &result)
    guard status == 0, result != nil else { return nil }
    return group.gr_gid
}
