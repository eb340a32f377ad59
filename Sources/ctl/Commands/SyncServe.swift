import Arguments
import Synchronization
import UnixSocket

#if canImport(Glibc)
    import Glibc
#endif

/// `evctl sync-serve`: standard input and output joined to the daemon's socket, byte for
/// byte, so a peer on another machine reaches the daemon through ssh.
///
/// One thread copies standard input to the socket, this one copies the socket to standard
/// output; neither waits for the other, so however the two sides interleave, nothing
/// fills up waiting for the other to read.
struct SyncServe: Command {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "sync-serve",
            abstract: "Relay the sync protocol between stdin/stdout and the local daemon (what a peer runs over ssh).",
            discussion: """
                Peers run it as `ssh user@host evctl sync-serve`, and it works with exec: peers: \
                whatever command an exec: peer runs to reach this node ends in it, e.g.

                  ssh user@host evctl sync-serve

                What the peer writes to standard input goes to the daemon's socket as it is, and \
                what the daemon answers comes out on standard output. At the end of standard \
                input the daemon reads the end of its requests; evctl exits 0 once the daemon has \
                answered them and closed the connection.

                It connects as the user who runs it (over ssh, the remote account), so the \
                daemon's socket permissions and access lists apply: a session needs read-write \
                access, and a daemon that gives this user less refuses it with forbidden, which \
                the initiating node reports.
                """)
    }

    var global: GlobalOptions

    init(_ arguments: ParsedArguments) {
        global = GlobalOptions(arguments)
    }

    func run() throws {
        let connection = try global.connect()
        let socket = connection.socket
        let inputFailure = RelayFailure()
        if let error = startThread(name: "evctl-stdin", {
            inputFailure.record(SyncServe.forwardStandardInput(to: socket, connection: connection))
            socket.shutdownWriting()
        }) {
            throw CommandFailure(exitCode: ExitStatus.failed, "cannot start a thread: \(error.message)")
        }

        var buffer: [UInt8] = []
        buffer.reserveCapacity(SyncServe.chunk)
        while true {
            buffer.removeAll(keepingCapacity: true)
            let count: Int
            do {
                count = try socket.read(into: &buffer, count: SyncServe.chunk)
            } catch {
                throw connection.lost(error)
            }
            if count == 0 { break }
            guard SyncServe.writeStandardOutput(buffer) else {
                // The peer went away (the ssh connection closed): nobody is left to tell.
                throw CommandFailure(exitCode: ExitStatus.failed, nil)
            }
        }
        // The daemon closed the connection; a request it never got is the one failure left.
        if let failure = inputFailure.failure { throw failure }
    }

    static let chunk = 64 * 1024

    /// Copies standard input to `socket` until its end; the failure that stopped it early.
    static func forwardStandardInput(to socket: UnixConnection, connection: Connection) -> CommandFailure? {
        var chunk = [UInt8](repeating: 0, count: SyncServe.chunk)
        while true {
            let count = chunk.withUnsafeMutableBytes { raw in Glibc.read(0, raw.baseAddress, raw.count) }
            if count == 0 { return nil }
            if count < 0 {
                switch errno {
                case EINTR: continue
                case EAGAIN: waitUntilReady(0, for: POLLIN)
                default:
                    let reason = String(cString: strerror(errno)).lowercased()
                    return CommandFailure(exitCode: ExitStatus.failed, "reading standard input failed: \(reason).")
                }
                continue
            }
            do {
                try socket.write(Array(chunk[..<count]))
            } catch {
                return connection.lost(error)
            }
        }
    }

    /// Writes all of `bytes` to standard output, however many calls it takes; false when
    /// standard output is closed or broken.
    static func writeStandardOutput(_ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeBytes { raw in
                Glibc.write(1, raw.baseAddress! + offset, raw.count - offset)
            }
            if written > 0 {
                offset += written
            } else if written < 0, errno == EINTR {
                continue
            } else if written < 0, errno == EAGAIN {
                waitUntilReady(1, for: POLLOUT)
            } else {
                return false
            }
        }
        return true
    }

    /// Blocks until `descriptor` is ready: ssh may hand over standard streams in
    /// non-blocking mode.
    static func waitUntilReady(_ descriptor: Int32, for event: Int32) {
        var poller = pollfd(fd: descriptor, events: Int16(event), revents: 0)
        _ = poll(&poller, 1, -1)
    }
}

/// What stopped the copy from standard input, if anything; set by its thread.
private final class RelayFailure: Sendable {
    /// Exit status and message; written once by the forwarding thread.
    private let recorded = Mutex<(exitCode: Int32, message: String?)?>(nil)

    func record(_ failure: CommandFailure?) {
        guard let failure else { return }
        recorded.withLock { $0 = (failure.exitCode, failure.message) }
    }

    var failure: CommandFailure? {
        recorded.withLock { $0 }.map { CommandFailure(exitCode: $0.exitCode, $0.message) }
    }
}
