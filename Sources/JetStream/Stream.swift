/// What a JetStream stream stores and for how long. Fields this module does not set keep
/// the server's defaults (limits retention, no message or byte limit, discard old).
public struct StreamConfig: Sendable, Equatable {
    /// Where the stream keeps its messages.
    public enum Storage: Sendable, Equatable {
        /// On disk in the server's store directory: survives a server restart.
        case file
        /// In the server's memory: lost when the server stops.
        case memory
    }

    /// The stream's name (no spaces, dots, `*` or `>`).
    public var name: String

    /// The subjects whose messages the stream stores; wildcards allowed (`evstore.>`).
    public var subjects: [String]

    public var storage: Storage

    /// How long the stream remembers a message ID (`Nats-Msg-Id`) to drop a copy published
    /// again within that time. The server's default is two minutes.
    public var duplicateWindow: Duration

    /// How long a message is kept; nil keeps messages until other limits remove them.
    public var maxAge: Duration?

    /// How many servers of a cluster hold a copy (1 on a single server).
    public var replicas: Int

    public init(
        name: String, subjects: [String], storage: Storage = .file, duplicateWindow: Duration = .seconds(120),
        maxAge: Duration? = nil, replicas: Int = 1
    ) {
        self.name = name
        self.subjects = subjects
        self.storage = storage
        self.duplicateWindow = duplicateWindow
        self.maxAge = maxAge
        self.replicas = replicas
    }
}

/// A stream's configuration as the server holds it, and what it stores now.
public struct StreamInfo: Sendable {
    public let config: StreamConfig
    public let state: StreamState
    /// When the stream was created, in nanoseconds since 1970 (UTC).
    public let created: Int64
}

/// The messages a stream holds when it was asked.
public struct StreamState: Sendable, Equatable {
    public let messages: UInt64
    public let bytes: UInt64
    /// The sequence of the oldest message held (0 when the stream never held one).
    public let firstSequence: UInt64
    /// The sequence of the newest message stored (0 when the stream never held one).
    public let lastSequence: UInt64
    public let consumers: Int
}

/// A message read back from a stream.
public struct StoredMessage: Sendable {
    public let subject: String
    public let sequence: UInt64
    /// Header names and values, including `Nats-Msg-Id` when the message had an ID. The order
    /// is by name (libnats keeps headers in a hash table, so the order sent is not kept);
    /// values of one name keep their order.
    public let headers: [(name: String, value: String)]
    public let data: [UInt8]
    /// When the stream stored it, in nanoseconds since 1970 (UTC).
    public let time: Int64

    /// The values of a header, in their order.
    public func values(of name: String) -> [String] {
        headers.filter { $0.name == name }.map(\.value)
    }
}
