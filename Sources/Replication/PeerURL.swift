import FoundationEssentials
import UnixSocket

#if canImport(Glibc)
    import Glibc
#endif

/// Where a peer is reached:
///
/// - `unix:///path/to/evstored.sock`: another daemon's socket on this machine;
/// - `exec:COMMAND`: a command, split as a shell splits words (no expansion), that speaks
///   the protocol on its stdin and stdout (`evctl --socket S sync-serve` is the reference);
/// - `ssh://[user@]host[:port][/socket/path]`: `evctl [--socket /socket/path] sync-serve`
///   run on the host by the system's ssh client, the way git reaches a remote.
package enum PeerURL: Equatable, Sendable, CustomStringConvertible {
    case unix(path: String)
    case exec(arguments: [String])
    case ssh(user: String?, host: String, port: Int?, socket: String?)

    package init(_ text: String) throws(SyncError) {
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
            // What reaches ssh's command line and the remote shell must be inert there: no
            // shell syntax, nothing ssh would read as an option.
            guard !host.isEmpty else { throw invalid("the host is missing") }
            guard PeerURL.isHostName(host) || PeerURL.isBracketedIPv6(host) else {
                throw invalid(
                    "the host \"\(host)\" is not a host name (letters, digits, '.', '_' and '-', not starting with '-') or a bracketed IPv6 address such as [::1]"
                )
            }
            if let user, !PeerURL.isUserName(user) {
                throw invalid(
                    "the user \"\(user)\" is not a user name (letters, digits, '.', '_' and '-', not starting with '-')"
                )
            }
            if let socket, !PeerURL.isRemoteSocketPath(socket) {
                throw invalid(
                    "the socket path \"\(socket)\" may hold only letters, digits, spaces and . _ - / + @ , : = %")
            }
            self = .ssh(user: user, host: host, port: port, socket: socket)
        } else {
            throw invalid("unknown scheme")
        }
    }

    package var description: String {
        switch self {
        case .unix(let path): "unix://\(path)"
        case .exec(let arguments): "exec:" + arguments.map(PeerURL.shellQuoted).joined(separator: " ")
        case .ssh(let user, let host, let port, let socket):
            "ssh://\(user.map { "\($0)@" } ?? "")\(host)\(port.map { ":\($0)" } ?? "")\(socket ?? "")"
        }
    }

    /// The command that reaches the peer, for exec: and ssh:// URLs; `ssh` is the ssh
    /// client's command (the `ssh_command` setting).
    package func command(ssh: [String]) -> [String]? {
        switch self {
        case .unix: return nil
        case .exec(let arguments): return arguments
        case .ssh(let user, let host, let port, let socket):
            var command = ssh
            command += ["-o", "BatchMode=yes"]
            if let port { command += ["-p", String(port)] }
            // ssh takes an IPv6 address bare (its port comes with -p), not in the URL's brackets.
            let address = PeerURL.isBracketedIPv6(host) ? String(host.dropFirst().dropLast()) : host
            command.append(user.map { "\($0)@\(address)" } ?? address)
            // The remote side runs it through its shell: quote what came from the URL.
            var remote = ["evctl"]
            if let socket { remote += ["--socket", PeerURL.shellQuoted(socket)] }
            remote.append("sync-serve")
            command.append(remote.joined(separator: " "))
            return command
        }
    }

    /// `[A-Za-z0-9._-]`, not starting with `-` (which ssh would read as an option).
    package static func isHostName(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        return !bytes.isEmpty && bytes[0] != UInt8(ascii: "-") && bytes.allSatisfy(isNameByte)
    }

    /// The same rule as a host name: the user goes to ssh as `user@host`.
    package static func isUserName(_ text: String) -> Bool { isHostName(text) }

    /// `[` hex digits, colons and dots (an IPv4 tail), with at least one colon, optionally
    /// `%zone` with a zone of `[A-Za-z0-9._-]`, then `]`.
    package static func isBracketedIPv6(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        guard bytes.count >= 4, bytes.first == UInt8(ascii: "["), bytes.last == UInt8(ascii: "]") else {
            return false
        }
        let inner = bytes[1..<(bytes.count - 1)]
        let percent = inner.firstIndex(of: UInt8(ascii: "%"))
        let address = inner[..<(percent ?? inner.endIndex)]
        guard address.contains(UInt8(ascii: ":")),
            address.allSatisfy({ isHexDigit($0) || $0 == UInt8(ascii: ":") || $0 == UInt8(ascii: ".") })
        else { return false }
        guard let percent else { return true }
        let zone = inner[(percent + 1)...]
        return !zone.isEmpty && zone.allSatisfy(isNameByte)
    }

    /// An absolute path of letters, digits, spaces and `._-/+@,:=%`: quoted for the remote
    /// shell (`shellQuoted`), it has no quote or backslash that any shell (sh, bash, zsh,
    /// fish, csh) could read as more than a word, and no control character.
    package static func isRemoteSocketPath(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        return bytes.first == UInt8(ascii: "/")
            && bytes.allSatisfy { isNameByte($0) || Array(" /+@,:=%".utf8).contains($0) }
    }

    private static func isNameByte(_ byte: UInt8) -> Bool {
        (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte)
            || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "-")
    }

    private static func isHexDigit(_ byte: UInt8) -> Bool {
        (0x30...0x39).contains(byte) || (0x41...0x46).contains(byte) || (0x61...0x66).contains(byte)
    }

    /// `word` as a POSIX shell reads it back: bare when it is plain, else single-quoted.
    package static func shellQuoted(_ word: String) -> String {
        let plain =
            !word.isEmpty
            && word.unicodeScalars.allSatisfy { scalar in
                scalar.isASCII && (scalar.properties.isAlphabetic || ("0"..."9").contains(scalar))
                    || "-_./:=@%+,".unicodeScalars.contains(scalar)
            }
        return plain ? word : "'" + word.replacing("'", with: #"'\''"#) + "'"
    }
}

extension PeerURL {
    /// What the URL reaches, for telling one peer from another however its URL is spelled:
    /// the outgoing sessions are keyed by it (one session per target at a time), and a URL
    /// given through the API names a configured peer when their targets are the same.
    ///
    /// A socket that exists is its file (device and inode, so `/run/peer/./s.sock`,
    /// `//run/peer/s.sock` and a symbolic link to it are one target); one that does not is
    /// its path with `.`, `..` and repeated slashes resolved. An ssh peer is its user, its
    /// host in lower case, its port (22 when none is given) and its socket path; an exec
    /// peer its command's words.
    package var target: String {
        switch self {
        case .unix(let path):
            var info = stat()
            if stat(path, &info) == 0 { return "unix inode \(info.st_dev):\(info.st_ino)" }
            return "unix path " + PeerURL.normalized(path: path)
        case .exec(let arguments):
            return "exec " + arguments.joined(separator: "\u{0}")
        case .ssh(let user, let host, let port, let socket):
            return "ssh \(user ?? "")@\(host.lowercased()):\(port ?? 22)"
                + (socket.map { PeerURL.normalized(path: $0) } ?? "")
        }
    }

    /// An absolute path with `.`, `..` and repeated slashes resolved as the kernel resolves
    /// them, symbolic links aside.
    package static func normalized(path: String) -> String {
        var parts: [Substring] = []
        for part in path.split(separator: "/", omittingEmptySubsequences: true) {
            switch part {
            case ".": continue
            case "..": _ = parts.popLast()
            default: parts.append(part)
            }
        }
        return "/" + parts.joined(separator: "/")
    }
}
