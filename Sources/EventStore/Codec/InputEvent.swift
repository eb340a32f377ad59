import Projections

/// An event as a client sends it, validated: the input form of the spec.
public struct InputEvent: Equatable, Sendable {
    public enum Change: Equatable, Sendable {
        case edit([FieldChange])
        case status(String)
        case add(set: String, element: JSONBytes)
        case remove(set: String, element: JSONBytes)
        case delete
        case restore
        /// Adds `amount` to the counter.
        case incr(counter: String, amount: Int64)

        public var kind: EventKind {
            switch self {
            case .edit: .edit
            case .status: .status
            case .add: .add
            case .remove: .remove
            case .delete: .delete
            case .restore: .restore
            case .incr: .incr
            }
        }
    }

    public var entity: EntityKey
    public var change: Change
    public var key: String?
    public var by: String?
    public var at: JSONBytes?
    /// The entity rev the client last read; a mismatch rejects the batch.
    public var ifMatch: UInt64?
    /// An `edit` that settles the conflicts of the fields it sets: its `base` names every
    /// head of them, although a plain edit of a field in conflict names none. Input only:
    /// the stored event carries the `base`, not this flag.
    public var resolve: Bool

    public init(
        entity: EntityKey, change: Change, key: String? = nil, by: String? = nil, at: JSONBytes? = nil,
        ifMatch: UInt64? = nil, resolve: Bool = false
    ) {
        self.entity = entity
        self.change = change
        self.key = key
        self.by = by
        self.at = at
        self.ifMatch = ifMatch
        self.resolve = resolve
    }

    /// Whether its author read the conflicts of the fields it sets: `resolve`, or an
    /// `if_match` (checked against the entity before anything is appended, so an event
    /// whose batch goes ahead was made from the entity's current state).
    var settlesConflicts: Bool { resolve || ifMatch != nil }
}
