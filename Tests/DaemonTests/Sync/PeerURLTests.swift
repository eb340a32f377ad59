@testable import Daemon
import Foundation
@testable import Replication
@testable import Server
import TestSupport
import Testing
@testable import Writer

/// ssh:// URLs reach ssh's command line and the remote shell: what they may hold.
@Suite("Peer URLs")
struct PeerURLTests {
    @Test(
        "ssh:// hosts, users and socket paths with shell syntax or option-like words are refused, naming the part",
        arguments: [
            ("ssh://u@h$(id>x)", "host"),
            ("ssh://u@h`id`", "host"),
            ("ssh://u@h;id", "host"),
            ("ssh://u@h|id", "host"),
            ("ssh://u@h&id", "host"),
            ("ssh://u@h'x'", "host"),
            ("ssh://u@h\"x\"", "host"),
            ("ssh://u@h\\x", "host"),
            ("ssh://u@h\nid", "host"),
            ("ssh://u@h*", "host"),
            ("ssh://u@h~", "host"),
            ("ssh://u@-oProxyCommand=id", "host"),
            ("ssh://-oProxyCommand=id", "host"),
            ("ssh://u@h\u{00E9}te", "host"),
            ("ssh://u@[::1;id]", "host"),
            ("ssh://u@[::1%$(id)]", "host"),
            ("ssh://u@[::1%]", "host"),
            ("ssh://u@[]", "host"),
            ("ssh://u@[host]", "host"),
            ("ssh://u@::1", "host"),
            ("ssh://$(id)@h", "user"),
            ("ssh://u;id@h", "user"),
            ("ssh://-oProxyCommand=id@h", "user"),
            ("ssh://u@x@h", "user"),
            ("ssh://u v@h", "user"),
            ("ssh://u@h/run/$(id)/evstored.sock", "socket path"),
            ("ssh://u@h/run/x';id;'.sock", "socket path"),
            ("ssh://u@h/run/x`id`.sock", "socket path"),
            ("ssh://u@h/run/x\\'.sock", "socket path"),
            ("ssh://u@h/run/x\n.sock", "socket path"),
            ("ssh://u@h/run/x|id", "socket path"),
            ("ssh://u@h/run/*.sock", "socket path"),
            ("ssh://u@h/run/x!1.sock", "socket path"),
        ] as [(String, String)])
    func hostile(text: String, part: String) {
        do {
            let url = try PeerURL(text)
            Issue.record("accepted \(text.debugDescription) as \(url)")
        } catch {
            #expect(error.reason == .invalidPeer)
            #expect(error.message.contains("the \(part) "), "\(error.message)")
        }
    }

    @Test(
        "host names, users, bracketed IPv6 addresses (with a zone) and plain socket paths are taken",
        arguments: [
            (
                "ssh://evstore@hq.example.net",
                PeerURL.ssh(user: "evstore", host: "hq.example.net", port: nil, socket: nil)
            ),
            ("ssh://field_2@van-7.local:22", .ssh(user: "field_2", host: "van-7.local", port: 22, socket: nil)),
            ("ssh://u@[::1]:2222", .ssh(user: "u", host: "[::1]", port: 2222, socket: nil)),
            ("ssh://[fe80::1%eth0]", .ssh(user: nil, host: "[fe80::1%eth0]", port: nil, socket: nil)),
            (
                "ssh://[::ffff:10.0.0.7]/run/evstore/evstored.sock",
                .ssh(user: nil, host: "[::ffff:10.0.0.7]", port: nil, socket: "/run/evstore/evstored.sock")
            ),
            (
                "ssh://h/srv/my store/ev-1+2@a,b:c=d%e.sock",
                .ssh(user: nil, host: "h", port: nil, socket: "/srv/my store/ev-1+2@a,b:c=d%e.sock")
            ),
        ] as [(String, PeerURL)])
    func plain(text: String, expected: PeerURL) throws {
        #expect(try PeerURL(text) == expected)
    }

    @Test("ssh gets an IPv6 address without its brackets, the port with -p")
    func ipv6Command() throws {
        #expect(
            try PeerURL("ssh://u@[fe80::1%eth0]:2222").command(ssh: ["ssh"]) == [
                "ssh", "-o", "BatchMode=yes", "-p", "2222", "u@fe80::1%eth0", "evctl sync-serve",
            ])
    }

    @Test("peers.add, evctl peers add and the config file refuse a host with shell syntax, saying why")
    func refusedEverywhere() throws {
        let hostile = "ssh://u@h$(id>x)"
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        let refused = try daemon.client().failure("peers.add", #"{"name":"hq","url":"\#(hostile)"}"#)
        #expect(refused.reason == "invalid_params")
        #expect(refused.message.contains(#"the host "h$(id>x)" is not a host name"#), "\(refused.message)")
        #expect((try daemon.client().call("peers.list")["peers"] as? [Any])?.isEmpty == true)

        let evctl = try builtBinary("evctl").path
        let cli = try runProgram(evctl, ["--socket", daemon.socketPath, "peers", "add", "hq", hostile])
        #expect(cli.status == 64, "\(cli)")
        #expect(cli.output.contains("is not a host name"), "\(cli.output)")

        let file = FileManager.default.temporaryDirectory.appendingPathComponent("evstored-\(UUID().uuidString).json")
            .path
        defer { try? FileManager.default.removeItem(atPath: file) }
        try #"{"peers":[{"name":"hq","url":"ssh://u@h$(id>x)"}]}"#.write(
            toFile: file, atomically: true, encoding: .utf8)
        do {
            _ = try Configuration.resolve(commandLine: .init(values: [:], configFile: file), environment: [:])
            Issue.record("the config file's hostile peer was taken")
        } catch {
            #expect(error.message.contains(#"peer "hq""#) && error.message.contains("is not a host name"), "\(error)")
        }
    }
}
