/// CRC-32C (Castagnoli), the checksum of every sync frame: the same function as iSCSI's
/// and ext4's metadata checksums, reflected polynomial 0x82F63B78, initial value and
/// final XOR 0xFFFFFFFF. `CRC32C.checksum("123456789")` is 0xE3069283.
package enum CRC32C {
    package static let table: [UInt32] = (0..<256).map { index in
        var crc = UInt32(index)
        for _ in 0..<8 { crc = crc & 1 == 1 ? (crc >> 1) ^ 0x82F6_3B78 : crc >> 1 }
        return crc
    }

    package static func checksum(_ bytes: some Sequence<UInt8>) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        table.withUnsafeBufferPointer { table in
            for byte in bytes { crc = table[Int((crc ^ UInt32(byte)) & 0xFF)] ^ (crc >> 8) }
        }
        return crc ^ 0xFFFF_FFFF
    }
}
