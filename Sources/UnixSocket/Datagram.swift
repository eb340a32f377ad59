#if canImport(Glibc)
    import Glibc
#endif

/// Sends one datagram to the Unix datagram socket at `path` (a path starting with "@" is
/// in the abstract namespace, as systemd's NOTIFY_SOCKET may be).
public func sendDatagram(_ bytes: [UInt8], to path: String) throws(SocketError) {
    let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard fd >= 0 else { throw SocketError.last("socket") }
    defer { close(fd) }
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    var pathBytes = Array(path.utf8)
    if pathBytes.first == UInt8(ascii: "@") { pathBytes[0] = 0 }
    let capacity = MemoryLayout.size(ofValue: address.sun_path)
    guard !pathBytes.isEmpty, pathBytes.count < capacity else {
        throw SocketError("sendto", path: path, code: ENAMETOOLONG)
    }
    withUnsafeMutableBytes(of: &address.sun_path) { raw in raw.copyBytes(from: pathBytes) }
    let length = socklen_t(MemoryLayout<sa_family_t>.size + pathBytes.count)
    let sent = withUnsafePointer(to: &address) { pointer in
        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
            bytes.withUnsafeBytes { raw in
                sendto(fd, raw.baseAddress, raw.count, Int32(MSG_NOSIGNAL), address, length)
            }
        }
    }
    guard sent >= 0 else { throw SocketError.last("sendto", path: path) }
}

/// A bound Unix datagram socket that receives messages (what systemd does with
/// NOTIFY_SOCKET; tests stand in for it with this).
public final class DatagramReceiver: @unchecked Sendable {
    public let path: String
    private var descriptor: Int32

    public init(path: String) throws(SocketError) {
        self.path = path
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw SocketError.last("socket") }
        let bound = try withAddress(path) { address, length in bind(fd, address, length) }
        guard bound == 0 else {
            let error = SocketError.last("bind", path: path)
            close(fd)
            throw error
        }
        descriptor = fd
    }

    deinit {
        close(descriptor)
        unlink(path)
    }

    /// The next message, or nil when none comes within `timeout` seconds.
    public func receive(timeout: Double) throws(SocketError) -> [UInt8]? {
        var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        let ready = poll(&poller, 1, Int32(timeout * 1000))
        guard ready > 0 else { return nil }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let n = buffer.withUnsafeMutableBytes { raw in recv(descriptor, raw.baseAddress, raw.count, 0) }
        guard n >= 0 else { throw SocketError.last("recv", path: path) }
        return Array(buffer[..<n])
    }
}
