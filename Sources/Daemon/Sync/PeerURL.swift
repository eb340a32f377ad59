import Foundation
import UnixSocket

/// Where a peer is reached:
///
/// - `unix:///path/to/evstored.sock`: another daemon's socket on this machine;
/// - `exec:COMMAND`: a command, split as a shell splits words (no expansion), that speaks
///   the protocol on its stdin and stdout (`evctl --socket S sync-serve` is the reference);
/// - `ssh://[user@]host[:port][/socket/path]`: `evctl [--socket /socket/path] sync-serve`
///   run on the host by the system's ssh client, the way git reaches a remote.
enum PeerURL: Equatable, Sendable, CustomStringConvertible {
    case unix(path: String)
    case exec(arguments: [String])
    case ssh(user: String?, host: String, port: Int?, socket: String?)

    init(_ text: String) throws(SyncError) {
        func invalid(_ why: String) -> SyncError {
            SyncError(
                .invalidPeer,
                "\"\(text)\" is not a peer URL (\(why)); use unix:///path/to/evstored.sock, ssh://user@host[:port][/socket] or exec:COMMAND"
            )
        }
        if text.hasPrefix("unix://") {
            let path = String(text.dropFirst("unix://".count))
            guard path.hasPrefix("/"), path.count > 1 else { throw invalid("a unix socket path must be absolute") }
            self = .unix(path: path)
        } else if text.hasPrefix("exec:") {
            let command = String(text.dropFirst("exec:".count))
            let arguments: [String]
            do {
                arguments = try ShellWords.split(command)
            } catch {
                throw invalid("\(error)")
            }
            guard !arguments.isEmpty else { throw invalid("exec: needs a command") }
            self = .exec(arguments: arguments)
        } else if text.hasPrefix("ssh://") {
            var rest = Substring(text.dropFirst("ssh://".count))
            var socket: String?
            if let slash = rest.firstIndex(of: "/") {
                socket = String(rest[slash...])
                rest = rest[..<slash]
                if socket == "/" { socket = nil }
            }
            var user: String?
            if let at = rest.lastIndex(of: "@") {
                user = String(rest[..<at])
                rest = rest[rest.index(after: at)...]
                guard !user!.isEmpty else { throw invalid("the user before @ is empty") }
            }
            var port: Int?
            if let colon = rest.lastIndex(of: ":"), !rest.hasSuffix("]") {
                guard let number = Int(rest[rest.index(after: colon)...]), (1...65535).contains(number) else {
                    throw invalid("the port is not a number from 1 to 65535")
                }
                port = number
                rest = rest[..<colon]
            }
            let host = String(rest)
            guard !host.isEmpty, !host.hasPrefix("-"), host.allSatisfy({ !$0.isWhitespace }) else {
                throw invalid("the host is missing or not a host name")
            }
            if let user, user.hasPrefix("-") || user.contains(where: \.isWhitespace) {
                throw invalid("the user name is not one")
            }
            self = .ssh(user: user, host: host, port: port, socket: socket)
        } else {
            throw invalid("unknown scheme")
        }
    }

    var description: String {
        switch self {
        case .unix(let path): "unix://\(path)"
        case .exec(let arguments): "exec:" + arguments.map(PeerURL.shellQuoted).joined(separator: " ")
        case .ssh(let user, let host, let port, let socket):
            "ssh://\(user.map { "\($0)@" } ?? "")\(host)\(port.map { ":\($0)" } ?? "")\(socket ?? "")"
        }
    }

    /// The command that reaches the peer, for exec: and ssh:// URLs; `ssh` is the ssh
    /// client's command (the `ssh_command` setting).
    func command(ssh: [String]) -> [String]? {
        switch self {
        case .unix: return nil
        case .exec(let arguments): return arguments
        case .ssh(let user, let host, let port, let socket):
            var command = ssh
            command += ["-o", "BatchMode=yes"]
            if let port { command += ["-p", String(port)] }
            command.append(user.map { "\($0)@\(host)" } ?? host)
            // The remote side runs it through its shell: quote what came from the URL.
            var remote = ["evctl"]
            if let socket { remote += ["--socket", PeerURL.shellQuoted(socket)] }
            remote.append("sync-serve")
            command.append(remote.joined(separator: " "))
            return command
        }
    }

    /// `word` as a POSIX shell reads it back: bare when it is plain, else single-quoted.
    static func shellQuoted(_ word: String) -> String {
        let plain =
            !word.isEmpty
            && word.unicodeScalars.allSatisfy { scalar in
                CharacterSet.alphanumerics.contains(scalar) && scalar.isASCII
                    || "-_./:=@%+,".unicodeScalars.contains(scalar)
            }
        return plain ? word : "'" + word.replacingOccurrences(of: "'", with: #"'\''"#) + "'"
    }
}
