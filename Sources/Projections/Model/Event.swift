/// An entity name, `TYPE/ID`, held as its UTF-8 bytes.
///
/// Bytes, not `String`, decide identity: Swift's `String` equality folds canonically
/// equivalent Unicode, but two different byte sequences are two different entities.
public struct EntityKey: Hashable, Comparable, Sendable, CustomStringConvertible {
    public let bytes: [UInt8]
    /// Length of TYPE in bytes (the `/` follows it).
    public let typeLength: Int
    /// Computed once: an entity is looked up in dictionaries several times per event, and
    /// hashing its bytes one by one each time shows in profiles.
    let fingerprint: UInt64

    /// Wraps bytes that have already been validated as `TYPE/ID`.
    public init(validated bytes: [UInt8]) {
        self.bytes = bytes
        self.typeLength = bytes.firstIndex(of: UInt8(ascii: "/")) ?? bytes.count
        self.fingerprint = XXH64.hash(bytes)
    }

    public static func == (lhs: EntityKey, rhs: EntityKey) -> Bool {
        lhs.fingerprint == rhs.fingerprint && lhs.bytes == rhs.bytes
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(fingerprint)
    }

    public var type: String { String(decoding: bytes[..<typeLength], as: UTF8.self) }
    public var description: String { String(decoding: bytes, as: UTF8.self) }

    public static func < (lhs: EntityKey, rhs: EntityKey) -> Bool {
        lhs.bytes.lexicographicallyPrecedes(rhs.bytes)
    }
}

/// One field set by an `edit`; a `null` value clears the field.
public struct FieldChange: Equatable, Sendable {
    public var name: String
    public var value: JSONBytes

    public init(name: String, value: JSONBytes) {
        self.name = name
        self.value = value
    }
}

/// The heads of one field that an `edit` supersedes.
public struct FieldBase: Equatable, Sendable {
    public var field: String
    public var heads: [ULID]

    public init(field: String, heads: [ULID]) {
        self.field = field
        self.heads = heads
    }
}

/// What an event does, with the causal context the appending node saw.
public enum EventBody: Equatable, Sendable {
    /// Fields sorted by name; `base` sorted by field, holding only fields that had heads.
    case edit(fields: [FieldChange], base: [FieldBase])
    case status(String, base: [ULID])
    /// A status set on a node other than its type's authority: a proposal, current only
    /// once the authority's `decide` accepts it. Its JSON is a status event with
    /// `"proposal":true`.
    case propose(String, base: [ULID])
    /// The authority's decision on the proposal `proposal`; a rejection says why.
    case decide(proposal: ULID, accept: Bool, reason: String?)
    case add(set: String, element: JSONBytes)
    case remove(set: String, element: JSONBytes, observed: [ULID])
    case delete
    case restore(base: [ULID])
    /// Adds `amount` to the named counter (counters merge by addition).
    case incr(counter: String, amount: Int64)

    public var kind: EventKind {
        switch self {
        case .edit: .edit
        case .status, .propose: .status
        case .decide: .decide
        case .add: .add
        case .remove: .remove
        case .delete: .delete
        case .restore: .restore
        case .incr: .incr
        }
    }

    /// Every id this event names in its causal context.
    public var namedIDs: [ULID] {
        switch self {
        case .edit(_, let base): base.flatMap(\.heads)
        case .status(_, let base), .propose(_, let base), .restore(let base): base
        case .remove(_, _, let observed): observed
        case .decide(let proposal, _, _): [proposal]
        case .add, .delete, .incr: []
        }
    }
}

public enum EventKind: String, CaseIterable, Sendable {
    case edit, status, add, remove, delete, restore, incr
    /// Made only by a type's authority, never sent by a client.
    case decide

    /// The kinds a client may send, as errors list them.
    public static let names = allCases.filter { $0 != .decide }.map(\.rawValue).joined(separator: ", ")
}

/// An event in its stored form: the client's input plus the id, origin and causal context
/// the appending node gave it.
public struct Event: Equatable, Sendable {
    public var id: ULID
    public var origin: ULID
    public var entity: EntityKey
    public var body: EventBody
    /// Client idempotency key (kept for the record; deduplication is per node).
    public var key: String?
    /// The actor, free text.
    public var by: String?
    /// Client wall time, informational only.
    public var at: JSONBytes?

    public init(
        id: ULID, origin: ULID, entity: EntityKey, body: EventBody,
        key: String? = nil, by: String? = nil, at: JSONBytes? = nil
    ) {
        self.id = id
        self.origin = origin
        self.entity = entity
        self.body = body
        self.key = key
        self.by = by
        self.at = at
    }
}
