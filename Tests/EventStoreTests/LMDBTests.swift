import Dispatch
import EventStore
import Foundation
import Synchronization
import Testing

// MARK: - Fixture

/// Runs `body` with an environment in a fresh temporary directory, removed afterwards.
private func withEnvironment<R>(
    _ options: EnvironmentOptions = EnvironmentOptions(),
    _ body: (Environment, String) throws -> R
) throws -> R {
    let directory = FileManager.default.temporaryDirectory
        .appendingPathComponent("evstore-lmdb-\(UUID().uuidString)").path
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let environment = try Environment(directory: directory, options: options)
    return try body(environment, directory)
}

private func bytes(_ string: String) -> [UInt8] { Array(string.utf8) }

/// A big-endian key, so that byte order is numeric order.
private func key(_ number: Int) -> [UInt8] { withUnsafeBytes(of: UInt32(number).bigEndian, Array.init) }

/// A value derived from `number`, so a reader can check it without shared state.
private func value(_ number: Int, size: Int) -> [UInt8] {
    // Filled in bulk: a byte-by-byte map is slow in debug and sanitizer builds.
    var bytes = [UInt8](repeating: UInt8(truncatingIfNeeded: number &* 31), count: size)
    withUnsafeBytes(of: UInt64(number).bigEndian) { raw in
        for (index, byte) in raw.enumerated() where index < size { bytes[index] = byte }
    }
    return bytes
}

private func number(_ bytes: [UInt8]?) -> Int {
    Int(bytes?.reduce(UInt32(0)) { $0 << 8 | UInt32($1) } ?? 0)
}

private struct Abort: Error {}

private let mebibyte = 1 << 20

// MARK: - Errors

@Suite("LMDBError")
struct LMDBErrorTests {
    static let lmdbCodes: [(LMDBError, String)] = [
        (.keyExist, "MDB_KEYEXIST"), (.notFound, "MDB_NOTFOUND"), (.pageNotFound, "MDB_PAGE_NOTFOUND"),
        (.corrupted, "MDB_CORRUPTED"), (.panic, "MDB_PANIC"), (.versionMismatch, "MDB_VERSION_MISMATCH"),
        (.invalid, "MDB_INVALID"), (.mapFull, "MDB_MAP_FULL"), (.dbsFull, "MDB_DBS_FULL"),
        (.readersFull, "MDB_READERS_FULL"), (.tlsFull, "MDB_TLS_FULL"), (.txnFull, "MDB_TXN_FULL"),
        (.cursorFull, "MDB_CURSOR_FULL"), (.pageFull, "MDB_PAGE_FULL"), (.mapResized, "MDB_MAP_RESIZED"),
        (.incompatible, "MDB_INCOMPATIBLE"), (.badReaderSlot, "MDB_BAD_RSLOT"), (.badTransaction, "MDB_BAD_TXN"),
        (.badValueSize, "MDB_BAD_VALSIZE"), (.badDatabase, "MDB_BAD_DBI"),
    ]

    static let errnoCodes: [(LMDBError, String)] = [
        (.noSpace, "ENOSPC"), (.diskQuotaExceeded, "EDQUOT"), (.permissionDenied, "EACCES"),
        (.notPermitted, "EPERM"), (.readOnlyFileSystem, "EROFS"), (.noMemory, "ENOMEM"), (.ioError, "EIO"),
        (.invalidArgument, "EINVAL"), (.noSuchFileOrDirectory, "ENOENT"), (.notDirectory, "ENOTDIR"),
        (.fileExists, "EEXIST"), (.resourceTemporarilyUnavailable, "EAGAIN"), (.resourceBusy, "EBUSY"),
        (.deadlock, "EDEADLK"), (.fileTooLarge, "EFBIG"),
    ]

    @Test("every code has its name and an actionable message", arguments: lmdbCodes + errnoCodes)
    func table(error: LMDBError, name: String) {
        #expect(error.name == name)
        #expect(error.message.count > 20)
        #expect(error.message.hasSuffix("."))
        #expect(!error.message.contains("error \(error.code)"))
    }

    @Test("LMDB's codes are the contiguous range MDB_KEYEXIST...MDB_BAD_DBI")
    func lmdbCodesMatchTheHeader() {
        #expect(Self.lmdbCodes.map(\.0.code) == Array(-30799...(-30780)))
    }

    @Test("errno constants carry the system's numbers")
    func errnoCodesMatchGlibc() {
        #expect(LMDBError.noSpace.code == ENOSPC)
        #expect(LMDBError.permissionDenied.code == EACCES)
        #expect(LMDBError.resourceTemporarilyUnavailable.code == EAGAIN)
        #expect(LMDBError.diskQuotaExceeded.code == EDQUOT)
    }

    @Test("catch LMDBError.mapFull matches by code")
    func patternMatch() {
        func failingPut() throws { throw LMDBError(code: LMDBError.mapFull.code, operation: "mdb_put") }
        var matched = false
        do {
            try failingPut()
        } catch LMDBError.notFound {
            Issue.record("matched the wrong code")
        } catch LMDBError.mapFull {
            matched = true
        } catch {
            Issue.record("unexpected \(error)")
        }
        #expect(matched)
        #expect(!(LMDBError.mapFull ~= Abort()))
    }

    @Test("equality compares codes only; the description names the call")
    func equalityAndDescription() {
        let error = LMDBError(code: LMDBError.mapFull.code, operation: "mdb_txn_commit")
        #expect(error == .mapFull)
        #expect(error != .noSpace)
        #expect(error.description.contains("mdb_txn_commit"))
        #expect(error.description.contains("MDB_MAP_FULL"))
    }

    @Test("unknown codes get a generic name with the number", arguments: [Int32(-30_000), 12_345, ENOTSOCK])
    func unknownCode(code: Int32) {
        let error = LMDBError(code: code, operation: "mdb_put")
        #expect(error.name == "error \(code)")
        #expect(error.message.contains("\(code)"))
        #expect(error.description.contains("mdb_put"))
    }

    @Test("storage full means the map, the disk, or a quota")
    func storageFull() {
        #expect(LMDBError.mapFull.isStorageFull)
        #expect(LMDBError.noSpace.isStorageFull)
        #expect(LMDBError.diskQuotaExceeded.isStorageFull)
        #expect(!LMDBError.notFound.isStorageFull)
        #expect(!LMDBError.ioError.isStorageFull)
    }
}

// MARK: - Environment

@Suite("LMDB environment")
struct LMDBEnvironmentTests {
    @Test("opening creates the directory with mode 0700; bad options are refused")
    func openCreatesDirectory() throws {
        try withEnvironment { _, directory in
            let attributes = try FileManager.default.attributesOfItem(atPath: directory)
            #expect((attributes[.posixPermissions] as? Int) == 0o700)
            #expect(FileManager.default.fileExists(atPath: directory + "/data.mdb"))
        }
        let options = EnvironmentOptions(initialMapSize: 8 * mebibyte, maxMapSize: 4 * mebibyte)
        #expect(throws: LMDBError.invalidArgument) {
            try withEnvironment(options) { _, _ in }
        }
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("evstore-file-\(UUID())").path
        #expect(FileManager.default.createFile(atPath: file, contents: Data()))
        defer { try? FileManager.default.removeItem(atPath: file) }
        #expect(throws: LMDBError.self) { _ = try Environment(directory: file + "/sub", options: .init()) }
    }

    @Test("put, get, delete, and drop")
    func putGetDeleteDrop() throws {
        try withEnvironment { env, _ in
            let db = try env.openDatabase("main", flags: .create)
            try env.write { txn throws in
                try txn.put(db, bytes("a"), bytes("1"))
                try txn.put(db, bytes("b"), bytes("2"))
                #expect(try txn.get(db, bytes("a")) == bytes("1"))
            }
            try env.read { txn throws in
                #expect(try txn.get(db, bytes("a")) == bytes("1"))
                #expect(try txn.get(db, bytes("b")) == bytes("2"))
                #expect(try txn.get(db, bytes("zz")) == nil)
                #expect(try txn.stat(db).entries == 2)
            }
            try env.write { txn throws in
                var keyExisted = false
                do {
                    try txn.put(db, bytes("a"), bytes("x"), flags: .noOverwrite)
                } catch LMDBError.keyExist {
                    keyExisted = true
                }
                #expect(keyExisted)
                // MDB_KEYEXIST leaves the transaction usable.
                try txn.put(db, bytes("a"), bytes("3"))
                #expect(try txn.delete(db, bytes("b")))
                #expect(try !txn.delete(db, bytes("missing")))
            }
            try env.read { txn throws in
                #expect(try txn.get(db, bytes("a")) == bytes("3"))
                #expect(try txn.get(db, bytes("b")) == nil)
            }
            try env.write { txn throws in try txn.drop(db) }
            try env.read { txn throws in #expect(try txn.stat(db).entries == 0) }
            try env.write { txn throws in try txn.put(db, bytes("again"), bytes("ok")) }
            try env.read { txn throws in #expect(try txn.get(db, bytes("again")) == bytes("ok")) }
        }
    }

    @Test("bad keys and database flags surface as errors")
    func argumentErrors() throws {
        try withEnvironment { env, _ in
            let db = try env.openDatabase("main", flags: .create)
            #expect(throws: LMDBError.badValueSize) {
                try env.write { txn throws in try txn.put(db, [], bytes("v")) }
            }
            #expect(throws: LMDBError.badValueSize) {
                try env.write { txn throws in try txn.put(db, [UInt8](repeating: 1, count: 600), bytes("v")) }
            }
            try env.write { txn throws in try txn.put(db, bytes("k"), bytes("v")) }
            #expect(throws: LMDBError.incompatible) {
                try env.read { txn throws in
                    try txn.withCursor(db) { cursor throws in
                        _ = try cursor.seekExact(bytes("k"))
                        return try cursor.count()
                    }
                }
            }
            #expect(throws: LMDBError.invalidArgument) {
                try env.read { txn throws in try txn.withCursor(db) { cursor throws in try cursor.current() } }
            }
            #expect(throws: LMDBError.notFound) {
                _ = try env.openDatabase("never-created", flags: [])
            }
        }
    }

    @Test("a throwing body aborts: nothing is written")
    func abortOnThrow() throws {
        try withEnvironment { env, _ in
            let db = try env.openDatabase("main", flags: .create)
            #expect(throws: Abort.self) {
                try env.write { txn throws in
                    try txn.put(db, bytes("k"), bytes("v"))
                    throw Abort()
                }
            }
            try env.read { txn throws in
                #expect(try txn.get(db, bytes("k")) == nil)
                #expect(try txn.stat(db).entries == 0)
            }
        }
    }

    @Test("a read transaction sees only what was committed before it began")
    func snapshotIsolation() throws {
        try withEnvironment { env, _ in
            let db = try env.openDatabase("main", flags: .create)
            try env.write { txn throws in try txn.put(db, bytes("k"), bytes("old")) }
            try env.read { snapshot throws in
                try env.write { txn throws in
                    try txn.put(db, bytes("k"), bytes("new"))
                    try txn.put(db, bytes("k2"), bytes("added"))
                    // Uncommitted changes are invisible to other transactions.
                    try env.read { other throws in #expect(try other.get(db, bytes("k")) == bytes("old")) }
                }
                #expect(try snapshot.get(db, bytes("k")) == bytes("old"))
                #expect(try snapshot.get(db, bytes("k2")) == nil)
            }
            try env.read { txn throws in
                #expect(try txn.get(db, bytes("k")) == bytes("new"))
                #expect(try txn.get(db, bytes("k2")) == bytes("added"))
            }
        }
    }

    @Test("info, sync, and a live compacting copy")
    func infoSyncCopy() throws {
        try withEnvironment(EnvironmentOptions(durable: false)) { env, directory in
            let db = try env.openDatabase("main", flags: .create)
            try env.write { txn throws in
                for index in 0..<100 { try txn.put(db, key(index), value(index, size: 100)) }
            }
            try env.sync(force: true)
            let info = env.info()
            #expect(info.mapSize == 64 * mebibyte)
            #expect(info.pageSize > 0)
            #expect(info.usedBytes == (info.lastPageNumber + 1) * info.pageSize)
            #expect(env.maxMapSize == 64 << 30)

            let backup = directory + "-backup"
            defer { try? FileManager.default.removeItem(atPath: backup) }
            try env.read { _ in try env.copy(to: backup, compact: true) }
            #expect(throws: LMDBError.fileExists) { try env.copy(to: backup, compact: false) }
            let copy = try Environment(directory: backup, options: .init())
            let copied = try copy.openDatabase("main", flags: [])
            try copy.read { txn throws in
                #expect(try txn.stat(copied).entries == 100)
                #expect(try txn.get(copied, key(42)) == value(42, size: 100))
            }
        }
    }
}

// MARK: - Cursors

@Suite("LMDB cursors")
struct LMDBCursorTests {
    @Test("navigation over plain keys")
    func navigation() throws {
        try withEnvironment { env, _ in
            let db = try env.openDatabase("main", flags: .create)
            try env.read { txn throws in
                try txn.withCursor(db) { cursor throws in
                    #expect(try cursor.first() == nil)
                    #expect(try cursor.last() == nil)
                }
            }
            try env.write { txn throws in
                for name in ["c", "a", "e", "b"] { try txn.put(db, bytes(name), bytes(name.uppercased())) }
            }
            try env.read { txn throws in
                try txn.withCursor(db) { cursor throws in
                    var keys: [String] = []
                    var entry = try cursor.first()
                    while let (key, value) = entry {
                        #expect(value == bytes(String(decoding: key, as: UTF8.self).uppercased()))
                        keys.append(String(decoding: key, as: UTF8.self))
                        entry = try cursor.next()
                    }
                    #expect(keys == ["a", "b", "c", "e"])

                    #expect(try cursor.last()?.key == bytes("e"))
                    #expect(try cursor.prev()?.key == bytes("c"))
                    #expect(try cursor.current()?.value == bytes("C"))
                    #expect(try cursor.seek(bytes("d"))?.key == bytes("e"))
                    #expect(try cursor.seek(bytes("b"))?.key == bytes("b"))
                    #expect(try cursor.seek(bytes("f")) == nil)
                    #expect(try cursor.seekExact(bytes("d")) == nil)
                    #expect(try cursor.seekExact(bytes("c"))?.value == bytes("C"))
                    #expect(try cursor.first()?.key == bytes("a"))
                    #expect(try cursor.prev() == nil)

                    // The key-only moves land where `seek` and `prev` do; `current` takes the value.
                    #expect(try cursor.seekKey(bytes("d")) == bytes("e"))
                    #expect(try cursor.current()?.value == bytes("E"))
                    #expect(try cursor.prevKey() == bytes("c"))
                    #expect(try cursor.current()?.value == bytes("C"))
                    #expect(try cursor.seekKey(bytes("b")) == bytes("b"))
                    #expect(try cursor.prevKey() == bytes("a"))
                    #expect(try cursor.prevKey() == nil)
                    #expect(try cursor.seekKey(bytes("f")) == nil)
                    #expect(try cursor.lastKey() == bytes("e"))
                    #expect(try cursor.current()?.value == bytes("E"))

                    // A value compared where it lies: equal bytes only, not a prefix or a longer one.
                    _ = try cursor.seekKey(bytes("c"))
                    #expect(try cursor.currentValueEquals(bytes("C")))
                    #expect(try !cursor.currentValueEquals(bytes("D")))
                    #expect(try !cursor.currentValueEquals(bytes("CC")))
                    #expect(try !cursor.currentValueEquals([]))
                }
            }
        }
    }

    @Test("dupsort: duplicate-aware moves, counts, and pair deletes")
    func dupSort() throws {
        try withEnvironment { env, _ in
            let db = try env.openDatabase("dups", flags: [.create, .dupSort])
            try env.write { txn throws in
                for (k, v) in [("k1", "v5"), ("k1", "v1"), ("k1", "v3"), ("k2", "v2"), ("k3", "v8"), ("k3", "v7")] {
                    try txn.put(db, bytes(k), bytes(v))
                }
                var duplicate = false
                do { try txn.put(db, bytes("k1"), bytes("v3"), flags: .noDupData) } catch LMDBError.keyExist {
                    duplicate = true
                }
                #expect(duplicate)
            }
            try env.read { txn throws in
                #expect(try txn.get(db, bytes("k1")) == bytes("v1"))
                #expect(try txn.stat(db).entries == 6)
                try txn.withCursor(db) { cursor throws in
                    #expect(try cursor.seekExact(bytes("k1"))?.value == bytes("v1"))
                    #expect(try cursor.count() == 3)
                    #expect(try cursor.nextDup()?.value == bytes("v3"))
                    #expect(try cursor.nextDup()?.value == bytes("v5"))
                    #expect(try cursor.nextDup() == nil)
                    #expect(try cursor.firstDup()?.value == bytes("v1"))
                    let last = try cursor.lastDup()
                    #expect(last?.key == bytes("k1"))
                    #expect(last?.value == bytes("v5"))
                    #expect(try cursor.prevDup()?.value == bytes("v3"))
                    #expect(try cursor.nextNoDup().map { $0.key + $0.value } == bytes("k2v2"))
                    #expect(try cursor.count() == 1)
                    #expect(try cursor.nextNoDup().map { $0.key + $0.value } == bytes("k3v7"))
                    #expect(try cursor.nextNoDup() == nil)
                    #expect(try cursor.seekExact(bytes("k3")) != nil)
                    #expect(try cursor.prevNoDup().map { $0.key + $0.value } == bytes("k2v2"))
                    #expect(try cursor.prevNoDup().map { $0.key + $0.value } == bytes("k1v5"))
                    #expect(try cursor.seekBoth(bytes("k1"), bytes("v4")).map { $0.key + $0.value } == bytes("k1v5"))
                    #expect(try cursor.seekBoth(bytes("k1"), bytes("v3"))?.value == bytes("v3"))
                    #expect(try cursor.seekBoth(bytes("k1"), bytes("v6")) == nil)
                    #expect(try cursor.seekBoth(bytes("k9"), bytes("v1")) == nil)
                }
            }
            try env.write { txn throws in
                #expect(try txn.delete(db, bytes("k1"), value: bytes("v3")))
                #expect(try !txn.delete(db, bytes("k1"), value: bytes("v3")))
                #expect(try txn.delete(db, bytes("k3")))
            }
            try env.read { txn throws in
                #expect(try txn.stat(db).entries == 3)
                try txn.withCursor(db) { cursor throws in
                    _ = try cursor.seekExact(bytes("k1"))
                    #expect(try cursor.count() == 2)
                    #expect(try cursor.seekExact(bytes("k3")) == nil)
                }
            }
        }
    }

    @Test("dupFixed: fixed-size values under one key")
    func dupFixed() throws {
        try withEnvironment { env, _ in
            let db = try env.openDatabase("fixed", flags: [.create, .dupSort, .dupFixed])
            let owner = bytes("stream-1")
            try env.write { txn throws in
                for index in 0..<500 { try txn.put(db, owner, key(index), flags: .appendDup) }
                try txn.put(db, bytes("stream-2"), key(7))
            }
            try env.read { txn throws in
                #expect(try txn.stat(db).entries == 501)
                try txn.withCursor(db) { cursor throws in
                    #expect(try cursor.seekExact(owner)?.value == key(0))
                    #expect(try cursor.count() == 500)
                    #expect(try cursor.lastDup()?.value == key(499))
                    #expect(try cursor.seekBoth(owner, key(250))?.value == key(250))
                    #expect(try cursor.nextDup()?.value == key(251))
                    #expect(try cursor.nextNoDup().map { $0.key + $0.value } == bytes("stream-2") + key(7))
                }
            }
        }
    }

    @Test("a write cursor puts and deletes; a read cursor cannot")
    func cursorWrites() throws {
        try withEnvironment { env, _ in
            let db = try env.openDatabase("dups", flags: [.create, .dupSort])
            try env.write { txn throws in
                try txn.withCursor(db) { cursor throws in
                    try cursor.put(bytes("k"), bytes("a"))
                    try cursor.put(bytes("k"), bytes("b"))
                    try cursor.put(bytes("k"), bytes("c"))
                    try cursor.put(bytes("other"), bytes("x"))
                    #expect(try cursor.current()?.key == bytes("other"))
                    #expect(try cursor.seekExact(bytes("k"))?.value == bytes("a"))
                    try cursor.deleteCurrent()
                    #expect(try cursor.current()?.value == bytes("b"))
                    #expect(try cursor.count() == 2)
                    _ = try cursor.seekExact(bytes("other"))
                    try cursor.deleteCurrent(allDuplicates: true)
                }
            }
            try env.read { txn throws in
                #expect(try txn.stat(db).entries == 2)
                #expect(try txn.get(db, bytes("other")) == nil)
                #expect(throws: LMDBError.permissionDenied) {
                    try txn.withCursor(db) { cursor throws in try cursor.put(bytes("k"), bytes("z")) }
                }
            }
        }
    }
}

// MARK: - Map growth

@Suite("LMDB map growth")
struct LMDBMapGrowthTests {
    @Test("one transaction far larger than the initial map")
    func growWithinOneTransaction() throws {
        try withEnvironment(EnvironmentOptions(initialMapSize: 1 * mebibyte)) { env, _ in
            #expect(env.info().mapSize == 1 * mebibyte)
            let db = try env.openDatabase("main", flags: .create)
            var runs = 0
            try env.write { txn throws in
                runs += 1
                for index in 0..<8_192 { try txn.put(db, key(index), value(index, size: 1_000)) }
            }
            #expect(runs > 1)
            let info = env.info()
            #expect(info.mapSize > 8 * mebibyte)
            #expect(info.mapSize % info.pageSize == 0)
            try env.read { txn throws in
                #expect(try txn.stat(db).entries == 8_192)
                for index in 0..<8_192 { #expect(try txn.get(db, key(index)) == value(index, size: 1_000)) }
            }
        }
    }

    @Test("many transactions grow the map ahead of need")
    func growAcrossTransactions() throws {
        try withEnvironment(EnvironmentOptions(initialMapSize: 1 * mebibyte)) { env, _ in
            let db = try env.openDatabase("main", flags: .create)
            var runs = 0
            for batch in 0..<40 {
                try env.write { txn throws in
                    runs += 1
                    for index in batch * 200..<(batch + 1) * 200 {
                        try txn.put(db, key(index), value(index, size: 1_000))
                    }
                }
            }
            // Proactive growth at 80% keeps most batches from hitting MDB_MAP_FULL.
            #expect(runs < 50)
            #expect(env.info().mapSize >= 8 * mebibyte)
            try env.read { txn throws in
                for index in 0..<8_000 { #expect(try txn.get(db, key(index)) == value(index, size: 1_000)) }
            }
        }
    }

    @Test("the maximum map size is a hard limit that leaves earlier data intact")
    func maximumMapSize() throws {
        let options = EnvironmentOptions(initialMapSize: 1 * mebibyte, maxMapSize: 4 * mebibyte)
        try withEnvironment(options) { env, _ in
            let db = try env.openDatabase("main", flags: .create)
            var committed = 0
            var failure: LMDBError?
            while failure == nil && committed < 100_000 {
                do {
                    try env.write { txn throws in
                        for index in committed..<committed + 64 {
                            try txn.put(db, key(index), value(index, size: 1_000))
                        }
                    }
                    committed += 64
                } catch let error as LMDBError {
                    failure = error
                }
            }
            let error = try #require(failure)
            #expect(error.isStorageFull)
            #expect(error == .mapFull)
            #expect(error.message.contains("\(4 * mebibyte) bytes"))
            #expect(committed > 1_000)
            #expect(env.info().mapSize == 4 * mebibyte)

            try env.read { txn throws in
                #expect(try txn.stat(db).entries == committed)
                for index in 0..<committed { #expect(try txn.get(db, key(index)) == value(index, size: 1_000)) }
                #expect(try txn.get(db, key(committed)) == nil)
            }
            // Deleting still works at the limit, and frees room for new writes.
            for start in stride(from: 0, to: committed / 2, by: 16) {
                try env.write { txn throws in
                    for index in start..<min(start + 16, committed / 2) { #expect(try txn.delete(db, key(index))) }
                }
            }
            try env.write { txn throws in try txn.put(db, key(committed), value(committed, size: 1_000)) }
            try env.read { txn throws in
                #expect(try txn.stat(db).entries == committed - committed / 2 + 1)
                #expect(try txn.get(db, key(committed - 1)) == value(committed - 1, size: 1_000))
            }
        }
    }

    /// What the reader threads share with the test.
    final class ReaderState: Sendable {
        /// Set once the writer is finished.
        let done = Atomic<Bool>(false)
        let reads = Atomic<Int>(0)
        /// Inconsistencies the readers saw.
        let problems = Mutex<[String]>([])
    }

    @Test("readers on several threads while a writer grows the map")
    func concurrentReaders() throws {
        try withEnvironment(EnvironmentOptions(initialMapSize: 1 * mebibyte)) { env, _ in
            let db = try env.openDatabase("main", flags: .create)
            let count = bytes("count")
            let state = ReaderState()

            @Sendable func readUntilDone() {
                var pass = 0
                while !state.done.load(ordering: .acquiring) {
                    pass += 1
                    do {
                        try env.read { txn throws in
                            let written = number(try txn.get(db, count))
                            // Every snapshot holds exactly the keys its counter promises.
                            let step = pass % 8 == 0 ? 1 : max(1, written / 64)
                            for index in stride(from: 0, to: written, by: step) {
                                guard try txn.get(db, key(index)) == value(index, size: 500) else {
                                    state.problems.withLock { $0.append("key \(index) wrong with count \(written)") }
                                    return
                                }
                            }
                            if try txn.get(db, key(written)) != nil {
                                state.problems.withLock { $0.append("key \(written) visible before its count") }
                            }
                        }
                        state.reads.add(1, ordering: .relaxed)
                    } catch {
                        state.problems.withLock { $0.append("read failed: \(error)") }
                        return
                    }
                }
            }

            let group = DispatchGroup()
            for _ in 0..<3 {
                group.enter()
                let thread = Thread {
                    readUntilDone()
                    group.leave()
                }
                thread.start()
            }
            let before = env.info().mapSize
            for batch in 0..<40 {
                try env.write { txn throws in
                    for index in batch * 250..<(batch + 1) * 250 {
                        try txn.put(db, key(index), value(index, size: 500))
                    }
                    try txn.put(db, count, key((batch + 1) * 250))
                }
            }
            state.done.store(true, ordering: .releasing)
            group.wait()

            #expect(state.problems.withLock { $0 } == [])
            #expect(state.reads.load(ordering: .relaxed) > 0)
            #expect(env.info().mapSize > before)
        }
    }
}

// MARK: - Fault injection

#if DEBUG
    @Suite("LMDB fault injection")
    struct LMDBFaultInjectionTests {
        @Test("MDB_MAP_FULL at put grows the map and runs the body again")
        func mapFullAtPut() throws {
            try withEnvironment { env, _ in
                let db = try env.openDatabase("main", flags: .create)
                let before = env.info().mapSize
                env.injectFailure(LMDBError.mapFull.code, at: .put, after: 2)
                var runs = 0
                try env.write { txn throws in
                    runs += 1
                    for index in 0..<3 { try txn.put(db, key(index), value(index, size: 10)) }
                }
                #expect(runs == 2)
                #expect(env.info().mapSize == before * 2)
                try env.read { txn throws in #expect(try txn.stat(db).entries == 3) }
            }
        }

        @Test("a caught MDB_MAP_FULL still fails the transaction, and still grows the map")
        func mapFullCaughtByBody() throws {
            try withEnvironment { env, _ in
                let db = try env.openDatabase("main", flags: .create)
                env.injectFailure(LMDBError.mapFull.code, at: .put)
                var runs = 0
                try env.write { txn throws in
                    runs += 1
                    do { try txn.put(db, bytes("k"), bytes("v")) } catch LMDBError.mapFull {}
                    // LMDB refuses a transaction after MDB_MAP_FULL; so does the mirror.
                    if runs == 1 {
                        #expect(throws: LMDBError.badTransaction) { try txn.put(db, bytes("k2"), bytes("v")) }
                    }
                }
                #expect(runs == 2)
                try env.read { txn throws in #expect(try txn.get(db, bytes("k")) == bytes("v")) }
            }
        }

        @Test("ENOSPC at commit throws a storage-full error and writes nothing")
        func noSpaceAtCommit() throws {
            try withEnvironment { env, _ in
                let db = try env.openDatabase("main", flags: .create)
                env.injectFailure(LMDBError.noSpace.code, at: .commit)
                var runs = 0
                #expect {
                    try env.write { txn throws in
                        runs += 1
                        try txn.put(db, bytes("k"), bytes("v"))
                    }
                } throws: { error in
                    (error as? LMDBError)?.isStorageFull == true && (error as? LMDBError)?.operation == "mdb_txn_commit"
                }
                #expect(runs == 1)
                try env.read { txn throws in #expect(try txn.get(db, bytes("k")) == nil) }
                // The plan is used up; the environment works again.
                try env.write { txn throws in try txn.put(db, bytes("k"), bytes("v")) }
                try env.read { txn throws in #expect(try txn.get(db, bytes("k")) == bytes("v")) }
            }
        }

        @Test("EIO at a cursor put poisons the transaction")
        func ioErrorAtCursorPut() throws {
            try withEnvironment { env, _ in
                let db = try env.openDatabase("main", flags: .create)
                env.injectFailure(LMDBError.ioError.code, at: .put, after: 1)
                #expect(throws: LMDBError.badTransaction) {
                    try env.write { txn throws in
                        _ = try? txn.withCursor(db) { cursor throws in
                            try cursor.put(bytes("a"), bytes("1"))
                            try cursor.put(bytes("b"), bytes("2"))
                        }
                        try txn.put(db, bytes("c"), bytes("3"))
                    }
                }
                try env.read { txn throws in #expect(try txn.stat(db).entries == 0) }
            }
        }
    }
#endif
