import CNetlink

#if canImport(Glibc)
    import Glibc
#endif

/// A change of the network that may mean it came back, as route netlink reports it.
public enum NetworkChange: Equatable, Sendable {
    /// A link is up (`RTM_NEWLINK` with `IFF_UP`), by interface index.
    case linkUp(interface: Int32)
    /// An IPv4 or IPv6 address was added (`RTM_NEWADDR`), by interface index.
    case addressAdded(interface: Int32)
    /// A route was added (`RTM_NEWROUTE`).
    case routeAdded
    /// The kernel dropped messages because the socket's buffer was full (`ENOBUFS`,
    /// `NLMSG_OVERRUN`) or a datagram was longer than the receive buffer: something
    /// changed, what is unknown.
    case lost
}

/// Parsing of route netlink datagrams (rtnetlink(7), netlink(7)): a walk over the
/// `nlmsghdr`s that checks every length against the bytes actually there, so a truncated
/// or hostile datagram ends the walk instead of reading past its end.
public enum RouteMessages {
    static let headerSize = MemoryLayout<nlmsghdr>.size
    static let linkSize = MemoryLayout<ifinfomsg>.size
    static let addressSize = MemoryLayout<ifaddrmsg>.size
    static let routeSize = MemoryLayout<rtmsg>.size

    /// The changes one datagram reports, in order. Messages of other types, and the
    /// removal of links, addresses and routes (which cannot bring the network back), are
    /// left out; a message whose length is wrong ends the walk.
    public static func parse(_ bytes: [UInt8]) -> [NetworkChange] {
        bytes.withUnsafeBytes { parse($0) }
    }

    public static func parse(_ bytes: UnsafeRawBufferPointer) -> [NetworkChange] {
        var changes: [NetworkChange] = []
        var offset = 0
        while bytes.count - offset >= headerSize {
            let header = bytes.loadUnaligned(fromByteOffset: offset, as: nlmsghdr.self)
            let length = Int(header.nlmsg_len)
            // NLMSG_OK: the length covers its header and no more than what is there.
            guard length >= headerSize, length <= bytes.count - offset else { break }
            let payload = UnsafeRawBufferPointer(rebasing: bytes[(offset + headerSize)..<(offset + length)])
            switch Int32(header.nlmsg_type) {
            case NLMSG_DONE:
                return changes
            case NLMSG_OVERRUN:
                changes.append(.lost)
            case Int32(RTM_NEWLINK) where payload.count >= linkSize:
                let link = payload.loadUnaligned(as: ifinfomsg.self)
                if link.ifi_flags & UInt32(IFF_UP) != 0 { changes.append(.linkUp(interface: link.ifi_index)) }
            case Int32(RTM_NEWADDR) where payload.count >= addressSize:
                let address = payload.loadUnaligned(as: ifaddrmsg.self)
                changes.append(.addressAdded(interface: Int32(bitPattern: address.ifa_index)))
            case Int32(RTM_NEWROUTE) where payload.count >= routeSize:
                changes.append(.routeAdded)
            default:
                break
            }
            // NLMSG_NEXT: messages start on 4-byte boundaries.
            let aligned = (length + Int(NLMSG_ALIGNTO) - 1) & ~(Int(NLMSG_ALIGNTO) - 1)
            guard aligned <= bytes.count - offset else { break }
            offset += aligned
        }
        return changes
    }
}

/// A route netlink socket (`AF_NETLINK`, `NETLINK_ROUTE`) joined to the multicast groups
/// of link, IPv4 and IPv6 address and route changes: the kernel sends it a message for
/// each. Messages from anyone but the kernel are ignored.
///
/// - Important: One thread receives at a time; `close()` must be the last call.
public final class RouteMonitor: @unchecked Sendable {
    /// The largest datagram read whole; a longer one counts as `.lost` (the kernel's route
    /// messages are a few hundred bytes each, and a datagram holds one event's messages).
    public static let receiveBytes = 64 * 1024

    public let descriptor: Int32
    private let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: RouteMonitor.receiveBytes, alignment: 16)
    private var closed = false

    /// Opens the socket and joins the groups. The corresponding C functions are `socket`
    /// and `bind`; they fail where netlink is not allowed (a seccomp filter, a sandbox).
    public init() throws(SocketError) {
        let fd = socket(AF_NETLINK, Int32(SOCK_RAW.rawValue) | Int32(SOCK_CLOEXEC.rawValue), NETLINK_ROUTE)
        guard fd >= 0 else {
            buffer.deallocate()
            throw SocketError.last("socket(AF_NETLINK)")
        }
        var address = sockaddr_nl()
        address.nl_family = sa_family_t(AF_NETLINK)
        address.nl_groups = UInt32(
            RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR | RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_ROUTE)
        let bound = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_nl>.size))
            }
        }
        guard bound == 0 else {
            let error = SocketError.last("bind(AF_NETLINK)")
            Glibc.close(fd)
            buffer.deallocate()
            throw error
        }
        descriptor = fd
    }

    deinit {
        close()
        buffer.deallocate()
    }

    /// Waits up to `timeout` seconds for a datagram and returns the changes it reports
    /// (perhaps none); nil when none came in time.
    public func receive(timeout: Double) throws(SocketError) -> [NetworkChange]? {
        var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        let milliseconds = pollMilliseconds(timeout)
        let ready = poll(&poller, 1, milliseconds)
        if ready < 0 {
            if errno == EINTR { return nil }
            throw SocketError.last("poll")
        }
        guard ready > 0 else { return nil }
        var sender = sockaddr_nl()
        var senderLength = socklen_t(MemoryLayout<sockaddr_nl>.size)
        let count = withUnsafeMutablePointer(to: &sender) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                recvfrom(
                    descriptor, buffer.baseAddress, buffer.count, Int32(MSG_DONTWAIT) | Int32(MSG_TRUNC), $0,
                    &senderLength)
            }
        }
        if count < 0 {
            switch errno {
            case EINTR, EAGAIN: return []
            case ENOBUFS: return [.lost]
            default: throw SocketError.last("recvfrom(AF_NETLINK)")
            }
        }
        // Port 0 is the kernel; another process may send to this socket's port.
        guard sender.nl_pid == 0 else { return [] }
        // With MSG_TRUNC the count is the datagram's full length.
        guard count <= buffer.count else { return [.lost] }
        return RouteMessages.parse(UnsafeRawBufferPointer(rebasing: buffer[..<count]))
    }

    public func close() {
        guard !closed else { return }
        closed = true
        Glibc.close(descriptor)
    }
}
