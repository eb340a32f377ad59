import CLMDB

#if canImport(Glibc)
    import Glibc
#endif

/// An error returned by LMDB (or by the system call LMDB made), with the call that failed.
///
/// Codes are LMDB's own (`MDB_MAP_FULL`, ...) or `errno` values that LMDB passes through
/// (`ENOSPC`, `EACCES`, ...). Match one with a pattern:
///
///     do { try env.write { ... } } catch LMDBError.mapFull { ... }
///
/// Two errors are equal when their codes are equal; the operation and message are context.
public struct LMDBError: Error, Equatable, CustomStringConvertible, Sendable {
    /// The LMDB return code or `errno` value.
    public let code: Int32

    /// The C function that failed, such as `mdb_put`; empty for the pattern constants.
    public let operation: String

    /// A message that replaces the table's one when the caller knows more.
    private let customMessage: String?

    /// Creates an error for a return code of `operation`.
    public init(code: Int32, operation: String) {
        self.init(code: code, operation: operation, message: nil)
    }

    init(code: Int32, operation: String, message: String?) {
        self.code = code
        self.operation = operation
        self.customMessage = message
    }

    /// The symbolic name of the code, such as `MDB_MAP_FULL` or `ENOSPC`.
    public var name: String {
        Self.table[code]?.name ?? "error \(code)"
    }

    /// What went wrong and what to do about it.
    public var message: String {
        if let customMessage { return customMessage }
        if let entry = Self.table[code] { return entry.message }
        return "LMDB failed with code \(code) (\(MDB.describe(code))); see lmdb.h or errno(3) for what it means."
    }

    public var description: String {
        operation.isEmpty ? "\(name): \(message)" : "\(operation) failed with \(name): \(message)"
    }

    /// Whether the failure means storage is exhausted: the map reached its maximum size,
    /// the disk is full, or a quota was hit.
    public var isStorageFull: Bool {
        self == .mapFull || self == .noSpace || self == .diskQuotaExceeded
    }

    /// Whether the failure means the data file itself is damaged or not one this LMDB
    /// reads: a page of the wrong type, a missing page, not an LMDB file, another data
    /// version, or a file shorter than its meta pages say (`Environment.init`).
    public var isCorruption: Bool {
        self == .corrupted || self == .pageNotFound || self == .invalid || self == .versionMismatch
    }

    public static func == (lhs: LMDBError, rhs: LMDBError) -> Bool {
        lhs.code == rhs.code
    }

    /// Matches any error with the same code, so that `catch LMDBError.mapFull` works.
    public static func ~= (pattern: LMDBError, value: any Error) -> Bool {
        (value as? LMDBError)?.code == pattern.code
    }
}

// MARK: - Codes

extension LMDBError {
    private init(_ code: Int32) { self.init(code: code, operation: "") }

    /// `MDB_KEYEXIST`: the key/data pair already exists.
    public static let keyExist = LMDBError(MDB_KEYEXIST)
    /// `MDB_NOTFOUND`: no matching key/data pair.
    public static let notFound = LMDBError(MDB_NOTFOUND)
    /// `MDB_PAGE_NOTFOUND`: a requested page was not found.
    public static let pageNotFound = LMDBError(MDB_PAGE_NOTFOUND)
    /// `MDB_CORRUPTED`: a page of the wrong type was found.
    public static let corrupted = LMDBError(MDB_CORRUPTED)
    /// `MDB_PANIC`: the environment had a fatal error.
    public static let panic = LMDBError(MDB_PANIC)
    /// `MDB_VERSION_MISMATCH`: the file was written by an incompatible LMDB.
    public static let versionMismatch = LMDBError(MDB_VERSION_MISMATCH)
    /// `MDB_INVALID`: the file is not an LMDB file.
    public static let invalid = LMDBError(MDB_INVALID)
    /// `MDB_MAP_FULL`: the map size is exhausted.
    public static let mapFull = LMDBError(MDB_MAP_FULL)
    /// `MDB_DBS_FULL`: too many named databases.
    public static let dbsFull = LMDBError(MDB_DBS_FULL)
    /// `MDB_READERS_FULL`: every reader slot is taken.
    public static let readersFull = LMDBError(MDB_READERS_FULL)
    /// `MDB_TLS_FULL`: too many thread-local reader slots.
    public static let tlsFull = LMDBError(MDB_TLS_FULL)
    /// `MDB_TXN_FULL`: the write transaction has too many dirty pages.
    public static let txnFull = LMDBError(MDB_TXN_FULL)
    /// `MDB_CURSOR_FULL`: a cursor stack overflowed.
    public static let cursorFull = LMDBError(MDB_CURSOR_FULL)
    /// `MDB_PAGE_FULL`: a page has no more space.
    public static let pageFull = LMDBError(MDB_PAGE_FULL)
    /// `MDB_MAP_RESIZED`: another process grew the map.
    public static let mapResized = LMDBError(MDB_MAP_RESIZED)
    /// `MDB_INCOMPATIBLE`: the operation does not fit the database's flags.
    public static let incompatible = LMDBError(MDB_INCOMPATIBLE)
    /// `MDB_BAD_RSLOT`: a reader slot was used wrongly.
    public static let badReaderSlot = LMDBError(MDB_BAD_RSLOT)
    /// `MDB_BAD_TXN`: the transaction failed earlier and must be aborted.
    public static let badTransaction = LMDBError(MDB_BAD_TXN)
    /// `MDB_BAD_VALSIZE`: a key or value has an unsupported size.
    public static let badValueSize = LMDBError(MDB_BAD_VALSIZE)
    /// `MDB_BAD_DBI`: the database handle is invalid.
    public static let badDatabase = LMDBError(MDB_BAD_DBI)

    /// `ENOSPC`: no space left on the device.
    public static let noSpace = LMDBError(ENOSPC)
    /// `EDQUOT`: the disk quota is exhausted.
    public static let diskQuotaExceeded = LMDBError(EDQUOT)
    /// `EACCES`: permission denied, or a write in a read-only transaction.
    public static let permissionDenied = LMDBError(EACCES)
    /// `EPERM`: the operation is not permitted.
    public static let notPermitted = LMDBError(EPERM)
    /// `EROFS`: the file system is read-only.
    public static let readOnlyFileSystem = LMDBError(EROFS)
    /// `ENOMEM`: out of memory or address space.
    public static let noMemory = LMDBError(ENOMEM)
    // The name swift-system's Errno uses.
    // swift-format-ignore: DontRepeatTypeInStaticProperties
    /// `EIO`: an I/O error.
    public static let ioError = LMDBError(EIO)
    /// `EINVAL`: an invalid argument.
    public static let invalidArgument = LMDBError(EINVAL)
    /// `ENOENT`: no such file or directory.
    public static let noSuchFileOrDirectory = LMDBError(ENOENT)
    /// `ENOTDIR`: a path component is not a directory.
    public static let notDirectory = LMDBError(ENOTDIR)
    /// `EEXIST`: the file exists.
    public static let fileExists = LMDBError(EEXIST)
    /// `EAGAIN`: the resource is temporarily unavailable (usually a lock held by another process).
    public static let resourceTemporarilyUnavailable = LMDBError(EAGAIN)
    /// `EBUSY`: the resource is busy.
    public static let resourceBusy = LMDBError(EBUSY)
    /// `EDEADLK`: the call would deadlock.
    public static let deadlock = LMDBError(EDEADLK)
    /// `EFBIG`: the file is too large.
    public static let fileTooLarge = LMDBError(EFBIG)

    /// Name and message for every code this module knows; one table so it can be tested whole.
    static let table: [Int32: (name: String, message: String)] = [
        MDB_KEYEXIST: (
            "MDB_KEYEXIST",
            "The key (or key/value pair) already exists; put without .noOverwrite or .noDupData to replace it."
        ),
        MDB_NOTFOUND: ("MDB_NOTFOUND", "No matching key/value pair was found."),
        MDB_PAGE_NOTFOUND: (
            "MDB_PAGE_NOTFOUND",
            "A page the database refers to does not exist, so the data file is damaged; restore it from a backup."
        ),
        MDB_CORRUPTED: (
            "MDB_CORRUPTED",
            "A page of the wrong type was found, so the data file is damaged; restore it from a backup."
        ),
        MDB_PANIC: (
            "MDB_PANIC",
            "The environment hit a fatal error and cannot be used; check the log for the first error and the disk, then reopen it."
        ),
        MDB_VERSION_MISMATCH: (
            "MDB_VERSION_MISMATCH",
            "The data file was written by an incompatible LMDB version; open it with the liblmdb that created it."
        ),
        MDB_INVALID: (
            "MDB_INVALID",
            "The file is not an LMDB data file; check that the data directory path is right."
        ),
        MDB_MAP_FULL: (
            "MDB_MAP_FULL",
            "The environment's map is full; delete data or raise EnvironmentOptions.maxMapSize."
        ),
        MDB_DBS_FULL: (
            "MDB_DBS_FULL",
            "Too many named databases are open; raise EnvironmentOptions.maxDatabases."
        ),
        MDB_READERS_FULL: (
            "MDB_READERS_FULL",
            "Every reader slot is taken; end long-running read transactions or raise EnvironmentOptions.maxReaders."
        ),
        MDB_TLS_FULL: (
            "MDB_TLS_FULL",
            "Too many thread-local reader slots are in use; open the environment with MDB_NOTLS (Environment does)."
        ),
        MDB_TXN_FULL: (
            "MDB_TXN_FULL",
            "The write transaction changed too many pages; split the work into smaller transactions."
        ),
        MDB_CURSOR_FULL: (
            "MDB_CURSOR_FULL",
            "A cursor's page stack overflowed, which means a damaged or absurdly deep tree; verify the data file."
        ),
        MDB_PAGE_FULL: (
            "MDB_PAGE_FULL",
            "An internal page ran out of space, which should not happen; report it with the operation that failed."
        ),
        MDB_MAP_RESIZED: (
            "MDB_MAP_RESIZED",
            "Another process grew the map; retry the transaction (Environment adopts the new size itself)."
        ),
        MDB_INCOMPATIBLE: (
            "MDB_INCOMPATIBLE",
            "The operation does not fit the database's flags (for example a dup operation on a database without .dupSort, or reopening a database with other flags); check the DatabaseFlags."
        ),
        MDB_BAD_RSLOT: (
            "MDB_BAD_RSLOT",
            "A reader slot was misused, usually a read transaction used on another thread or after it ended; keep each transaction on one thread inside its closure."
        ),
        MDB_BAD_TXN: (
            "MDB_BAD_TXN",
            "The transaction cannot be used any more because an earlier operation in it failed; let it abort and run it again."
        ),
        MDB_BAD_VALSIZE: (
            "MDB_BAD_VALSIZE",
            "A key is empty or longer than 511 bytes (the same limit applies to values in .dupSort databases); use a shorter key."
        ),
        MDB_BAD_DBI: (
            "MDB_BAD_DBI",
            "The database handle is not valid in this environment; open the database again with Environment.openDatabase."
        ),
        ENOSPC: (
            "ENOSPC",
            "The disk holding the data directory is full; free disk space or move the data directory to a larger volume."
        ),
        EDQUOT: (
            "EDQUOT",
            "The disk quota of the user running the store is exhausted; raise the quota or free space."
        ),
        EACCES: (
            "EACCES",
            "Permission denied: the process cannot open or write the data files (or a write was attempted in a read transaction); check the owner and mode of the data directory."
        ),
        EPERM: (
            "EPERM",
            "The operation is not permitted on the data files; check the file system's mount options and file attributes."
        ),
        EROFS: (
            "EROFS",
            "The data directory is on a read-only file system; remount it read-write or choose another directory."
        ),
        ENOMEM: (
            "ENOMEM",
            "Out of memory or address space for the map; lower EnvironmentOptions.maxMapSize or free memory."
        ),
        EIO: (
            "EIO",
            "The disk reported an I/O error; check the device (dmesg, SMART) before trusting the data."
        ),
        EINVAL: (
            "EINVAL",
            "An argument was invalid (for example a map size, flag combination, or an unpositioned cursor); check the call."
        ),
        ENOENT: (
            "ENOENT",
            "A file or directory does not exist; check the data directory path."
        ),
        ENOTDIR: (
            "ENOTDIR",
            "A component of the data directory path is not a directory; check the path."
        ),
        EEXIST: (
            "EEXIST",
            "The file already exists; choose an empty directory as the copy destination."
        ),
        EAGAIN: (
            "EAGAIN",
            "The data files are locked by another process; stop the other process or use another data directory."
        ),
        EBUSY: (
            "EBUSY",
            "The data files are busy; stop the other process using them and try again."
        ),
        EDEADLK: (
            "EDEADLK",
            "The call would deadlock; do not open a transaction while this thread already has one open."
        ),
        EFBIG: (
            "EFBIG",
            "The data file would exceed the file system's file size limit; lower maxMapSize or use another file system."
        ),
    ]
}
