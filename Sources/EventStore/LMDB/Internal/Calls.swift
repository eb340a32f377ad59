import CLMDB

#if canImport(Glibc)
    import Glibc
#endif

#if canImport(Glibc)
    import Glibc
#endif

/// Every call into liblmdb (and the few libc calls the environment needs) goes through here.
///
/// Each wrapper turns a return code into a thrown `LMDBError` and copies bytes out of the map,
/// so nothing above this file touches `MDB_val`, cursor op codes, or raw return codes.
enum MDB {
    /// Throws when `code` is not `MDB_SUCCESS`.
    @inline(__always)
    static func check(_ code: Int32, _ operation: String) throws(LMDBError) {
        guard code == MDB_SUCCESS else { throw LMDBError(code: code, operation: operation) }
    }

    /// LMDB's description of a code it has no table entry for. The C function is `mdb_strerror`.
    static func describe(_ code: Int32) -> String {
        String(cString: mdb_strerror(code))
    }

    // MARK: Environment

    static func envCreate() throws(LMDBError) -> OpaquePointer {
        var env: OpaquePointer?
        try check(mdb_env_create(&env), "mdb_env_create")
        return env!
    }

    static func envSetMaxDatabases(_ env: OpaquePointer, _ count: Int) throws(LMDBError) {
        try check(mdb_env_set_maxdbs(env, MDB_dbi(count)), "mdb_env_set_maxdbs")
    }

    static func envSetMaxReaders(_ env: OpaquePointer, _ count: Int) throws(LMDBError) {
        try check(mdb_env_set_maxreaders(env, UInt32(count)), "mdb_env_set_maxreaders")
    }

    /// Sets the map size; 0 adopts the size another process gave the file.
    ///
    /// - Important: No transaction of this process may be open (see `ResizeLock`).
    static func envSetMapSize(_ env: OpaquePointer, _ size: Int) throws(LMDBError) {
        try check(mdb_env_set_mapsize(env, size), "mdb_env_set_mapsize")
    }

    /// Opens the environment in `directory` with `MDB_NOTLS`, and `MDB_NOSYNC` unless `durable`.
    static func envOpen(_ env: OpaquePointer, directory: String, durable: Bool) throws(LMDBError) {
        var flags = UInt32(MDB_NOTLS)
        if !durable { flags |= UInt32(MDB_NOSYNC) }
        try check(mdb_env_open(env, directory, flags, 0o600), "mdb_env_open")
    }

    static func envClose(_ env: OpaquePointer) {
        mdb_env_close(env)
    }

    static func envSync(_ env: OpaquePointer, force: Bool) throws(LMDBError) {
        try check(mdb_env_sync(env, force ? 1 : 0), "mdb_env_sync")
    }

    static func envCopy(_ env: OpaquePointer, to directory: String, compact: Bool) throws(LMDBError) {
        try check(mdb_env_copy2(env, directory, compact ? UInt32(MDB_CP_COMPACT) : 0), "mdb_env_copy2")
    }

    /// Writes the copy to an open file, from its current offset, then flushes it to disk.
    static func envCopy(_ env: OpaquePointer, toDescriptor descriptor: Int32, compact: Bool) throws(LMDBError) {
        try check(mdb_env_copyfd2(env, descriptor, compact ? UInt32(MDB_CP_COMPACT) : 0), "mdb_env_copyfd2")
        guard fsync(descriptor) == 0 else { throw LMDBError(code: errno, operation: "fsync") }
    }

    /// - Important: Reads the meta pages inside the map, so hold `ResizeLock` shared.
    static func envInfo(_ env: OpaquePointer) -> EnvironmentInfo {
        var info = MDB_envinfo()
        var stat = MDB_stat()
        // Both only fail for null arguments.
        precondition(mdb_env_info(env, &info) == MDB_SUCCESS)
        precondition(mdb_env_stat(env, &stat) == MDB_SUCCESS)
        return EnvironmentInfo(
            mapSize: info.me_mapsize,
            lastPageNumber: info.me_last_pgno,
            pageSize: Int(stat.ms_psize),
            numReaders: Int(info.me_numreaders),
            lastTransactionID: info.me_last_txnid
        )
    }

    // MARK: Transactions

    static func txnBegin(_ env: OpaquePointer, readOnly: Bool) throws(LMDBError) -> OpaquePointer {
        var txn: OpaquePointer?
        try check(mdb_txn_begin(env, nil, readOnly ? UInt32(MDB_RDONLY) : 0, &txn), "mdb_txn_begin")
        return txn!
    }

    /// Begins a write transaction nested in `parent` (same environment).
    static func txnBeginNested(parent: OpaquePointer) throws(LMDBError) -> OpaquePointer {
        var txn: OpaquePointer?
        try check(mdb_txn_begin(mdb_txn_env(parent), parent, 0, &txn), "mdb_txn_begin")
        return txn!
    }

    /// Commits; LMDB frees the transaction whether or not this succeeds.
    static func txnCommit(_ txn: OpaquePointer) throws(LMDBError) {
        try check(mdb_txn_commit(txn), "mdb_txn_commit")
    }

    static func txnAbort(_ txn: OpaquePointer) {
        mdb_txn_abort(txn)
    }

    static func dbiOpen(_ txn: OpaquePointer, _ name: String, flags: UInt32) throws(LMDBError) -> UInt32 {
        var dbi = MDB_dbi()
        try check(mdb_dbi_open(txn, name, flags, &dbi), "mdb_dbi_open")
        return dbi
    }

    static func stat(_ txn: OpaquePointer, _ dbi: UInt32) throws(LMDBError) -> DatabaseStat {
        var stat = MDB_stat()
        try check(mdb_stat(txn, dbi, &stat), "mdb_stat")
        return DatabaseStat(
            entries: stat.ms_entries,
            depth: Int(stat.ms_depth),
            branchPages: stat.ms_branch_pages,
            leafPages: stat.ms_leaf_pages,
            overflowPages: stat.ms_overflow_pages,
            pageSize: Int(stat.ms_psize)
        )
    }

    // MARK: Data

    /// The value for `key` copied out of the map, or nil when there is none.
    static func get(_ txn: OpaquePointer, _ dbi: UInt32, _ key: [UInt8]) throws(LMDBError) -> [UInt8]? {
        var value = MDB_val()
        let code = key.withUnsafeBytes { key in
            var key = MDB_val(key)
            return mdb_get(txn, dbi, &key, &value)
        }
        if code == MDB_NOTFOUND { return nil }
        try check(code, "mdb_get")
        return value.bytes
    }

    static func put(
        _ txn: OpaquePointer, _ dbi: UInt32, _ key: [UInt8], _ value: [UInt8], flags: UInt32
    ) throws(LMDBError) {
        let code = withValues(key, value) { key, value in mdb_put(txn, dbi, &key, &value, flags) }
        try check(code, "mdb_put")
    }

    /// Deletes `key` (only the pair `key`/`value` when `value` is given); false when absent.
    static func delete(
        _ txn: OpaquePointer, _ dbi: UInt32, _ key: [UInt8], value: [UInt8]?
    ) throws(LMDBError) -> Bool {
        let code: Int32
        if let value {
            code = withValues(key, value) { key, value in mdb_del(txn, dbi, &key, &value) }
        } else {
            code = key.withUnsafeBytes { key in
                var key = MDB_val(key)
                return mdb_del(txn, dbi, &key, nil)
            }
        }
        if code == MDB_NOTFOUND { return false }
        try check(code, "mdb_del")
        return true
    }

    /// Deletes every entry of the database and keeps it open.
    static func empty(_ txn: OpaquePointer, _ dbi: UInt32) throws(LMDBError) {
        try check(mdb_drop(txn, dbi, 0), "mdb_drop")
    }

    /// Deletes the database from the environment and closes its handle.
    static func remove(_ txn: OpaquePointer, _ dbi: UInt32) throws(LMDBError) {
        try check(mdb_drop(txn, dbi, 1), "mdb_drop")
    }

    // MARK: Cursors

    /// A cursor movement; the C enum stays in this file.
    enum CursorMove {
        case first, last, next, prev, current
        case setRange, setKey
        case firstDup, lastDup, nextDup, prevDup, nextNoDup, prevNoDup, getBothRange

        var op: MDB_cursor_op {
            switch self {
            case .first: MDB_FIRST
            case .last: MDB_LAST
            case .next: MDB_NEXT
            case .prev: MDB_PREV
            case .current: MDB_GET_CURRENT
            case .setRange: MDB_SET_RANGE
            case .setKey: MDB_SET_KEY
            case .firstDup: MDB_FIRST_DUP
            case .lastDup: MDB_LAST_DUP
            case .nextDup: MDB_NEXT_DUP
            case .prevDup: MDB_PREV_DUP
            case .nextNoDup: MDB_NEXT_NODUP
            case .prevNoDup: MDB_PREV_NODUP
            case .getBothRange: MDB_GET_BOTH_RANGE
            }
        }
    }

    static func cursorOpen(_ txn: OpaquePointer, _ dbi: UInt32) throws(LMDBError) -> OpaquePointer {
        var cursor: OpaquePointer?
        try check(mdb_cursor_open(txn, dbi, &cursor), "mdb_cursor_open")
        return cursor!
    }

    static func cursorClose(_ cursor: OpaquePointer) {
        mdb_cursor_close(cursor)
    }

    /// Moves the cursor and returns the pair it lands on, copied; nil when there is none.
    ///
    /// Some moves (`MDB_FIRST_DUP`, `MDB_GET_BOTH_RANGE`, ...) leave the key or value unset, so
    /// the pair is always read back with `MDB_GET_CURRENT`.
    static func cursorGet(
        _ cursor: OpaquePointer, _ move: CursorMove, key: [UInt8] = [], value: [UInt8] = []
    ) throws(LMDBError) -> (key: [UInt8], value: [UInt8])? {
        if move != .current {
            let code = withValues(key, value) { key, value in mdb_cursor_get(cursor, &key, &value, move.op) }
            if code == MDB_NOTFOUND { return nil }
            try check(code, "mdb_cursor_get")
        }
        var foundKey = MDB_val()
        var foundValue = MDB_val()
        let current = mdb_cursor_get(cursor, &foundKey, &foundValue, MDB_GET_CURRENT)
        if current == MDB_NOTFOUND { return nil }
        try check(current, "mdb_cursor_get")
        return (foundKey.bytes, foundValue.bytes)
    }

    /// Whether the value at the cursor is `bytes`, compared where it lies in the map (nothing
    /// copied); false when the cursor is on no pair.
    static func cursorValueEquals(_ cursor: OpaquePointer, _ bytes: [UInt8]) throws(LMDBError) -> Bool {
        var foundKey = MDB_val()
        var foundValue = MDB_val()
        let code = mdb_cursor_get(cursor, &foundKey, &foundValue, MDB_GET_CURRENT)
        if code == MDB_NOTFOUND { return false }
        try check(code, "mdb_cursor_get")
        guard foundValue.mv_size == bytes.count else { return false }
        guard let data = foundValue.mv_data, !bytes.isEmpty else { return true }
        return bytes.withUnsafeBytes { memcmp(data, $0.baseAddress!, bytes.count) == 0 }
    }

    /// The same move, copying out only the key it lands on: for a search that looks at keys
    /// before it takes a value. Every move but `MDB_GET_BOTH_RANGE` reports the key it lands
    /// on in place of the one given (`MDB_SET_RANGE` and `MDB_SET_KEY` included).
    static func cursorGetKey(_ cursor: OpaquePointer, _ move: CursorMove, key: [UInt8] = []) throws(LMDBError)
        -> [UInt8]?
    {
        precondition(move != .getBothRange, "MDB_GET_BOTH_RANGE does not report the key it lands on")
        var foundKey = MDB_val()
        var foundValue = MDB_val()
        let code = key.withUnsafeBytes { key in
            foundKey = MDB_val(key)
            return mdb_cursor_get(cursor, &foundKey, &foundValue, move.op)
        }
        if code == MDB_NOTFOUND { return nil }
        try check(code, "mdb_cursor_get")
        return foundKey.bytes
    }

    /// A page of values of a `.dupFixed` key, as one buffer (`MDB_GET_MULTIPLE` for the page
    /// the cursor is on, `MDB_NEXT_MULTIPLE` for the next one); nil when there is none.
    static func cursorGetMultiple(_ cursor: OpaquePointer, next: Bool) throws(LMDBError) -> [UInt8]? {
        var key = MDB_val()
        var value = MDB_val()
        let code = mdb_cursor_get(cursor, &key, &value, next ? MDB_NEXT_MULTIPLE : MDB_GET_MULTIPLE)
        if code == MDB_NOTFOUND { return nil }
        try check(code, "mdb_cursor_get")
        return value.bytes
    }

    static func cursorPut(
        _ cursor: OpaquePointer, _ key: [UInt8], _ value: [UInt8], flags: UInt32
    ) throws(LMDBError) {
        let code = withValues(key, value) { key, value in mdb_cursor_put(cursor, &key, &value, flags) }
        try check(code, "mdb_cursor_put")
    }

    /// Stores `values`, consecutive elements of `elementSize` bytes, as values of `key` in
    /// one call (`MDB_MULTIPLE`, for `.dupFixed` databases), with `flags` besides.
    static func cursorPutMultiple(
        _ cursor: OpaquePointer, _ key: [UInt8], values: [UInt8], elementSize: Int, flags: UInt32 = 0
    ) throws(LMDBError) {
        precondition(elementSize > 0 && !values.isEmpty && values.count % elementSize == 0)
        let code = key.withUnsafeBytes { key in
            values.withUnsafeBytes { values in
                var key = MDB_val(key)
                // data[0]: the first element and the size of each; data[1]: how many.
                var data = [
                    MDB_val(mv_size: elementSize, mv_data: UnsafeMutableRawPointer(mutating: values.baseAddress)),
                    MDB_val(mv_size: values.count / elementSize, mv_data: nil),
                ]
                return data.withUnsafeMutableBufferPointer { data in
                    mdb_cursor_put(cursor, &key, data.baseAddress, UInt32(MDB_MULTIPLE) | flags)
                }
            }
        }
        try check(code, "mdb_cursor_put")
    }

    static func cursorDelete(_ cursor: OpaquePointer, allDuplicates: Bool) throws(LMDBError) {
        try check(mdb_cursor_del(cursor, allDuplicates ? UInt32(MDB_NODUPDATA) : 0), "mdb_cursor_del")
    }

    static func cursorCount(_ cursor: OpaquePointer) throws(LMDBError) -> Int {
        var count = 0
        try check(mdb_cursor_count(cursor, &count), "mdb_cursor_count")
        return count
    }

    // MARK: Helpers

    /// Runs `body` with `MDB_val`s that point at the two arrays' bytes.
    private static func withValues<R>(
        _ first: [UInt8], _ second: [UInt8], _ body: (inout MDB_val, inout MDB_val) -> R
    ) -> R {
        first.withUnsafeBytes { first in
            second.withUnsafeBytes { second in
                var first = MDB_val(first)
                var second = MDB_val(second)
                return body(&first, &second)
            }
        }
    }
}

extension MDB_val {
    /// Points at `buffer`; LMDB never writes through input values.
    fileprivate init(_ buffer: UnsafeRawBufferPointer) {
        self.init(mv_size: buffer.count, mv_data: UnsafeMutableRawPointer(mutating: buffer.baseAddress))
    }

    /// A copy of the bytes, which in the map are only valid until the transaction ends.
    fileprivate var bytes: [UInt8] {
        guard let data = mv_data, mv_size > 0 else { return [] }
        return Array(UnsafeRawBufferPointer(start: data, count: mv_size))
    }
}

// MARK: - File system

extension MDB {
    /// The virtual memory page size; map sizes must be a multiple of it.
    static let systemPageSize = Int(sysconf(Int32(_SC_PAGESIZE)))

    /// Creates `path` and any missing parents with mode 0700; existing directories are fine.
    /// The device and inode of `path`, which name a directory however it is spelled.
    static func fileIdentity(_ path: String) throws(LMDBError) -> String {
        let descriptor = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard descriptor >= 0 else { throw LMDBError(code: errno, operation: "open") }
        defer { close(descriptor) }
        var info = Glibc.stat()
        guard fstat(descriptor, &info) == 0 else { throw LMDBError(code: errno, operation: "fstat") }
        return "\(info.st_dev):\(info.st_ino)"
    }

    /// The bytes still free for unprivileged writers on the file system that holds `path`,
    /// or nil when `statvfs` fails.
    static func availableBytes(_ path: String) -> Int? {
        var info = Glibc.statvfs()
        guard statvfs(path, &info) == 0 else { return nil }
        return Int(clamping: UInt64(info.f_bavail).multipliedReportingOverflow(by: UInt64(info.f_frsize)).partialValue)
    }

    /// The size of the file at `path` in bytes, or 0 when it cannot be read.
    static func fileSize(_ path: String) -> Int {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return 0 }
        defer { close(descriptor) }
        var info = Glibc.stat()
        return fstat(descriptor, &info) == 0 ? Int(info.st_size) : 0
    }

    /// Removes an environment's files (`data.mdb`, `lock.mdb`) and then its directory,
    /// should it be empty; whatever is missing is passed over.
    static func removeEnvironmentFiles(_ directory: String) {
        unlink(directory + "/data.mdb")
        unlink(directory + "/lock.mdb")
        rmdir(directory)
    }

    /// The errno for a resource that is in use.
    static let busy = EBUSY

    static func makeDirectory(_ path: String) throws(LMDBError) {
        var prefix = path.hasPrefix("/") ? "/" : ""
        for component in path.split(separator: "/") {
            prefix += component
            if mkdir(prefix, 0o700) != 0, errno != EEXIST {
                let code = errno
                let reason = LMDBError(code: code, operation: "mkdir").message
                throw LMDBError(code: code, operation: "mkdir", message: "Cannot create directory \(prefix): \(reason)")
            }
            prefix += "/"
        }
    }
}

// MARK: - Resize lock

/// A readers–writer lock that keeps `mdb_env_set_mapsize` away from open transactions.
///
/// Every transaction holds it shared for its whole life; a map resize holds it exclusive.
/// Writers are preferred, so a waiting resize is not starved by a stream of readers.
/// The lock counts how often the current thread holds it shared: nested transactions on one
/// thread take it only once (taking it again would deadlock behind a waiting resize), and a
/// resize requested by a thread that holds it shared fails with `EDEADLK` instead of hanging.
final class ResizeLock {
    private let lock: UnsafeMutablePointer<pthread_rwlock_t>
    /// This thread's shared hold count, stored as the pointer's bit pattern.
    private let depthKey: pthread_key_t

    init() throws(LMDBError) {
        var attributes = pthread_rwlockattr_t()
        pthread_rwlockattr_init(&attributes)
        defer { pthread_rwlockattr_destroy(&attributes) }
        pthread_rwlockattr_setkind_np(&attributes, Int32(PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP))

        lock = .allocate(capacity: 1)
        var code = pthread_rwlock_init(lock, &attributes)
        guard code == 0 else {
            lock.deallocate()
            throw LMDBError(code: code, operation: "pthread_rwlock_init")
        }
        var key = pthread_key_t()
        code = pthread_key_create(&key, nil)
        guard code == 0 else {
            pthread_rwlock_destroy(lock)
            lock.deallocate()
            throw LMDBError(code: code, operation: "pthread_key_create")
        }
        depthKey = key
    }

    deinit {
        pthread_key_delete(depthKey)
        pthread_rwlock_destroy(lock)
        lock.deallocate()
    }

    /// Whether the current thread holds the lock shared.
    var isHeldSharedByCurrentThread: Bool { sharedDepth > 0 }

    private var sharedDepth: Int {
        get { Int(bitPattern: pthread_getspecific(depthKey)) }
        set { pthread_setspecific(depthKey, UnsafeRawPointer(bitPattern: newValue)) }
    }

    func withShared<R>(_ body: () throws -> R) rethrows -> R {
        let depth = sharedDepth
        if depth == 0 { precondition(pthread_rwlock_rdlock(lock) == 0, "pthread_rwlock_rdlock failed") }
        sharedDepth = depth + 1
        defer {
            sharedDepth = depth
            if depth == 0 { precondition(pthread_rwlock_unlock(lock) == 0, "pthread_rwlock_unlock failed") }
        }
        return try body()
    }

    func withExclusive<R>(_ body: () throws -> R) throws -> R {
        guard !isHeldSharedByCurrentThread else {
            throw LMDBError(
                code: EDEADLK, operation: "mdb_env_set_mapsize",
                message: "The map must be resized, but this thread has a transaction open; "
                    + "do not call Environment.write from inside another transaction's closure."
            )
        }
        precondition(pthread_rwlock_wrlock(lock) == 0, "pthread_rwlock_wrlock failed")
        defer { precondition(pthread_rwlock_unlock(lock) == 0, "pthread_rwlock_unlock failed") }
        return try body()
    }
}
