import Arguments
import Projections
import UnixSocket

/// One message from the daemon: a reply to a request, or a notification (from `watch`).
enum Message {
    case reply(Reply)
    /// `bytes` is the whole message as the daemon wrote it.
    case notification(method: String, params: [String: Any], bytes: [UInt8])
}

/// A reply: its result or its error, and the result's bytes exactly as the daemon sent them.
struct Reply {
    var id: Int?
    var result: Any?
    var resultBytes: [UInt8]
    var error: RPCError?
    /// For an append read with `Connection.appendReply(_:)`: how many ids the result
    /// lists and how many events it says were written (`result` is then nil).
    var appendCounts: (ids: Int, appended: Int?)? = nil
}

/// A connection to the daemon speaking newline-delimited JSON-RPC 2.0.
///
/// Every failure comes out as a `CommandFailure` with evctl's exit status and a sentence
/// for the user; no errno numbers.
final class Connection: @unchecked Sendable {
    let path: String
    let socket: UnixConnection
    /// The reading side; used by one thread at a time.
    var reader = LineReader(limit: 1 << 30)
    /// The next request id; used by the writing thread only.
    var nextID = 1

    private init(path: String, socket: UnixConnection) {
        self.path = path
        self.socket = socket
    }

    static func open(_ path: String) throws(CommandFailure) -> Connection {
        do {
            return Connection(path: path, socket: try UnixConnection.connect(to: path))
        } catch {
            throw failure(connecting: path, error)
        }
    }

    static func failure(connecting path: String, _ error: SocketError) -> CommandFailure {
        if error.isMissing || error.isConnectionRefused {
            return CommandFailure(
                exitCode: ExitStatus.unavailable,
                "no evstore daemon is listening on \(path). Start it with `evstored` (or `systemctl start evstored`), "
                    + "or point evctl at its socket with --socket or EVSTORE_SOCKET.")
        }
        if error.isPermissionDenied {
            return CommandFailure(exitCode: ExitStatus.forbidden, permissionMessage(path))
        }
        return CommandFailure(
            exitCode: ExitStatus.unavailable,
            "cannot connect to the evstore daemon at \(path): \(error.message.lowercased()).")
    }

    /// Who may connect is decided by the socket's group: say which group that is.
    static func permissionMessage(_ path: String) -> String {
        let info = System.status(path)
        guard let info, let group = System.groupName(info.st_gid) else {
            return "permission denied on \(path): you may not open the socket or the directory that holds it. "
                + "Ask an administrator to add you to the socket's group (evstore under systemd), then log in again."
        }
        let mode = " (mode " + String(info.st_mode & 0o7777, radix: 8) + ")"
        return "permission denied on \(path): the socket belongs to group \(group)\(mode), and only its members may "
            + "connect. Add yourself to it (`sudo usermod -aG \(group) $USER`, then log in again), "
            + "or run evctl as a member of \(group)."
    }

    // MARK: Requests

    /// The bytes of a request line: `{"jsonrpc":"2.0","id":N,"method":M,"params":P}\n`.
    static func requestLine(id: Int, method: String, params: [UInt8]) -> [UInt8] {
        var line = Array(#"{"jsonrpc":"2.0","id":"#.utf8)
        line += Array(String(id).utf8)
        line += Array(#","method":"#.utf8)
        CanonicalWriter.appendString(method, to: &line)
        line += Array(#","params":"#.utf8)
        line += params
        line += Array("}\n".utf8)
        return line
    }

    /// Sends one request; returns its id.
    @discardableResult
    func send(_ method: String, _ params: JSONObjectWriter = JSONObjectWriter()) throws(CommandFailure) -> Int {
        let id = nextID
        nextID += 1
        try write(Connection.requestLine(id: id, method: method, params: params.bytes))
        return id
    }

    func write(_ bytes: [UInt8]) throws(CommandFailure) {
        do {
            try socket.write(bytes)
        } catch {
            // The daemon may have answered and closed before reading a byte (a client with
            // no access is told so as it connects): its line says why.
            if let refusal = refusalLeft() { throw refusal }
            throw lost(error)
        }
    }

    /// The error line the daemon sent before it closed the connection, as a failure; nil
    /// when it left none.
    private func refusalLeft() -> CommandFailure? {
        guard let line = try? receiveLineOrEnd(), case .reply(let reply) = try? Connection.decode(line),
            let error = reply.error
        else { return nil }
        return CommandFailure(exitCode: error.exitStatus, error.description)
    }

    /// Sends a request and waits for its reply; an error reply becomes a failure with the
    /// exit status of its reason.
    func call(_ method: String, _ params: JSONObjectWriter = JSONObjectWriter()) throws(CommandFailure) -> Reply {
        let reply = try exchange(method, params)
        if let error = reply.error {
            throw CommandFailure(exitCode: error.exitStatus, error.description)
        }
        return reply
    }

    /// Sends a request and waits for its reply, an error reply included, for a command that
    /// decides on the error's reason itself.
    func exchange(_ method: String, _ params: JSONObjectWriter = JSONObjectWriter()) throws(CommandFailure) -> Reply {
        let id = try send(method, params)
        while true {
            switch try receive() {
            case .notification:
                continue
            case .reply(let reply):
                guard reply.id == id || reply.id == nil else { continue }
                return reply
            }
        }
    }

    /// The next message; the end of the stream is a failure (the daemon went away).
    func receive() throws(CommandFailure) -> Message {
        guard let message = try receiveOrEnd() else {
            throw CommandFailure(
                exitCode: ExitStatus.unavailable,
                "the daemon at \(path) closed the connection before answering; it may have stopped.")
        }
        return message
    }

    /// Whether a message is already here to read: buffered, or waiting on the socket. When
    /// false, the next `receive` would wait for the daemon.
    var hasPendingInput: Bool {
        reader.isMidLine || (try? socket.waitReadable(timeout: 0)) == true
    }

    /// The next message, or nil when the daemon closed the connection.
    func receiveOrEnd() throws(CommandFailure) -> Message? {
        try receiveLineOrEnd().map { (line) throws(CommandFailure) in try Connection.decode(line) }
    }

    /// The next line as the daemon sent it, nil at the end of the stream.
    func receiveLineOrEnd() throws(CommandFailure) -> [UInt8]? {
        let socket = self.socket
        let line: LineReader.Line
        do {
            line = try reader.next { buffer, count in try socket.read(into: &buffer, count: count) }
        } catch let error as SocketError {
            throw lost(error)
        } catch {
            throw CommandFailure(
                exitCode: ExitStatus.unavailable, "reading from the daemon at \(path) failed: \(error)")
        }
        switch line {
        case .end:
            return nil
        case .tooLong(let bytes):
            throw CommandFailure(
                exitCode: ExitStatus.failed, "the daemon sent a reply of \(bytes) bytes, too long to read.")
        case .line(let bytes):
            return bytes
        }
    }

    /// A successful append's reply read for its counts only: the ids counted, not built,
    /// and the versions and revs skipped (a reply to 1,000 events holds 3,000 members,
    /// which a bulk import would otherwise decode into values it never looks at). Nil for
    /// anything else (an error, a notification), which `decode(_:)` reads in full.
    static func appendReply(_ bytes: [UInt8]) -> Reply? {
        var scanner = JSONScanner(bytes)
        var id: Int?
        var counts: (ids: Int, appended: Int?)?
        var result: Range<Int>?
        do {
            try scanner.readObject { (key, scanner) throws(JSONError) in
                if key.elementsEqual("result".utf8) {
                    scanner.skipWhitespace()
                    let start = scanner.offset
                    var ids = 0
                    var appended: Int?
                    try scanner.readObject { (key, scanner) throws(JSONError) in
                        if key.elementsEqual("ids".utf8) {
                            try scanner.readArray { (scanner) throws(JSONError) in
                                try scanner.skipValue()
                                ids += 1
                            }
                        } else if key.elementsEqual("appended".utf8) {
                            appended = try integer(&scanner)
                        } else {
                            try scanner.skipValue()
                        }
                    }
                    counts = (ids, appended)
                    result = start..<scanner.offset
                } else if key.elementsEqual("id".utf8) {
                    id = try integer(&scanner)
                } else if key.elementsEqual("jsonrpc".utf8) {
                    try scanner.skipValue()
                } else {
                    throw JSONError("not an append's result", at: scanner.offset)
                }
            }
            try scanner.expectEnd()
        } catch {
            return nil
        }
        guard let counts, let result else { return nil }
        return Reply(id: id, result: nil, resultBytes: Array(bytes[result]), error: nil, appendCounts: counts)
    }

    /// A JSON integer at the scanner; nil for any other value (skipped).
    private static func integer(_ scanner: inout JSONScanner) throws(JSONError) -> Int? {
        var text: [UInt8] = []
        try scanner.canonicalValue(into: &text)
        return Int(String(decoding: text, as: UTF8.self))
    }

    static func decode(_ bytes: [UInt8]) throws(CommandFailure) -> Message {
        guard let object = try? JSONTree.parse(bytes) as? [String: Any] else {
            let start = String(decoding: bytes.prefix(80), as: UTF8.self)
            throw CommandFailure(
                exitCode: ExitStatus.failed, "the daemon sent something that is not JSON-RPC: \(start)")
        }
        if object["id"] == nil, let method = object["method"] as? String {
            return .notification(method: method, params: object["params"] as? [String: Any] ?? [:], bytes: bytes)
        }
        var reply = Reply(id: object["id"] as? Int, result: object["result"], resultBytes: [], error: nil)
        if let error = object["error"] as? [String: Any] {
            reply.error = RPCError(error)
        } else {
            reply.resultBytes = RawJSON.member("result", of: bytes) ?? Array("null".utf8)
        }
        return .reply(reply)
    }

    func lost(_ error: SocketError) -> CommandFailure {
        CommandFailure(exitCode: ExitStatus.unavailable, lostReason(error) + "; it may have stopped.")
    }

    func lostReason(_ error: SocketError) -> String {
        "lost the connection to the daemon at \(path) (\(error.message.lowercased()))"
    }

    func close() {
        socket.shutdown()
    }
}
