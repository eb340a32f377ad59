import CEpoll

#if canImport(Glibc)
    import Glibc
#endif

/// An epoll instance: the descriptors one event-loop thread waits on, each with a 64-bit
/// tag the caller chooses (its own number for the connection, never the descriptor: a
/// descriptor number closed and reused must not be mistaken for the one before).
///
/// Level-triggered: a descriptor that stays readable is reported again at each wait.
///
/// - Important: `wait` runs on one thread; `add`, `modify` and `remove` may run on any.
public final class Epoll: @unchecked Sendable {
    /// What a descriptor is watched for, and what a wait reports.
    public struct Events: OptionSet, Sendable {
        public let rawValue: UInt32
        public init(rawValue: UInt32) { self.rawValue = rawValue }

        public static let readable = Events(rawValue: evstore_epollin)
        public static let writable = Events(rawValue: evstore_epollout)
        /// Reported whether asked for or not: the other end is gone, or the socket failed.
        public static let hangUp = Events(rawValue: evstore_epollhup)
        public static let error = Events(rawValue: evstore_epollerr)
    }

    /// One descriptor that is ready: its tag and what it is ready for.
    public struct Ready: Sendable {
        public var tag: UInt64
        public var events: Events
    }

    public let descriptor: Int32
    /// Where `wait` receives the kernel's reports (one waiting thread).
    private let tags: UnsafeMutablePointer<UInt64>
    private let events: UnsafeMutablePointer<UInt32>
    private let capacity: Int32

    /// A new epoll instance that reports up to `capacity` (at most 256) descriptors per
    /// wait. The corresponding C function is `epoll_create1`.
    public init(capacity: Int = 256) throws(SocketError) {
        let fd = evstore_epoll_create()
        guard fd >= 0 else { throw SocketError.last("epoll_create1") }
        descriptor = fd
        self.capacity = Int32(min(capacity, 256))
        tags = .allocate(capacity: capacity)
        events = .allocate(capacity: capacity)
    }

    deinit {
        Glibc.close(descriptor)
        tags.deallocate()
        events.deallocate()
    }

    /// Starts watching `fd` for `events`, reporting it with `tag`.
    public func add(_ fd: Int32, events: Events, tag: UInt64) throws(SocketError) {
        try control(evstore_epoll_ctl_add, fd, events: events, tag: tag)
    }

    /// Changes what `fd` is watched for.
    public func modify(_ fd: Int32, events: Events, tag: UInt64) throws(SocketError) {
        try control(evstore_epoll_ctl_mod, fd, events: events, tag: tag)
    }

    /// Stops watching `fd` (call before it is closed).
    public func remove(_ fd: Int32) {
        _ = evstore_epoll_ctl(descriptor, evstore_epoll_ctl_del, fd, 0, 0)
    }

    private func control(_ operation: Int32, _ fd: Int32, events: Events, tag: UInt64) throws(SocketError) {
        guard evstore_epoll_ctl(descriptor, operation, fd, events.rawValue, tag) == 0 else {
            throw SocketError.last("epoll_ctl")
        }
    }

    /// Waits up to `timeout` seconds (nil: until something is ready) and returns what is
    /// ready; empty when the time ran out or a signal came. The corresponding C function is
    /// `epoll_wait`.
    public func wait(timeout: Double?) -> [Ready] {
        let milliseconds = timeout.map(pollMilliseconds) ?? -1
        let count = evstore_epoll_wait(descriptor, tags, events, capacity, milliseconds)
        guard count > 0 else { return [] }
        return (0..<Int(count)).map { Ready(tag: tags[$0], events: Events(rawValue: events[$0])) }
    }
}

/// An eventfd: a counter another thread bumps to wake a thread waiting in `Epoll.wait`.
public final class EventFD: @unchecked Sendable {
    public let descriptor: Int32

    /// The corresponding C function is `eventfd`.
    public init() throws(SocketError) {
        let fd = evstore_eventfd()
        guard fd >= 0 else { throw SocketError.last("eventfd") }
        descriptor = fd
    }

    deinit { Glibc.close(descriptor) }

    /// Makes the descriptor readable (wakes its waiter). Never blocks.
    public func signal() {
        var one: UInt64 = 1
        _ = Glibc.write(descriptor, &one, 8)
    }

    /// Resets it to not readable.
    public func drain() {
        var count: UInt64 = 0
        _ = Glibc.read(descriptor, &count, 8)
    }
}
