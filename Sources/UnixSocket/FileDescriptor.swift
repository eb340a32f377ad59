#if canImport(Glibc)
    import Glibc
#endif

/// Whole reads and writes on a descriptor that is not a socket of this module: the standard
/// streams and regular files. The binaries carry no Foundation (whose `FileHandle` would
/// bring ICU's data with it), so evctl and evstored write their output through these.
public enum FileDescriptor {
    public static let standardInput: Int32 = 0
    public static let standardOutput: Int32 = 1
    public static let standardError: Int32 = 2

    /// Writes every byte, retrying after `EINTR` and short writes. The corresponding C
    /// function is `write`.
    public static func write(_ bytes: [UInt8], to descriptor: Int32) throws(SocketError) {
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeBytes { raw in
                Glibc.write(descriptor, raw.baseAddress! + offset, raw.count - offset)
            }
            if written < 0 {
                if errno == EINTR { continue }
                throw SocketError.last("write")
            }
            offset += written
        }
    }

    /// Closes `descriptor` (one passed by a peer, say); what `close` reports is of no use
    /// then, as the descriptor is gone either way.
    public static func close(_ descriptor: Int32) {
        _ = Glibc.close(descriptor)
    }

    /// Writes the text's UTF-8 bytes.
    public static func write(_ text: String, to descriptor: Int32) throws(SocketError) {
        try write(Array(text.utf8), to: descriptor)
    }

    /// Reads until the end of the file, retrying after `EINTR`. The corresponding C function
    /// is `read`.
    public static func readToEnd(_ descriptor: Int32) throws(SocketError) -> [UInt8] {
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let n = chunk.withUnsafeMutableBytes { raw in read(descriptor, raw.baseAddress, raw.count) }
            if n < 0 {
                if errno == EINTR { continue }
                throw SocketError.last("read")
            }
            if n == 0 { return bytes }
            bytes += chunk[..<n]
        }
    }
}
