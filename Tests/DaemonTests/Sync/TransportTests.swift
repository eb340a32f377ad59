import Foundation
import TestSupport
import Testing
import UnixSocket

/// The exec: and ssh:// transports with real processes, and background sync from the
/// config file.
@Suite("Transports and background sync")
struct TransportTests {
    func sync(_ daemon: DaemonProcess, _ peer: String) throws -> [String: Any] {
        let result = try daemon.client().call("sync", #"{"peer":"\#(peer)"}"#)
        return (result["peers"] as! [[String: Any]])[0]
    }

    func append(_ daemon: DaemonProcess, _ entity: String, _ status: String) throws {
        _ = try daemon.client().call(
            "append", eventsParams([#"{"entity":"\#(entity)","kind":"status","status":"\#(status)"}"#]))
    }

    func digest(_ daemon: DaemonProcess) throws -> String { try daemon.client().call("status")["digest"] as! String }

    @Test("exec: runs a command that speaks the protocol on its stdin and stdout")
    func exec() throws {
        let a = try DaemonProcess()
        let b = try DaemonProcess()
        defer {
            a.removeFiles()
            b.removeFiles()
        }
        try append(a, "job/a", "assigned")
        try append(b, "job/b", "en_route")
        let evctl = try builtBinary("evctl").path
        let outcome = try sync(a, "exec:\(evctl) --socket '\(b.socketPath)' sync-serve")
        #expect(outcome["error"] is NSNull, "\(outcome)")
        #expect(outcome["sent"] as? Int == 1)
        #expect(outcome["received"] as? Int == 1)
        #expect(try digest(a) == digest(b))

        // A command that is not there, and one that is not evstore.
        let missing = try sync(a, "exec:/nonexistent/evctl sync-serve")
        #expect((missing["error"] as? [String: Any])?["reason"] as? String == "unreachable")
        let stranger = try sync(a, "exec:/bin/echo hello")
        #expect((stranger["error"] as? [String: Any])?["reason"] as? String == "not_evstore")
    }

    /// A real sshd on 127.0.0.1 (or `listenAddress`) with host and client keys made here;
    /// only root can run it. `launcher` runs it elsewhere, e.g. in a network namespace.
    final class SSHServer {
        let directory: String
        let port: Int
        /// sshd runs as a daemon of its own, stopped through its pid file.
        private let detached: Bool

        init(evctlDirectory: String, listenAddress: String = "127.0.0.1", launcher: [String] = []) throws {
            detached = !launcher.isEmpty
            directory =
                FileManager.default.temporaryDirectory.appendingPathComponent("sshd-\(UUID().uuidString.prefix(6))")
                .path
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            for key in ["host_key", "client_key", "stranger_key"] {
                let (status, output) = try runProgram(
                    "/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-C", key, "-f", "\(directory)/\(key)"])
                guard status == 0 else { throw DaemonError("ssh-keygen: \(output)") }
            }
            try FileManager.default.copyItem(
                atPath: "\(directory)/client_key.pub", toPath: "\(directory)/authorized_keys")
            try FileManager.default.createDirectory(atPath: "/run/sshd", withIntermediateDirectories: true)
            var lastError = ""
            for attempt in 0..<5 {
                let port = Int.random(in: 20_000..<60_000)
                let config = """
                    Port \(port)
                    ListenAddress \(listenAddress)
                    HostKey \(directory)/host_key
                    AuthorizedKeysFile \(directory)/authorized_keys
                    PubkeyAuthentication yes
                    PasswordAuthentication no
                    KbdInteractiveAuthentication no
                    PermitRootLogin prohibit-password
                    StrictModes no
                    UsePAM no
                    PidFile \(directory)/sshd.pid
                    SetEnv PATH=\(evctlDirectory):/usr/local/bin:/usr/bin:/bin
                    """
                try config.write(toFile: "\(directory)/sshd_config", atomically: true, encoding: .utf8)
                let log = "\(directory)/sshd-\(attempt).log"
                _ = FileManager.default.createFile(atPath: log, contents: nil)
                let candidate = Process()
                // Through a launcher sshd runs as a daemon of its own, logging to the file:
                // a child of this process that closes the descriptors it inherited (sshd
                // does) makes Foundation wait for its exit on the thread that watches every
                // child, and `runProgram` would then hang.
                let command =
                    launcher.isEmpty
                    ? ["/usr/sbin/sshd", "-D", "-e", "-f", "\(directory)/sshd_config"]
                    : launcher + ["/usr/sbin/sshd", "-E", log, "-f", "\(directory)/sshd_config"]
                candidate.executableURL = URL(fileURLWithPath: command[0])
                candidate.arguments = Array(command.dropFirst())
                candidate.standardError = FileHandle(forWritingAtPath: log)
                candidate.standardOutput = FileHandle.nullDevice
                try candidate.run()
                // sshd says when it listens.
                let deadline = Date().addingTimeInterval(10)
                var listening = false
                while Date() < deadline, candidate.isRunning || !launcher.isEmpty {
                    if let text = try? String(contentsOfFile: log, encoding: .utf8), text.contains("Server listening") {
                        listening = true
                        break
                    }
                    Thread.sleep(forTimeInterval: 0.05)
                }
                if listening {
                    self.port = port
                    processHandle = candidate
                    return
                }
                lastError = (try? String(contentsOfFile: log, encoding: .utf8)) ?? "sshd did not start"
                if candidate.isRunning { candidate.terminate() }
            }
            throw DaemonError(lastError)
        }

        private var processHandle: Process?

        /// The ssh command a daemon uses with `key`.
        func sshCommand(key: String) -> String {
            "ssh -i \(directory)/\(key) -o UserKnownHostsFile=\(directory)/known_hosts -o StrictHostKeyChecking=accept-new -o ConnectTimeout=5"
        }

        func stop() {
            if let processHandle {
                processHandle.terminate()
                reap(processHandle)
            }
            if detached, let text = try? String(contentsOfFile: "\(directory)/sshd.pid", encoding: .utf8),
                let pid = Int32(text.trimmingCharacters(in: .whitespacesAndNewlines))
            {
                kill(pid, SIGTERM)
            }
            try? FileManager.default.removeItem(atPath: directory)
        }
    }

    @Test(
        "ssh:// runs evctl sync-serve on the host through the system ssh client; a refused key is terminal",
        .enabled(
            if: getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/sbin/sshd"), "sshd runs as root"),
        .timeLimit(.minutes(30)))
    func ssh() throws {
        let evctl = try builtBinary("evctl")
        let server = try SSHServer(evctlDirectory: evctl.deletingLastPathComponent().path)
        defer { server.stop() }
        let remote = try DaemonProcess(arguments: ["--node", "remote"])
        let local = try DaemonProcess(arguments: [
            "--node", "local", "--ssh-command", server.sshCommand(key: "client_key"),
        ])
        let stranger = try DaemonProcess(arguments: ["--ssh-command", server.sshCommand(key: "stranger_key")])
        defer {
            for daemon in [remote, local, stranger] { daemon.removeFiles() }
        }
        try append(remote, "job/r", "assigned")
        try append(local, "job/l", "on_site")
        let url = "ssh://root@127.0.0.1:\(server.port)\(remote.socketPath)"
        let outcome = try sync(local, url)
        #expect(outcome["error"] is NSNull, "\(outcome)")
        #expect(outcome["sent"] as? Int == 1)
        #expect(outcome["received"] as? Int == 1)
        #expect(try digest(local) == digest(remote))

        _ = try stranger.client().call("peers.add", #"{"name":"hq","url":"\#(url)"}"#)
        let refused = try sync(stranger, "hq")
        #expect((refused["error"] as? [String: Any])?["reason"] as? String == "auth", "\(refused)")
        let status = try stranger.client().call("status")
        let peer = (status["peers"] as! [[String: Any]])[0]
        #expect(peer["state"] as? String == "terminal")
        #expect((status["needs_attention"] as? [String: Any])?["failing_peers"] as? Int == 1)
    }

    @Test(
        "an append of a type made only at its authority is handed to it over ssh:// as over unix://",
        .enabled(
            if: getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/sbin/sshd"), "sshd runs as root"),
        .timeLimit(.minutes(30)))
    func forwardOverSSH() throws {
        let evctl = try builtBinary("evctl")
        let server = try SSHServer(evctlDirectory: evctl.deletingLastPathComponent().path)
        defer { server.stop() }
        let (root, file) = try TypesFileTests.directory(rules: ForwardTests.rules)
        defer { try? FileManager.default.removeItem(atPath: root) }
        let hq = try DaemonProcess(root: root + "/hq", arguments: ["--node", "hq", "--types-file", file])
        let overSSH = try DaemonProcess(
            root: root + "/ssh",
            arguments: [
                "--node", "van-ssh", "--types-file", file, "--ssh-command", server.sshCommand(key: "client_key"),
            ])
        let overUnix = try DaemonProcess(root: root + "/unix", arguments: ["--node", "van-unix", "--types-file", file])
        defer {
            for daemon in [hq, overSSH, overUnix] { daemon.removeFiles() }
        }
        _ = try overSSH.client().call(
            "peers.add", #"{"name":"hq","url":"ssh://root@127.0.0.1:\#(server.port)\#(hq.socketPath)"}"#)
        _ = try overUnix.client().call("peers.add", #"{"name":"hq","url":"unix://\#(hq.socketPath)"}"#)
        // The round trips, printed (timings are for `make bench`; these are a debug build's).
        var report: [String] = []
        for (label, daemon) in [("ssh://", overSSH), ("unix://", overUnix)] {
            let client = try daemon.client()
            var seconds: [Double] = []
            for n in 0..<40 {
                let begin = Date()
                let answer = try client.call("append", eventsParams([ForwardTests.payment("\(label.prefix(3))-\(n)")]))
                seconds.append(Date().timeIntervalSince(begin))
                #expect((answer["ids"] as? [String])?.count == 1, "\(answer)")
            }
            seconds.sort()
            report.append(
                "\(label) p50 \(String(format: "%.1f", seconds[19] * 1000)) ms, p99 \(String(format: "%.1f", seconds[39] * 1000)) ms"
            )
            #expect(try ForwardTests.ownPayments(daemon) == 0, "nothing made at \(label)'s node")
        }
        let held = try hq.client().call("log", #"{"type":"payment","limit":1000}"#)["events"] as? [[String: Any]]
        #expect(held?.count == 80)
        print("forward round trips over 40 appends each: " + report.joined(separator: "; "))
    }

    @Test("peers from the config file sync in the background; an unreachable one retries with backoff, shown in status")
    func background() throws {
        let b = try DaemonProcess(arguments: ["--node", "b"])
        defer { b.removeFiles() }
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("evbg-\(UUID().uuidString.prefix(8))")
            .path
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        let config = """
            {"peers":[{"name":"b","url":"unix://\(b.socketPath)"},{"name":"gone","url":"unix://\(root)/nobody.sock"}],
             "sync_interval_s":1,"backoff_base_s":1,"backoff_cap_s":2}
            """
        try config.write(toFile: root + "/evstored.json", atomically: true, encoding: .utf8)
        let a = try DaemonProcess(root: root, arguments: ["--config", root + "/evstored.json", "--node", "a"])
        defer { a.removeFiles() }
        try append(b, "job/from-b", "assigned")
        try append(a, "job/from-a", "en_route")
        // Both ways, without anyone asking.
        let deadline = Date().addingTimeInterval(30)
        var converged = false
        while Date() < deadline {
            if let da = try? digest(a), let db = try? digest(b), da == db,
                (try? b.client().call("status")["events"] as? Int) == 2
            {
                converged = true
                break
            }
            Thread.sleep(forTimeInterval: 0.1)
        }
        #expect(converged)
        // Pending counts what b lacks by what it last held: a new local event is pending
        // until the next background sync.
        let status = try a.client().call("status")
        let peers = Dictionary(
            uniqueKeysWithValues: (status["peers"] as! [[String: Any]]).map { ($0["name"] as! String, $0) })
        #expect(peers["b"]?["last_success"] is String)
        #expect(peers["b"]?["source"] as? String == "config")
        let gone = peers["gone"]
        #expect(gone?["state"] as? String == "retrying")
        #expect((gone?["failures"] as? Int ?? 0) >= 1)
        #expect((gone?["last_error"] as? [String: Any])?["reason"] as? String == "unreachable")
        #expect(gone?["last_success"] is NSNull)
        #expect(gone?["pending"] as? Int == 2)  // it never got anything
        // A config peer cannot be removed through the API.
        let refused = try a.client().failure("peers.remove", #"{"name":"b"}"#)
        #expect(refused.reason == "forbidden")
    }
}
