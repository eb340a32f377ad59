import CCrypto

/// Ed25519 through libcrypto, which libnats links already.
enum Ed25519 {
    /// The public key of a 32-byte private key (seed), nil when libcrypto cannot make one.
    /// The C functions are `EVP_PKEY_new_raw_private_key` and `EVP_PKEY_get_raw_public_key`.
    static func publicKey(seed: [UInt8]) -> [UInt8]? {
        guard seed.count == 32 else { return nil }
        let key = seed.withUnsafeBufferPointer {
            EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nil, $0.baseAddress, 32)
        }
        guard let key else { return nil }
        defer { EVP_PKEY_free(key) }
        var publicKey = [UInt8](repeating: 0, count: 32)
        var length = publicKey.count
        guard EVP_PKEY_get_raw_public_key(key, &publicKey, &length) == 1, length == 32 else { return nil }
        return publicKey
    }
}
