import FoundationEssentials
import UnixSocket

/// The connection to a peer, and for exec: and ssh:// peers the process that carries it.
package final class PeerLink {
    package let connection: UnixConnection
    package let child: ChildProcess?
    package let url: PeerURL

    private init(connection: UnixConnection, child: ChildProcess?, url: PeerURL) {
        self.connection = connection
        self.child = child
        self.url = url
    }

    /// Connects to the peer at `url`; `ssh` is the ssh client's command. A socket whose
    /// listener accepts nothing fails after `timeout` seconds (`sync_timeout_s`).
    package static func open(_ url: PeerURL, ssh: [String], timeout: Double = 30) throws(SyncError) -> PeerLink {
        if case .unix(let path) = url {
            do {
                return PeerLink(
                    connection: try UnixConnection.connect(to: path, timeout: timeout), child: nil, url: url)
            } catch {
                if error.isTimeout {
                    throw SyncError(
                        .timeout, "the socket at \(path) accepted no connection for \(Int(timeout)) s (sync_timeout_s)")
                }
                throw SyncError(.unreachable, "no daemon answers at \(path): \(error)")
            }
        }
        let command = url.command(ssh: ssh)!
        do {
            let (child, connection) = try ChildProcess.spawn(command)
            return PeerLink(connection: connection, child: child, url: url)
        } catch {
            throw SyncError(.unreachable, "cannot start \(command[0]): \(error)")
        }
    }

    /// Ends the link. For a process, waits a moment for it to exit (then stops it) and,
    /// when the session failed, explains the failure from what the process said: ssh's
    /// complaints about keys and hosts, a missing remote evctl, a remote daemon not running.
    ///
    /// After a failure this takes well under a second, however the process behaves: it has
    /// a quarter of a second to exit once its input ends (ssh that failed has exited by
    /// then), then SIGTERM and a quarter more, then SIGKILL; what it wrote to stderr is
    /// awaited a quarter of a second more (a process it started may hold the pipe). A
    /// silent peer's session so ends within `sync_timeout_s` and a moment. After a success
    /// the process has `timeout` seconds (at most 5) to exit.
    package func close(after error: SyncError?, timeout: Double = 5) -> SyncError? {
        connection.shutdown()
        guard let child else {
            connection.close()
            return error
        }
        let termination =
            if error == nil {
                child.wait(timeout: min(timeout, 5)) ?? child.terminate(grace: 1)
            } else {
                child.wait(timeout: 0.25, standardErrorTimeout: 0.5)
                    ?? child.terminate(grace: 0.25, standardErrorTimeout: 0.25)
            }
        connection.close()
        guard let error else { return nil }
        let said = child.standardError.split(whereSeparator: \.isNewline).map(String.init)
            .filter { !$0.isEmpty && !$0.hasPrefix("Warning: Permanently added") }
        let lastLine = said.last ?? ""
        let all = said.joined(separator: " ")
        let exit: Int32? = if case .exited(let code) = termination { code } else { nil }
        // Only a session that failed on the transport (nothing or garbage came back) is
        // explained by the process; a protocol error stands as it is.
        switch error.reason {
        case .closed, .timeout, .notEvstore: break
        default: return error
        }
        if exit == 77 {
            return SyncError(
                .authentication,
                "the remote user may not use the peer's daemon socket (add it to its group): \(lastLine)")
        }
        if all.contains("Permission denied") || all.contains("Host key verification failed")
            || all.contains("Too many authentication failures")
            || all.contains("REMOTE HOST IDENTIFICATION HAS CHANGED")
        {
            return SyncError(.authentication, "ssh was refused: \(lastLine)")
        }
        if all.contains("Connection refused") || all.contains("Could not resolve hostname")
            || all.contains("No route to host") || all.contains("Connection timed out")
            || all.contains("Network is unreachable") || all.contains("Connection closed by")
        {
            return SyncError(.unreachable, "ssh could not connect: \(lastLine)")
        }
        if exit == 127 || all.contains("command not found") {
            return SyncError(
                .remoteCommand, "the peer's command was not found (is evctl installed and in PATH there?): \(lastLine)")
        }
        if exit == 69 {
            return SyncError(.unreachable, "the peer's daemon is not running: \(lastLine)")
        }
        if !lastLine.isEmpty {
            var refined = error
            refined.message += " (the peer's command said: \(lastLine))"
            return refined
        }
        return error
    }
}
