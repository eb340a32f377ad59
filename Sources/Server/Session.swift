import UnixSocket
import Wire

/// What a session asks of the connection it serves.
package protocol SessionOwner: AnyObject, Sendable {
    /// `bytes` of requests were answered later than they ran (an append, once committed).
    func answered(_ bytes: Int)
    /// A watch begins catching up on a catch-up thread: no request may run until it has joined.
    func catchingUp()
    /// The catch-up ended: the requests after it run.
    func caughtUp()
    /// Whether the client has hung up (a batch stops there).
    var clientHasLeft: Bool { get }
    /// The oldest descriptor the client passed and no request has taken (its to close).
    func takeDescriptor() -> Int32?
}

/// What a connection hands the lines it read to: the session of the layer above, which
/// dispatches them and puts the answers in the connection's outbox.
///
/// It is used by one thread at a time, the request thread running its connection's queue.
package protocol ConnectionSession: AnyObject, Sendable {
    /// Set once, before the first line.
    var owner: (any SessionOwner)? { get set }
    /// How many watches the session holds (read from the loop's thread).
    var watchCount: Int { get }
    /// Runs one parsed line; whether its bytes were answered (false: they will be, later,
    /// through `owner.answered`).
    func run(_ parsed: ParsedLine, bytes: Int) -> Bool
    /// Whether `parsed` is an append, which a read queued after it must wait for.
    func isAppend(_ parsed: ParsedLine) -> Bool
    /// Stores what a client that sent `lines` and left expects stored (its appends).
    func storeAppends(of lines: [ParsedLine])
    /// The connection ends: what the session holds for it (its watches, its blob uploads) goes.
    func end()
    /// Logs a refusal of `what` to this client.
    func logRefusal(_ what: String, message: String)
    /// Answers the request `line` at once, on the event loop's thread, when it is cheap and
    /// bounded (a `get` of an entity whose record is small, a small append handed to the
    /// writer) and the client may make it. The connection calls it only when no request of
    /// its own is queued, running or unanswered, so the order holds; what it declines goes
    /// to the request threads as before.
    func answerOnLoop(_ line: [UInt8]) -> LoopAnswer
}

/// What became of a request line offered to the session on the event loop.
package enum LoopAnswer: Sendable, Equatable {
    /// Not answered here: the line goes to the request threads.
    case declined
    /// Answered: the answer is in the outbox.
    case answered
    /// Handed to the writer: its answer takes its place in the outbox once committed, and
    /// the session then calls `SessionOwner.answered` with the line's bytes.
    case submitted
}

/// Makes the session of each connection the server accepts.
package protocol SessionFactory: Sendable {
    func session(
        context: ServerContext, outbox: Outbox, client: ClientAccess, identifier: Int, limits: Limits
    ) -> any ConnectionSession
}

/// Why a sync session another node started is refused on the loop.
package enum IncomingRefusal: Sendable {
    /// The client lacks the access a session needs.
    case forbidden
    /// `max_incoming_sessions` are in progress.
    case busy
}

/// The sync sessions other nodes start on the socket: a first line that is a sync preamble
/// hands the socket to the replication layer through this.
package protocol IncomingSessions: Sendable {
    /// The protocol version `line` announces, if it is a sync preamble.
    func preambleVersion(_ line: [UInt8]) -> Int?
    /// The bytes that refuse a session at once (this node's preamble and an error frame).
    func refusal(_ reason: IncomingRefusal, message: String) -> [UInt8]
    /// Runs the session on the calling thread until it ends.
    func serve(_ socket: UnixConnection, buffered: [UInt8], version: Int)
}
