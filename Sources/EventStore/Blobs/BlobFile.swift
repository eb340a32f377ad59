import CFileIO

#if canImport(Glibc)
    import Glibc
#endif

/// The blob store's calls into the C library on descriptors: whole reads and writes at an
/// offset, retried after `EINTR` and short transfers, and copies between files in the kernel.
/// The pointer work of the blob store is here and nowhere else.
enum BlobFile {
    /// Reads `count` bytes at `offset`; fewer only at the end of the file.
    /// Appends to `out` up to `count` bytes from `offset` (fewer at the end of the file):
    /// how many it appended.
    static func read(_ descriptor: Int32, count: Int, at offset: UInt64, appendingTo out: inout [UInt8])
        throws(EventStoreError) -> Int
    {
        let start = out.count
        out.append(contentsOf: repeatElement(0, count: count))
        var done = 0
        while done < count {
            let n = out.withUnsafeMutableBytes { buffer in
                pread(descriptor, buffer.baseAddress! + start + done, count - done, off_t(offset) + off_t(done))
            }
            if n < 0, errno == EINTR { continue }
            guard n >= 0 else {
                out.removeLast(count)
                throw BlobStore.failure("cannot read", errno)
            }
            if n == 0 { break }
            done += n
        }
        if done < count { out.removeLast(count - done) }
        return done
    }

    static func read(_ descriptor: Int32, count: Int, at offset: UInt64) throws(EventStoreError) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        var done = 0
        while done < count {
            let n = bytes.withUnsafeMutableBytes { buffer in
                pread(descriptor, buffer.baseAddress! + done, count - done, off_t(offset) + off_t(done))
            }
            if n < 0, errno == EINTR { continue }
            guard n >= 0 else { throw BlobStore.failure("cannot read", errno) }
            if n == 0 { break }
            done += n
        }
        if done < count { bytes.removeLast(count - done) }
        return bytes
    }

    /// Writes all of `bytes` at `offset`.
    static func write(_ descriptor: Int32, _ bytes: [UInt8], at offset: UInt64) throws(EventStoreError) {
        try write(descriptor, bytes[...], at: offset)
    }

    static func write(_ descriptor: Int32, _ bytes: ArraySlice<UInt8>, at offset: UInt64) throws(EventStoreError) {
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeBytes { buffer in
                pwrite(descriptor, buffer.baseAddress! + done, bytes.count - done, off_t(offset) + off_t(done))
            }
            if n < 0, errno == EINTR { continue }
            guard n > 0 else { throw BlobStore.failure("cannot write the upload", n == 0 ? EIO : errno) }
            done += n
        }
    }

    /// Starts writing `count` bytes at `offset` to the disk without waiting for them, so a
    /// file written in pieces (a blob that arrives) is mostly on the disk when its `fsync`
    /// comes: the disk works while the next pieces arrive and are hashed. A hint only: it
    /// makes nothing durable, and when it fails the `fsync` does all the work. The
    /// corresponding C function is `sync_file_range` with `SYNC_FILE_RANGE_WRITE`.
    static func startWriteback(_ descriptor: Int32, at offset: UInt64, count: Int) {
        _ = evstore_start_writeback(descriptor, Int64(offset), Int64(count))
    }

    /// Copies `count` bytes of `source` from its start to `target` at its file offset, in
    /// the kernel. The corresponding C function is `sendfile`.
    static func copy(_ source: Int32, to target: Int32, count: UInt64) throws(EventStoreError) {
        var offset = off_t(0)
        while UInt64(offset) < count {
            let n = sendfile(target, source, &offset, Int(min(count - UInt64(offset), 1 << 30)))
            if n < 0, errno == EINTR { continue }
            guard n > 0 else {
                throw BlobStore.failure("cannot write the blob to the file given", n == 0 ? EIO : errno)
            }
        }
    }

    /// The size of a regular file open on `descriptor`; nil for anything else.
    static func regularFileSize(_ descriptor: Int32) -> UInt64? {
        var info = stat()
        guard fstat(descriptor, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return nil }
        return UInt64(info.st_size)
    }

    /// Whether `descriptor` was opened for writing.
    static func isWritable(_ descriptor: Int32) -> Bool {
        let flags = fcntl(descriptor, F_GETFL)
        return flags >= 0 && flags & O_ACCMODE != O_RDONLY
    }

    /// The names in `directory` but `.` and `..`; none when it cannot be read.
    static func names(in directory: String) -> [String] {
        guard let handle = opendir(directory) else { return [] }
        defer { closedir(handle) }
        var names: [String] = []
        while let entry = readdir(handle) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            if name != ".", name != ".." { names.append(name) }
        }
        return names
    }
}
