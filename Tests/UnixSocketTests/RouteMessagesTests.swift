import Foundation
import Testing
import UnixSocket

/// Route netlink datagrams built byte by byte as the kernel lays them out (netlink(7),
/// rtnetlink(7)): a 16-byte `nlmsghdr`, then the message, each padded to 4 bytes.
@Suite("Route netlink messages")
struct RouteMessagesTests {
    static let newLink: UInt16 = 16, delLink: UInt16 = 17, newAddress: UInt16 = 20, newRoute: UInt16 = 24
    static let done: UInt16 = 3, overrun: UInt16 = 4, error: UInt16 = 2

    static func le32(_ value: UInt32) -> [UInt8] { withUnsafeBytes(of: value.littleEndian) { Array($0) } }
    static func le16(_ value: UInt16) -> [UInt8] { withUnsafeBytes(of: value.littleEndian) { Array($0) } }

    /// One message: its header (length covering header and body unless `length` says
    /// otherwise) and body, padded.
    static func message(_ type: UInt16, _ body: [UInt8], length: UInt32? = nil) -> [UInt8] {
        var bytes = le32(length ?? UInt32(16 + body.count)) + le16(type) + le16(0) + le32(1) + le32(0) + body
        while bytes.count % 4 != 0 { bytes.append(0) }
        return bytes
    }

    /// `ifinfomsg` followed by an IFLA_IFNAME attribute.
    static func link(index: Int32, flags: UInt32) -> [UInt8] {
        [0, 0] + le16(1) + le32(UInt32(bitPattern: index)) + le32(flags) + le32(0xFFFF_FFFF)
            + le16(7) + le16(3) + Array("d0\0".utf8)
    }

    /// `ifaddrmsg` followed by an IFA_ADDRESS attribute.
    static func address(index: UInt32) -> [UInt8] {
        [2, 24, 0, 0] + le32(index) + le16(8) + le16(1) + [10, 9, 9, 1]
    }

    static let route: [UInt8] = [2, 24, 0, 0, 254, 3, 0, 1] + le32(0)

    static var sample: [UInt8] {
        message(newLink, link(index: 7, flags: 0x1 | 0x40 | 0x10000)) + message(newAddress, address(index: 7))
            + message(newRoute, route) + message(done, le32(0))
    }

    @Test("a link up, an address and a route added are reported; a link down, a removal and what follows DONE are not")
    func wellFormed() {
        #expect(RouteMessages.parse(Self.sample) == [.linkUp(interface: 7), .addressAdded(interface: 7), .routeAdded])
        let quiet =
            Self.message(Self.newLink, Self.link(index: 3, flags: 0))
            + Self.message(Self.delLink, Self.link(index: 3, flags: 1))
            + Self.message(Self.error, Self.le32(0) + [UInt8](repeating: 0, count: 16))
        #expect(RouteMessages.parse(quiet) == [])
        #expect(RouteMessages.parse(Self.message(Self.overrun, [])) == [.lost])
        #expect(RouteMessages.parse(Self.message(Self.done, []) + Self.message(Self.newRoute, Self.route)) == [])
    }

    @Test("a datagram cut at every length yields only the messages that are whole in it")
    func truncated() {
        let sample = Self.sample
        var seen: [[NetworkChange]] = []
        for cut in 0...sample.count {
            let changes = RouteMessages.parse(Array(sample[..<cut]))
            #expect(
                Array(
                    [NetworkChange.linkUp(interface: 7), .addressAdded(interface: 7), .routeAdded].prefix(changes.count)
                ) == changes)
            seen.append(changes)
        }
        #expect(seen.first == [])
        #expect(seen.last?.count == 3)
    }

    @Test(
        "lengths that lie (zero, below the header, past the end, huge) and bodies too short end the walk without a crash"
    )
    func lyingLengths() {
        for length: UInt32 in [0, 1, 15, 17, 1 << 20, 0xFFFF_FFFF, 0x7FFF_FFFF] {
            let bytes =
                Self.message(Self.newAddress, Self.address(index: 1), length: length)
                + Self.message(Self.newRoute, Self.route)
            _ = RouteMessages.parse(bytes)
        }
        // A header alone, then bodies shorter than their struct: not reported.
        #expect(RouteMessages.parse(Self.message(Self.newLink, [])) == [])
        #expect(RouteMessages.parse(Self.message(Self.newLink, [0, 0, 1, 0, 7, 0, 0, 0])) == [])
        #expect(RouteMessages.parse(Self.message(Self.newAddress, [2, 24])) == [])
        #expect(RouteMessages.parse(Self.message(Self.newRoute, [2])) == [])
        // Unaligned lengths: the walk goes on at the next 4-byte boundary.
        let odd =
            Self.message(Self.newAddress, Array(Self.address(index: 2).prefix(13)))
            + Self.message(Self.newRoute, Self.route)
        #expect(RouteMessages.parse(odd) == [.addressAdded(interface: 2), .routeAdded])
    }

    @Test("10,000 datagrams of random bytes, and random bytes after valid headers, parse without a crash")
    func garbage() {
        var generator = SystemRandomNumberGenerator()
        var reported = 0
        for round in 0..<10_000 {
            let size = Int.random(in: 0...300, using: &generator)
            var bytes = (0..<size).map { _ in UInt8.random(in: 0...255, using: &generator) }
            if round % 2 == 0, bytes.count >= 6 {
                // A plausible header: a small length and a route message type.
                bytes[0] = UInt8.random(in: 0...64, using: &generator)
                bytes[1] = 0
                bytes[2] = 0
                bytes[3] = 0
                bytes[4] = [16, 20, 24, 3, 4].randomElement(using: &generator)!
                bytes[5] = 0
            }
            reported += RouteMessages.parse(bytes).count
        }
        #expect(reported >= 0)
    }
}
