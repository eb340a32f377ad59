import CLMDB

/// A handle to a named database (a B+tree) inside an `Environment`.
///
/// Handles stay valid until the environment closes and may be used from any thread.
public struct Database: Sendable, Hashable {
    /// LMDB's `MDB_dbi`.
    public let rawValue: UInt32
}

/// How a database is opened. The corresponding C function is `mdb_dbi_open`.
public struct DatabaseFlags: OptionSet, Sendable {
    public let rawValue: UInt32

    public init(rawValue: UInt32) {
        self.rawValue = rawValue
    }

    /// Create the database if it does not exist (`MDB_CREATE`).
    public static let create = DatabaseFlags(rawValue: UInt32(MDB_CREATE))
    /// Allow several sorted values per key (`MDB_DUPSORT`); values are then limited to 511 bytes.
    public static let dupSort = DatabaseFlags(rawValue: UInt32(MDB_DUPSORT))
    /// With `.dupSort`: every value of the database has the same size (`MDB_DUPFIXED`).
    public static let dupFixed = DatabaseFlags(rawValue: UInt32(MDB_DUPFIXED))
    /// Keys are native `UInt32` or `Int` (`size_t`) integers (`MDB_INTEGERKEY`).
    public static let integerKey = DatabaseFlags(rawValue: UInt32(MDB_INTEGERKEY))
    /// Keys compare from their last byte to their first (`MDB_REVERSEKEY`).
    public static let reverseKey = DatabaseFlags(rawValue: UInt32(MDB_REVERSEKEY))
}

/// How a value is stored. The corresponding C function is `mdb_put`.
public struct PutFlags: OptionSet, Sendable {
    public let rawValue: UInt32

    public init(rawValue: UInt32) {
        self.rawValue = rawValue
    }

    /// Fail with `LMDBError.keyExist` if the key exists (`MDB_NOOVERWRITE`).
    public static let noOverwrite = PutFlags(rawValue: UInt32(MDB_NOOVERWRITE))
    /// In a `.dupSort` database, fail with `LMDBError.keyExist` if the pair exists (`MDB_NODUPDATA`).
    public static let noDupData = PutFlags(rawValue: UInt32(MDB_NODUPDATA))
    /// The key sorts after every existing key: a fast bulk load (`MDB_APPEND`).
    public static let append = PutFlags(rawValue: UInt32(MDB_APPEND))
    /// The value sorts after every existing value of its key (`MDB_APPENDDUP`).
    public static let appendDup = PutFlags(rawValue: UInt32(MDB_APPENDDUP))
}

/// The shape of one database's B+tree. The corresponding C function is `mdb_stat`.
public struct DatabaseStat: Sendable, Hashable {
    /// The number of key/value pairs (every duplicate counts).
    public var entries: Int
    /// The height of the tree.
    public var depth: Int
    public var branchPages: Int
    public var leafPages: Int
    public var overflowPages: Int
    /// The size of one page in bytes.
    public var pageSize: Int
}
