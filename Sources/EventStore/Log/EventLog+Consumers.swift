/// A durable consumer: a named cursor over this node's commit sequence, kept in the store
/// so a reader that stops (a crash, a restart, an upgrade) resumes after the last seq it
/// acknowledged, never missing an event and re-reading only what it had not acknowledged.
///
/// Like the seq it counts, a consumer is this node's own: never replicated, not in the
/// digest, not exported.
public struct Consumer: Equatable, Sendable {
    public var name: String
    /// The last seq the consumer acknowledged (0: none yet; it reads from the start).
    public var seq: UInt64
    /// When that acknowledgement was stored, ms since 1970.
    public var ackedAt: UInt64

    public init(name: String, seq: UInt64, ackedAt: UInt64) {
        self.name = name
        self.seq = seq
        self.ackedAt = ackedAt
    }

    /// The longest name, in bytes.
    public static let maxNameBytes = 64

    /// Checks a consumer name: 1 to 64 of `A-Z a-z 0-9 . _ -`, as peer names, so it reads
    /// the same in logs, metrics labels and file names.
    public static func validate(name: String) throws(EventStoreError) {
        let bytes = Array(name.utf8)
        let allowed = { (byte: UInt8) -> Bool in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "-"):
                return true
            default: return false
            }
        }
        guard (1...maxNameBytes).contains(bytes.count), bytes.allSatisfy(allowed) else {
            throw EventStoreError(
                .invalidParams,
                "a consumer name is 1 to \(maxNameBytes) characters of A-Z, a-z, 0-9, \".\", \"_\" and \"-\"")
        }
    }

    /// The stored record: a version byte (1), the seq and the time, 8 bytes big-endian each.
    var record: [UInt8] { [1] + bigEndian(seq) + bigEndian(ackedAt) }

    init(name: String, record: [UInt8]) throws(EventStoreError) {
        guard record.count == 17, record[0] == 1 else {
            throw EventStoreError(.corrupt, "the record of consumer \(name) is unreadable (\(record.count) bytes)")
        }
        self.init(
            name: name, seq: uint64(bigEndian: Array(record[1..<9])), ackedAt: uint64(bigEndian: Array(record[9..<17])))
    }
}

extension EventLog {
    /// Every consumer, by name.
    public func consumers() throws(EventStoreError) -> [Consumer] {
        try reading { txn in
            try txn.withCursor(tables.consumers) { cursor in
                var consumers: [Consumer] = []
                var item = try cursor.first()
                while let (key, value) = item {
                    consumers.append(try Consumer(name: String(decoding: key, as: UTF8.self), record: value))
                    item = try cursor.next()
                }
                return consumers
            }
        }
    }

    /// The consumer named `name`; nil when there is none.
    public func consumer(named name: String) throws(EventStoreError) -> Consumer? {
        try reading { txn in
            guard let record = try txn.get(tables.consumers, Array(name.utf8)) else { return nil }
            return try Consumer(name: name, record: record)
        }
    }

    /// Acknowledges `seq` for the consumer `name`, creating it when there is none (then
    /// `seq` is where it starts: 0 for the whole log, the head for what comes next).
    ///
    /// Acknowledgements only move forward: a seq below the one stored is refused
    /// (`conflict`), the same seq again is a no-op (a retried ack), and a seq beyond the
    /// head (no event has it yet) is refused (`invalidParams`). Through the writer.
    public func ackConsumer(_ name: String, seq: UInt64, maxConsumers: Int = .max) throws(EventStoreError) -> Consumer {
        try perform(AckConsumerJob(name, seq: seq, maxConsumers: maxConsumers))
    }

    /// Removes the consumer `name`; false when there was none. Through the writer.
    public func removeConsumer(_ name: String) throws(EventStoreError) -> Bool {
        try perform(RemoveConsumerJob(name))
    }

    func ackConsumer(
        _ name: String, seq: UInt64, maxConsumers: Int, batch: borrowing WriteBatch, txn: inout WriteTransaction
    ) throws -> Consumer {
        try Consumer.validate(name: name)
        // The head as this transaction has it: events stored earlier in the same commit count.
        guard seq <= batch.seq else {
            throw EventStoreError(
                .invalidParams,
                "seq \(seq) is beyond this node's head (\(batch.seq)): acknowledge only a seq you have read from this node"
            )
        }
        let key = Array(name.utf8)
        if let stored = try txn.get(tables.consumers, key) {
            let current = try Consumer(name: name, record: stored)
            if seq == current.seq { return current }
            guard seq > current.seq else {
                throw EventStoreError(
                    .conflict,
                    "consumer \(name) has acknowledged up to seq \(current.seq); acknowledgements only move forward (is another reader using the same consumer?)"
                )
            }
        } else if try txn.stat(tables.consumers).entries >= maxConsumers {
            throw EventStoreError(
                .tooManyConsumers,
                "this node already keeps \(maxConsumers) consumers, the most it keeps (max_consumers); remove one that is no longer read (evctl consumers remove NAME) or raise max_consumers"
            )
        }
        let consumer = Consumer(name: name, seq: seq, ackedAt: batch.now)
        try txn.put(tables.consumers, key, consumer.record)
        return consumer
    }

    func removeConsumer(_ name: String, txn: inout WriteTransaction) throws -> Bool {
        try Consumer.validate(name: name)
        return try txn.delete(tables.consumers, Array(name.utf8))
    }
}
