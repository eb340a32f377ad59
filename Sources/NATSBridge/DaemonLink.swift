import JSONRPCClient

/// Why a session of the bridge ended, in a sentence for the log.
struct BridgeError: Error, CustomStringConvertible {
    var message: String
    /// The daemon's `data.reason` when it refused a request.
    var reason: String? = nil
    var description: String { message }

    /// Something the daemon said or did (or its socket).
    static func daemon(_ message: String, reason: String? = nil) -> BridgeError {
        BridgeError(message: message, reason: reason)
    }
    /// Something the NATS server said or did.
    static func nats(_ message: String) -> BridgeError { BridgeError(message: message) }
}

/// A connection to evstored's socket, through the JSON-RPC client: the bridge's requests
/// (status, consumers) and its watch.
///
/// - Important: `call` and `nextLine` are for one thread at a time; `shutdown()` may be
///   called from any thread, and ends a read waiting on another.
final class DaemonLink: Sendable {
    let path: String
    private let link: JSONRPCConnection

    /// The longest line read: a notification of the largest event a peer may send (16 MiB)
    /// with room to spare.
    static let maxLineBytes = 40 << 20

    init(path: String) throws(BridgeError) {
        self.path = path
        do {
            link = try JSONRPCConnection(path: path, timeout: 10, maxLineBytes: DaemonLink.maxLineBytes)
        } catch {
            throw DaemonLink.error(error, path: path)
        }
    }

    /// Ends the connection; a read waiting on it returns the end of the stream.
    func shutdown() { link.shutdown() }

    /// Sends a request; its id.
    @discardableResult
    func send(_ method: String, _ params: [UInt8]) throws(BridgeError) -> Int {
        do {
            return try link.send(method, params: params)
        } catch {
            throw DaemonLink.error(error, path: path)
        }
    }

    /// The next line the daemon sent; nil when it closed the connection.
    func nextLine() throws(BridgeError) -> [UInt8]? {
        do {
            return try link.nextLine()
        } catch {
            throw DaemonLink.error(error, path: path)
        }
    }

    /// Sends a request and waits for its result (notifications meanwhile are skipped);
    /// an error reply is thrown with its reason and message.
    func call(_ method: String, _ params: String = "{}") throws(BridgeError) -> [String: Any] {
        let reply: Reply
        do {
            reply = try link.exchange(method, params: Array(params.utf8))
        } catch ClientError.closed {
            throw .daemon("evstored at \(path) closed the connection before answering \(method)")
        } catch {
            throw DaemonLink.error(error, path: path)
        }
        if let error = reply.error {
            let reason = error.reason ?? "error"
            throw .daemon("\(method): \(error.message) (\(reason))", reason: reason)
        }
        return reply.result as? [String: Any] ?? [:]
    }

    /// A failure of the protocol as a sentence for the bridge's log.
    private static func error(_ error: ClientError, path: String) -> BridgeError {
        switch error {
        case .connecting(let error): .daemon("cannot connect to evstored at \(path): \(error.message.lowercased())")
        case .lost(let error): .daemon("lost the connection to evstored at \(path): \(error.message.lowercased())")
        case .unreadable(let text): .daemon("reading from evstored at \(path) failed: \(text)")
        case .tooLong(let bytes): .daemon("evstored sent a line of \(bytes) bytes, more than the bridge reads")
        case .closed: .daemon("evstored at \(path) closed the connection")
        case .notJSONRPC: .daemon("evstored at \(path) sent a line that is not JSON-RPC")
        }
    }
}
