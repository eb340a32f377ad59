#if canImport(Glibc)
    import Glibc
#endif

/// Starts a detached thread that runs `body`, or returns the error that kept it from
/// starting (`EAGAIN` under a task or memory limit). Foundation's `Thread.start()` cannot
/// report that failure: the thread silently never runs, so whatever it was to close stays
/// open. The corresponding C function is `pthread_create`.
///
/// `name` is cut to the 15 bytes Linux keeps; `stackBytes` nil takes the system's default.
public func startThread(name: String, stackBytes: Int? = nil, _ body: @escaping @Sendable () -> Void)
    -> SocketError?
{
    var attributes = pthread_attr_t()
    pthread_attr_init(&attributes)
    defer { pthread_attr_destroy(&attributes) }
    pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
    if let stackBytes {
        let status = pthread_attr_setstacksize(&attributes, stackBytes)
        if status != 0 { return SocketError("pthread_attr_setstacksize", code: status) }
    }
    let box = Unmanaged.passRetained(ThreadBody(name: String(decoding: name.utf8.prefix(15), as: UTF8.self), body))
    var thread = pthread_t()
    let status = pthread_create(
        &thread, &attributes,
        { argument in
            let body = Unmanaged<ThreadBody>.fromOpaque(argument!).takeRetainedValue()
            _ = setThreadName?(pthread_self(), body.name)
            body.run()
            return nil
        }, box.toOpaque())
    if status != 0 {
        box.release()
        return SocketError("pthread_create", code: status)
    }
    return nil
}

/// `pthread_setname_np`, which Glibc declares for C only with _GNU_SOURCE: looked up once.
private typealias SetThreadName = @convention(c) (pthread_t, UnsafePointer<CChar>) -> Int32
private let setThreadName: SetThreadName? = dlsym(nil, "pthread_setname_np").map {
    unsafeBitCast($0, to: SetThreadName.self)
}

/// What a thread started by `startThread` runs, handed to it through `pthread_create`.
private final class ThreadBody: Sendable {
    let name: String
    let run: @Sendable () -> Void

    init(name: String, _ run: @escaping @Sendable () -> Void) {
        self.name = name
        self.run = run
    }
}
