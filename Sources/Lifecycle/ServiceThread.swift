import UnixSocket

#if canImport(Glibc)
    import Glibc
#endif

/// Starts one of the daemon's long-lived threads (accept, writer, sync, maintenance). Without
/// it the daemon cannot serve, so a thread that cannot start (a task or memory limit at
/// startup) ends the process with `EX_OSERR` and says why, rather than leaving a daemon
/// that answers nothing.
package func startServiceThread(name: String, _ body: @escaping @Sendable () -> Void) {
    guard let error = startThread(name: name, body) else { return }
    try? FileDescriptor.write(
        "evstored: cannot start the \(name) thread: \(error.message)\n", to: FileDescriptor.standardError)
    exit(71)
}

/// Runs `body` on a thread of its own, or on the calling thread when none can be started:
/// slower, but the work is done and nothing waits for a thread that never ran.
package func runOnThread(name: String, _ body: @escaping @Sendable () -> Void) {
    if startThread(name: name, body) != nil { body() }
}
