import Projections

extension EventLog {
    /// The least commit sequence head refused at open: no release assigns seqs anywhere
    /// near it (one a microsecond for a quarter of a million years), so a head this large
    /// was not written by evstore, and appending above it would soon leave no seq to take.
    static let sequenceHeadLimit: UInt64 = 1 << 63

    /// Checks that the meta values of a store add up before `open` uses or writes any of
    /// them; throws `corrupt` with a message naming `file` and what is wrong, and `open`
    /// then changes nothing (its write transaction is aborted).
    ///
    /// - the format marker is 4 bytes and names a format a release wrote: 1 up to
    ///   `formatVersion` (a newer one is refused as a newer evstore's, 0 as damage: an
    ///   upgrade from it would give every event a new seq);
    /// - the node id is 16 bytes; a store that holds events has one;
    /// - the sequence head (`meta/seq`, and the sequence table's last seq) is 8 bytes and
    ///   below `sequenceHeadLimit`;
    /// - the dictionary version is 4 bytes, and the dictionaries table holds exactly the
    ///   versions 1 through it: every one an event may have been compressed with (each is
    ///   kept for good), and none above it, which the next training would overwrite.
    static func checkMeta(txn: borrowing some TransactionReading & ~Copyable, tables: Tables, file: String) throws {
        func refuse(_ problem: String) -> EventStoreError {
            EventStoreError(
                .corrupt,
                "\(file) does not add up: \(problem). Restore the store from a backup; nothing in it was changed.")
        }
        let holdsEvents = try txn.stat(tables.events).entries > 0

        if let format = try txn.get(tables.meta, Meta.format) {
            guard format.count == 4 else {
                throw refuse("its format marker is \(format.count) bytes, not 4")
            }
            let version = uint32(bigEndian: format)
            guard version <= formatVersion else {
                throw EventStoreError(
                    .corrupt,
                    "\(file) was written by a newer evstore (format \(version)); this version reads format \(formatVersion) and older. Upgrade evstore."
                )
            }
            guard version >= 1 else {
                throw refuse("its format marker says format 0, which no release of evstore wrote")
            }
        } else if holdsEvents {
            throw EventStoreError(
                .corrupt, "\(file) holds events but no format marker; it was not made by evstore")
        }

        if let nodeID = try txn.get(tables.meta, Meta.nodeID) {
            guard nodeID.count == 16 else {
                throw refuse("its node id is \(nodeID.count) bytes, not the 16 of a ULID")
            }
        } else if holdsEvents {
            throw refuse("it holds events but no node id")
        }

        if let recorded = try txn.get(tables.meta, Meta.sequenceHead), recorded.count != 8 {
            throw refuse("its sequence head is \(recorded.count) bytes, not 8")
        }
        let head = try sequenceHead(txn: txn, tables: tables)
        guard head < sequenceHeadLimit else {
            throw refuse(
                "its commit sequence is at \(head), a seq no release of evstore reaches (the limit is \(sequenceHeadLimit - 1))"
            )
        }

        var held: [UInt32] = []
        try txn.withCursor(tables.dictionaries) { cursor in
            var item = try cursor.first()
            while let entry = item {
                guard entry.key.count == 4 else {
                    throw refuse("its dictionaries table has a key of \(entry.key.count) bytes, not a 4-byte version")
                }
                held.append(uint32(bigEndian: entry.key))
                item = try cursor.next()
            }
        }
        // The events' dictionaries below the records' base, the records' above it: each run
        // counts from 1 to its current version.
        let base = EventLog.recordDictionaryBase
        try checkDictionaries(
            current: try txn.get(tables.meta, Meta.dictionaryVersion), held: held.filter { $0 < base }, base: 0,
            kind: "compression dictionary", refuse: refuse)
        try checkDictionaries(
            current: try txn.get(tables.meta, Meta.recordDictionaryVersion), held: held.filter { $0 >= base },
            base: base, kind: "projection record dictionary", refuse: refuse)
    }

    /// Checks one run of dictionaries: `held` (big-endian keys, so in order) must be
    /// `base + 1` through the current version `meta` names, each once.
    private static func checkDictionaries(
        current meta: [UInt8]?, held: [UInt32], base: UInt32, kind: String, refuse: (String) -> EventStoreError
    ) throws {
        var current: UInt32 = 0
        if let meta {
            guard meta.count == 4 else { throw refuse("its \(kind) version is \(meta.count) bytes, not 4") }
            current = uint32(bigEndian: meta)
            // The events' may be 0 (none yet); the records' is written only with one.
            if base > 0 {
                guard current > base else { throw refuse("its \(kind) version \(current) is out of its range") }
                current -= base
            }
        }
        let numbers = held.map { $0 - base }
        // `numbers` is 1 through `current` when it counts `current` versions from 1 and ends
        // at `current`.
        let complete =
            numbers.count == Int(current) && (current == 0 || (numbers.first == 1 && numbers.last == current))
        if !complete {
            let holds = numbers.isEmpty ? "none" : EventLog.describe(versions: numbers)
            // The current one when it is missing, else the first gap below it.
            var missing: UInt64 = 1
            for version in numbers where UInt64(version) == missing { missing += 1 }
            if current > 0, !numbers.contains(current) { missing = UInt64(current) }
            if missing <= UInt64(current) {
                throw refuse(
                    "its meta names \(kind) \(current) as current, but dictionary \(missing) is missing (the store holds \(holds)); what was compressed with it, or is written now, could not be read"
                )
            }
            throw refuse(
                "its meta names \(kind) \(current == 0 ? "none" : String(current)) as current, but the store holds \(holds); the next training would overwrite a dictionary in use"
            )
        }
    }

    /// "dictionary 1", "dictionaries 1 to 3", "dictionaries 1, 2, 5", for messages.
    static func describe(versions: [UInt32]) -> String {
        guard let first = versions.first, let last = versions.last, versions.count > 1 else {
            return versions.first.map { "dictionary \($0)" } ?? "no dictionary"
        }
        if UInt64(last) - UInt64(first) + 1 == UInt64(versions.count) { return "dictionaries \(first) to \(last)" }
        let shown = versions.prefix(8).map(String.init).joined(separator: ", ")
        return "dictionaries " + shown + (versions.count > 8 ? " and \(versions.count - 8) more" : "")
    }
}
