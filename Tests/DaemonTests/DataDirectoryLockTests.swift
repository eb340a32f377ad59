import Foundation
import TestSupport
import Testing
import UnixSocket

/// What the daemon makes and takes before it opens the store: the socket's and the data
/// directory with their documented modes, and the data directory's lock (one data
/// directory, one daemon: the second is refused before it opens the store).
@Suite("Start-up directories and the data directory's lock")
struct DataDirectoryLockTests {
    @Test(
        "a second evstored on the same data directory exits 69 naming the first's pid and socket; the first serves on")
    func secondDaemonRefused() throws {
        let first = try DaemonProcess()
        defer { first.removeFiles() }
        _ = try first.client().call("append", eventsParams([#"{"entity":"job/1","kind":"status","status":"new"}"#]))
        let otherSocket = first.root + "/second.sock"
        let second = try DaemonProcess(root: first.root, arguments: ["--socket", otherSocket], waitForSocket: false)
        #expect(try second.waitForExit(timeout: 15) == 69)
        #expect(second.stderr.contains("pid \(first.process.processIdentifier)"), "\(second.stderr)")
        #expect(second.stderr.contains("socket \(first.socketPath)"), "\(second.stderr)")
        #expect(second.stderr.contains("in use by another evstored"), "\(second.stderr)")
        #expect(!FileManager.default.fileExists(atPath: otherSocket), "it never served")
        let record = try String(contentsOfFile: first.dataDirectory + "/evstored.lock", encoding: .utf8)
        #expect(record == "pid \(first.process.processIdentifier)\nsocket \(first.socketPath)\n")

        // The first is untouched: it appends, and a watcher sees the appends.
        let watcher = try first.client()
        _ = try watcher.call("watch")
        _ = try first.client().call("append", eventsParams([#"{"entity":"job/1","kind":"status","status":"done"}"#]))
        let note = try watcher.readJSON()
        #expect(note["method"] as? String == "event", "\(note)")
        #expect(try first.client().call("status")["events"] as? Int == 2)

        // The lock goes with its holder, however it ends: a kill -9 leaves the file, not the lock.
        first.signal(SIGKILL)
        _ = try first.waitForExit()
        let next = try DaemonProcess(root: first.root)
        #expect(try next.client().call("status")["events"] as? Int == 2)
        try next.stop()
    }

    @Test("the default layout (make run): the socket's directory 0750, the data directory 0700, the socket 0660")
    func defaultLayout() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("evrun-\(UUID().uuidString.prefix(8))")
            .path
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: root) }
        for (socketMode, directoryMode) in [(nil, 0o750), ("0666", 0o755)] as [(String?, UInt32)] {
            let work = root + "/" + (socketMode ?? "default")
            try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: true)
            let process = Process()
            process.executableURL = try builtBinary("evstored")
            process.arguments = socketMode.map { ["--socket-mode", $0] } ?? []
            process.currentDirectoryURL = URL(fileURLWithPath: work)
            process.environment = ProcessInfo.processInfo.environment.filter {
                !$0.key.hasPrefix("EVSTORE_") && !$0.key.hasPrefix("XDG_") && $0.key != "NOTIFY_SOCKET"
                    && $0.key != "STATE_DIRECTORY" && $0.key != "RUNTIME_DIRECTORY"
            }
            process.standardError = FileHandle.nullDevice
            process.standardOutput = FileHandle.nullDevice
            try process.run()
            defer {
                kill(process.processIdentifier, SIGTERM)
                reap(process, timeout: 10)
            }
            let socket = work + "/.evstore/evstored.sock"
            let deadline = Date().addingTimeInterval(20)
            while (try? UnixConnection.connect(to: socket)) == nil, process.isRunning, Date() < deadline {
                Thread.sleep(forTimeInterval: 0.02)
            }
            func mode(_ path: String) -> UInt32? {
                var info = stat()
                return lstat(path, &info) == 0 ? UInt32(info.st_mode & 0o7777) : nil
            }
            #expect(mode(work + "/.evstore") == directoryMode, "the socket's directory lets its group reach the socket")
            #expect(mode(work + "/.evstore/data") == 0o700)
            #expect(mode(socket) == (socketMode == nil ? 0o660 : 0o666))
        }
    }
}
