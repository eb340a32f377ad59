import EventStore
import Projections

/// The events of the wire: `log`'s pages and `watch`'s notifications.
package enum EventJSON {
    /// A stored event as `log` and `watch` give it: its canonical JSON with `seq` added
    /// as the last member (it is this node's, not part of the event).
    package static func stored(_ item: SequencedEvent) -> [UInt8] {
        var out: [UInt8] = []
        stored(item, into: &out)
        return out
    }

    package static func stored(_ item: borrowing SequencedEvent, into out: inout [UInt8]) {
        // From the payload the writer stored, with the id put in its place: the same bytes
        // as encoding the event again, for a copy.
        if let splice = Splice(item) {
            let start = out.count
            splice.append(to: &out)
            assert(
                out[start...].elementsEqual(stored(SequencedEvent(seq: item.seq, event: item.event))),
                "a notification spliced from the payload differs from the event's encoding")
            return
        }
        EventCodec.encodeStored(item.event, includeID: true, into: &out)
        guard out.last == UInt8(ascii: "}") else { return }
        out.removeLast()
        append(seqMember, to: &out)
        CanonicalWriter.appendInteger(Int(clamping: item.seq), to: &out)
        out.append(UInt8(ascii: "}"))
    }

    /// A stored event as `stored(_:)` gives it, from its payload as the log holds it: the
    /// payload with the id put in its place, or, for one whose id's place is not found
    /// (none the writer makes), the event decoded and encoded again. The payload is not
    /// decoded when its id's place is found: the writer stored it whole and canonical, and
    /// `EventLog.storedFeed` checked its JSON.
    /// - Throws: `corrupt` when a payload without the id's place does not decode.
    package static func stored(_ item: StoredEvent, into out: inout [UInt8]) throws(EventStoreError) {
        if let splice = Splice(item) {
            let start = out.count
            splice.append(to: &out)
            // Checked against the event encoded again where it decodes (`storedFeed` checked
            // the JSON's structure, not that it is an event).
            assert(
                (try? EventCodec.decodeStored(item.payload, id: item.id)).map {
                    out[start...].elementsEqual(stored(SequencedEvent(seq: item.seq, event: $0)))
                } ?? true,
                "an event spliced from its stored payload differs from its encoding")
            return
        }
        stored(SequencedEvent(seq: item.seq, event: try item.decoded()), into: &out)
    }

    /// What a stored event's JSON is made of when its stored payload is at hand: the
    /// payload, with the id put in its place and `seq` after the last member. It holds the
    /// payload (shared, not copied), so a watch can queue it and have the bytes made by
    /// whoever writes them, at a size known now.
    package struct Splice: Sendable {
        package let payload: [UInt8]
        package let id: ULID
        package let seq: UInt64
        /// Where in the payload the id goes.
        private let at: Int

        /// Nil when the event has no payload, or one whose id's place cannot be found.
        package init?(_ item: borrowing SequencedEvent) {
            guard let payload = item.payload else { return nil }
            self.init(seq: item.seq, id: item.event.id, hasKey: item.event.key != nil, payload: payload)
        }

        /// From a payload read back from the log, whether the event has a key read from it
        /// (`EventCodec.idPosition(inPayload:)`). Nil when the id's place cannot be found.
        package init?(_ item: StoredEvent) {
            self.init(seq: item.seq, id: item.id, payload: item.payload, at: EventCodec.idPosition(inPayload:))
        }

        /// Nil when the id's place cannot be found in the payload.
        package init?(seq: UInt64, id: ULID, hasKey: Bool, payload: [UInt8]) {
            self.init(seq: seq, id: id, payload: payload) { EventCodec.idPosition(inPayload: $0, hasKey: hasKey) }
        }

        /// With the id's place known (the writer encoded the payload): nil when it is not a
        /// place inside a payload that ends its object.
        package init?(seq: UInt64, id: ULID, payload: [UInt8], idPosition at: Int) {
            self.init(seq: seq, id: id, payload: payload) { $0.indices.contains(at) && at > 0 ? at : nil }
            assert(
                EventCodec.idPosition(inPayload: payload) == at,
                "the id's place the writer kept differs from the one found in its payload")
        }

        /// With the id's place as `place` finds it in a payload that ends its object.
        private init?(seq: UInt64, id: ULID, payload: [UInt8], at place: ([UInt8]) -> Int?) {
            guard payload.last == UInt8(ascii: "}"), let at = place(payload) else { return nil }
            self.payload = payload
            self.id = id
            self.seq = seq
            self.at = at
        }

        /// The size of what `append` adds (without `closingNotification`).
        package var count: Int {
            // The payload, `"id":` and the id in quotes and a comma, `,"seq":` and the digits.
            payload.count + Splice.idMemberBytes + EventJSON.seqMember.count
                + CanonicalWriter.digitCount(Int(clamping: seq).magnitude)
        }

        /// Appends the event's JSON; with `closingNotification`, the `}}` that close a watch
        /// notification around it and the newline after it as well (3 bytes more than
        /// `count`). What is not the payload's goes in in two pieces, each with room made
        /// once.
        package func append(to out: inout [UInt8], closingNotification: Bool = false) {
            out.append(contentsOf: payload[..<at])
            out.append(addingCapacity: Splice.idMemberBytes) { span in
                EventJSON.append(EventJSON.idKey, to: &span)
                span.append(UInt8(ascii: "\""))
                id.appendText(to: &span)
                span.append(UInt8(ascii: "\""))
                span.append(UInt8(ascii: ","))
            }
            out.append(contentsOf: payload[at..<(payload.count - 1)])
            let magnitude = Int(clamping: seq).magnitude
            let width = CanonicalWriter.digitCount(magnitude)
            out.append(addingCapacity: EventJSON.seqMember.count + width + (closingNotification ? 4 : 1)) { span in
                EventJSON.append(EventJSON.seqMember, to: &span)
                CanonicalWriter.appendDigits(magnitude, width: width, to: &span)
                span.append(UInt8(ascii: "}"))
                if closingNotification {
                    span.append(UInt8(ascii: "}"))
                    span.append(UInt8(ascii: "}"))
                    span.append(UInt8(ascii: "\n"))
                }
            }
        }

        /// `"id":`, the id in quotes, and the comma after it.
        private static let idMemberBytes = 5 + ULID.textLength + 2 + 1
    }

    /// A payload whose id's place is not known, with the id and `seq` as its last members:
    /// the same members as `Splice` makes, not in canonical order.
    package static func appendUnspliced(payload: [UInt8], id: ULID, seq: UInt64, to out: inout [UInt8]) {
        out.append(contentsOf: payload.dropLast())
        out.append(UInt8(ascii: ","))
        append(idKey, to: &out)
        id.appendJSON(to: &out)
        append(seqMember, to: &out)
        CanonicalWriter.appendInteger(Int(clamping: seq), to: &out)
        out.append(UInt8(ascii: "}"))
    }

    /// `"id":` and `,"seq":`: fixed-size values, read without an accessor's lazy
    /// initialization or a reference count.
    fileprivate static let idKey: InlineArray<5, UInt8> = [0x22, 0x69, 0x64, 0x22, 0x3A]
    fileprivate static let seqMember: InlineArray<7, UInt8> = [0x2C, 0x22, 0x73, 0x65, 0x71, 0x22, 0x3A]

    fileprivate static func append<let count: Int>(_ bytes: InlineArray<count, UInt8>, to span: inout OutputSpan<UInt8>)
    {
        for index in bytes.indices { span.append(bytes[index]) }
    }

    fileprivate static func append<let count: Int>(_ bytes: InlineArray<count, UInt8>, to out: inout [UInt8]) {
        out.append(addingCapacity: count) { append(bytes, to: &$0) }
    }
}
