/// A position in one database, valid inside `withCursor` of a transaction.
///
/// Every move returns the key/value pair it lands on, copied out of the map, or nil when there
/// is no such pair (`MDB_NOTFOUND`). The `Dup` moves work in `.dupSort` databases and stay
/// within the current key's values.
///
/// - Important: A cursor belongs to its transaction's thread and ends with `withCursor`.
public struct Cursor: ~Copyable {
    /// A key/value pair, copied out of the map.
    public typealias Entry = (key: [UInt8], value: [UInt8])

    private let handle: OpaquePointer
    /// Failures seen by this cursor, handed to its write transaction when the cursor closes.
    private(set) var health = TransactionHealth()
    #if DEBUG
        private let faults: FaultInjector?
    #endif

    #if DEBUG
        init(handle: OpaquePointer, faults: FaultInjector?) {
            self.handle = handle
            self.faults = faults
        }
    #else
        init(handle: OpaquePointer) {
            self.handle = handle
        }
    #endif

    deinit {
        MDB.cursorClose(handle)
    }

    /// Moves to the first pair of the database (`MDB_FIRST`).
    ///
    /// The corresponding C function is `mdb_cursor_get`.
    public mutating func first() throws(LMDBError) -> Entry? { try move(.first) }

    /// Moves to the last pair of the database (`MDB_LAST`).
    public mutating func last() throws(LMDBError) -> Entry? { try move(.last) }

    /// Moves to the next pair, the next value of a duplicate key included (`MDB_NEXT`).
    ///
    /// An unpositioned cursor moves to the first pair.
    public mutating func next() throws(LMDBError) -> Entry? { try move(.next) }

    /// Moves to the previous pair (`MDB_PREV`).
    ///
    /// An unpositioned cursor moves to the last pair.
    public mutating func prev() throws(LMDBError) -> Entry? { try move(.prev) }

    /// The pair at the cursor (`MDB_GET_CURRENT`); throws `LMDBError.invalidArgument` when unpositioned.
    public mutating func current() throws(LMDBError) -> Entry? { try move(.current) }

    /// Moves to the first key greater than or equal to `key` (`MDB_SET_RANGE`).
    public mutating func seek(_ key: [UInt8]) throws(LMDBError) -> Entry? { try move(.setRange, key: key) }

    /// `seek` that copies out only the key it lands on; `current()` takes the value.
    public mutating func seekKey(_ key: [UInt8]) throws(LMDBError) -> [UInt8]? {
        try perform("mdb_cursor_get") { cursor throws(LMDBError) in try MDB.cursorGetKey(cursor, .setRange, key: key) }
    }

    /// `last` that copies out only the key it lands on.
    public mutating func lastKey() throws(LMDBError) -> [UInt8]? {
        try perform("mdb_cursor_get") { cursor throws(LMDBError) in try MDB.cursorGetKey(cursor, .last) }
    }

    /// `prev` that copies out only the key it lands on.
    public mutating func prevKey() throws(LMDBError) -> [UInt8]? {
        try perform("mdb_cursor_get") { cursor throws(LMDBError) in try MDB.cursorGetKey(cursor, .prev) }
    }

    /// Whether the value at the cursor is `bytes`, compared in the map without copying it
    /// out; false when the cursor is on no pair.
    public mutating func currentValueEquals(_ bytes: [UInt8]) throws(LMDBError) -> Bool {
        try perform("mdb_cursor_get") { cursor throws(LMDBError) in try MDB.cursorValueEquals(cursor, bytes) }
    }

    /// Moves to `key` exactly (`MDB_SET_KEY`), to its first value in a `.dupSort` database.
    public mutating func seekExact(_ key: [UInt8]) throws(LMDBError) -> Entry? { try move(.setKey, key: key) }

    /// Moves to the first value of the current key (`MDB_FIRST_DUP`).
    public mutating func firstDup() throws(LMDBError) -> Entry? { try move(.firstDup) }

    /// Moves to the last value of the current key (`MDB_LAST_DUP`).
    public mutating func lastDup() throws(LMDBError) -> Entry? { try move(.lastDup) }

    /// Moves to the next value of the current key; nil after its last one (`MDB_NEXT_DUP`).
    public mutating func nextDup() throws(LMDBError) -> Entry? { try move(.nextDup) }

    /// Moves to the previous value of the current key; nil before its first one (`MDB_PREV_DUP`).
    public mutating func prevDup() throws(LMDBError) -> Entry? { try move(.prevDup) }

    /// Moves to the first value of the next key (`MDB_NEXT_NODUP`).
    public mutating func nextNoDup() throws(LMDBError) -> Entry? { try move(.nextNoDup) }

    /// Moves to the last value of the previous key (`MDB_PREV_NODUP`).
    public mutating func prevNoDup() throws(LMDBError) -> Entry? { try move(.prevNoDup) }

    /// Moves to `key` and its first value greater than or equal to `value` (`MDB_GET_BOTH_RANGE`).
    public mutating func seekBoth(_ key: [UInt8], _ value: [UInt8]) throws(LMDBError) -> Entry? {
        try move(.getBothRange, key: key, value: value)
    }

    /// The values of the current key in a `.dupFixed` database a page at a time, as one
    /// buffer of fixed-size values: the page the cursor is on (`MDB_GET_MULTIPLE`, which
    /// may start before the cursor's value), then with `next` the following page
    /// (`MDB_NEXT_MULTIPLE`). Nil past the key's last value. A key holding a single value
    /// has no such page: LMDB then answers with an empty buffer.
    public mutating func multiple(next: Bool) throws(LMDBError) -> [UInt8]? {
        try perform("mdb_cursor_get") { cursor throws(LMDBError) in try MDB.cursorGetMultiple(cursor, next: next) }
    }

    /// The number of values of the current key in a `.dupSort` database.
    ///
    /// The corresponding C function is `mdb_cursor_count`.
    public mutating func count() throws(LMDBError) -> Int {
        try perform("mdb_cursor_count") { cursor throws(LMDBError) in try MDB.cursorCount(cursor) }
    }

    /// Stores `value` under `key` and moves the cursor there.
    ///
    /// Only for cursors of a `WriteTransaction`; in a read transaction LMDB fails with
    /// `LMDBError.permissionDenied`. The corresponding C function is `mdb_cursor_put`.
    public mutating func put(_ key: [UInt8], _ value: [UInt8], flags: PutFlags = []) throws(LMDBError) {
        try injectPutFault()
        try perform("mdb_cursor_put") { cursor throws(LMDBError) in
            try MDB.cursorPut(cursor, key, value, flags: flags.rawValue)
        }
    }

    /// Stores `values`, consecutive elements of `elementSize` bytes each, as values of `key`
    /// in one call: for `.dupFixed` databases only. With `.appendDup` (every value sorts
    /// after the key's existing ones, else LMDB fails with `LMDBError.keyExist`) a full page
    /// is split by starting a new one, so values added in order fill their pages instead of
    /// leaving each half empty.
    ///
    /// The corresponding C function is `mdb_cursor_put` with `MDB_MULTIPLE`.
    public mutating func putMultiple(
        _ key: [UInt8], values: [UInt8], elementSize: Int, flags: PutFlags = []
    ) throws(LMDBError) {
        try injectPutFault()
        try perform("mdb_cursor_put") { cursor throws(LMDBError) in
            try MDB.cursorPutMultiple(cursor, key, values: values, elementSize: elementSize, flags: flags.rawValue)
        }
    }

    /// In debug builds, the fault a test injected for the next put, as LMDB would fail it.
    private mutating func injectPutFault() throws(LMDBError) {
        #if DEBUG
            if let faults {
                try perform("mdb_cursor_put") { _ throws(LMDBError) in
                    try faults.check(.put, operation: "mdb_cursor_put")
                }
            }
        #endif
    }

    /// Deletes the pair at the cursor, or with `allDuplicates` every value of its key.
    ///
    /// Only for cursors of a `WriteTransaction`. The corresponding C function is `mdb_cursor_del`.
    public mutating func deleteCurrent(allDuplicates: Bool = false) throws(LMDBError) {
        try perform("mdb_cursor_del") { cursor throws(LMDBError) in
            try MDB.cursorDelete(cursor, allDuplicates: allDuplicates)
        }
    }

    private mutating func move(
        _ move: MDB.CursorMove, key: [UInt8] = [], value: [UInt8] = []
    ) throws(LMDBError) -> Entry? {
        try perform("mdb_cursor_get") { cursor throws(LMDBError) in
            try MDB.cursorGet(cursor, move, key: key, value: value)
        }
    }

    /// Runs one call unless the transaction already failed, and remembers its failure.
    private mutating func perform<R>(
        _ operation: String, _ call: (OpaquePointer) throws(LMDBError) -> R
    ) throws(LMDBError) -> R {
        try health.checkUsable(operation)
        do throws(LMDBError) {
            return try call(handle)
        } catch {
            health.record(error)
            throw error
        }
    }
}
