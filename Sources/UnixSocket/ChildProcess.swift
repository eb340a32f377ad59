import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A process started with its standard input and output on one end of a socket pair, so
/// that this process talks to it through a `UnixConnection` (as it would to a daemon), and
/// its standard error on a pipe whose last bytes are kept for error messages.
///
/// The child gets descriptors 0, 1 and 2 and no other, an empty signal mask and every
/// signal's default action, whatever this process blocks or ignores.
///
/// - Important: Only `wait` and `terminate` reap the child, one call at a time under a
///   lock, and a signal is sent only while the child is not reaped: its pid cannot have
///   been reused by then. Do not reap it elsewhere (`waitpid(-1, ...)`, or `SIGCHLD` set
///   to `SIG_IGN`, which makes the kernel reap it and lose its status).
public final class ChildProcess: Sendable {
    public let pid: Int32
    /// How the child ended, once reaped; nil before.
    private let termination = Mutex<Termination?>(nil)
    private let errorTail: StandardErrorTail

    private init(pid: Int32, errorTail: StandardErrorTail) {
        self.pid = pid
        self.errorTail = errorTail
    }

    /// A child that is still running when the last reference goes is killed and reaped,
    /// so that it leaves no zombie behind.
    deinit {
        termination.withLock { termination in
            guard termination == nil else { return }
            kill(pid, SIGKILL)
            var status: Int32 = 0
            while waitpid(pid, &status, 0) < 0, errno == EINTR {}
        }
    }

    /// Starts `arguments` (arguments[0] is looked up in PATH, like execvp), with `environment` (nil: inherit).
    ///
    /// Returns the child and this process's end of the socket pair; closing that end (or
    /// `shutdownWriting()`) is the end of the child's standard input. The corresponding C
    /// function is `posix_spawnp`.
    public static func spawn(_ arguments: [String], environment: [String: String]? = nil)
        throws(SocketError) -> (ChildProcess, UnixConnection)
    {
        guard let command = arguments.first, !command.isEmpty else {
            throw SocketError("posix_spawnp", code: EINVAL, message: "no command to run was given")
        }
        var sockets: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &sockets) == 0
        else { throw SocketError.last("socketpair") }
        let connection = UnixConnection(adopting: sockets[0])
        var childSocket = sockets[1]
        defer { close(childSocket) }
        let errorPipe = try ChildProcess.makePipe()
        var errorWriter = errorPipe.writing
        defer { close(errorWriter) }
        // The reader ends when every writer closed the pipe: the child, and this process
        // (by the defer above) whether or not the spawn succeeds.
        let errorTail = try StandardErrorTail.start(reading: errorPipe.reading)
        childSocket = try ChildProcess.aboveStandardStreams(childSocket)
        errorWriter = try ChildProcess.aboveStandardStreams(errorWriter)
        let pid = try ChildProcess.launch(
            arguments, environment: environment, standardInOut: childSocket, standardError: errorWriter)
        return (ChildProcess(pid: pid, errorTail: errorTail), connection)
    }

    /// The last few KiB the child wrote to stderr (captured by a thread through a pipe, bounded to the last 8 KiB),
    /// complete once the child exited and wait returned.
    ///
    /// Invalid UTF-8 (or a character cut at the start of the kept bytes) shows as U+FFFD.
    public var standardError: String { errorTail.text }

    /// How a child ended.
    public enum Termination: Equatable, Sendable {
        /// It exited with this status.
        case exited(Int32)
        /// A signal ended it.
        case signalled(Int32)

        /// From the status `waitpid` stores (`WIFEXITED`, `WEXITSTATUS` and `WTERMSIG` are
        /// macros Swift does not import).
        init(waitStatus status: Int32) {
            let signal = status & 0x7f
            self = signal == 0 ? .exited((status >> 8) & 0xff) : .signalled(signal)
        }
    }

    /// Waits for the exit, at most `timeout` seconds (nil: forever); nil when still running.
    ///
    /// Once the child has exited, waits up to `standardErrorTimeout` seconds more for the
    /// end of its standard error (a process it started may still hold the pipe open), so
    /// `standardError` is complete.
    public func wait(timeout: Double?, standardErrorTimeout: Double = 1) -> Termination? {
        // Polled with WNOHANG rather than blocking in waitpid: a blocking wait would either
        // hold the lock (and `terminate` could not signal) or run outside it (and a signal
        // could reach a reaped, reused pid).
        let deadline = timeout.map { Clock.now() + $0 }
        var pause = 0.001
        while true {
            if let termination = reap() {
                errorTail.waitForEnd(timeout: standardErrorTimeout)
                return termination
            }
            if let deadline {
                let remaining = deadline - Clock.now()
                if remaining <= 0 { return nil }
                pause = min(pause, remaining)
            }
            Clock.sleep(pause)
            pause = min(pause * 2, 0.05)
        }
    }

    /// SIGTERM, then SIGKILL after `grace` seconds, then reaps it; `standardErrorTimeout`
    /// as for `wait`.
    public func terminate(grace: Double = 1, standardErrorTimeout: Double = 1) -> Termination {
        signal(SIGTERM)
        if let termination = wait(timeout: grace, standardErrorTimeout: standardErrorTimeout) { return termination }
        signal(SIGKILL)
        while true {
            if let termination = wait(timeout: nil, standardErrorTimeout: standardErrorTimeout) { return termination }
        }
    }

    /// Sends `signal` unless the child is reaped. The corresponding C function is `kill`.
    private func signal(_ signal: Int32) {
        termination.withLock { termination in
            if termination == nil { kill(pid, signal) }
        }
    }

    /// The termination when the child has ended (reaping it, the first time), nil while it
    /// runs. The corresponding C function is `waitpid` with `WNOHANG`.
    private func reap() -> Termination? {
        termination.withLock { termination in
            guard termination == nil else { return termination }
            var status: Int32 = 0
            while true {
                let result = waitpid(pid, &status, WNOHANG)
                if result == pid {
                    termination = Termination(waitStatus: status)
                } else if result < 0, errno == EINTR {
                    continue
                } else if result < 0 {
                    // ECHILD: reaped by someone else (see the class's note); its status is lost.
                    termination = .exited(-1)
                }
                return termination
            }
        }
    }

    // MARK: Spawning

    /// Runs the command with `standardInOut` as descriptors 0 and 1 and `standardError` as 2.
    private static func launch(
        _ arguments: [String], environment: [String: String]?, standardInOut: Int32, standardError: Int32
    ) throws(SocketError) -> Int32 {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, standardInOut, 0)
        posix_spawn_file_actions_adddup2(&actions, standardInOut, 1)
        posix_spawn_file_actions_adddup2(&actions, standardError, 2)
        posix_spawn_file_actions_addclose(&actions, standardInOut)
        posix_spawn_file_actions_addclose(&actions, standardError)
        // Descriptors are opened close-on-exec here, but not everywhere at once (accept,
        // then fcntl): closing the rest makes sure another thread's new one cannot leak.
        if let closeFrom = GNUExtensions.addCloseFrom { _ = closeFrom(&actions, 3) }

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var noSignals = sigset_t()
        sigemptyset(&noSignals)
        posix_spawnattr_setsigmask(&attributes, &noSignals)
        var allSignals = sigset_t()
        sigfillset(&allSignals)
        posix_spawnattr_setsigdefault(&attributes, &allSignals)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        var pid: pid_t = 0
        let command = arguments[0]
        let result = withCStrings(arguments) { argv in
            if let environment {
                return withCStrings(environment.map { "\($0.key)=\($0.value)" }) { envp in
                    posix_spawnp(&pid, command, &actions, &attributes, argv, envp)
                }
            }
            return posix_spawnp(&pid, command, &actions, &attributes, argv, environ)
        }
        guard result == 0 else {
            let reason =
                result == ENOENT
                ? "no such command (looked for in PATH)" : String(cString: strerror(result)).lowercased()
            throw SocketError("posix_spawnp", code: result, message: "cannot run \(command): \(reason)")
        }
        return pid
    }

    /// A pipe, both ends close-on-exec from the start.
    private static func makePipe() throws(SocketError) -> (reading: Int32, writing: Int32) {
        var ends: [Int32] = [-1, -1]
        if let pipe2 = GNUExtensions.pipe2 {
            guard pipe2(&ends, O_CLOEXEC) == 0 else { throw SocketError.last("pipe2") }
        } else {
            guard pipe(&ends) == 0 else { throw SocketError.last("pipe") }
            for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        }
        return (ends[0], ends[1])
    }

    /// `descriptor`, or a close-on-exec copy of it numbered 3 or more when it is 0, 1 or 2
    /// (when this process runs without standard streams): the child's dup2 onto 0, 1 and 2
    /// must not overwrite a descriptor it still has to copy.
    private static func aboveStandardStreams(_ descriptor: Int32) throws(SocketError) -> Int32 {
        guard descriptor < 3 else { return descriptor }
        let copy = fcntl(descriptor, F_DUPFD_CLOEXEC, 3)
        guard copy >= 0 else { throw SocketError.last("fcntl(F_DUPFD_CLOEXEC)") }
        close(descriptor)
        return copy
    }
}

/// Runs `body` with `strings` as a NULL-terminated array of C strings (an argv or envp).
private func withCStrings<R>(
    _ strings: [String], _ body: (UnsafePointer<UnsafeMutablePointer<CChar>?>) -> R
) -> R {
    let pointers = strings.map { strdup($0) } + [nil]
    defer { for pointer in pointers { free(pointer) } }
    return pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
}

/// glibc functions that Swift's Glibc module does not import (they are declared only with
/// `_GNU_SOURCE` or `__USE_MISC`), looked up at run time; nil where glibc lacks them.
private enum GNUExtensions {
    typealias AddCloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>?, Int32) -> Int32
    typealias Pipe2 = @convention(c) (UnsafeMutablePointer<Int32>?, Int32) -> Int32

    /// `posix_spawn_file_actions_addclosefrom_np` (glibc 2.34).
    static let addCloseFrom: AddCloseFrom? = dlsym(nil, "posix_spawn_file_actions_addclosefrom_np").map {
        unsafeBitCast($0, to: AddCloseFrom.self)
    }
    /// `pipe2` (glibc 2.9).
    static let pipe2: Pipe2? = dlsym(nil, "pipe2").map { unsafeBitCast($0, to: Pipe2.self) }
}

/// The monotonic clock, in seconds.
private enum Clock {
    static func now() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }

    static func sleep(_ seconds: Double) {
        var remaining = timespec(tv_sec: Int(seconds), tv_nsec: Int((seconds - Double(Int(seconds))) * 1e9))
        var request = remaining
        while nanosleep(&request, &remaining) < 0, errno == EINTR { request = remaining }
    }
}

/// The last bytes written to a pipe (a child's standard error), read by a thread of its own
/// until every writer closed it, so the child never blocks on a full pipe.
private final class StandardErrorTail: @unchecked Sendable {
    /// How many of the last bytes are kept.
    static let limit = 8 * 1024

    /// The bytes read, at most twice `limit` (the oldest are dropped in batches).
    private let bytes = Mutex<[UInt8]>([])
    /// Posted by the reading thread at the end of the pipe (unsafe pointer: a `sem_t` must
    /// not move).
    private let ended: UnsafeMutablePointer<sem_t>
    private let descriptor: Int32

    private init(descriptor: Int32) {
        self.descriptor = descriptor
        ended = UnsafeMutablePointer<sem_t>.allocate(capacity: 1)
        sem_init(ended, 0, 0)
    }

    deinit {
        sem_destroy(ended)
        ended.deallocate()
    }

    /// Starts the thread that reads `descriptor` to its end, then closes it.
    static func start(reading descriptor: Int32) throws(SocketError) -> StandardErrorTail {
        let tail = StandardErrorTail(descriptor: descriptor)
        var thread = pthread_t()
        let context = Unmanaged.passRetained(tail).toOpaque()
        let created = pthread_create(
            &thread, nil,
            { context in
                Unmanaged<StandardErrorTail>.fromOpaque(context!).takeRetainedValue().readToEnd()
                return nil
            }, context)
        guard created == 0 else {
            Unmanaged<StandardErrorTail>.fromOpaque(context).release()
            close(descriptor)
            throw SocketError("pthread_create", code: created)
        }
        pthread_detach(thread)
        return tail
    }

    private func readToEnd() {
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = chunk.withUnsafeMutableBytes { raw in read(descriptor, raw.baseAddress, raw.count) }
            if n < 0, errno == EINTR { continue }
            guard n > 0 else { break }
            bytes.withLock { bytes in
                bytes += chunk[..<n]
                if bytes.count > 2 * StandardErrorTail.limit {
                    bytes.removeFirst(bytes.count - StandardErrorTail.limit)
                }
            }
        }
        close(descriptor)
        sem_post(ended)
    }

    /// Waits up to `timeout` seconds for the end of the pipe.
    func waitForEnd(timeout: Double) {
        var deadline = timespec()
        clock_gettime(CLOCK_REALTIME, &deadline)
        let nanoseconds = deadline.tv_nsec + Int(timeout * 1e9)
        deadline.tv_sec += nanoseconds / 1_000_000_000
        deadline.tv_nsec = nanoseconds % 1_000_000_000
        while true {
            if sem_timedwait(ended, &deadline) == 0 {
                sem_post(ended)  // for the next caller
                return
            }
            if errno != EINTR { return }
        }
    }

    var text: String {
        String(decoding: bytes.withLock { $0.suffix(StandardErrorTail.limit) }, as: UTF8.self)
    }
}
