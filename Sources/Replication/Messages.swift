import EventStore
import FoundationEssentials
import Projections

/// The JSON payloads of the control frames (hello, reconcile, ack, done, error). They are
/// small and rare, so they use FoundationEssentials' coders; batches are binary (`BatchCodec`).
package enum Messages {
    package struct Hello: Codable, Equatable {
        package var protocolVersion: Int
        /// The sender's node id.
        package var node: String
        package var name: String?
        /// Per origin, the greatest id held.
        package var vector: [String: String]
        /// In the responder's hello: the fingerprints of the ranges both hold.
        package var ranges: [WireRange]?
        /// The sender's wall clock as it wrote the hello, ms since the Unix epoch: each side
        /// learns how far the other's clock is from its own. Older peers leave it out.
        package var clock: UInt64? = nil
        /// The ids of the events the sender holds as dead letters (or dropped), at most
        /// `maxDeadLetterIDs`, in id order: its peer's vector covers them, yet they did not
        /// arrive, so the peer counts them as pending and stops sending them. Older peers
        /// leave it out (and ignore it).
        package var deadLetters: [String]? = nil
        /// True when the sender holds more dead letters than `deadLetters` lists.
        package var deadLettersCut: Bool? = nil
        /// Every protocol version the sender speaks, from protocol 2 on; nil from a node
        /// that speaks only protocol 1 (0.4), which ignores it. In the initiator's hello
        /// `protocolVersion` is then the preamble's; in the responder's, the one the session
        /// runs.
        package var protocols: [Int]? = nil
        /// The capabilities the sender speaks (with `protocols`).
        package var capabilities: [String]? = nil
        /// In the responder's hello, when the session agreed to `verify`: windows of the
        /// events both hold, one range of an origin's ids each with the count and a digest
        /// of the responder's content hashes, for the initiator to compare with its own; a
        /// window that differs comes back in its `done` as `recheck`.
        package var windows: [WireRange]? = nil
        /// With `windows`: the events of the windows the initiator asked to recheck at the
        /// previous session, each with the responder's content hash (the answer comes in the
        /// initiator's `done` as `divergent`).
        package var checks: [Check]? = nil
        /// In the initiator's hello, with the `forward` capability: the session hands one
        /// append to the responder and syncs nothing. A node without the capability ignores
        /// it (and the initiator, finding no `forward` agreed, ends the session).
        package var forward: Bool? = nil
        /// True when the sender has no compression dictionary yet: with the `dictionary`
        /// capability agreed, the peer sends its own before its first batch. Older peers
        /// leave it out (and ignore it).
        package var needsDictionary: Bool? = nil

        package enum CodingKeys: String, CodingKey {
            case protocolVersion = "protocol"
            case node, name, vector, ranges, clock
            case deadLetters = "dead_letters"
            case deadLettersCut = "dead_letters_cut"
            case protocols, capabilities, windows, checks, forward
            case needsDictionary = "needs_dictionary"
        }

        /// Checks one hello may carry at most (about 4.5 MB).
        package static let maxChecks = 65_536
        /// Windows one hello may carry at most, and the events all of them cover.
        package static let maxWindows = 1024
        package static let maxWindowEvents = 65_536

        /// Dead-lettered ids one hello lists at most: 100,000 ids take under 3 MB, well
        /// within the 8 MiB of a control frame.
        package static let maxDeadLetterIDs = 100_000

        package init(
            protocolVersion: Int, node: String, name: String? = nil, vector: [String: String],
            ranges: [WireRange]? = nil, clock: UInt64? = nil, deadLetters: [String]? = nil, deadLettersCut: Bool? = nil,
            protocols: [Int]? = nil, capabilities: [String]? = nil, windows: [WireRange]? = nil, checks: [Check]? = nil
        ) {
            self.protocolVersion = protocolVersion
            self.node = node
            self.name = name
            self.vector = vector
            self.ranges = ranges
            self.clock = clock
            self.deadLetters = deadLetters
            self.deadLettersCut = deadLettersCut
            self.protocols = protocols
            self.capabilities = capabilities
            self.windows = windows
            self.checks = checks
        }
    }

    /// A range of one origin's ids, `(after, through]`, with either its fingerprint or its ids.
    package struct WireRange: Codable, Equatable {
        package var origin: String
        package var after: String?
        package var through: String
        package var count: Int?
        package var hash: String?
        package var ids: [String]?

        package init(
            origin: String, after: String? = nil, through: String, count: Int? = nil, hash: String? = nil,
            ids: [String]? = nil
        ) {
            self.origin = origin
            self.after = after
            self.through = through
            self.count = count
            self.hash = hash
            self.ids = ids
        }
    }

    package struct Reconcile: Codable, Equatable {
        package var ranges: [WireRange]
        /// Ids the receiver holds and the sender lacks.
        package var needs: [String]

        package init(ranges: [WireRange], needs: [String]) {

            self.ranges = ranges

            self.needs = needs

        }

    }

    package struct Ack: Codable, Equatable {
        package var received: Int
        package var skipped: Int
        package var deadLetters: Int
        /// The ids of the events of the batch that became dead letters (those with a valid
        /// id). Older peers leave it out.
        package var deadLettered: [String]? = nil

        package enum CodingKeys: String, CodingKey {
            case received, skipped
            case deadLetters = "dead_letters"
            case deadLettered = "dead_lettered"
        }

        package init(received: Int, skipped: Int, deadLetters: Int, deadLettered: [String]? = nil) {

            self.received = received

            self.skipped = skipped

            self.deadLetters = deadLetters

            self.deadLettered = deadLettered

        }

    }

    package struct Done: Codable, Equatable {
        package var sent: Int
        /// Of those, the events found by reconciliation beyond the version vector.
        package var reconciled: Int
        /// In the initiator's done, when the session agreed to `verify`: the checked events
        /// it holds with another content hash, each with its own hash (at most
        /// `maxDivergent`; `[]` when none differ).
        package var divergent: [Check]? = nil
        /// With `divergent`: the responder's windows whose digest differs here (origin,
        /// after, through), which its next hello checks event by event (at most
        /// `maxRecheck`; `[]` when none differ).
        package var recheck: [WireRange]? = nil

        package static let maxDivergent = 256
        package static let maxRecheck = 64

        package init(sent: Int, reconciled: Int, divergent: [Check]? = nil, recheck: [WireRange]? = nil) {

            self.sent = sent

            self.reconciled = reconciled

            self.divergent = divergent

            self.recheck = recheck

        }

    }

    /// An event id and a content hash (`EventLog.contentHash`: 32 lowercase hex digits).
    package struct Check: Codable, Equatable {
        package var id: String
        package var hash: String

        package init(id: String, hash: String) {
            self.id = id
            self.hash = hash
        }
    }

    package struct Failure: Codable, Equatable {
        package var reason: String
        package var message: String

        package init(reason: String, message: String) {

            self.reason = reason

            self.message = message

        }

    }

    package static func encode(_ value: some Encodable) -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return Array((try? encoder.encode(value)) ?? Data())
    }

    /// The largest control frame either side accepts: far more than any honest message
    /// (a reconcile round holds at most a few thousand ranges), little enough that a
    /// hostile peer cannot make the decoder hold gigabytes.
    package static let maxBytes = 8 << 20

    package static func decode<T: Decodable>(_ type: T.Type, _ payload: [UInt8], frame: String) throws(SyncError) -> T {
        guard payload.count <= maxBytes else {
            throw SyncError(
                .protocolError, "the peer's \(frame) frame is \(payload.count) bytes; the limit is \(maxBytes)")
        }
        do {
            return try JSONDecoder().decode(type, from: Data(payload))
        } catch let error as DecodingError {
            throw SyncError(.protocolError, "the peer's \(frame) frame does not decode: \(describe(error))")
        } catch {
            throw SyncError(.protocolError, "the peer's \(frame) frame does not decode")
        }
    }

    /// What is wrong with a message, without a byte of what the peer sent: the decoder's own
    /// text quotes the input, and a map's keys in a coding path are the peer's. Only the
    /// message's own member at the top of the path is named.
    package static func describe(_ error: DecodingError) -> String {
        func member(_ context: DecodingError.Context) -> String {
            guard let first = context.codingPath.first else { return "it" }
            if let index = first.intValue { return "item \(index)" }
            return context.codingPath.count == 1
                ? "\"\(first.stringValue)\"" : "a value within \"\(first.stringValue)\""
        }
        switch error {
        case .typeMismatch(let type, let context): return "\(member(context)) is not of type \(type)"
        case .valueNotFound(let type, let context): return "\(member(context)) lacks a value of type \(type)"
        case .keyNotFound(let key, let context):
            // The key is the message's own, never the peer's.
            return "\(member(context)) lacks \"\(key.stringValue)\""
        case .dataCorrupted(let context):
            return context.codingPath.isEmpty ? "it is not valid JSON" : "\(member(context)) is not valid"
        @unknown default: return "it is not a valid message"
        }
    }
}

extension Messages.WireRange {
    package init(_ range: IDRange) {
        origin = range.origin.description
        after = range.after?.description
        through = range.through.description
        switch range.content {
        case .fingerprint(let fingerprint):
            count = fingerprint.count
            hash = fingerprint.hash
        case .ids(let ids):
            self.ids = ids.map(\.description)
        }
    }

    package func decoded() throws(SyncError) -> IDRange {
        func id(_ text: String, _ what: String) throws(SyncError) -> ULID {
            guard let id = ULID(text) else {
                throw SyncError(.protocolError, "a range's \(what) is not an id (\(SyncError.size(of: text)))")
            }
            return id
        }
        let content: IDRange.Content
        if let ids {
            var parsed: [ULID] = []
            for text in ids { parsed.append(try id(text, "id")) }
            content = .ids(parsed)
        } else if let count, let hash, let fingerprint = Fingerprint(count: count, hash: hash) {
            content = .fingerprint(fingerprint)
        } else {
            throw SyncError(.protocolError, "a range has neither ids nor a valid fingerprint")
        }
        return IDRange(
            origin: try id(origin, "origin"),
            after: try after.map { (text) throws(SyncError) in try id(text, "after") },
            through: try id(through, "through"), content: content)
    }
}

extension Messages.Hello {
    /// The sender's name, when it gives one that is a valid node name (`NodeName`). Any
    /// other ends the session: a name goes into every log line and dead letter
    /// of the session, so a long one would cost far more than it weighs.
    package func validatedName() throws(SyncError) -> String? {
        guard let name else { return nil }
        guard NodeName.isValid(name) else {
            throw SyncError(
                .protocolError,
                "the peer's hello gives a name of \(SyncError.size(of: name)), which is not a node name: \(NodeName.rule)"
            )
        }
        return name
    }

    /// The dead-lettered ids the peer's hello lists; nil when it lists none (an older peer).
    package func decodedDeadLetters() throws(SyncError) -> Set<ULID>? {
        guard let deadLetters else { return nil }
        guard deadLetters.count <= Messages.Hello.maxDeadLetterIDs else {
            throw SyncError(
                .protocolError,
                "the peer's hello lists \(deadLetters.count) dead-lettered ids; at most \(Messages.Hello.maxDeadLetterIDs) are allowed"
            )
        }
        var out = Set<ULID>()
        for text in deadLetters {
            guard let id = ULID(text) else {
                throw SyncError(
                    .protocolError,
                    "the peer's dead-lettered ids hold something that is not an id (\(SyncError.size(of: text)))")
            }
            out.insert(id)
        }
        return out
    }

    package func decodedVector() throws(SyncError) -> [ULID: ULID] {
        var out: [ULID: ULID] = [:]
        for (origin, last) in vector {
            guard let o = ULID(origin), let l = ULID(last) else {
                throw SyncError(.protocolError, "the peer's version vector holds something that is not an id")
            }
            out[o] = l
        }
        return out
    }
}

extension [ULID: ULID] {
    package var wire: [String: String] {
        [String: String](uniqueKeysWithValues: map { ($0.key.description, $0.value.description) })
    }
}
