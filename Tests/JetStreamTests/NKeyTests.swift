import Foundation
import Testing

@testable import JetStream

@Suite struct NKeyTests {
    /// The user key pair printed by `nk -gen user -pubout` in the NATS documentation
    /// (docs.nats.io, "NKeys": running-a-nats-service/configuration/securing_nats/auth_intro/nkey_auth).
    static let documentedSeed = "SUACSSL3UAHUDXKFSNVUZRF5UHPMWZ6BFDTJ7M6USDXIEDNPPQYYYCU3VY"
    static let documentedPublicKey = "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4"

    @Test func derivesTheDocumentedPublicKey() throws {
        #expect(try NKey.userPublicKey(fromSeed: Self.documentedSeed) == Self.documentedPublicKey)
    }

    @Test(arguments: [
        "\(documentedSeed)\n",
        "  \(documentedSeed)  \r\n",
        "-----BEGIN USER NKEY SEED-----\n\(documentedSeed)\n------END USER NKEY SEED------\n",
    ])
    func readsTheSeedFromAFile(contents: String) throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("nkey-\(UUID().uuidString).nk").path
        try contents.write(toFile: path, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: path) }
        #expect(try NKey.userPublicKey(fromSeedFile: path) == Self.documentedPublicKey)
    }

    @Test func aFileWithoutASeedSaysSo() throws {
        let error = #expect(throws: NATSError.self) { try NKey.userPublicKey(fromSeedFile: "/nonexistent/user.nk") }
        #expect(error?.code == .invalidArgument)
        #expect(error?.message.contains("/nonexistent/user.nk") == true)
        #expect(error?.message.contains("No such file") == true)
    }

    @Test func rejectsMalformedSeeds() throws {
        // The last characters changed: the checksum no longer matches.
        var mistyped = Self.documentedSeed
        mistyped.removeLast(2)
        mistyped += "XX"
        let checksum = #expect(throws: NATSError.self) { try NKey.userPublicKey(fromSeed: mistyped) }
        #expect(checksum?.message.contains("checksum") == true)

        let short = #expect(throws: NATSError.self) { try NKey.userPublicKey(fromSeed: "SUACSS") }
        #expect(short?.code == .invalidArgument)
        #expect(throws: NATSError.invalidArgument) { try NKey.userPublicKey(fromSeed: "not base32 at all!") }

        // A well-formed account seed (SA...): a seed, with a valid checksum, of the wrong type.
        let accountPrefix: UInt8 = 0 << 3
        let seedPrefix: UInt8 = 18 << 3
        var raw = [seedPrefix | accountPrefix >> 5, (accountPrefix & 0x1F) << 3] + [UInt8](repeating: 7, count: 32)
        let crc = CRC16.xmodem(raw[...])
        raw += [UInt8(crc & 0xFF), UInt8(crc >> 8)]
        let accountSeed = Base32.encode(raw)
        #expect(accountSeed.hasPrefix("SA"))
        let wrongType = #expect(throws: NATSError.self) { try NKey.userPublicKey(fromSeed: accountSeed) }
        #expect(wrongType?.message.contains("not a user seed") == true)
    }

    @Test func base32AndChecksumMatchTheirReferences() {
        // RFC 4648 test vectors, without padding.
        #expect(Base32.encode(Array("foobar".utf8)) == "MZXW6YTBOI")
        #expect(Base32.encode(Array("fo".utf8)) == "MZXQ")
        #expect(Base32.decode("MZXW6YTBOI") == Array("foobar".utf8))
        // CRC-16/XMODEM's check value.
        #expect(CRC16.xmodem(Array("123456789".utf8)[...]) == 0x31C3)
    }
}
