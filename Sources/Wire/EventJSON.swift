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
        if let payload = item.payload, payload.last == UInt8(ascii: "}"),
            let at = EventCodec.idPosition(inPayload: payload, hasKey: item.event.key != nil)
        {
            let start = out.count
            out.append(contentsOf: payload[..<at])
            out.append(contentsOf: idKey)
            item.event.id.appendJSON(to: &out)
            out.append(UInt8(ascii: ","))
            out.append(contentsOf: payload[at..<(payload.count - 1)])
            out.append(contentsOf: seqMember)
            CanonicalWriter.appendInteger(Int(clamping: item.seq), to: &out)
            out.append(UInt8(ascii: "}"))
            assert(
                out[start...].elementsEqual(stored(SequencedEvent(seq: item.seq, event: item.event))),
                "a notification spliced from the payload differs from the event's encoding")
            return
        }
        EventCodec.encodeStored(item.event, includeID: true, into: &out)
        guard out.last == UInt8(ascii: "}") else { return }
        out.removeLast()
        out.append(contentsOf: seqMember)
        CanonicalWriter.appendInteger(Int(clamping: item.seq), to: &out)
        out.append(UInt8(ascii: "}"))
    }

    private static let idKey = Array(#""id":"#.utf8)
    private static let seqMember = Array(#","seq":"#.utf8)
}
