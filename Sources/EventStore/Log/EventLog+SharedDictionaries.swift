/// A store's current compression dictionaries, as one node offers them to a peer that has
/// none yet (sync's `dictionary` capability): the events' and, when it has one, the
/// projection records'. A new node that takes them compresses from its first event on with
/// a dictionary, and trains none until its own store has grown tenfold past the threshold.
public struct SharedDictionaries: Equatable, Sendable {
    public var events: [UInt8]
    public var records: [UInt8]?

    public init(events: [UInt8], records: [UInt8]?) {
        self.events = events
        self.records = records
    }

    /// The largest dictionary a node takes: 32 times the trained size (32 KiB), so any
    /// `dictionaryCapacity` a peer may have been configured with fits.
    public static let maxBytes = 1 << 20
    /// The first bytes of a trained zstd dictionary (`ZSTD_MAGIC_DICTIONARY`, little-endian):
    /// what is offered must be one, not raw content zstd would also load.
    public static let magic: [UInt8] = [0x37, 0xA4, 0x30, 0xEC]
    /// What a dictionary taken is tried on before it is stored.
    static let probe = Array(
        #"{"entity":"job/01JD3Q8R5N8X6ZK2W7Y4V9B3TQ","fields":{"address":"12 Main St","priority":2},"kind":"edit","origin":"01JD3Q8R5N8X6ZK2W7Y4V9B3TQ"}"#
            .utf8)
}

extension EventLog {
    /// Whether the store has a compression dictionary yet (one trained or taken).
    public func hasDictionary() throws(EventStoreError) -> Bool {
        try reading { txn in try txn.get(tables.meta, Meta.dictionaryVersion) != nil }
    }

    /// The dictionaries the store compresses with now; nil while it has none.
    public func currentDictionaries() throws(EventStoreError) -> SharedDictionaries? {
        try reading { txn -> SharedDictionaries? in
            guard let version = try txn.get(tables.meta, Meta.dictionaryVersion),
                let events = try txn.get(tables.dictionaries, version)
            else { return nil }
            let records = try txn.get(tables.meta, Meta.recordDictionaryVersion).flatMap { version in
                try txn.get(tables.dictionaries, version)
            }
            return SharedDictionaries(events: events, records: records)
        }
    }

    /// Takes a peer's dictionaries, loaded and tried (`SharedDictionaries.loaded(level:)`),
    /// as this store's first, when it has none yet: stored under the next versions and
    /// made current, as a training would (on the writer). They count as trained at
    /// `dictionaryTrainingThreshold` events or the store's count, the larger: the store
    /// trains its own once it has grown tenfold past that.
    ///
    /// - Returns: false when the store has a dictionary already (trained or taken since it
    ///   asked): nothing is changed.
    @discardableResult
    public func adoptDictionaries(_ loaded: LoadedDictionaries) throws(EventStoreError) -> Bool {
        try requireWriterThread()
        guard writer.withLock({ $0.dictionaryVersion }) == 0 else { return false }
        let count = try reading { txn in try txn.stat(tables.events).entries }
        let offered = loaded.shared
        _ = try install(
            PreparedDictionary(
                bytes: offered.events, dictionary: loaded.events,
                eventCount: max(count, options.dictionaryTrainingThreshold),
                records: offered.records.flatMap { bytes in loaded.records.map { (bytes: bytes, dictionary: $0) } },
                eventSamples: 0, recordSamples: 0))
        return true
    }
}

/// A peer's dictionaries that zstd has loaded and that gave back what they compressed:
/// only `SharedDictionaries.loaded(level:)` makes one, so a store takes none unchecked.
public struct LoadedDictionaries: Sendable {
    public let shared: SharedDictionaries
    let events: CompressionDictionary
    let records: CompressionDictionary?
}

extension SharedDictionaries {
    /// Both dictionaries loaded into zstd at `level` and tried: what a node checks before
    /// it takes them, on the session's thread, so that bytes a hostile peer sends cost the
    /// writer nothing.
    /// - Throws: `invalid_params`, saying what is wrong with which; `loaded` for nothing.
    public func loaded(level: Int32) throws(EventStoreError) -> LoadedDictionaries {
        let events = try SharedDictionaries.checked(self.events, what: "events'", level: level)
        let records = try self.records.map { (bytes) throws(EventStoreError) in
            try SharedDictionaries.checked(bytes, what: "projection records'", level: level)
        }
        return LoadedDictionaries(shared: self, events: events, records: records)
    }

    /// A peer's dictionary, loaded and tried: it must compress and give back a sample event.
    static func checked(_ bytes: [UInt8], what: String, level: Int32) throws(EventStoreError)
        -> CompressionDictionary
    {
        guard bytes.count <= SharedDictionaries.maxBytes else {
            throw EventStoreError(
                .invalidParams,
                "the \(what) dictionary offered is \(bytes.count) bytes, over the \(SharedDictionaries.maxBytes) a node takes"
            )
        }
        guard bytes.starts(with: SharedDictionaries.magic), bytes.count > SharedDictionaries.magic.count + 4 else {
            throw EventStoreError(.invalidParams, "the \(what) dictionary offered is not a trained zstd dictionary")
        }
        let dictionary: CompressionDictionary
        let back: [UInt8]
        do {
            dictionary = try CompressionDictionary(bytes: bytes, level: level)
            let frame = try Compressor(level: level).compress(SharedDictionaries.probe, dictionary: dictionary)
            back = try Decompressor().decompress(frame, dictionary: dictionary, maxSize: SharedDictionaries.probe.count)
        } catch {
            throw EventStoreError(.invalidParams, "the \(what) dictionary offered cannot be used: \(error)")
        }
        guard back == SharedDictionaries.probe else {
            throw EventStoreError(
                .invalidParams, "the \(what) dictionary offered does not give back what it compressed")
        }
        return dictionary
    }
}
