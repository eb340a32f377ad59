/// A read-only snapshot of the environment, valid inside `Environment.read`.
///
/// It sees the data committed when it began and nothing committed later.
///
/// - Important: A transaction belongs to the thread that runs the closure; never hand it to
///   another thread and never hold one across an `await`. Bytes it returns are copies.
public struct ReadTransaction: ~Copyable, TransactionReading {
    private let handle: OpaquePointer

    init(handle: OpaquePointer) {
        self.handle = handle
    }

    deinit {
        MDB.txnAbort(handle)
    }

    /// The value stored under `key`, or nil when there is none.
    ///
    /// The corresponding C function is `mdb_get`.
    public func get(_ db: Database, _ key: [UInt8]) throws(LMDBError) -> [UInt8]? {
        try MDB.get(handle, db.rawValue, key)
    }

    /// The shape of `db`'s tree as this transaction sees it.
    ///
    /// The corresponding C function is `mdb_stat`.
    public func stat(_ db: Database) throws(LMDBError) -> DatabaseStat {
        try MDB.stat(handle, db.rawValue)
    }

    /// Runs `body` with a cursor over `db`, closed when `body` returns.
    ///
    /// The corresponding C function is `mdb_cursor_open`.
    public func withCursor<R>(_ db: Database, _ body: (inout Cursor) throws -> R) throws -> R {
        #if DEBUG
            var cursor = Cursor(handle: try MDB.cursorOpen(handle, db.rawValue), faults: nil)
        #else
            var cursor = Cursor(handle: try MDB.cursorOpen(handle, db.rawValue))
        #endif
        return try body(&cursor)
    }
}

/// The one write transaction of the environment, valid inside `Environment.write`.
///
/// `Environment.write` commits it when the closure returns and aborts it when the closure
/// throws. An operation that fails for lack of space, memory, or I/O leaves the transaction
/// unusable (LMDB marks it failed); later operations throw `LMDBError.badTransaction`.
///
/// - Important: A transaction belongs to the thread that runs the closure; never hand it to
///   another thread and never hold one across an `await`. Bytes it returns are copies.
public struct WriteTransaction: ~Copyable, TransactionReading {
    private let handle: OpaquePointer
    private var isFinished = false
    /// Failures seen so far, including those the closure caught. A reference, so reads
    /// (which can fail too) need not be `mutating`.
    private let healthRecord: HealthRecord
    var health: TransactionHealth { healthRecord.value }
    #if DEBUG
        private let faults: FaultInjector
    #endif

    #if DEBUG
        init(handle: OpaquePointer, faults: FaultInjector, health: HealthRecord = HealthRecord()) {
            self.handle = handle
            self.faults = faults
            self.healthRecord = health
        }
    #else
        init(handle: OpaquePointer, health: HealthRecord = HealthRecord()) {
            self.handle = handle
            self.healthRecord = health
        }
    #endif

    deinit {
        if !isFinished { MDB.txnAbort(handle) }
    }

    /// Commits every change. LMDB frees the transaction whether or not this succeeds.
    ///
    /// The corresponding C function is `mdb_txn_commit`.
    consuming func commit() throws(LMDBError) {
        isFinished = true
        if health.fatalFailure != nil {
            // What mdb_txn_commit does for a transaction with MDB_TXN_ERROR set.
            MDB.txnAbort(handle)
            throw LMDBError(code: LMDBError.badTransaction.code, operation: "mdb_txn_commit")
        }
        #if DEBUG
            if let failure = faults.failure(at: .commit, operation: "mdb_txn_commit") {
                MDB.txnAbort(handle)
                throw failure
            }
        #endif
        try MDB.txnCommit(handle)
    }

    /// Opens (or with `.create`, creates) the database `name`.
    mutating func openDatabase(_ name: String, flags: DatabaseFlags) throws(LMDBError) -> Database {
        try perform("mdb_dbi_open") { txn throws(LMDBError) in
            Database(rawValue: try MDB.dbiOpen(txn, name, flags: flags.rawValue))
        }
    }

    /// The value stored under `key`, or nil when there is none, including this transaction's changes.
    ///
    /// The corresponding C function is `mdb_get`.
    public func get(_ db: Database, _ key: [UInt8]) throws(LMDBError) -> [UInt8]? {
        try perform("mdb_get") { txn throws(LMDBError) in try MDB.get(txn, db.rawValue, key) }
    }

    /// The shape of `db`'s tree, including this transaction's changes.
    ///
    /// The corresponding C function is `mdb_stat`.
    public func stat(_ db: Database) throws(LMDBError) -> DatabaseStat {
        try perform("mdb_stat") { txn throws(LMDBError) in try MDB.stat(txn, db.rawValue) }
    }

    /// Stores `value` under `key`.
    ///
    /// Keys are 1...511 bytes; so are values in `.dupSort` databases.
    /// The corresponding C function is `mdb_put`.
    public mutating func put(
        _ db: Database, _ key: [UInt8], _ value: [UInt8], flags: PutFlags = []
    ) throws(LMDBError) {
        #if DEBUG
            let faults = self.faults
            try perform("mdb_put") { _ throws(LMDBError) in try faults.check(.put, operation: "mdb_put") }
        #endif
        try perform("mdb_put") { txn throws(LMDBError) in
            try MDB.put(txn, db.rawValue, key, value, flags: flags.rawValue)
        }
    }

    /// Deletes `key` with all its values, or only the pair `key`/`value` when `value` is given.
    ///
    /// Returns false when there was nothing to delete.
    /// The corresponding C function is `mdb_del`.
    @discardableResult
    public mutating func delete(_ db: Database, _ key: [UInt8], value: [UInt8]? = nil) throws(LMDBError) -> Bool {
        try perform("mdb_del") { txn throws(LMDBError) in try MDB.delete(txn, db.rawValue, key, value: value) }
    }

    /// Deletes every entry of `db`; the database stays open.
    ///
    /// The corresponding C function is `mdb_drop`.
    public mutating func drop(_ db: Database) throws(LMDBError) {
        try perform("mdb_drop") { txn throws(LMDBError) in try MDB.empty(txn, db.rawValue) }
    }

    /// Deletes `db` from the environment, its entries and its name: a table a newer format
    /// no longer has. Its handle is closed; nothing may use it after.
    ///
    /// The corresponding C function is `mdb_drop` (with `del` 1).
    mutating func removeDatabase(_ db: Database) throws(LMDBError) {
        try perform("mdb_drop") { txn throws(LMDBError) in try MDB.remove(txn, db.rawValue) }
    }

    /// Runs `body` with a cursor over `db` that can also write, closed when `body` returns.
    ///
    /// The corresponding C function is `mdb_cursor_open`.
    public func withCursor<R>(_ db: Database, _ body: (inout Cursor) throws -> R) throws -> R {
        let cursorHandle = try perform("mdb_cursor_open") { txn throws(LMDBError) in
            try MDB.cursorOpen(txn, db.rawValue)
        }
        #if DEBUG
            var cursor = Cursor(handle: cursorHandle, faults: faults)
        #else
            var cursor = Cursor(handle: cursorHandle)
        #endif
        defer { healthRecord.value.absorb(cursor.health) }
        return try body(&cursor)
    }

    /// Runs `body` in a nested transaction: its changes join this transaction when `body`
    /// returns and are discarded when it throws, and this transaction stays usable either
    /// way. A storage failure inside (a full map, an I/O error) still fails this transaction
    /// too, so that `Environment.write` can grow the map and run everything again.
    ///
    /// - Important: Only the nested transaction may be used inside `body`.
    /// The corresponding C function is `mdb_txn_begin` with a parent.
    public mutating func nested<R>(_ body: (inout WriteTransaction) throws -> R) throws -> R {
        let childHandle = try perform("mdb_txn_begin") { txn throws(LMDBError) in try MDB.txnBeginNested(parent: txn) }
        #if DEBUG
            var child = WriteTransaction(handle: childHandle, faults: faults, health: healthRecord)
        #else
            var child = WriteTransaction(handle: childHandle, health: healthRecord)
        #endif
        let result = try body(&child)
        try child.commit()
        return result
    }

    /// Runs one call on the transaction unless it already failed, and remembers its failure.
    private func perform<R>(
        _ operation: String, _ call: (OpaquePointer) throws(LMDBError) -> R
    ) throws(LMDBError) -> R {
        try health.checkUsable(operation)
        do throws(LMDBError) {
            return try call(handle)
        } catch {
            healthRecord.value.record(error)
            throw error
        }
    }
}

/// Reads that both kinds of transaction offer, for code that runs in either.
public protocol TransactionReading: ~Copyable {
    /// The value stored under `key`, or nil when there is none.
    func get(_ db: Database, _ key: [UInt8]) throws(LMDBError) -> [UInt8]?
    /// The shape of `db`'s tree as this transaction sees it.
    func stat(_ db: Database) throws(LMDBError) -> DatabaseStat
    /// Runs `body` with a cursor over `db`, closed when `body` returns.
    func withCursor<R>(_ db: Database, _ body: (inout Cursor) throws -> R) throws -> R
}

/// The health of one write transaction, shared by the calls made through it.
final class HealthRecord {
    var value = TransactionHealth()
}

/// What LMDB remembers about failures inside a write transaction, mirrored in Swift.
///
/// LMDB sets `MDB_TXN_ERROR` after a failure that leaves the transaction inconsistent; the
/// mirror lets injected failures behave the same, and tells `Environment.write` that the map
/// was full even when the closure caught the error.
struct TransactionHealth {
    /// The first failure after which the transaction refuses every call.
    private(set) var fatalFailure: LMDBError?
    /// The first `MDB_MAP_FULL`, caught or not.
    private(set) var mapFull: LMDBError?

    func checkUsable(_ operation: String) throws(LMDBError) {
        if fatalFailure != nil {
            throw LMDBError(code: LMDBError.badTransaction.code, operation: operation)
        }
    }

    mutating func record(_ error: LMDBError) {
        if mapFull == nil, error == .mapFull { mapFull = error }
        if fatalFailure == nil, Self.failsTransaction(error) { fatalFailure = error }
    }

    mutating func absorb(_ other: TransactionHealth) {
        if let failure = other.mapFull { record(failure) }
        if let failure = other.fatalFailure { record(failure) }
    }

    /// Failures after which LMDB refuses the transaction; argument errors such as
    /// `MDB_KEYEXIST` or `MDB_BAD_VALSIZE` leave it usable.
    private static func failsTransaction(_ error: LMDBError) -> Bool {
        switch error {
        case .mapFull, .txnFull, .cursorFull, .pageFull, .pageNotFound, .corrupted, .panic,
            .noSpace, .diskQuotaExceeded, .ioError, .noMemory:
            true
        default:
            false
        }
    }
}
