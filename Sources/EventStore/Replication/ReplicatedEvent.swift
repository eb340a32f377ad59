import Projections

/// An event as replication moves it: its id and its canonical JSON without the id (the
/// form it is stored in), or with the id inside when `id` is nil.
public struct ReplicatedEvent: Equatable, Sendable {
    public var id: ULID?
    public var json: [UInt8]
    /// The event decoded and its stored payload, or why it cannot be stored, when the
    /// receiver decoded it before the writer takes it (`EventLog.predecode(_:)`); nil: the
    /// writer decodes it.
    public var decoded: Result<DecodedReplica, EventStoreError>?

    public init(id: ULID?, json: [UInt8]) {
        self.id = id
        self.json = json
    }

    /// Equal events: the same id and bytes, decoded or not.
    public static func == (lhs: ReplicatedEvent, rhs: ReplicatedEvent) -> Bool {
        lhs.id == rhs.id && lhs.json == rhs.json
    }
}

/// A replicated event decoded, with the canonical payload it is stored as.
public struct DecodedReplica: Sendable {
    public let event: Event
    public let payload: [UInt8]
}
