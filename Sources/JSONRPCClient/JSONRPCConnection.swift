import Projections
import Synchronization
import UnixSocket

// The JSON-RPC client. Its rule: it speaks evstored's newline-delimited JSON-RPC 2.0 over
// the Unix socket — request lines, replies matched by id, notifications, error objects —
// and knows nothing of what the methods mean; each caller (evctl, the NATS bridge, the
// tests) turns its failures into its own errors.

/// An error reply's object: `code`, `message`, and from `data` the stable `reason` and, for
/// an append, the `index` of the event that failed.
public struct RemoteError: Error, Sendable, Equatable {
    public var code: Int
    public var message: String
    public var reason: String?
    public var index: Int?

    public init(code: Int, message: String, reason: String?, index: Int? = nil) {
        self.code = code
        self.message = message
        self.reason = reason
        self.index = index
    }

    /// From the `error` member of a reply.
    public init(_ error: [String: Any]) {
        let data = error["data"] as? [String: Any]
        self.init(
            code: error["code"] as? Int ?? -32603,
            message: error["message"] as? String ?? "the daemon gave no message",
            reason: data?["reason"] as? String,
            index: data?["index"] as? Int)
    }
}

/// A reply: its result or its error, and the result's bytes exactly as the daemon sent them.
public struct Reply {
    public var id: Int?
    public var result: Any?
    public var resultBytes: [UInt8]
    public var error: RemoteError?
    /// For a reply read for its counts only (an append's: how many ids the result lists and
    /// how many events it says were written; `result` is then nil).
    public var appendCounts: (ids: Int, appended: Int?)?

    public init(
        id: Int?, result: Any?, resultBytes: [UInt8], error: RemoteError?, appendCounts: (ids: Int, appended: Int?)? = nil
    ) {
        self.id = id
        self.result = result
        self.resultBytes = resultBytes
        self.error = error
        self.appendCounts = appendCounts
    }
}

/// One message from the daemon: a reply to a request, or a notification (from `watch`).
public enum Message {
    case reply(Reply)
    /// `bytes` is the whole message as the daemon wrote it.
    case notification(method: String, params: [String: Any], bytes: [UInt8])
}

/// Why talking to the daemon failed.
public enum ClientError: Error, Sendable {
    /// The socket could not be connected to.
    case connecting(SocketError)
    /// A read or a write failed on the connected socket.
    case lost(SocketError)
    /// Reading failed otherwise (the description of the error).
    case unreadable(String)
    /// A line longer than the connection reads, of this many bytes.
    case tooLong(Int)
    /// The daemon closed the connection before the reply came.
    case closed
    /// A line that is not a JSON-RPC message: its first bytes.
    case notJSONRPC([UInt8])
}

/// A connection to evstored's socket.
///
/// - Important: writes may come from one thread while another reads; reads are one at a
///   time (the reader is locked), and `shutdown()` from any thread ends a read waiting.
public final class JSONRPCConnection: Sendable {
    public let path: String
    public let socket: UnixConnection
    private let reader: Mutex<LineReader>
    private let nextID = Atomic<Int>(1)

    /// Connects to `path`, waiting at most `timeout` seconds when given; lines longer than
    /// `maxLineBytes` are refused (`tooLong`).
    public init(path: String, timeout: Double? = nil, maxLineBytes: Int = 1 << 30) throws(ClientError) {
        self.path = path
        do {
            socket = try UnixConnection.connect(to: path, timeout: timeout)
        } catch {
            throw .connecting(error)
        }
        reader = Mutex(LineReader(limit: maxLineBytes))
    }

    deinit { socket.close() }

    /// The bytes of a request line: `{"jsonrpc":"2.0","id":N,"method":M,"params":P}\n`.
    public static func requestLine(id: Int, method: String, params: [UInt8]) -> [UInt8] {
        var line = Array(#"{"jsonrpc":"2.0","id":"#.utf8)
        line += Array(String(id).utf8)
        line += Array(#","method":"#.utf8)
        CanonicalWriter.appendString(method, to: &line)
        line += Array(#","params":"#.utf8)
        line += params
        line += Array("}\n".utf8)
        return line
    }

    /// Sends one request with the next id (1, 2, ...); returns the id.
    @discardableResult
    public func send(_ method: String, params: [UInt8]) throws(ClientError) -> Int {
        let id = nextID.add(1, ordering: .relaxed).oldValue
        try write(JSONRPCConnection.requestLine(id: id, method: method, params: params))
        return id
    }

    /// Sends one request with the next id, passing `descriptor` with it (`SCM_RIGHTS`): the
    /// daemon gets its own descriptor of the same open file. Returns the id.
    @discardableResult
    public func send(_ method: String, params: [UInt8], passing descriptor: Int32) throws(ClientError) -> Int {
        let id = nextID.add(1, ordering: .relaxed).oldValue
        do {
            try socket.write(JSONRPCConnection.requestLine(id: id, method: method, params: params), passing: descriptor)
        } catch {
            throw .lost(error)
        }
        return id
    }

    public func write(_ bytes: [UInt8]) throws(ClientError) {
        do {
            try socket.write(bytes)
        } catch {
            throw .lost(error)
        }
    }

    /// The next line as the daemon sent it, without its newline; nil at the end of the stream.
    public func nextLine() throws(ClientError) -> [UInt8]? {
        let socket = self.socket
        let line: LineReader.Line
        do {
            line = try reader.withLock { reader in
                try reader.next { buffer, count in try socket.read(into: &buffer, count: count) }
            }
        } catch let error as SocketError {
            throw .lost(error)
        } catch {
            throw .unreadable("\(error)")
        }
        switch line {
        case .end: return nil
        case .tooLong(let bytes): throw .tooLong(bytes)
        case .line(let bytes): return bytes
        }
    }

    /// The next message; nil at the end of the stream.
    public func next() throws(ClientError) -> Message? {
        guard let line = try nextLine() else { return nil }
        guard let message = JSONRPCConnection.decode(line) else { throw .notJSONRPC(Array(line.prefix(80))) }
        return message
    }

    /// Sends a request and waits for its reply, an error reply included; notifications and
    /// replies to other requests meanwhile are skipped.
    public func exchange(_ method: String, params: [UInt8]) throws(ClientError) -> Reply {
        let id = try send(method, params: params)
        while true {
            guard let message = try next() else { throw .closed }
            guard case .reply(let reply) = message, reply.id == id || reply.id == nil else { continue }
            return reply
        }
    }

    /// Whether a message is already here to read: buffered, or waiting on the socket. When
    /// false, the next read would wait for the daemon.
    public var hasPendingInput: Bool {
        reader.withLock { $0.isMidLine } || (try? socket.waitReadable(timeout: 0)) == true
    }

    /// What was read past the last line taken (for a caller that hands the socket over to
    /// another protocol).
    public func takeBuffered() -> [UInt8] { reader.withLock { $0.takeBuffered() } }

    /// Ends the connection; a read waiting on it returns the end of the stream.
    public func shutdown() { socket.shutdown() }

    /// A line as a message; nil when it is not a JSON-RPC message.
    public static func decode(_ bytes: [UInt8]) -> Message? {
        guard let object = try? JSONTree.parse(bytes) as? [String: Any] else { return nil }
        if object["id"] == nil, let method = object["method"] as? String {
            return .notification(method: method, params: object["params"] as? [String: Any] ?? [:], bytes: bytes)
        }
        var reply = Reply(id: object["id"] as? Int, result: object["result"], resultBytes: [], error: nil)
        if let error = object["error"] as? [String: Any] {
            reply.error = RemoteError(error)
        } else {
            reply.resultBytes = member("result", of: bytes) ?? Array("null".utf8)
        }
        return .reply(reply)
    }

    /// The bytes of the member `name` of the object `bytes`, as written there.
    public static func member(_ name: String, of bytes: [UInt8]) -> [UInt8]? {
        let wanted = Array(name.utf8)
        var found: [UInt8]?
        var scanner = JSONScanner(bytes)
        do {
            try scanner.readObject { (key, scanner) throws(JSONError) in
                let start = scanner.offset
                try scanner.skipValue()
                if key.elementsEqual(wanted) { found = Array(bytes[start..<scanner.offset]) }
            }
        } catch {
            return nil
        }
        return found
    }
}
