/// NATS NKeys: Ed25519 keys written as base32 text with a type prefix and a CRC16.
///
/// A seed (`S` then the key type, `SU...` for a user) encodes 2 prefix bytes, the 32-byte
/// Ed25519 private key and a CRC16; a public key (`U...` for a user) encodes 1 prefix byte,
/// the 32-byte Ed25519 public key and a CRC16 (nats-io/nkeys `strkey.go`). libnats signs the
/// server's nonce with the seed but must be told the public key as well; this derives it, so
/// an operator has only the seed file to give.
public enum NKey {
    /// The user public key (`U...`) of a user seed (`SU...`).
    public static func userPublicKey(fromSeed seed: String) throws(NATSError) -> String {
        switch derive(seed) {
        case .success(let publicKey): return publicKey
        case .failure(let problem): throw invalid("the NKey seed \(problem.reason)")
        }
    }

    /// The user public key of the seed in `path`: the first line that starts with `SU` (after
    /// blanks), which is where libnats looks for it in a seed file, plain or decorated.
    public static func userPublicKey(fromSeedFile path: String) throws(NATSError) -> String {
        var bytes: [UInt8]
        switch SecretFile.contents(of: path) {
        case .success(let read): bytes = read
        case .failure(let failure):
            throw invalid("cannot read the NKey seed file \(path): \(failure.description)")
        }
        defer { SecretFile.wipe(&bytes) }
        for line in bytes.split(separator: UInt8(ascii: "\n")) {
            let text = line.drop { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") }
            guard text.starts(with: [UInt8(ascii: "S"), UInt8(ascii: "U")]) else { continue }
            switch derive(String(decoding: text.prefix { $0 > 0x20 }, as: UTF8.self)) {
            case .success(let publicKey): return publicKey
            case .failure(let problem): throw invalid("the NKey seed in \(path) \(problem.reason)")
            }
        }
        throw invalid("no NKey user seed (a line starting with SU) is in \(path): give the file nk -gen user wrote")
    }

    /// Why a seed cannot be used, as the end of a sentence about it.
    private struct Problem: Error {
        let reason: String
    }

    private static func derive(_ seed: String) -> Result<String, Problem> {
        guard var raw = Base32.decode(seed), raw.count == 36 else {
            return .failure(Problem(reason: "is not an NKey seed (58 characters of base32 that start with SU)"))
        }
        defer { SecretFile.wipe(&raw) }
        guard CRC16.xmodem(raw[0..<34]) == UInt16(raw[34]) | UInt16(raw[35]) << 8 else {
            return .failure(Problem(reason: "fails its checksum: it was mistyped or cut short"))
        }
        // The first 5 bits say "seed", the next 5 the type of key it is the seed of.
        guard raw[0] & 0xF8 == Prefix.seed else {
            return .failure(Problem(reason: "is not a seed (it does not start with S)"))
        }
        guard (raw[0] & 0x07) << 5 | (raw[1] & 0xF8) >> 3 == Prefix.user else {
            return .failure(Problem(reason: "is not a user seed (it does not start with SU)"))
        }
        var privateKey = Array(raw[2..<34])
        defer { SecretFile.wipe(&privateKey) }
        guard let publicKey = Ed25519.publicKey(seed: privateKey) else {
            return .failure(Problem(reason: "could not be made into an Ed25519 key by libcrypto"))
        }
        var encoded = [Prefix.user] + publicKey
        let checksum = CRC16.xmodem(encoded[...])
        encoded += [UInt8(checksum & 0xFF), UInt8(checksum >> 8)]
        return .success(Base32.encode(encoded))
    }

    private static func invalid(_ message: String) -> NATSError {
        NATSError(code: .invalidArgument, operation: "NKey.userPublicKey", message: message)
    }

    /// Prefix bytes (nkeys `strkey.go`): the type in the top 5 bits.
    private enum Prefix {
        static let seed: UInt8 = 18 << 3
        static let user: UInt8 = 20 << 3
    }
}

/// RFC 4648 base32 without padding, as NKeys use it.
enum Base32 {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567".utf8)

    static func encode(_ bytes: [UInt8]) -> String {
        var text: [UInt8] = []
        var buffer: UInt32 = 0
        var bits = 0
        for byte in bytes {
            buffer = buffer << 8 | UInt32(byte)
            bits += 8
            while bits >= 5 {
                bits -= 5
                text.append(alphabet[Int(buffer >> UInt32(bits) & 0x1F)])
            }
        }
        if bits > 0 { text.append(alphabet[Int(buffer << UInt32(5 - bits) & 0x1F)]) }
        return String(decoding: text, as: UTF8.self)
    }

    /// The bytes of `text`, nil when a character is not in the alphabet. Trailing bits that
    /// do not fill a byte are dropped.
    static func decode(_ text: String) -> [UInt8]? {
        var bytes: [UInt8] = []
        var buffer: UInt32 = 0
        var bits = 0
        for character in text.utf8 {
            let value: UInt8
            switch character {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"): value = character - UInt8(ascii: "A")
            case UInt8(ascii: "2")...UInt8(ascii: "7"): value = character - UInt8(ascii: "2") + 26
            default: return nil
            }
            buffer = buffer << 5 | UInt32(value)
            bits += 5
            if bits >= 8 {
                bits -= 8
                bytes.append(UInt8(buffer >> UInt32(bits) & 0xFF))
            }
        }
        return bytes
    }
}

/// CRC-16/XMODEM (polynomial 0x1021, initial value 0), the checksum of NKey text.
enum CRC16 {
    static func xmodem(_ bytes: ArraySlice<UInt8>) -> UInt16 {
        var crc: UInt16 = 0
        for byte in bytes {
            crc ^= UInt16(byte) << 8
            for _ in 0..<8 {
                crc = crc & 0x8000 != 0 ? crc << 1 ^ 0x1021 : crc << 1
            }
        }
        return crc
    }
}
