import CCrypto

/// SHA-256 through libcrypto's one-shot digest: the only call into libcrypto in the store.
///
/// Content hashes must resist a peer that crafts content to match another event's hash
/// (a forgery under a real event's id), which a non-cryptographic hash does not.
public enum SHA256 {
    public static let byteCount = 32

    /// The 32-byte digest of `bytes`.
    public static func digest(_ bytes: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: byteCount)
        var length: UInt32 = 0
        let ok = bytes.withUnsafeBufferPointer { input in
            out.withUnsafeMutableBufferPointer { output in
                EVP_Digest(input.baseAddress, input.count, output.baseAddress, &length, EVP_sha256(), nil)
            }
        }
        // Fails only when libcrypto cannot allocate a context.
        precondition(ok == 1 && length == byteCount, "EVP_Digest(SHA-256) failed")
        return out
    }

    /// The digest in lowercase hex.
    public static func hex(_ bytes: [UInt8]) -> String {
        hexString(digest(bytes))
    }

    public static func hexString(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}
