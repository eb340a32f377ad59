import CLMDB

#if canImport(Glibc)
    import Glibc
#endif

/// What the meta pages of an LMDB data file say, read with plain file reads before the file
/// is mapped.
///
/// LMDB maps the whole file and trusts its meta pages: a file cut short (a failed copy, a
/// full disk on a file system without preallocation, a restore that stopped) maps without
/// complaint and faults with SIGBUS at the first read past its end. Checking the file's
/// length against the newer meta page first turns that into an error that names the file.
///
/// The layout is LMDB's (`mdb.c`, 64-bit builds), both metas at the start of the file:
///
/// ```
/// page 0 at offset 0, page 1 at offset mm_psize; each:
///   offset  0  page header (16): mp_pgno (8), mp_pad (2), mp_flags (2; P_META 0x08), mp_pages (4)
///   offset 16  mm_magic (4)   0xBEEFC0DE
///   offset 20  mm_version (4) 1 (MDB_DATA_VERSION)
///   offset 24  mm_address (8), mm_mapsize (8)
///   offset 40  mm_dbs[2] (48 each); mm_dbs[0].md_pad (4, offset 40) is mm_psize, the page size
///   offset 136 mm_last_pg (8)  the last page the meta's transaction used
///   offset 144 mm_txnid (8)    the newer of the two metas is the one LMDB opens
/// ```
/// Values are in the byte order of the machine that wrote the file, as LMDB keeps them.
struct MetaPage: Equatable {
    /// The page size the file was written with (`mm_psize`).
    var pageSize: Int
    /// The last page this meta's transaction used (`mm_last_pg`): the file holds at least
    /// `lastPage + 1` pages.
    var lastPage: UInt64
    /// The transaction that wrote this meta (`mm_txnid`).
    var transactionID: UInt64

    static let magic: UInt32 = 0xBEEF_C0DE
    static let dataVersion: UInt32 = 1
    /// `P_META` in the page header's flags.
    static let metaFlag: UInt16 = 0x08
    /// The bytes of a meta page LMDB reads: the page header and `MDB_meta`.
    static let headerBytes = 152
    /// LMDB's page sizes run from 256 bytes (`MIN_PAGESIZE`) to 64 KiB (`MAX_PAGESIZE`).
    static let pageSizes = 256...65536

    /// The meta in `bytes`, a page's first `headerBytes`, or why the page is not a meta
    /// page LMDB can open.
    static func parse(_ bytes: [UInt8]) -> Result<MetaPage, MetaPageProblem> {
        guard bytes.count >= headerBytes else { return .failure(.short) }
        func load<T: FixedWidthInteger>(_ offset: Int, as type: T.Type) -> T {
            bytes.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: offset, as: T.self) }
        }
        guard load(10, as: UInt16.self) & metaFlag != 0 else { return .failure(.notMeta) }
        guard load(16, as: UInt32.self) == magic else { return .failure(.badMagic) }
        let version = load(20, as: UInt32.self)
        guard version == dataVersion else { return .failure(.version(version)) }
        return .success(
            MetaPage(
                pageSize: Int(load(40, as: UInt32.self)), lastPage: load(136, as: UInt64.self),
                transactionID: load(144, as: UInt64.self)))
    }
}

/// Why a page is not a meta page LMDB can open.
enum MetaPageProblem: Error, Equatable {
    case short, notMeta, badMagic
    case version(UInt32)
}

extension MDB {
    /// Checks the data file at `path` against its meta pages before LMDB maps it: both are
    /// LMDB meta pages of this data version, the page size is one LMDB writes, and the file
    /// holds every page the newer meta says its transaction used. A missing or empty file is
    /// a new environment (LMDB writes its metas at open), so it passes.
    ///
    /// Only reads the file. Throws `MDB_INVALID` for a file that is not LMDB's,
    /// `MDB_VERSION_MISMATCH` for another data version, and `MDB_CORRUPTED` for a file
    /// shorter than its metas say, each with a message naming the file.
    static func checkDataFile(_ path: String) throws(LMDBError) {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        if descriptor < 0 {
            let code = errno
            if code == ENOENT { return }
            throw LMDBError(
                code: code, operation: "open",
                message: "Cannot read \(path): \(LMDBError(code: code, operation: "open").message)")
        }
        defer { close(descriptor) }
        var info = Glibc.stat()
        guard fstat(descriptor, &info) == 0 else {
            let code = errno
            throw LMDBError(
                code: code, operation: "fstat",
                message: "Cannot read \(path): \(LMDBError(code: code, operation: "fstat").message)")
        }
        let size = Int(info.st_size)
        if size == 0 { return }
        let advice = "Restore the store from a backup; nothing in it was changed."

        func meta(at offset: Int, _ which: String) throws(LMDBError) -> MetaPage {
            let bytes = try readBytes(descriptor, count: MetaPage.headerBytes, at: offset, path: path)
            switch MetaPage.parse(bytes) {
            case .success(let meta): return meta
            case .failure(.short):
                throw LMDBError(
                    code: MDB_CORRUPTED, operation: "mdb_env_open",
                    message: "\(path) is truncated: it is \(size) bytes, too short to hold LMDB's \(which) meta "
                        + "page. \(advice)")
            case .failure(.version(let version)):
                throw LMDBError(
                    code: MDB_VERSION_MISMATCH, operation: "mdb_env_open",
                    message: "\(path) was written by an LMDB of data version \(version); this one reads "
                        + "version \(MetaPage.dataVersion). Open it with the evstore that wrote it.")
            case .failure:
                throw LMDBError(
                    code: MDB_INVALID, operation: "mdb_env_open",
                    message: "\(path) is not an LMDB data file: its \(which) page is not an LMDB meta page. "
                        + advice)
            }
        }

        let first = try meta(at: 0, "first")
        let pageSize = first.pageSize
        guard MetaPage.pageSizes.contains(pageSize), pageSize.nonzeroBitCount == 1 else {
            throw LMDBError(
                code: MDB_INVALID, operation: "mdb_env_open",
                message: "\(path) is not a usable LMDB data file: its meta page gives a page size of "
                    + "\(pageSize) bytes. \(advice)")
        }
        guard size >= 2 * pageSize else {
            throw LMDBError(
                code: MDB_CORRUPTED, operation: "mdb_env_open",
                message: "\(path) is truncated: it is \(size) bytes, shorter than LMDB's two meta pages of "
                    + "\(pageSize) bytes. \(advice)")
        }
        let second = try meta(at: pageSize, "second")
        let newer = second.transactionID > first.transactionID ? second : first
        let (pages, pagesOverflow) = newer.lastPage.addingReportingOverflow(1)
        let (needed, bytesOverflow) = pages.multipliedReportingOverflow(by: UInt64(pageSize))
        guard !pagesOverflow, !bytesOverflow, needed <= UInt64(Int.max) else {
            throw LMDBError(
                code: MDB_CORRUPTED, operation: "mdb_env_open",
                message: "\(path) does not add up: its meta page (transaction \(newer.transactionID)) says it "
                    + "uses page \(newer.lastPage), beyond any file. \(advice)")
        }
        guard UInt64(size) >= needed else {
            throw LMDBError(
                code: MDB_CORRUPTED, operation: "mdb_env_open",
                message: "\(path) is truncated: it is \(size) bytes, but its meta page (transaction "
                    + "\(newer.transactionID)) says it uses \(pages) pages of \(pageSize) bytes (\(needed) "
                    + "bytes). \(advice)")
        }
    }

    /// Up to `count` bytes of the file at `offset` (fewer at its end).
    private static func readBytes(_ descriptor: Int32, count: Int, at offset: Int, path: String) throws(LMDBError)
        -> [UInt8]
    {
        var bytes = [UInt8](repeating: 0, count: count)
        var filled = 0
        while filled < count {
            let got = bytes.withUnsafeMutableBytes { buffer in
                pread(descriptor, buffer.baseAddress! + filled, count - filled, off_t(offset + filled))
            }
            if got < 0 {
                let code = errno
                if code == EINTR { continue }
                throw LMDBError(
                    code: code, operation: "pread",
                    message: "Cannot read \(path): \(LMDBError(code: code, operation: "pread").message)")
            }
            if got == 0 { break }
            filled += got
        }
        return Array(bytes.prefix(filled))
    }
}
