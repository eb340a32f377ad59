import Projections

/// An event as replication moves it: its id and its canonical JSON without the id (the
/// form it is stored in), or with the id inside when `id` is nil.
public struct ReplicatedEvent: Equatable, Sendable {
    public var id: ULID?
    public var json: [UInt8]

    public init(id: ULID?, json: [UInt8]) {
        self.id = id
        self.json = json
    }
}
