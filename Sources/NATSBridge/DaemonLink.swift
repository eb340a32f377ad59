import Projections
import Synchronization
import UnixSocket

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

/// A connection to evstored's socket, speaking its newline-delimited JSON-RPC 2.0: the
/// bridge's requests (status, consumers) and its watch.
///
/// - Important: `call` and `nextLine` are for one thread at a time; `shutdown()` may be
///   called from any thread, and ends a read waiting on another.
final class DaemonLink: Sendable {
    let path: String
    private let socket: UnixConnection
    /// The reading side: one reading thread at a time.
    private let reader: Mutex<LineReader>
    private let nextID = Atomic<Int>(1)

    /// The longest line read: a notification of the largest event a peer may send (16 MiB)
    /// with room to spare.
    static let maxLineBytes = 40 << 20

    init(path: String) throws(BridgeError) {
        self.path = path
        do {
            socket = try UnixConnection.connect(to: path, timeout: 10)
        } catch {
            throw .daemon("cannot connect to evstored at \(path): \(error.message.lowercased())")
        }
        reader = Mutex(LineReader(limit: DaemonLink.maxLineBytes))
    }

    deinit { socket.close() }

    /// Ends the connection; a read waiting on it returns the end of the stream.
    func shutdown() { socket.shutdown() }

    /// Sends a request; its id.
    @discardableResult
    func send(_ method: String, _ params: [UInt8]) throws(BridgeError) -> Int {
        let id = nextID.add(1, ordering: .relaxed).oldValue
        var line = Array(#"{"jsonrpc":"2.0","id":"#.utf8) + Array(String(id).utf8)
        line += Array(#","method":"#.utf8)
        CanonicalWriter.appendString(method, to: &line)
        line += Array(#","params":"#.utf8) + params + Array("}\n".utf8)
        do {
            try socket.write(line)
        } catch {
            throw .daemon("lost the connection to evstored at \(path): \(error.message.lowercased())")
        }
        return id
    }

    /// The next line the daemon sent; nil when it closed the connection.
    func nextLine() throws(BridgeError) -> [UInt8]? {
        let socket = self.socket
        let line: LineReader.Line
        do {
            line = try reader.withLock { reader in
                try reader.next { buffer, count in try socket.read(into: &buffer, count: count) }
            }
        } catch let error as SocketError {
            throw .daemon("lost the connection to evstored at \(path): \(error.message.lowercased())")
        } catch {
            throw .daemon("reading from evstored at \(path) failed: \(error)")
        }
        switch line {
        case .end: return nil
        case .tooLong(let bytes): throw .daemon("evstored sent a line of \(bytes) bytes, more than the bridge reads")
        case .line(let bytes): return bytes
        }
    }

    /// Sends a request and waits for its result (notifications meanwhile are skipped);
    /// an error reply is thrown with its reason and message.
    func call(_ method: String, _ params: String = "{}") throws(BridgeError) -> [String: Any] {
        let id = try send(method, Array(params.utf8))
        while true {
            guard let line = try nextLine() else {
                throw .daemon("evstored at \(path) closed the connection before answering \(method)")
            }
            guard let message = try? JSONTree.parse(line) as? [String: Any] else {
                throw .daemon("evstored at \(path) sent a line that is not JSON-RPC")
            }
            guard message["id"] as? Int == id else { continue }
            if let error = message["error"] as? [String: Any] {
                let reason = (error["data"] as? [String: Any])?["reason"] as? String ?? "error"
                throw .daemon("\(method): \(error["message"] as? String ?? "failed") (\(reason))", reason: reason)
            }
            return message["result"] as? [String: Any] ?? [:]
        }
    }
}
