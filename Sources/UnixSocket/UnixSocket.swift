import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A connected stream socket (`AF_UNIX`, `SOCK_STREAM`): blocking reads and writes on a
/// file descriptor this value owns.
///
/// - Important: Reads and writes may run on two different threads at once (one each);
///   `close()` must be the last call.
public final class UnixConnection: @unchecked Sendable {
    /// The descriptor, for reads and writes (which end before `close()`).
    public let descriptor: Int32
    /// Whether the descriptor is still open: `shutdown` from another thread must never
    /// reach a descriptor number that was closed and handed to another connection.
    private let open = Mutex(true)

    /// Where `read` receives bytes before they are appended to the caller's buffer (one
    /// reader at a time); made at the first blocking read, so a connection served by an
    /// event loop (which reads into the loop's buffer) never holds one.
    private var scratchStorage: UnsafeMutableRawBufferPointer?

    private var scratch: UnsafeMutableRawBufferPointer {
        if let scratchStorage { return scratchStorage }
        let made = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 16)
        scratchStorage = made
        return made
    }

    public init(adopting descriptor: Int32) {
        self.descriptor = descriptor
    }

    deinit {
        close()
        scratchStorage?.deallocate()
    }

    /// Connects to the socket at `path`. The corresponding C function is `connect`.
    ///
    /// `timeout` bounds the wait of a connect to a socket whose listener accepts nothing
    /// and whose backlog is full (which otherwise blocks for good); past it the error's
    /// `isTimeout` is true. It stays the connection's write timeout.
    public static func connect(to path: String, timeout: Double? = nil) throws(SocketError) -> UnixConnection {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw SocketError.last("socket") }
        let connection = UnixConnection(adopting: fd)
        // A Unix socket's connect waits as long as the send timeout says.
        if let timeout { try connection.setTimeouts(read: nil, write: timeout) }
        let result = try withAddress(path) { address, length in
            Glibc.connect(fd, address, length)
        }
        guard result == 0 else { throw SocketError.last("connect", path: path) }
        return connection
    }

    /// Two connected ends of a new socket pair (`socketpair`), for a session inside one
    /// process or with a child.
    public static func pair() throws(SocketError) -> (UnixConnection, UnixConnection) {
        var sockets: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &sockets) == 0
        else { throw SocketError.last("socketpair") }
        return (UnixConnection(adopting: sockets[0]), UnixConnection(adopting: sockets[1]))
    }

    /// Reads what is available, at most `count` bytes, and appends it to `buffer`,
    /// blocking until at least one byte or the end. Returns 0 at the end of the stream.
    ///
    /// - Important: One thread reads at a time.
    public func read(into buffer: inout [UInt8], count: Int) throws(SocketError) -> Int {
        let limit = min(count, scratch.count)
        while true {
            let n = Glibc.read(descriptor, scratch.baseAddress, limit)
            if n >= 0 {
                buffer.append(contentsOf: UnsafeRawBufferPointer(rebasing: scratch[..<n]))
                return n
            }
            if errno == EINTR { continue }
            throw SocketError.last("read")
        }
    }

    /// Reads what is available without blocking, at most `count` bytes (and at most
    /// `scratch.count`), through `scratch`, and appends it to `buffer`. Returns 0 at the end
    /// of the stream, nil when nothing is available yet. The corresponding C function is
    /// `recv` with `MSG_DONTWAIT`.
    public func readAvailable(into buffer: inout [UInt8], count: Int, scratch: UnsafeMutableRawBufferPointer)
        throws(SocketError) -> Int?
    {
        let limit = min(count, scratch.count)
        while true {
            let n = recv(descriptor, scratch.baseAddress, limit, Int32(MSG_DONTWAIT))
            if n >= 0 {
                buffer.append(contentsOf: UnsafeRawBufferPointer(rebasing: scratch[..<n]))
                return n
            }
            if errno == EINTR { continue }
            if errno == EAGAIN || errno == EWOULDBLOCK { return nil }
            throw SocketError.last("read")
        }
    }

    /// The most descriptors one read takes from the socket's control messages; the kernel
    /// closes any more that came with the same bytes.
    public static let maxDescriptorsPerRead = 2

    /// `readAvailable`, also taking the file descriptors the peer passed with these bytes
    /// (`SCM_RIGHTS`), which are appended to `descriptors`, close-on-exec: they are the
    /// caller's to close. The corresponding C function is `recvmsg`.
    public func readAvailable(
        into buffer: inout [UInt8], count: Int, scratch: UnsafeMutableRawBufferPointer, descriptors: inout [Int32]
    ) throws(SocketError) -> Int? {
        let limit = min(count, scratch.count)
        let space = UnixConnection.controlSpace
        var control = [UInt64](repeating: 0, count: (space + 7) / 8)
        while true {
            var vector = iovec(iov_base: scratch.baseAddress, iov_len: limit)
            let n = control.withUnsafeMutableBytes { control in
                withUnsafeMutablePointer(to: &vector) { vector in
                    var message = msghdr()
                    message.msg_iov = vector
                    message.msg_iovlen = 1
                    message.msg_control = control.baseAddress
                    message.msg_controllen = space
                    let n = recvmsg(descriptor, &message, Int32(MSG_DONTWAIT) | Int32(MSG_CMSG_CLOEXEC))
                    if n >= 0 { UnixConnection.takeDescriptors(&message, into: &descriptors) }
                    return n
                }
            }
            if n >= 0 {
                buffer.append(contentsOf: UnsafeRawBufferPointer(rebasing: scratch[..<n]))
                return n
            }
            if errno == EINTR { continue }
            if errno == EAGAIN || errno == EWOULDBLOCK { return nil }
            throw SocketError.last("read")
        }
    }

    /// `CMSG_SPACE` of `maxDescriptorsPerRead` descriptors: a header, then the data aligned
    /// to the size of a `size_t`.
    private static var controlSpace: Int {
        let align = MemoryLayout<Int>.size
        let header = (MemoryLayout<cmsghdr>.size + align - 1) / align * align
        let data = (maxDescriptorsPerRead * MemoryLayout<Int32>.size + align - 1) / align * align
        return header + data
    }

    /// The descriptors of the `SCM_RIGHTS` messages in `message`'s control buffer (the
    /// walk `CMSG_FIRSTHDR`/`CMSG_NXTHDR` make).
    private static func takeDescriptors(_ message: inout msghdr, into descriptors: inout [Int32]) {
        guard let base = message.msg_control, message.msg_controllen >= MemoryLayout<cmsghdr>.size else { return }
        let align = MemoryLayout<Int>.size
        let header = (MemoryLayout<cmsghdr>.size + align - 1) / align * align
        var offset = 0
        while offset + MemoryLayout<cmsghdr>.size <= message.msg_controllen {
            let entry = base.advanced(by: offset).loadUnaligned(as: cmsghdr.self)
            let length = Int(entry.cmsg_len)
            guard length >= header, offset + length <= message.msg_controllen else { return }
            if entry.cmsg_level == SOL_SOCKET, entry.cmsg_type == Int32(SCM_RIGHTS) {
                let count = (length - header) / MemoryLayout<Int32>.size
                for index in 0..<count {
                    descriptors.append(
                        base.advanced(by: offset + header + index * MemoryLayout<Int32>.size).loadUnaligned(
                            as: Int32.self))
                }
            }
            offset += (length + align - 1) / align * align
        }
    }

    /// Writes all of `bytes`, passing `descriptor` with them (`SCM_RIGHTS`): the peer
    /// receives its own descriptor of the same open file. The corresponding C function is
    /// `sendmsg`.
    public func write(_ bytes: [UInt8], passing passed: Int32) throws(SocketError) {
        precondition(!bytes.isEmpty, "a descriptor goes with at least one byte")
        let align = MemoryLayout<Int>.size
        let header = (MemoryLayout<cmsghdr>.size + align - 1) / align * align
        let space = header + (MemoryLayout<Int32>.size + align - 1) / align * align
        var control = [UInt64](repeating: 0, count: (space + 7) / 8)
        let sent: Int = bytes.withUnsafeBytes { raw in
            control.withUnsafeMutableBytes { control in
                var entry = cmsghdr()
                entry.cmsg_len = header + MemoryLayout<Int32>.size
                entry.cmsg_level = SOL_SOCKET
                entry.cmsg_type = Int32(SCM_RIGHTS)
                control.storeBytes(of: entry, as: cmsghdr.self)
                control.storeBytes(of: passed, toByteOffset: header, as: Int32.self)
                var vector = iovec(iov_base: UnsafeMutableRawPointer(mutating: raw.baseAddress), iov_len: raw.count)
                return withUnsafeMutablePointer(to: &vector) { vector in
                    var message = msghdr()
                    message.msg_iov = vector
                    message.msg_iovlen = 1
                    message.msg_control = control.baseAddress
                    message.msg_controllen = space
                    while true {
                        let n = sendmsg(descriptor, &message, Int32(MSG_NOSIGNAL))
                        if n < 0, errno == EINTR { continue }
                        return n
                    }
                }
            }
        }
        guard sent > 0 else { throw SocketError.last("sendmsg") }
        if sent < bytes.count { try write(Array(bytes[sent...])) }
    }

    /// Waits up to `timeout` seconds for bytes to read (or the end of the stream); false
    /// when the time ran out first. The corresponding C function is `poll`.
    public func waitReadable(timeout: Double) throws(SocketError) -> Bool {
        var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        let milliseconds = pollMilliseconds(timeout)
        while true {
            let ready = poll(&poller, 1, milliseconds)
            if ready >= 0 { return ready > 0 }
            if errno != EINTR { throw SocketError.last("poll") }
        }
    }

    /// What ended a wait for bytes that another thread may cut short.
    public enum Wake: Equatable, Sendable {
        /// Bytes (or the end of the stream) wait to be read.
        case readable
        /// `wake` was signalled; it is drained.
        case signalled
        case timedOut
    }

    /// Waits up to `timeout` seconds for bytes to read, or for another thread to signal
    /// `wake`, whichever comes first (both at once: `readable`). The corresponding C
    /// function is `poll`.
    public func waitReadable(timeout: Double, or wake: EventFD) throws(SocketError) -> Wake {
        var pollers = [
            pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0),
            pollfd(fd: wake.descriptor, events: Int16(POLLIN), revents: 0),
        ]
        let milliseconds = pollMilliseconds(timeout)
        while true {
            let ready = poll(&pollers, 2, milliseconds)
            if ready < 0 {
                if errno == EINTR { continue }
                throw SocketError.last("poll")
            }
            if pollers[1].revents != 0 { wake.drain() }
            if pollers[0].revents != 0 { return .readable }
            return pollers[1].revents != 0 ? .signalled : .timedOut
        }
    }

    /// Whether the other end is gone: closed in both directions, not merely done sending
    /// (a client may shut down its writing side and still read its answers). Does not
    /// block. The corresponding C function is `poll`.
    public var peerHasClosed: Bool {
        var poller = pollfd(fd: descriptor, events: 0, revents: 0)
        guard poll(&poller, 1, 0) == 1 else { return false }
        return poller.revents & Int16(POLLHUP | POLLERR) != 0
    }

    /// Writes all of `bytes`, however many calls it takes.
    public func write(_ bytes: [UInt8]) throws(SocketError) {
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { raw in
                Glibc.send(descriptor, raw.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL))
            }
            if n > 0 {
                offset += n
            } else if n < 0, errno == EINTR {
                continue
            } else {
                throw SocketError.last("write")
            }
        }
    }

    /// Writes as much of `bytes[offset...]` as the socket takes without blocking and returns
    /// how many bytes that was: 0 when its buffer is full. The corresponding C function is
    /// `send` with `MSG_DONTWAIT`.
    public func writeAvailable(_ bytes: [UInt8], from offset: Int = 0) throws(SocketError) -> Int {
        var written = offset
        while written < bytes.count {
            let n = bytes.withUnsafeBytes { raw in
                Glibc.send(
                    descriptor, raw.baseAddress! + written, bytes.count - written,
                    Int32(MSG_NOSIGNAL) | Int32(MSG_DONTWAIT))
            }
            if n > 0 {
                written += n
            } else if n < 0, errno == EINTR {
                continue
            } else if n < 0, errno == EAGAIN || errno == EWOULDBLOCK {
                break
            } else {
                throw SocketError.last("write")
            }
        }
        return written - offset
    }

    /// Bounds how long a read or a write may block; nil for no bound. A read or write that
    /// waits longer throws an error whose `isTimeout` is true.
    public func setTimeouts(read: Double?, write: Double?) throws(SocketError) {
        func set(_ option: Int32, _ seconds: Double?) throws(SocketError) {
            let total = seconds ?? 0
            var value = timeval(tv_sec: Int(total), tv_usec: Int((total - Double(Int(total))) * 1_000_000))
            guard setsockopt(descriptor, SOL_SOCKET, option, &value, socklen_t(MemoryLayout<timeval>.size)) == 0
            else { throw SocketError.last("setsockopt") }
        }
        try set(SO_RCVTIMEO, read)
        try set(SO_SNDTIMEO, write)
    }

    /// The process at the other end, as the kernel saw it connect (`SO_PEERCRED`).
    public func peerCredentials() throws(SocketError) -> PeerCredentials {
        // struct ucred from <sys/socket.h> (visible to C only with _GNU_SOURCE): pid, uid, gid.
        var credentials = (pid: Int32(0), uid: UInt32(0), gid: UInt32(0))
        var length = socklen_t(MemoryLayout<(Int32, UInt32, UInt32)>.size)
        guard getsockopt(descriptor, SOL_SOCKET, SO_PEERCRED, &credentials, &length) == 0 else {
            throw SocketError.last("getsockopt(SO_PEERCRED)")
        }
        return PeerCredentials(
            pid: credentials.pid, uid: credentials.uid, gid: credentials.gid, groups: peerGroups())
    }

    /// The supplementary groups of the process at the other end, as they were when it
    /// connected (`SO_PEERGROUPS`, Linux 4.13 and later); nil when the kernel cannot tell.
    /// The corresponding C function is `getsockopt`.
    private func peerGroups() -> [UInt32]? {
        // SO_PEERGROUPS from <asm-generic/socket.h>.
        let option: Int32 = 59
        var groups = [gid_t](repeating: 0, count: 64)
        while true {
            var length = socklen_t(groups.count * MemoryLayout<gid_t>.size)
            if getsockopt(descriptor, SOL_SOCKET, option, &groups, &length) == 0 {
                return Array(groups.prefix(Int(length) / MemoryLayout<gid_t>.size))
            }
            // Too small: `length` holds the size it needs.
            guard errno == ERANGE, Int(length) > groups.count * MemoryLayout<gid_t>.size else { return nil }
            groups = [gid_t](repeating: 0, count: Int(length) / MemoryLayout<gid_t>.size)
        }
    }

    /// Ends the reading side, or both: a thread blocked in `read` wakes and sees the end.
    public func shutdown(writing: Bool = true) {
        open.withLock { open in
            if open { _ = Glibc.shutdown(descriptor, Int32(writing ? SHUT_RDWR : SHUT_RD)) }
        }
    }

    /// Ends the writing side only: the other end reads the end of the stream, and what it
    /// still sends can be read here. The corresponding C function is `shutdown` with `SHUT_WR`.
    public func shutdownWriting() {
        open.withLock { open in
            if open { _ = Glibc.shutdown(descriptor, Int32(SHUT_WR)) }
        }
    }

    /// Closes the descriptor. Call once, after every other use has returned.
    public func close() {
        open.withLock { open in
            if open { Glibc.close(descriptor) }
            open = false
        }
    }
}

/// Who is at the other end of a Unix socket.
public struct PeerCredentials: Equatable, Sendable {
    public var pid: Int32
    /// The effective user and group ids.
    public var uid: UInt32
    public var gid: UInt32
    /// The supplementary groups, when the kernel tells them (`SO_PEERGROUPS`).
    public var groups: [UInt32]?

    public init(pid: Int32, uid: UInt32, gid: UInt32, groups: [UInt32]? = nil) {
        self.pid = pid
        self.uid = uid
        self.gid = gid
        self.groups = groups
    }
}

/// Runs `body` with a `sockaddr_un` for `path`.
func withAddress<R>(_ path: String, _ body: (UnsafePointer<sockaddr>, socklen_t) -> R) throws(SocketError) -> R {
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    let bytes = Array(path.utf8)
    let capacity = MemoryLayout.size(ofValue: address.sun_path)
    guard !bytes.isEmpty, bytes.count < capacity, !bytes.contains(0) else {
        throw SocketError(
            "bind", path: path, code: ENAMETOOLONG,
            message: "a Unix socket path must be 1 to \(capacity - 1) bytes; choose a shorter path")
    }
    withUnsafeMutableBytes(of: &address.sun_path) { raw in
        raw.copyBytes(from: bytes)
    }
    return withUnsafePointer(to: &address) { pointer in
        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            body($0, socklen_t(MemoryLayout<sockaddr_un>.size))
        }
    }
}

/// `seconds` as the milliseconds `poll` and `epoll_wait` take: rounded up, so a wait never
/// ends early, and clamped to 0 through `Int32.max`.
func pollMilliseconds(_ seconds: Double) -> Int32 {
    Int32(min(max(seconds, 0) * 1000, Double(Int32.max)).rounded(.up))
}
