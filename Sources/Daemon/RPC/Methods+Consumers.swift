import EventStore
import Wire

/// Durable consumers: named cursors over the commit sequence, kept in the store, so a
/// reader of `log` or `watch` (a bridge to HQ, a search index) resumes where it stopped
/// whatever crashed.
extension Methods {
    /// `consumers.list`: every consumer, its acknowledged seq and its lag (head − seq).
    func consumersList(_ request: Request) throws -> [UInt8] {
        _ = try Params(request)
        return try consumersAnswer()
    }

    /// `{"consumers":[...],"head":N}`: what `consumers.list`, `.ack` and `.remove` answer,
    /// as `peers.*` answer the peers.
    func consumersAnswer() throws -> [UInt8] {
        let head = log.sequenceHead
        let consumers = try log.consumers()
        var out = JSONWriter()
        out.beginObject()
        out.key("consumers")
        Methods.write(consumers, head: head, to: &out)
        out.member("head", Int(clamping: head))
        out.endObject()
        return out.bytes
    }

    /// `consumers.ack {name, seq}`: the consumer has processed every event up to `seq`;
    /// creates it when new (`seq` 0: it reads from the start). Answers every consumer.
    func consumersAck(_ request: Request) throws -> [UInt8] {
        let params = try Params(request)
        guard let name = try params.string("name"), let seq = try params.seq("seq") else {
            throw RPCError.invalidParams(
                "consumers.ack takes \"name\" and \"seq\": the seq of the last event the consumer has processed (0 to create it at the start)"
            )
        }
        _ = try writer.perform(AckConsumerJob(name, seq: seq, maxConsumers: maxConsumers), from: -8)
        return try consumersAnswer()
    }

    /// `consumers.remove {name}`: forgets a consumer (`not_found` when there is none);
    /// answers those left.
    func consumersRemove(_ request: Request) throws -> [UInt8] {
        let params = try Params(request)
        guard let name = try params.string("name") else {
            throw RPCError.invalidParams("consumers.remove takes \"name\"")
        }
        guard try writer.perform(RemoveConsumerJob(name), from: -9) else { throw Methods.unknownConsumer(name) }
        return try consumersAnswer()
    }

    /// Where a feed (`log`, `watch`) starts: `after` as given, or the seq the consumer named
    /// `consumer` acknowledged (`not_found` when there is none); nil when neither is given.
    static func resumePoint(after: UInt64?, consumer name: String?, log: EventLog) throws(RPCError) -> UInt64? {
        guard let name else { return after }
        guard after == nil else {
            throw RPCError.invalidParams(
                "give \"after\" or \"consumer\", not both: a consumer resumes after the seq it acknowledged")
        }
        let consumer: Consumer?
        do throws(EventStoreError) {
            try Consumer.validate(name: name)
            consumer = try log.consumer(named: name)
        } catch {
            throw RPCError(error)
        }
        guard let consumer else { throw unknownConsumer(name) }
        return consumer.seq
    }

    static func unknownConsumer(_ name: String) -> RPCError {
        RPCError.application(
            .notFound,
            "no consumer named \(name) on this node; create it with consumers.ack {\"name\":\"\(name)\",\"seq\":0} to read from the start (evctl consumers add \(name))"
        )
    }

    static func write(_ consumer: Consumer, head: UInt64, to out: inout JSONWriter) {
        out.beginObject()
        out.member("name", consumer.name)
        out.member("seq", Int(clamping: consumer.seq))
        out.member("lag", Int(clamping: head >= consumer.seq ? head - consumer.seq : 0))
        out.member("acked_at", EventLog.timestamp(milliseconds: consumer.ackedAt))
        out.endObject()
    }

    static func write(_ consumers: [Consumer], head: UInt64, to out: inout JSONWriter) {
        out.beginArray()
        for consumer in consumers { write(consumer, head: head, to: &out) }
        out.endArray()
    }
}
