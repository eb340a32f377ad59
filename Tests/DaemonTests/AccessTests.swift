import Arguments
@testable import Daemon
import Foundation
@testable import Server
import TestSupport
import Testing
import UnixSocket
@testable import Writer

/// Whether this process may run clients under other users' credentials: the tests of
/// refusals need a client that is neither root nor the daemon's user, and only root can
/// start one (`setpriv`, from util-linux). They run as root here and in CI.
let canSwitchUsers = getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv")

/// The uid and gid of `nobody` and `nogroup`, which exist on every Debian-like system; the
/// tests' outsider. gid 1 (`daemon`) is the tests' write group.
let nobody: UInt32 = 65534
let writeGroup: UInt32 = 1

/// `setpriv` arguments that run a command as `uid` with primary group `gid` and exactly the
/// supplementary `groups`.
func asUser(_ uid: UInt32, gid: UInt32, groups: [UInt32] = []) -> [String] {
    [
        "/usr/bin/setpriv", "--reuid=\(uid)", "--regid=\(gid)",
        groups.isEmpty ? "--clear-groups" : "--groups=" + groups.map(String.init).joined(separator: ","),
    ]
}

@Suite("Who may connect: read_groups, write_groups, read_users, write_users")
struct AccessTests {
    // MARK: The table and the rules

    @Test("every method has a level in one table: reads are read-only, the rest need write")
    func methodTable() {
        #expect(Set(MethodAccess.required.keys) == Set(Methods.names))
        let reads = Set(MethodAccess.required.filter { $0.value == .read }.keys)
        #expect(
            reads == [
                "get", "list", "log", "watch", "status", "types", "conflicts", "dead_letters", "peers.list",
                "peers.show", "attention", "consumers.list", "blob.get", "blob.stat",
            ])
        #expect(MethodAccess.required.values.allSatisfy { $0 != .none })
        #expect(MethodAccess.syncSession == .write)
        #expect(MethodAccess.level(for: "no.such.method") == .read)
    }

    @Test(
        "with no list set everyone who can connect may write, not give exec: peers; with lists, root, the daemon's user, then write, then read"
    )
    func grants() {
        let open = AccessPolicy(daemonUID: 1000)
        #expect(!open.isRestricted)
        #expect(open.grant(uid: 4242, groups: [4242]).level == .write)
        #expect(open.grant(uid: 1000, groups: [1000]).level == .full)

        let policy = AccessPolicy(
            readGroups: [100], writeGroups: [200], readUsers: [3001], writeUsers: [3002], daemonUID: 1000)
        #expect(policy.isRestricted)
        #expect(policy.grant(uid: 0, groups: [0]).level == .full)
        #expect(policy.grant(uid: 1000, groups: [1000]).level == .full)
        #expect(policy.grant(uid: 4242, groups: [4242, 200]).level == .write, "a supplementary group counts")
        #expect(policy.grant(uid: 4242, groups: [200, 100]).level == .write, "write wins over read")
        #expect(policy.grant(uid: 3002, groups: [100]).level == .write)
        #expect(policy.grant(uid: 4242, groups: [100]).level == .read)
        #expect(policy.grant(uid: 3001, groups: [4242]).level == .read)
        let none = policy.grant(uid: 4242, groups: [4242, 4243])
        #expect(none.level == .none)
        #expect(none.why.contains("read_groups"))
    }

    @Test("a refusal names the client, its access and the setting that would allow it")
    func refusalMessages() {
        let policy = AccessPolicy(readGroups: [100], daemonUID: 1000)
        let reader = ClientAccess(
            credentials: PeerCredentials(pid: 7, uid: 4242, gid: 100), groups: [100],
            grant: policy.grant(uid: 4242, groups: [100]))
        #expect(reader.refusal(of: "get") == nil)
        #expect(reader.refusal(of: "peers.list") == nil)
        let refused = reader.refusal(of: "append")
        #expect(refused?.reason == "forbidden" && refused?.code == -32008)
        #expect(refused?.message.contains("uid 4242") == true)
        #expect(refused?.message.contains("read-only") == true)
        #expect(refused?.message.contains("write_groups") == true)
        let outsider = ClientAccess(
            credentials: PeerCredentials(pid: 8, uid: 4243, gid: 4243), groups: [4243],
            grant: policy.grant(uid: 4243, groups: [4243]))
        let none = outsider.refusal(of: "status")
        #expect(none?.message.contains("has no access") == true && none?.message.contains("read_groups") == true)
    }

    // MARK: Configuration

    func resolve(_ arguments: [String], _ environment: [String: String] = [:]) throws -> Configuration {
        let invocation = try Parser.parse(arguments, root: Evstored.self)
        return try Configuration.resolve(
            commandLine: Evstored(invocation.arguments).commandLine, environment: environment)
    }

    @Test("the lists come from the file (names and ids), the environment and flags; names are resolved")
    func configuration() throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("evstored-\(UUID().uuidString).json")
            .path
        defer { try? FileManager.default.removeItem(atPath: file) }
        try #"{"read_groups":["root",4242],"write_users":"root, 77"}"#.write(
            toFile: file, atomically: true, encoding: .utf8)
        let fromFile = try resolve(["--config", file])
        #expect(fromFile.readGroups == ["root", "4242"] && fromFile.writeUsers == ["root", "77"])
        #expect(fromFile.access.readGroups == [0, 4242] && fromFile.access.writeUsers == [0, 77])
        #expect(fromFile.access.daemonUID == geteuid())
        let fromEnvironment = try resolve(
            ["--config", file], ["EVSTORE_READ_GROUPS": "", "EVSTORE_WRITE_GROUPS": "0"])
        #expect(fromEnvironment.access.readGroups.isEmpty && fromEnvironment.access.writeGroups == [0])
        let fromFlags = try resolve(["--read-users", "5,6 7"])
        #expect(fromFlags.access.readUsers == [5, 6, 7] && fromFlags.access.isRestricted)
        #expect(!(try resolve([])).access.isRestricted)

        #expect {
            _ = try resolve(["--write-groups", "root,no-such-group-evstore"])
        } throws: { error in
            let text = "\(error)"
            return text.contains("--write-groups") && text.contains("no-such-group-evstore")
        }
        try #"{"read_users":["no-such-user-evstore"]}"#.write(toFile: file, atomically: true, encoding: .utf8)
        #expect {
            _ = try resolve(["--config", file])
        } throws: { error in "\(error)".contains("\"read_users\" in \(file)") }
        #expect(throws: Configuration.Invalid.self) { _ = try resolve(["--read-groups", "a;b"]) }
    }

    @Test("an unknown group name stops the daemon at start with the configuration exit status")
    func unknownGroupAtStart() throws {
        let daemon = try DaemonProcess(arguments: ["--read-groups", "no-such-group-evstore"], waitForSocket: false)
        defer { daemon.removeFiles() }
        #expect(try daemon.waitForExit() == 78)
        #expect(daemon.stderr.contains("--read-groups") && daemon.stderr.contains("no-such-group-evstore"))
    }

    // MARK: The socket

    @Test("the socket file gets the configured mode; the data directory and store are the daemon's alone")
    func socketMode() throws {
        let daemon = try DaemonProcess(arguments: ["--socket-mode", "0640"])
        defer { daemon.removeFiles() }
        var info = stat()
        #expect(lstat(daemon.socketPath, &info) == 0)
        #expect(info.st_mode & S_IFMT == S_IFSOCK)
        #expect(info.st_mode & 0o777 == 0o640)
        #expect(lstat(daemon.dataDirectory, &info) == 0 && info.st_mode & 0o777 == 0o700)
        #expect(lstat(daemon.dataDirectory + "/data.mdb", &info) == 0 && info.st_mode & 0o777 == 0o600)
        let backup = daemon.root + "/backup/one"
        _ = try daemon.client().call("backup", #"{"path":"\#(backup)"}"#)
        #expect(lstat(backup, &info) == 0 && info.st_mode & 0o777 == 0o700)
        #expect(lstat(backup + "/data.mdb", &info) == 0 && info.st_mode & 0o777 == 0o600)
    }

    @Test(
        "the socket file gets the configured group",
        .enabled(if: getuid() == 0, "changing a file's group to one the user is not in needs root"))
    func socketGroup() throws {
        let daemon = try DaemonProcess(arguments: ["--socket-group", "daemon"])
        defer { daemon.removeFiles() }
        var info = stat()
        #expect(lstat(daemon.socketPath, &info) == 0)
        #expect(info.st_gid == writeGroup && info.st_mode & 0o777 == 0o660)

        // A directory the daemon makes for its socket lets the socket's group through.
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("evacc-\(UUID().uuidString.prefix(8))")
            .path
        let socket = root + "/run/s.sock"
        let other = try DaemonProcess(
            root: root, arguments: ["--socket", socket, "--socket-group", "daemon"], waitForSocket: false)
        defer { other.removeFiles() }
        let deadline = Date().addingTimeInterval(20)
        while (try? UnixConnection.connect(to: socket)) == nil, other.process.isRunning, Date() < deadline {
            Thread.sleep(forTimeInterval: 0.02)
        }
        #expect(lstat(socket, &info) == 0 && info.st_gid == writeGroup)
        #expect(lstat(root + "/run", &info) == 0)
        #expect(info.st_gid == writeGroup && info.st_mode & 0o777 == 0o750)
    }

    @Test(
        "nothing listens on a network port: every socket the daemon holds is a Unix socket, but the one route netlink watch"
    )
    func noNetworkSockets() throws {
        let b = try DaemonProcess(arguments: ["--node", "b"])
        defer { b.removeFiles() }
        let a = try DaemonProcess(arguments: ["--node", "a"])
        defer { a.removeFiles() }
        _ = try a.client().call("peers.add", #"{"name":"b","url":"unix://\#(b.socketPath)"}"#)
        _ = try a.client().call("sync", #"{"peer":"b"}"#)
        let watcher = try a.client()
        _ = try watcher.call("watch")

        let census = try SocketCensus(pid: a.process.processIdentifier)
        // Recorded for the report: what the daemon holds while serving, watched and synced.
        print("evstored pid \(a.process.processIdentifier) sockets: \(census.counts)")
        #expect(census.counts["unix", default: 0] >= 2, "the listener and the watcher's connection")
        for kind in SocketCensus.networkTables {
            #expect(census.counts[kind, default: 0] == 0, "\(kind): \(census.counts)")
        }
        // The network watch (receive only, from the kernel), where netlink is available.
        #expect(census.counts["netlink", default: 0] <= 1, "\(census.counts)")
        #expect(census.counts["unknown", default: 0] == 0, "\(census.counts)")
    }

    // MARK: Clients with other credentials

    /// A daemon whose socket anyone may open (mode 0666), so the lists alone decide.
    func restrictedDaemon(_ arguments: [String] = []) throws -> DaemonProcess {
        try DaemonProcess(
            arguments: [
                "--socket-mode", "0666", "--read-groups", "nogroup", "--write-groups", "daemon",
            ] + arguments)
    }

    func evctl(_ user: [String], _ socket: String, _ arguments: [String]) throws -> (status: Int32, output: String) {
        let evctl = try builtBinary("evctl").path
        return try runProgram(user[0], Array(user.dropFirst()) + [evctl, "--socket", socket] + arguments)
    }

    @Test(
        "a read group member may read, not append (forbidden, exit 77); a write group member may; an outsider nothing",
        .enabled(if: canSwitchUsers, "needs root to run clients as other users"))
    func evctlAsOtherUsers() throws {
        let daemon = try restrictedDaemon()
        defer { daemon.removeFiles() }
        let socket = daemon.socketPath
        let root = try evctl(["/usr/bin/env"], socket, ["append", "job/1", "status", "new"])
        #expect(root.status == 0, "\(root.output)")

        let reader = asUser(nobody, gid: nobody)
        let read = try evctl(reader, socket, ["get", "job/1"])
        #expect(read.status == 0 && read.output.contains("new"), "\(read.output)")
        let list = try evctl(reader, socket, ["status"])
        #expect(list.status == 0, "\(list.output)")
        let append = try evctl(reader, socket, ["append", "job/1", "status", "done"])
        #expect(append.status == 77, "\(append.output)")
        #expect(append.output.contains("append is refused"), "\(append.output)")
        #expect(append.output.contains("uid 65534") && append.output.contains("read-only"), "\(append.output)")
        #expect(append.output.contains("write_groups") && append.output.contains("(forbidden)"), "\(append.output)")
        let peers = try evctl(reader, socket, ["peers", "add", "x", "unix:///nowhere.sock"])
        #expect(peers.status == 77, "\(peers.output)")
        // An export is a read; an import stores events.
        let exported = try evctl(reader, socket, ["export"])
        #expect(exported.status == 0 && exported.output.contains(#""status":"new""#), "\(exported.output)")
        let file = NSTemporaryDirectory() + "evstore-access-import-\(getpid()).ndjson"
        try exported.output.write(toFile: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: file) }
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: file)
        let imported = try evctl(reader, socket, ["import", file])
        #expect(imported.status == 77 && imported.output.contains("import is refused"), "\(imported.output)")
        // A durable consumer another process reads is moved only with write access.
        let consumer = try evctl(reader, socket, ["consumers", "add", "reader"])
        #expect(consumer.status == 77 && consumer.output.contains("consumers.ack is refused"), "\(consumer.output)")
        #expect(try evctl(reader, socket, ["consumers", "list"]).status == 0)

        // The write group as a supplementary group, as a login in that group has it.
        let writer = asUser(nobody, gid: nobody, groups: [writeGroup])
        let written = try evctl(writer, socket, ["append", "job/1", "status", "on_site"])
        #expect(written.status == 0, "\(written.output)")
        // An exec: peer's command would run as the daemon's user: not for the write group.
        let exec = try evctl(writer, socket, ["peers", "add", "relay", "exec:/bin/true"])
        #expect(exec.status == 77 && exec.output.contains("daemon's user"), "\(exec.output)")
        let execOnce = try evctl(writer, socket, ["sync", "exec:/bin/true"])
        #expect(execOnce.status == 77, "\(execOnce.output)")
        // Nor a unix:// peer, which the daemon would open with its own user and groups.
        let unix = try evctl(writer, socket, ["peers", "add", "other", "unix:///nowhere/evstored.sock"])
        #expect(unix.status == 77 && unix.output.contains("unix://"), "\(unix.output)")

        let outsider = asUser(nobody, gid: 65533)
        let refused = try evctl(outsider, socket, ["get", "job/1"])
        #expect(refused.status == 77, "\(refused.output)")
        #expect(refused.output.contains("has no access") && refused.output.contains("read_groups"), "\(refused.output)")

        let state = try daemon.client().call("get", #"{"entity":"job/1"}"#)
        #expect((state["status"] as? [String: Any])?["current"] as? String == "on_site")
        #expect(state["events"] as? Int == 2, "the refused append wrote nothing")
    }

    @Test(
        "refusals are JSON-RPC errors in place (single, batch, notification); the connection goes on; one log line",
        .enabled(if: canSwitchUsers, "needs root to run clients as other users"))
    func refusalsOnOneConnection() throws {
        let daemon = try restrictedDaemon()
        defer { daemon.removeFiles() }
        _ = try daemon.client().call("append", eventsParams([#"{"entity":"job/1","kind":"status","status":"new"}"#]))
        let append =
            #"{"jsonrpc":"2.0","id":2,"method":"append","params":{"events":[{"entity":"job/1","kind":"delete"}]}}"#
        let lines = [
            #"{"jsonrpc":"2.0","id":1,"method":"get","params":{"entity":"job/1"}}"#,
            append,
            #"[{"jsonrpc":"2.0","id":3,"method":"status"},{"jsonrpc":"2.0","id":4,"method":"rebuild"}]"#,
            #"{"jsonrpc":"2.0","method":"append","params":{"events":[{"entity":"job/1","kind":"delete"}]}}"#,
            #"{"jsonrpc":"2.0","id":5,"method":"sync"}"#,
            #"{"jsonrpc":"2.0","id":6,"method":"list"}"#,
        ]
        // evctl sync-serve relays bytes to the socket and back: a raw client, run as nobody.
        let input = FileManager.default.temporaryDirectory.appendingPathComponent("access-\(UUID().uuidString)").path
        try (lines.joined(separator: "\n") + "\n").write(toFile: input, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: input) }
        let user = asUser(nobody, gid: nobody)
        let evctl = try builtBinary("evctl").path
        let run = try runProgram(
            "/bin/sh",
            ["-c", "\(user.joined(separator: " ")) \(evctl) --socket \(daemon.socketPath) sync-serve < \(input)"])
        #expect(run.status == 0, "\(run.output)")
        let replies = run.output.split(separator: "\n").map { try? JSONSerialization.jsonObject(with: Data($0.utf8)) }
        #expect(replies.count == 5, "no reply to the notification: \(run.output)")
        guard replies.count == 5 else { return }
        func error(_ reply: Any?) -> (code: Int?, reason: String?) {
            let error = (reply as? [String: Any])?["error"] as? [String: Any]
            return (error?["code"] as? Int, (error?["data"] as? [String: Any])?["reason"] as? String)
        }
        #expect((replies[0] as? [String: Any])?["result"] != nil)
        #expect(error(replies[1]).code == -32008 && error(replies[1]).reason == "forbidden")
        #expect((replies[1] as? [String: Any])?["id"] as? Int == 2)
        let batch = replies[2] as? [[String: Any]] ?? []
        #expect(batch.count == 2 && batch[0]["result"] != nil && error(batch[1]).reason == "forbidden")
        #expect(error(replies[3]).reason == "forbidden")
        #expect((replies[4] as? [String: Any])?["result"] != nil, "the connection keeps serving")

        let state = try daemon.client().call("get", #"{"entity":"job/1"}"#)
        #expect(state["deleted"] as? Bool == false)
        let logged = daemon.stderr.split(separator: "\n").filter { $0.contains("notice") && $0.contains("refused") }
        #expect(logged.count == 1, "one line per connection: \(logged)")
        #expect(logged.first?.contains("pid ") == true && logged.first?.contains("uid 65534") == true)
    }

    @Test(
        "mode 0600: another user cannot even connect (permission denied on the socket, exit 77)",
        .enabled(if: canSwitchUsers, "needs root to run clients as other users"))
    func socketModeKeepsOthersOut() throws {
        let daemon = try DaemonProcess(arguments: ["--socket-mode", "0600"])
        defer { daemon.removeFiles() }
        let refused = try evctl(asUser(nobody, gid: nobody, groups: [writeGroup]), daemon.socketPath, ["status"])
        #expect(refused.status == 77, "\(refused.output)")
        #expect(refused.output.contains("permission denied on \(daemon.socketPath)"), "\(refused.output)")
        #expect(!daemon.stderr.contains("refused"), "the kernel refused it: the daemon never saw it")
    }

    @Test(
        "SIGHUP applies changed lists to new connections",
        .enabled(if: canSwitchUsers, "needs root to run clients as other users"))
    func reload() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("evacc-\(UUID().uuidString.prefix(8))")
            .path
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        let config = root + "/evstored.json"
        try #"{"socket_mode":"0666","read_groups":["nogroup"]}"#.write(
            toFile: config, atomically: true, encoding: .utf8)
        let daemon = try DaemonProcess(root: root, arguments: ["--config", config])
        defer { daemon.removeFiles() }
        let user = asUser(nobody, gid: nobody)
        #expect(try evctl(user, daemon.socketPath, ["append", "job/1", "status", "new"]).status == 77)

        try #"{"socket_mode":"0666","write_groups":["nogroup"]}"#.write(
            toFile: config, atomically: true, encoding: .utf8)
        daemon.signal(SIGHUP)
        let deadline = Date().addingTimeInterval(10)
        while !daemon.stderr.contains("access for new connections"), Date() < deadline {
            Thread.sleep(forTimeInterval: 0.02)
        }
        let after = try evctl(user, daemon.socketPath, ["append", "job/1", "status", "new"])
        #expect(after.status == 0, "\(after.output)")

        // A name that does not resolve leaves the lists as they were.
        try #"{"socket_mode":"0666","write_groups":["no-such-group-evstore"]}"#.write(
            toFile: config, atomically: true, encoding: .utf8)
        daemon.signal(SIGHUP)
        while !daemon.stderr.contains("not reloaded"), Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
        #expect(daemon.stderr.contains("no-such-group-evstore"))
        #expect(try evctl(user, daemon.socketPath, ["append", "job/1", "status", "x"]).status == 0)
    }

    @Test(
        "sync-serve runs with its user's rights: read-only is refused (auth, forbidden), no access too (auth), the write group converges",
        .enabled(if: canSwitchUsers, "needs root to run clients as other users"), .timeLimit(.minutes(30)))
    func syncServeAsOtherUsers() throws {
        let remote = try restrictedDaemon(["--node", "remote"])
        defer { remote.removeFiles() }
        let local = try DaemonProcess(arguments: ["--node", "local"])
        defer { local.removeFiles() }
        _ = try remote.client().call(
            "append", eventsParams([#"{"entity":"job/r","kind":"status","status":"assigned"}"#]))
        _ = try local.client().call(
            "append", eventsParams([#"{"entity":"job/l","kind":"status","status":"on_site"}"#]))
        let evctl = try builtBinary("evctl").path
        func url(_ user: [String]) -> String {
            "exec:" + (user + [evctl, "--socket", remote.socketPath, "sync-serve"]).joined(separator: " ")
        }
        func sync(_ url: String) throws -> [String: Any] {
            let result = try local.client().call("sync", #"{"peer":"\#(url)"}"#)
            return (result["peers"] as! [[String: Any]])[0]
        }

        let refused = try sync(url(asUser(nobody, gid: nobody)))
        let error = refused["error"] as? [String: Any]
        #expect(error?["reason"] as? String == "auth", "\(refused)")
        let message = error?["message"] as? String ?? ""
        #expect(message.contains("forbidden") && message.contains("uid 65534"), "\(message)")
        #expect(message.contains("write_groups"), "\(message)")
        #expect(refused["received"] as? Int == 0 && refused["sent"] as? Int == 0)
        #expect(remote.stderr.contains("refused a sync session"), "\(remote.stderr)")

        // A user with no access is refused as it connects, with a JSON-RPC line rather than
        // an error frame: still `auth`, described, not quoted.
        let outsider = try sync(url(asUser(nobody, gid: 65533)))
        let outsiderError = outsider["error"] as? [String: Any]
        #expect(outsiderError?["reason"] as? String == "auth", "\(outsider)")
        let outsiderMessage = outsiderError?["message"] as? String ?? ""
        #expect(outsiderMessage.contains("no access"), "\(outsider)")
        #expect(outsider["received"] as? Int == 0 && outsider["sent"] as? Int == 0)

        let converged = try sync(url(asUser(nobody, gid: nobody, groups: [writeGroup])))
        #expect(converged["error"] is NSNull, "\(converged)")
        #expect(converged["sent"] as? Int == 1 && converged["received"] as? Int == 1)
        let digests = try [local, remote].map { try $0.client().call("status")["digest"] as? String }
        #expect(digests[0] != nil && digests[0] == digests[1])
    }
}

/// The sockets a process holds, by the kernel table each is listed in: its descriptors'
/// `socket:[inode]` links matched against /proc/net/{unix,tcp,tcp6,udp,udp6,...}.
struct SocketCensus {
    static let networkTables = ["tcp", "tcp6", "udp", "udp6", "udplite", "udplite6", "raw", "raw6"]
    var counts: [String: Int] = [:]

    /// The inodes of the sockets `pid` holds now.
    static func socketInodes(pid: Int32) throws -> [String] {
        var inodes: [String] = []
        let fdDirectory = "/proc/\(pid)/fd"
        for entry in try FileManager.default.contentsOfDirectory(atPath: fdDirectory) {
            guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: fdDirectory + "/" + entry),
                target.hasPrefix("socket:[")
            else { continue }
            inodes.append(String(target.dropFirst("socket:[".count).dropLast()))
        }
        return inodes
    }

    init(pid: Int32) throws {
        let before = try SocketCensus.socketInodes(pid: pid)
        var table: [String: String] = [:]
        for kind in ["unix", "netlink"] + SocketCensus.networkTables {
            // Read to the end: /proc files have no size, and a read by size stops short.
            guard let file = FileHandle(forReadingAtPath: "/proc/net/\(kind)") else { continue }
            let text = String(decoding: file.readDataToEndOfFile(), as: UTF8.self)
            file.closeFile()
            // The inode is the 7th column of /proc/net/unix and the 10th of the others
            // (/proc/net/netlink too).
            let column = kind == "unix" ? 6 : 9
            for line in text.split(separator: "\n").dropFirst() {
                let fields = line.split(separator: " ", omittingEmptySubsequences: true)
                if fields.count > column { table[String(fields[column])] = kind }
            }
        }
        // A socket the daemon closed while the tables were read (a connection that just
        // ended) is no longer one it holds: only those held before and after count.
        let after = Set(try SocketCensus.socketInodes(pid: pid))
        for inode in before where after.contains(inode) { counts[table[inode] ?? "unknown", default: 0] += 1 }
    }
}
