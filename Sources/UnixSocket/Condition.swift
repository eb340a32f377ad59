#if canImport(Glibc)
    import Glibc
#endif

/// A mutex that is locked and unlocked in separate calls (where `Synchronization.Mutex`'s
/// closure cannot span the code it guards). The corresponding C type is `pthread_mutex_t`,
/// kept at a fixed address (a pthread mutex must not move).
public final class Lock: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>

    public init() {
        mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    public func lock() { pthread_mutex_lock(mutex) }
    public func unlock() { pthread_mutex_unlock(mutex) }
}

/// A mutex with a condition variable: `lock()`, then `wait` until the state it guards
/// changes, which whoever changes it announces with `signal()` or `broadcast()` while
/// holding the lock. Timed waits run on the monotonic clock, so moving the wall clock
/// neither cuts them short nor stretches them. The corresponding C types are
/// `pthread_mutex_t` and `pthread_cond_t`.
public final class Condition: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let condition: UnsafeMutablePointer<pthread_cond_t>

    public init() {
        mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
        condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        pthread_cond_destroy(condition)
        condition.deallocate()
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    public func lock() { pthread_mutex_lock(mutex) }
    public func unlock() { pthread_mutex_unlock(mutex) }

    /// Wakes one waiter.
    public func signal() { pthread_cond_signal(condition) }

    /// Wakes every waiter.
    public func broadcast() { pthread_cond_broadcast(condition) }

    /// Releases the lock until woken (or spuriously), then holds it again.
    public func wait() { pthread_cond_wait(condition, mutex) }

    /// `wait()`, until `deadline` at the latest: false when it passed first.
    public func wait(until deadline: ContinuousClock.Instant) -> Bool {
        let left = ContinuousClock.now.duration(to: deadline).components
        return wait(seconds: Double(left.seconds) + Double(left.attoseconds) / 1e18)
    }

    /// `wait()`, for at most `seconds`: false when the time ran out first.
    public func wait(seconds: Double) -> Bool {
        guard seconds > 0 else { return false }
        var deadline = timespec()
        clock_gettime(CLOCK_MONOTONIC, &deadline)
        let whole = seconds.rounded(.down)
        let nanoseconds = deadline.tv_nsec + Int((seconds - whole) * 1e9)
        deadline.tv_sec += Int(min(whole, Double(Int32.max))) + nanoseconds / 1_000_000_000
        deadline.tv_nsec = nanoseconds % 1_000_000_000
        return pthread_cond_timedwait(condition, mutex, &deadline) != ETIMEDOUT
    }
}

/// Suspends the calling thread for `seconds` (resuming the sleep after a signal). The
/// corresponding C function is `nanosleep`.
public func sleepThread(seconds: Double) {
    guard seconds > 0 else { return }
    let whole = seconds.rounded(.down)
    var request = timespec(tv_sec: Int(whole), tv_nsec: Int((seconds - whole) * 1e9))
    var remaining = timespec()
    while nanosleep(&request, &remaining) < 0, errno == EINTR { request = remaining }
}
