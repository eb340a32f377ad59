import CCrypto

/// SHA-256 through libcrypto: the one-shot digest, and `Hasher` for content that arrives in
/// pieces (a blob). The only calls into libcrypto in the store.
///
/// Content hashes must resist a peer that crafts content to match another event's hash
/// (a forgery under a real event's id), which a non-cryptographic hash does not.
public enum SHA256 {
    public static let byteCount = 32

    /// The 32-byte digest of `bytes`.
    public static func digest(_ bytes: [UInt8]) -> [UInt8] { digest(bytes[...]) }

    /// The 32-byte digest of `bytes`.
    public static func digest(_ bytes: ArraySlice<UInt8>) -> [UInt8] {
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

extension SHA256 {
    /// A digest over bytes given in pieces, in order.
    ///
    /// Owned by one thread at a time (a blob's upload holds it between requests under a lock).
    public final class Hasher: @unchecked Sendable {
        private let context: OpaquePointer

        public init() {
            // Fails only when libcrypto cannot allocate a context.
            guard let context = EVP_MD_CTX_new() else { preconditionFailure("EVP_MD_CTX_new failed") }
            precondition(EVP_DigestInit_ex(context, EVP_sha256(), nil) == 1, "EVP_DigestInit_ex(SHA-256) failed")
            self.context = context
        }

        deinit { EVP_MD_CTX_free(context) }

        public func update(_ bytes: [UInt8]) {
            bytes.withUnsafeBufferPointer { input in
                precondition(EVP_DigestUpdate(context, input.baseAddress, input.count) == 1, "EVP_DigestUpdate failed")
            }
        }

        public func update(_ bytes: ArraySlice<UInt8>) {
            bytes.withUnsafeBufferPointer { input in
                precondition(EVP_DigestUpdate(context, input.baseAddress, input.count) == 1, "EVP_DigestUpdate failed")
            }
        }

        /// The digest of everything given; the hasher starts again empty.
        public func finish() -> [UInt8] {
            var out = [UInt8](repeating: 0, count: SHA256.byteCount)
            var length: UInt32 = 0
            let ok = out.withUnsafeMutableBufferPointer { EVP_DigestFinal_ex(context, $0.baseAddress, &length) }
            precondition(ok == 1 && length == SHA256.byteCount, "EVP_DigestFinal_ex failed")
            precondition(EVP_DigestInit_ex(context, EVP_sha256(), nil) == 1, "EVP_DigestInit_ex(SHA-256) failed")
            return out
        }
    }
}
