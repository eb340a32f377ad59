import Arguments
import JSONRPCClient
import Projections
import UnixSocket

/// The client's reply and message, as every command reads them.
typealias Reply = JSONRPCClient.Reply
typealias Message = JSONRPCClient.Message

/// A connection to the daemon speaking newline-delimited JSON-RPC 2.0 (through the
/// JSON-RPC client), as evctl uses it.
///
/// Every failure comes out as a `CommandFailure` with evctl's exit status and a sentence
/// for the user; no errno numbers.
final class Connection: Sendable {
    let path: String
    /// The protocol: request lines, replies by id, notifications.
    let link: JSONRPCConnection
    var socket: UnixConnection { link.socket }

    private init(link: JSONRPCConnection) {
        self.path = link.path
        self.link = link
    }

    static func open(_ path: String) throws(CommandFailure) -> Connection {
        do {
            return Connection(link: try JSONRPCConnection(path: path))
        } catch {
            guard case .connecting(let error) = error else {
                throw CommandFailure(exitCode: ExitStatus.unavailable, "cannot connect to the evstore daemon at \(path).")
            }
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

    /// Sends one request; returns its id.
    @discardableResult
    func send(_ method: String, _ params: JSONObjectWriter = JSONObjectWriter()) throws(CommandFailure) -> Int {
        do {
            return try link.send(method, params: params.bytes)
        } catch {
            // The daemon may have answered and closed before reading a byte (a client with
            // no access is told so as it connects): its line says why.
            if case .lost = error, let refusal = refusalLeft() { throw refusal }
            throw translate(error)
        }
    }

    /// The error line the daemon sent before it closed the connection, as a failure; nil
    /// when it left none.
    private func refusalLeft() -> CommandFailure? {
        guard let line = try? link.nextLine(), case .reply(let reply) = JSONRPCConnection.decode(line),
            let error = reply.error
        else { return nil }
        return CommandFailure(exitCode: error.exitStatus, error.description)
    }

    /// Sends a request passing `descriptor` with it, and waits for its reply; an error reply
    /// becomes a failure with the exit status of its reason.
    func call(_ method: String, _ params: JSONObjectWriter, passing descriptor: Int32) throws(CommandFailure) -> Reply {
        let id: Int
        do {
            id = try link.send(method, params: params.bytes, passing: descriptor)
        } catch {
            if case .lost = error, let refusal = refusalLeft() { throw refusal }
            throw translate(error)
        }
        let reply = try reply(to: id)
        if let error = reply.error { throw CommandFailure(exitCode: error.exitStatus, error.description) }
        return reply
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
        try reply(to: send(method, params))
    }

    /// The reply to the request `id`, past notifications and replies to others.
    private func reply(to id: Int) throws(CommandFailure) -> Reply {
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
    var hasPendingInput: Bool { link.hasPendingInput }

    /// The next message, or nil when the daemon closed the connection.
    func receiveOrEnd() throws(CommandFailure) -> Message? {
        try receiveLineOrEnd().map { (line) throws(CommandFailure) in try Connection.decode(line) }
    }

    /// The next line as the daemon sent it, nil at the end of the stream.
    func receiveLineOrEnd() throws(CommandFailure) -> [UInt8]? {
        do {
            return try link.nextLine()
        } catch {
            throw translate(error)
        }
    }

    /// A failure of the protocol as evctl reports it.
    private func translate(_ error: ClientError) -> CommandFailure {
        switch error {
        case .connecting(let error):
            return Connection.failure(connecting: path, error)
        case .lost(let error):
            return lost(error)
        case .unreadable(let text):
            return CommandFailure(exitCode: ExitStatus.unavailable, "reading from the daemon at \(path) failed: \(text)")
        case .tooLong(let bytes):
            return CommandFailure(
                exitCode: ExitStatus.failed, "the daemon sent a reply of \(bytes) bytes, too long to read.")
        case .closed:
            return CommandFailure(
                exitCode: ExitStatus.unavailable,
                "the daemon at \(path) closed the connection before answering; it may have stopped.")
        case .notJSONRPC(let start):
            return CommandFailure(
                exitCode: ExitStatus.failed,
                "the daemon sent something that is not JSON-RPC: \(String(decoding: start, as: UTF8.self))")
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
        guard let message = JSONRPCConnection.decode(bytes) else {
            let start = String(decoding: bytes.prefix(80), as: UTF8.self)
            throw CommandFailure(
                exitCode: ExitStatus.failed, "the daemon sent something that is not JSON-RPC: \(start)")
        }
        return message
    }

    func lost(_ error: SocketError) -> CommandFailure {
        CommandFailure(exitCode: ExitStatus.unavailable, lostReason(error) + "; it may have stopped.")
    }

    func lostReason(_ error: SocketError) -> String {
        "lost the connection to the daemon at \(path) (\(error.message.lowercased()))"
    }

    func close() {
        link.shutdown()
    }
}
