@testable import Daemon
import Foundation
@testable import Server
import Synchronization
import Testing
import UnixSocket
@testable import Writer

/// `backup` writes where a client names, with the daemon's rights: these tests plant what a
/// client with write access could plant there, and check that the daemon neither writes
/// through it nor leaves a copy others can read.
@Suite("backup: the destination is the daemon's own, and the copy private from its first byte")
struct BackupTests {
    /// A daemon holding `count` events in its store.
    func daemon(events count: Int, arguments: [String] = []) throws -> DaemonProcess {
        let daemon = try DaemonProcess(arguments: arguments)
        let client = try daemon.client()
        var appended = 0
        while appended < count {
            let batch = (0..<min(500, count - appended)).map { index in
                #"{"entity":"job/\#(appended + index)","kind":"edit","fields":{"note":"\#(String(repeating: "x", count: 200))"}}"#
            }
            _ = try client.call("append", eventsParams(batch))
            appended += batch.count
        }
        return daemon
    }

    func mode(_ path: String) -> UInt32? {
        var info = stat()
        return lstat(path, &info) == 0 ? UInt32(info.st_mode & 0o7777) : nil
    }

    @Test(
        "an existing directory that is not the daemon's own with mode 0700 is refused, and nothing is written in it",
        .enabled(if: getuid() == 0, "giving a directory to another user needs root"))
    func foreignDirectories() throws {
        let daemon = try self.daemon(events: 1)
        defer { daemon.removeFiles() }
        let client = try daemon.client()
        let manager = FileManager.default

        let open = daemon.root + "/open"
        try manager.createDirectory(atPath: open, withIntermediateDirectories: false)
        #expect(chmod(open, 0o755) == 0)
        let wide = try client.failure("backup", #"{"path":"\#(open)"}"#)
        #expect(wide.reason == "forbidden" && wide.message.contains("mode 0755, not 0700"), "\(wide)")

        // Another user's directory: its owner could swap data.mdb for a link mid-copy.
        let theirs = daemon.root + "/theirs"
        try manager.createDirectory(atPath: theirs, withIntermediateDirectories: false)
        #expect(chmod(theirs, 0o700) == 0 && chown(theirs, nobody, nobody) == 0)
        let foreign = try client.failure("backup", #"{"path":"\#(theirs)"}"#)
        #expect(foreign.reason == "forbidden" && foreign.message.contains("belongs to uid 65534"), "\(foreign)")

        // A link at the path itself is not followed.
        let target = daemon.root + "/target"
        try manager.createDirectory(atPath: target, withIntermediateDirectories: false)
        #expect(chmod(target, 0o700) == 0)
        try manager.createSymbolicLink(atPath: daemon.root + "/link", withDestinationPath: target)
        let linked = try client.failure("backup", #"{"path":"\#(daemon.root)/link"}"#)
        #expect(linked.reason == "forbidden" && linked.message.contains("symbolic link"), "\(linked)")

        for path in [open, theirs, target] {
            #expect(try manager.contentsOfDirectory(atPath: path).isEmpty, "\(path) was written in")
        }
        #expect(mode(open) == 0o755 && mode(theirs) == 0o700, "no mode was changed")
    }

    @Test(
        "a link planted at data.mdb is refused; the file it points to keeps its mode",
        .enabled(if: getuid() == 0, "the daemon runs as the test's user, and root's files are the victims"))
    func plantedLink() throws {
        let daemon = try self.daemon(events: 1)
        defer { daemon.removeFiles() }
        let victim = daemon.root + "/victim"
        _ = FileManager.default.createFile(atPath: victim, contents: Data("keep me".utf8))
        #expect(chmod(victim, 0o644) == 0)
        let planted = daemon.root + "/planted"
        try FileManager.default.createDirectory(atPath: planted, withIntermediateDirectories: false)
        #expect(chmod(planted, 0o700) == 0)
        try FileManager.default.createSymbolicLink(atPath: planted + "/data.mdb", withDestinationPath: victim)
        let refused = try daemon.client().failure("backup", #"{"path":"\#(planted)"}"#)
        #expect(refused.reason == "conflict", "\(refused)")
        #expect(mode(victim) == 0o644, "the link was followed")
        #expect(try String(contentsOfFile: victim, encoding: .utf8) == "keep me")
    }

    @Test("data.mdb is 0600 at every moment of the copy, and the copy opens as a store with every event")
    func privateFromCreation() throws {
        let count = 6000
        let daemon = try self.daemon(events: count)
        defer { daemon.removeFiles() }
        let path = daemon.root + "/copy"
        let file = path + "/data.mdb"

        // Another process's view while the daemon writes: the file's mode, as often as it
        // can look. LMDB used to create it 0666 less the umask, and the daemon chmod it after.
        final class Watch: Sendable {
            let state = Mutex((running: true, modes: Set<UInt32>(), looks: 0))
            let done = DispatchSemaphore(value: 0)
        }
        let watch = Watch()
        let thread = Thread {
            while watch.state.withLock({ $0.running }) {
                var info = stat()
                if lstat(file, &info) == 0 {
                    let mode = UInt32(info.st_mode & 0o7777)
                    watch.state.withLock {
                        $0.modes.insert(mode)
                        $0.looks += 1
                    }
                }
            }
            watch.done.signal()
        }
        thread.start()
        let result = try daemon.client().call("backup", #"{"path":"\#(path)"}"#)
        watch.state.withLock { $0.running = false }
        watch.done.wait()
        let seen = watch.state.withLock { $0 }
        #expect(seen.looks > 0)
        #expect(seen.modes == [0o600], "modes seen during the copy: \(seen.modes.map { String($0, radix: 8) })")
        #expect(mode(path) == 0o700)
        #expect(try FileManager.default.contentsOfDirectory(atPath: path) == ["data.mdb"])
        let bytes = try #require(result["bytes"] as? Int)
        #expect(bytes == (try FileManager.default.attributesOfItem(atPath: file)[.size] as? Int))

        let restored = try DaemonProcess(arguments: ["--data-dir", path])
        defer { restored.removeFiles() }
        let client = try restored.client()
        #expect(try client.call("status")["events"] as? Int == count)
        #expect(
            try client.call("status")["digest"] as? String == (try daemon.client().call("status")["digest"] as? String))
    }

    @Test("backup_dir confines backups: outside it, \"..\" and links under it are refused; under it works")
    func confinement() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("evbk-\(UUID().uuidString.prefix(8))")
            .path
        let backups = root + "/backups"
        let outside = root + "/outside"
        for directory in [backups, outside] {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        }
        let daemon = try DaemonProcess(root: root, arguments: ["--backup-dir", backups])
        defer { daemon.removeFiles() }
        let client = try daemon.client()
        _ = try client.call("append", eventsParams([#"{"entity":"job/1","kind":"status","status":"new"}"#]))

        let away = try client.failure("backup", #"{"path":"\#(outside)/one"}"#)
        #expect(away.reason == "forbidden" && away.message.contains("backup_dir"), "\(away)")
        let dotted = try client.failure("backup", #"{"path":"\#(backups)/../outside/two"}"#)
        #expect(dotted.reason == "invalid_params" && dotted.message.contains(".."), "\(dotted)")
        let itself = try client.failure("backup", #"{"path":"\#(backups)"}"#)
        #expect(itself.reason == "forbidden", "\(itself)")
        // A link under backup_dir that leads out of it.
        try FileManager.default.createSymbolicLink(atPath: backups + "/out", withDestinationPath: outside)
        let linked = try client.failure("backup", #"{"path":"\#(backups)/out/three"}"#)
        #expect(linked.reason == "forbidden" && linked.message.contains("symbolic link"), "\(linked)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: outside).isEmpty, "nothing was written outside")

        let made = try client.call("backup", #"{"path":"\#(backups)/2026/one"}"#)
        #expect(made["path"] as? String == backups + "/2026/one")
        #expect(mode(backups + "/2026") == 0o700 && mode(backups + "/2026/one/data.mdb") == 0o600)
    }

    @Test("backup_dir must be an absolute path without . or ..; a trailing slash is dropped")
    func confinementSetting() throws {
        func set(_ text: String) throws -> String? {
            var configuration = Configuration(dataDirectory: "d", socketPath: "s")
            try configuration.set("backup_dir", text: text, source: "--backup-dir")
            return configuration.backupDirectory
        }
        #expect(try set("/srv/evstore-backup/") == "/srv/evstore-backup")
        #expect(try set("") == nil)
        for bad in ["relative/dir", "/srv/../etc", "/srv/./b"] {
            #expect(throws: Configuration.Invalid.self, "\(bad)") { _ = try set(bad) }
        }
    }
}
