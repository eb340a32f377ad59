/// Base64 (RFC 4648, the standard alphabet, with padding): how blob bytes travel inside
/// JSON-RPC lines. Shared by the daemon and evctl, which links no Foundation.
public enum Base64 {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    private static let values: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (index, byte) in alphabet.enumerated() { table[Int(byte)] = UInt8(index) }
        return table
    }()

    /// The base64 text of `bytes`, as UTF-8 bytes.
    public static func encode(_ bytes: some Collection<UInt8>) -> [UInt8] {
        let input = Array(bytes)
        var out = [UInt8](repeating: UInt8(ascii: "="), count: (input.count + 2) / 3 * 4)
        let alphabet = self.alphabet
        input.withUnsafeBufferPointer { input in
            out.withUnsafeMutableBufferPointer { out in
                var i = 0
                var o = 0
                while i + 3 <= input.count {
                    let word = UInt32(input[i]) << 16 | UInt32(input[i + 1]) << 8 | UInt32(input[i + 2])
                    out[o] = alphabet[Int(word >> 18)]
                    out[o + 1] = alphabet[Int(word >> 12 & 0x3F)]
                    out[o + 2] = alphabet[Int(word >> 6 & 0x3F)]
                    out[o + 3] = alphabet[Int(word & 0x3F)]
                    i += 3
                    o += 4
                }
                let rest = input.count - i
                if rest > 0 {
                    let word = UInt32(input[i]) << 16 | (rest == 2 ? UInt32(input[i + 1]) << 8 : 0)
                    out[o] = alphabet[Int(word >> 18)]
                    out[o + 1] = alphabet[Int(word >> 12 & 0x3F)]
                    if rest == 2 { out[o + 2] = alphabet[Int(word >> 6 & 0x3F)] }
                }
            }
        }
        return out
    }

    /// The bytes of base64 `text`; nil when it is not base64 (a length that is not a
    /// multiple of 4, a character outside the alphabet, padding anywhere but the end).
    public static func decode(_ text: some Collection<UInt8>) -> [UInt8]? {
        let input = Array(text)
        guard input.count % 4 == 0 else { return nil }
        guard !input.isEmpty else { return [] }
        let padding = input.last == UInt8(ascii: "=") ? (input[input.count - 2] == UInt8(ascii: "=") ? 2 : 1) : 0
        var out = [UInt8](repeating: 0, count: input.count / 4 * 3 - padding)
        let values = self.values
        let valid = input.withUnsafeBufferPointer { input in
            out.withUnsafeMutableBufferPointer { out in
                var o = 0
                var i = 0
                let full = input.count - (padding > 0 ? 4 : 0)
                while i < full {
                    let a = values[Int(input[i])]
                    let b = values[Int(input[i + 1])]
                    let c = values[Int(input[i + 2])]
                    let d = values[Int(input[i + 3])]
                    guard a | b | c | d < 64 else { return false }
                    let word = UInt32(a) << 18 | UInt32(b) << 12 | UInt32(c) << 6 | UInt32(d)
                    out[o] = UInt8(word >> 16)
                    out[o + 1] = UInt8(word >> 8 & 0xFF)
                    out[o + 2] = UInt8(word & 0xFF)
                    i += 4
                    o += 3
                }
                guard padding > 0 else { return true }
                let a = values[Int(input[i])]
                let b = values[Int(input[i + 1])]
                let c = padding == 1 ? values[Int(input[i + 2])] : 0
                guard a | b | c < 64 else { return false }
                let word = UInt32(a) << 18 | UInt32(b) << 12 | UInt32(c) << 6
                // The bits padding leaves over must be zero, so one byte string has one text.
                guard padding == 2 ? word & 0xFFFF == 0 : word & 0xFF == 0 else { return false }
                out[o] = UInt8(word >> 16)
                if padding == 1 { out[o + 1] = UInt8(word >> 8 & 0xFF) }
                return true
            }
        }
        return valid ? out : nil
    }
}
