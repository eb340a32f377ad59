#if canImport(Glibc)
    import Glibc
#endif

/// A listening Unix stream socket.
public final class UnixListener: @unchecked Sendable {
    /// The listening descriptor; -1 once closed.
    public private(set) var descriptor: Int32
    /// The socket file, when this listener made it (and so removes it at close).
    public let path: String?

    private init(descriptor: Int32, path: String?) {
        self.descriptor = descriptor
        self.path = path
    }

    deinit { close() }

    /// Binds and listens on `path` with the file mode `mode` (and `group` when given).
    ///
    /// A socket file left by a crashed run (nobody accepts on it) is replaced; a socket a
    /// live process accepts on is not: that is an error saying so. A path that exists and
    /// is not a socket is never removed.
    public static func bind(path: String, mode: mode_t = 0o660, group: gid_t? = nil, backlog: Int32 = 128)
        throws(SocketError) -> UnixListener
    {
        var info = stat()
        if lstat(path, &info) == 0 {
            guard info.st_mode & S_IFMT == S_IFSOCK else {
                throw SocketError(
                    "bind", path: path, code: EEXIST,
                    message: "the path exists and is not a socket; remove it or choose another socket path")
            }
            do throws(SocketError) {
                let probe = try UnixConnection.connect(to: path)
                probe.close()
                throw SocketError(
                    "bind", path: path, code: EADDRINUSE,
                    message: "another daemon is serving this socket; stop it or choose another socket path")
            } catch {
                guard error.isConnectionRefused else { throw error }
                unlink(path)  // stale: left by a run that did not close it
            }
        }
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw SocketError.last("socket") }
        // The file is made with at most the final mode (the socket's own mode, less the
        // umask), so no other user can connect in between bind and chmod. Not by setting the
        // umask for the bind: it is the process's, and a file or directory another thread
        // made meanwhile took it too (a backup's directory, a blob's file) with bits missing.
        guard fchmod(fd, mode) == 0 else {
            let error = SocketError.last("fchmod", path: path)
            Glibc.close(fd)
            throw error
        }
        let bound = try withAddress(path) { address, length in Glibc.bind(fd, address, length) }
        let bindError = errno
        guard bound == 0 else {
            Glibc.close(fd)
            throw SocketError("bind", path: path, code: bindError)
        }
        let listener = UnixListener(descriptor: fd, path: path)
        guard chmod(path, mode) == 0 else { throw SocketError.last("chmod", path: path) }
        if let group, chown(path, uid_t.max, group) != 0 {
            throw SocketError.last("chown", path: path)
        }
        guard listen(fd, backlog) == 0 else { throw SocketError.last("listen", path: path) }
        return listener
    }

    /// A listener on a descriptor another process opened (systemd socket activation).
    public static func adopting(descriptor: Int32) -> UnixListener {
        _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC)
        return UnixListener(descriptor: descriptor, path: nil)
    }

    /// Waits up to `timeout` seconds for a client. Returns nil when none came in time, or
    /// when the listener is closed.
    public func accept(timeout: Double) throws(SocketError) -> UnixConnection? {
        guard descriptor >= 0 else { return nil }
        var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        let ready = poll(&poller, 1, Int32(timeout * 1000))
        if ready < 0 {
            if errno == EINTR { return nil }
            throw SocketError.last("poll")
        }
        if ready == 0 { return nil }
        let fd = Glibc.accept(descriptor, nil, nil)
        if fd >= 0 { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        if fd < 0 {
            switch errno {
            case EINTR, EAGAIN, ECONNABORTED: return nil
            default: throw SocketError.last("accept")
            }
        }
        return UnixConnection(adopting: fd)
    }

    /// Stops listening and removes the socket file this listener made.
    public func close() {
        guard descriptor >= 0 else { return }
        Glibc.close(descriptor)
        descriptor = -1
        if let path { unlink(path) }
    }
}
