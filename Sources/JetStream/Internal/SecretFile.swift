#if canImport(Glibc)
    import Glibc
#endif

/// Reads small files that hold secrets (an NKey seed) with libc, not Foundation.
enum SecretFile {
    /// An `errno` value that stopped a read.
    struct Failure: Error {
        let code: Int32
        var description: String { String(cString: strerror(code)) }
    }

    /// The file's bytes. Files over 1 MiB are refused (`EFBIG`): a seed file is a line or a few.
    static func contents(of path: String) -> Result<[UInt8], Failure> {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return .failure(Failure(code: errno)) }
        defer { close(descriptor) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        defer { wipe(&chunk) }
        while true {
            let count = read(descriptor, &chunk, chunk.count)
            if count < 0 {
                if errno == EINTR { continue }
                let failure = errno
                wipe(&bytes)
                return .failure(Failure(code: failure))
            }
            if count == 0 { return .success(bytes) }
            bytes.append(contentsOf: chunk[0..<count])
            if bytes.count > 1 << 20 {
                wipe(&bytes)
                return .failure(Failure(code: EFBIG))
            }
        }
    }

    /// Overwrites a buffer that held a secret (best effort: copies Swift made are not reached).
    static func wipe(_ bytes: inout [UInt8]) {
        for index in bytes.indices { bytes[index] = 0 }
    }
}
