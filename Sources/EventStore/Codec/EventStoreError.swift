import Projections

/// An error the store reports to its callers: a stable machine reason plus a sentence a
/// person can act on. The reasons are the API's `data.reason` strings.
public struct EventStoreError: Error, Equatable, Sendable, CustomStringConvertible {
    public struct Reason: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        public static let notFound = Reason(rawValue: "not_found")
        public static let conflict = Reason(rawValue: "conflict")
        public static let deleted = Reason(rawValue: "deleted")
        public static let tooLarge = Reason(rawValue: "too_large")
        public static let invalidEvent = Reason(rawValue: "invalid_event")
        /// A status move the types file does not allow.
        public static let invalidTransition = Reason(rawValue: "invalid_transition")
        public static let storageFull = Reason(rawValue: "storage_full")
        public static let unavailable = Reason(rawValue: "unavailable")
        public static let forbidden = Reason(rawValue: "forbidden")
        /// The store's own data is unreadable (corruption, a format this version does not know).
        public static let corrupt = Reason(rawValue: "corrupt")
        /// No greater event id can be made: the clock reads the greatest ULID.
        public static let idsExhausted = Reason(rawValue: "ids_exhausted")
        /// A replicated event of this node's own origin with an id further ahead of its
        /// clock than `max_clock_skew_s`: refused (a dead letter), as this node did not make it.
        public static let foreignOwnOrigin = Reason(rawValue: "foreign_own_origin")
        /// A request's parameter is well formed but out of range (a consumer's seq beyond
        /// the head, a consumer name outside its alphabet): JSON-RPC's invalid params.
        public static let invalidParams = Reason(rawValue: "invalid_params")
        /// `max_consumers` are kept already: a new consumer is refused.
        public static let tooManyConsumers = Reason(rawValue: "too_many_consumers")
    }

    public var reason: Reason
    public var message: String
    /// The position of the offending event in its batch, when there is one.
    public var index: Int?

    public init(_ reason: Reason, _ message: String, index: Int? = nil) {
        self.reason = reason
        self.message = message
        self.index = index
    }

    public func at(index: Int) -> EventStoreError {
        var copy = self
        copy.index = index
        return copy
    }

    public var description: String {
        if let index { return "\(reason): event \(index): \(message)" }
        return "\(reason): \(message)"
    }

    package static func invalid(_ message: String) -> EventStoreError {
        EventStoreError(.invalidEvent, message)
    }
}

extension EventStoreError {
    /// Translates storage-layer errors into the API's reasons.
    static func from(_ error: any Error) -> EventStoreError {
        switch error {
        case let error as EventStoreError:
            return error
        case let error as LMDBError where error.isStorageFull:
            return EventStoreError(
                .storageFull,
                "storage is full: \(error.message) Nothing of this request was written; free disk space or raise map_max_bytes (a SIGHUP applies it), then retry."
            )
        case let error as LMDBError where error.isCorruption:
            return EventStoreError(
                .corrupt, "the store's data file cannot be read (\(error.operation), \(error.name)): \(error.message)")
        case let error as LMDBError:
            return EventStoreError(.unavailable, "storage error in \(error.operation): \(error.name): \(error.message)")
        case let error as ZstdError:
            return EventStoreError(.corrupt, "compression error: \(error)")
        case let error as CorruptDataError:
            return EventStoreError(.corrupt, "stored data is unreadable: \(error.message)")
        default:
            return EventStoreError(.unavailable, "\(error)")
        }
    }
}
