import Synchronization

/// How an `Environment` is opened and how far its map may grow.
public struct EnvironmentOptions: Sendable {
    /// The map size to start with, in bytes; rounded up to a multiple of the page size.
    public var initialMapSize: Int
    /// The size the map may grow to, in bytes; writes past it throw an error whose
    /// `isStorageFull` is true.
    public var maxMapSize: Int
    /// The number of named databases the environment can hold (the event log opens 16,
    /// and an upgrade one more for a table it replaces).
    public var maxDatabases: Int
    /// The number of read transactions that can be open at once, across processes.
    public var maxReaders: Int
    /// Whether a commit waits for the disk (`fdatasync`). When false (`MDB_NOSYNC`) a crash
    /// may lose the last commits but never corrupts the file; call `Environment.sync(force:)`
    /// to flush.
    public var durable: Bool

    public init(
        initialMapSize: Int = 64 << 20,
        maxMapSize: Int = 64 << 30,
        maxDatabases: Int = 32,
        maxReaders: Int = 126,
        durable: Bool = true
    ) {
        self.initialMapSize = initialMapSize
        self.maxMapSize = maxMapSize
        self.maxDatabases = maxDatabases
        self.maxReaders = maxReaders
        self.durable = durable
    }
}

/// The size and use of an environment's map. The corresponding C function is `mdb_env_info`.
public struct EnvironmentInfo: Sendable, Hashable {
    /// The current map size in bytes.
    public var mapSize: Int
    /// The last page the last committed transaction used.
    public var lastPageNumber: Int
    /// The size of one database page in bytes.
    public var pageSize: Int
    /// The number of reader slots used so far.
    public var numReaders: Int
    /// The id of the last committed write transaction: it grows with every commit.
    public var lastTransactionID: Int

    /// Bytes of the map in use: every page up to `lastPageNumber`.
    public var usedBytes: Int { (lastPageNumber + 1) * pageSize }
}

/// An open LMDB environment: one data directory holding named databases.
///
/// Reads run in `read { txn in }` and see a snapshot; writes run in `write { txn in }`, one at
/// a time, and commit when the closure returns. The map grows by itself up to
/// `EnvironmentOptions.maxMapSize`.
///
/// This is `@unchecked Sendable` because LMDB allows an environment opened with `MDB_NOTLS` to
/// be used from any thread, and the one thing it forbids — resizing the map while this process
/// has a transaction open — is prevented by `resizeLock`.
///
/// - Important: Do not start a transaction inside another transaction's closure on the same
///   thread: a nested `write` blocks forever on LMDB's writer lock, and a write that must grow
///   the map inside a read fails with `LMDBError.deadlock`.
public final class Environment: @unchecked Sendable {
    private let handle: OpaquePointer
    /// The directory that holds `data.mdb` and `lock.mdb`.
    public let directory: String
    /// The size the map may grow to, in bytes (a multiple of the page size).
    public var maxMapSize: Int { maximum.load(ordering: .relaxed) }
    /// `maxMapSize`; changed by `setMaxMapSize(_:)` while the environment is open.
    private let maximum: Atomic<Int>
    /// The first map size, and the least the map grows by.
    private let initialMapSize: Int
    /// Held shared by every transaction for its life and exclusive by map resizes, because
    /// `mdb_env_set_mapsize` must not run while this process has a transaction open.
    private let resizeLock: ResizeLock
    /// This environment's entry in `openDirectories`.
    private let identity: String
    #if DEBUG
        let faults = FaultInjector()
    #endif

    /// The directories (by device and inode) with an environment open in this process:
    /// LMDB forbids opening one twice in a process, and closing either copy would break the
    /// other's locks.
    private static let openDirectories = Mutex<Set<String>>([])

    /// Opens (creating if needed) the environment in `directory`.
    ///
    /// The directory and its missing parents are created with mode 0700. An existing
    /// `data.mdb` is first checked against its meta pages with plain reads: one that is not
    /// LMDB's, or shorter than the pages they say are used, throws an error naming the file
    /// (`isCorruption`) and is left as it was.
    /// The corresponding C functions are `mdb_env_create` and `mdb_env_open`.
    public init(directory: String, options: EnvironmentOptions = EnvironmentOptions()) throws {
        guard options.initialMapSize > 0, options.initialMapSize <= options.maxMapSize else {
            throw LMDBError(
                code: LMDBError.invalidArgument.code, operation: "mdb_env_set_mapsize",
                message: "initialMapSize (\(options.initialMapSize)) must be positive and at most "
                    + "maxMapSize (\(options.maxMapSize)); fix the EnvironmentOptions."
            )
        }
        guard options.maxDatabases >= 0, options.maxReaders > 0 else {
            throw LMDBError(
                code: LMDBError.invalidArgument.code, operation: "mdb_env_set_maxreaders",
                message: "maxDatabases (\(options.maxDatabases)) must not be negative and maxReaders "
                    + "(\(options.maxReaders)) must be positive; fix the EnvironmentOptions."
            )
        }
        let pageSize = MDB.systemPageSize
        let initialMapSize = (options.initialMapSize + pageSize - 1) / pageSize * pageSize
        self.initialMapSize = initialMapSize
        self.maximum = Atomic(max(options.maxMapSize / pageSize * pageSize, initialMapSize))
        self.directory = directory
        self.resizeLock = try ResizeLock()

        try MDB.makeDirectory(directory)
        // Before LMDB maps it: a file shorter than its meta pages say faults at the first read.
        try MDB.checkDataFile(directory + "/data.mdb")
        let identity = try MDB.fileIdentity(directory)
        guard Self.openDirectories.withLock({ $0.insert(identity).inserted }) else {
            throw LMDBError(
                code: MDB.busy, operation: "mdb_env_open",
                message: "The store in \(directory) is already open in this process; use the instance that is open."
            )
        }
        self.identity = identity
        let env: OpaquePointer
        do {
            env = try MDB.envCreate()
        } catch {
            Self.openDirectories.withLock { _ = $0.remove(identity) }
            throw error
        }
        do {
            try MDB.envSetMaxDatabases(env, options.maxDatabases)
            try MDB.envSetMaxReaders(env, options.maxReaders)
            try MDB.envSetMapSize(env, initialMapSize)
            try MDB.envOpen(env, directory: directory, durable: options.durable)
        } catch {
            MDB.envClose(env)
            Self.openDirectories.withLock { _ = $0.remove(identity) }
            throw error
        }
        self.handle = env
    }

    deinit {
        MDB.envClose(handle)
        Self.openDirectories.withLock { _ = $0.remove(identity) }
    }

    /// Opens the database `name`, creating it when `flags` contains `.create`.
    ///
    /// Runs in its own write transaction. The corresponding C function is `mdb_dbi_open`.
    public func openDatabase(_ name: String, flags: DatabaseFlags = []) throws -> Database {
        try write { txn in try txn.openDatabase(name, flags: flags) }
    }

    /// Runs `body` in a read-only transaction and ends the transaction when it returns.
    ///
    /// The corresponding C function is `mdb_txn_begin` with `MDB_RDONLY`.
    ///
    /// - Important: The transaction belongs to the calling thread; never hold one across an
    ///   `await`. A long read keeps the map from growing and old pages from being reused, so
    ///   copy what you need and return.
    public func read<R>(_ body: (borrowing ReadTransaction) throws -> R) throws -> R {
        while true {
            let attempt: Attempt<R> = try resizeLock.withShared {
                let txnHandle: OpaquePointer
                do {
                    txnHandle = try MDB.txnBegin(handle, readOnly: true)
                } catch LMDBError.mapResized {
                    return .mapResized
                }
                let txn = ReadTransaction(handle: txnHandle)
                return .finished(try body(txn))
            }
            switch attempt {
            case .finished(let result): return result
            case .mapResized: try adoptResizedMap()
            case .mapFull(let failure, _): throw failure
            }
        }
    }

    /// Runs `body` in the write transaction: commits when it returns, aborts when it throws.
    ///
    /// When the map fills up (in `body` or at commit), the transaction is aborted, the map
    /// grows (doubling, by at least the initial size, up to `maxMapSize`), and `body` runs again
    /// from scratch. At `maxMapSize` the write fails with `MDB_MAP_FULL` (`isStorageFull`).
    /// The map also grows before a transaction starts when more than 80% of it is in use.
    /// The corresponding C functions are `mdb_txn_begin` and `mdb_txn_commit`.
    ///
    /// - Important: `body` may run more than once, so it must only change state outside the
    ///   transaction after `write` returns. Writes are serialized: a second thread waits here
    ///   until the first commits. Never hold the transaction across an `await`.
    public func write<R>(_ body: (inout WriteTransaction) throws -> R) throws -> R {
        while true {
            try growIfNearlyFull()
            switch try attemptWrite(body) {
            case .finished(let result): return result
            case .mapFull(let failure, let mapSize): try growMap(after: failure, from: mapSize)
            case .mapResized: try adoptResizedMap()
            }
        }
    }

    /// Flushes committed data to disk; needed only when `durable` is false, or with `force`.
    ///
    /// The corresponding C function is `mdb_env_sync`.
    public func sync(force: Bool) throws {
        try resizeLock.withShared { try MDB.envSync(handle, force: force) }
    }

    /// The map's size and use.
    ///
    /// The corresponding C functions are `mdb_env_info` and `mdb_env_stat`.
    public func info() -> EnvironmentInfo {
        resizeLock.withShared { MDB.envInfo(handle) }
    }

    /// Writes a consistent copy of the environment into `directory` while it stays in use.
    ///
    /// `directory` is created if missing and must not already hold a `data.mdb`. With `compact`,
    /// free pages are left out and pages renumbered (`MDB_CP_COMPACT`).
    /// The corresponding C function is `mdb_env_copy2`.
    ///
    /// - Important: The copy runs in a read transaction, so the map cannot grow until it ends.
    public func copy(to directory: String, compact: Bool) throws {
        try MDB.makeDirectory(directory)
        try resizeLock.withShared { try MDB.envCopy(handle, to: directory, compact: compact) }
    }

    /// Writes a consistent copy of the environment's data file into the open file
    /// `descriptor`, from its current offset, and flushes it to disk (`fsync`).
    ///
    /// The caller opens the file, so it decides where the copy goes and with which mode
    /// from the first byte: nothing here follows a path.
    /// The corresponding C function is `mdb_env_copyfd2`.
    ///
    /// - Important: The copy runs in a read transaction, so the map cannot grow until it ends.
    public func copy(toDescriptor descriptor: Int32, compact: Bool) throws {
        try resizeLock.withShared { try MDB.envCopy(handle, toDescriptor: descriptor, compact: compact) }
    }

    // MARK: Map growth

    /// How one transaction attempt ended.
    private enum Attempt<Result> {
        case finished(Result)
        /// The map filled up while it was `mapSize` bytes.
        case mapFull(LMDBError, mapSize: Int)
        /// Another process grew the map; adopt its size and retry.
        case mapResized
    }

    private func attemptWrite<R>(_ body: (inout WriteTransaction) throws -> R) throws -> Attempt<R> {
        try resizeLock.withShared {
            let mapSize = MDB.envInfo(handle).mapSize
            let txnHandle: OpaquePointer
            do {
                txnHandle = try MDB.txnBegin(handle, readOnly: false)
            } catch LMDBError.mapResized {
                return .mapResized
            }
            #if DEBUG
                var txn = WriteTransaction(handle: txnHandle, faults: faults)
            #else
                var txn = WriteTransaction(handle: txnHandle)
            #endif
            let result: R
            do {
                result = try body(&txn)
            } catch {
                if let failure = txn.health.mapFull ?? Self.mapFull(error) {
                    return .mapFull(failure, mapSize: mapSize)
                }
                throw error
            }
            // The closure caught a full map; the transaction cannot commit, but a larger map helps.
            if let failure = txn.health.mapFull { return .mapFull(failure, mapSize: mapSize) }
            do {
                try txn.commit()
            } catch {
                if let failure = Self.mapFull(error) { return .mapFull(failure, mapSize: mapSize) }
                throw fullDiskIfShortWrite(error)
            }
            return .finished(result)
        }
    }

    /// Free space below which an `EIO` at commit is taken for a full disk.
    static let nearlyFullBytes = 16 << 20

    /// LMDB reports a page write the file system cut short, which is what a full disk does
    /// part-way through a commit, as `EIO`. When the file system is (nearly) full, that is
    /// what it was: `ENOSPC`, so callers see storage full rather than a failing device.
    private func fullDiskIfShortWrite(_ error: any Error) -> any Error {
        guard let failure = error as? LMDBError, failure == .ioError,
            let available = MDB.availableBytes(directory), available < Self.nearlyFullBytes
        else { return error }
        return LMDBError(
            code: LMDBError.noSpace.code, operation: failure.operation,
            message: "The disk is full (\(available) bytes free where \(directory) is): a commit could not be "
                + "written whole, and nothing of it was kept. Free disk space and retry.")
    }

    /// Changes the size the map may grow to, from the next growth on: a raised maximum lets
    /// writes that failed with `isStorageFull` succeed without reopening; a lowered one stops
    /// growth (the map never shrinks). Rounded down to the page size, at least the initial size.
    public func setMaxMapSize(_ bytes: Int) {
        let pageSize = MDB.systemPageSize
        maximum.store(max(bytes / pageSize * pageSize, initialMapSize), ordering: .relaxed)
    }

    /// `error` when it is `MDB_MAP_FULL`.
    private static func mapFull(_ error: any Error) -> LMDBError? {
        guard let error = error as? LMDBError, error == .mapFull else { return nil }
        return error
    }

    /// Grows the map after `failure` filled it at `observedSize` bytes, or throws at the maximum.
    private func growMap(after failure: LMDBError, from observedSize: Int) throws {
        try resizeLock.withExclusive {
            let current = MDB.envInfo(handle).mapSize
            // Another writer grew the map since this one failed.
            guard current <= observedSize else { return }
            guard current < maxMapSize else {
                throw LMDBError(
                    code: failure.code, operation: failure.operation,
                    message: "Storage reached its configured maximum of \(maxMapSize) bytes "
                        + "(EnvironmentOptions.maxMapSize); delete data, or raise the maximum "
                        + "(setMaxMapSize) if the disk has room."
                )
            }
            try MDB.envSetMapSize(handle, nextMapSize(after: current))
        }
    }

    /// Grows the map ahead of a write when more than 80% of it is in use.
    private func growIfNearlyFull() throws {
        // A write nested in a read on this thread cannot resize; it grows on MDB_MAP_FULL or fails.
        guard !resizeLock.isHeldSharedByCurrentThread else { return }
        func needsGrowth(_ info: EnvironmentInfo) -> Bool {
            info.usedBytes > info.mapSize / 5 * 4 && info.mapSize < maxMapSize
        }
        guard needsGrowth(info()) else { return }
        try resizeLock.withExclusive {
            let info = MDB.envInfo(handle)
            guard needsGrowth(info) else { return }
            try MDB.envSetMapSize(handle, nextMapSize(after: info.mapSize))
        }
    }

    /// Adopts the map size another process committed (`mdb_env_set_mapsize` with 0).
    private func adoptResizedMap() throws {
        try resizeLock.withExclusive { try MDB.envSetMapSize(handle, 0) }
    }

    /// Double, by at least the initial size, at most `maxMapSize`, a multiple of the page size.
    private func nextMapSize(after current: Int) -> Int {
        let (doubled, overflow) = current.multipliedReportingOverflow(by: 2)
        let wanted = overflow ? maxMapSize : min(max(doubled, current + initialMapSize), maxMapSize)
        let pageSize = MDB.systemPageSize
        return (wanted + pageSize - 1) / pageSize * pageSize
    }
}
