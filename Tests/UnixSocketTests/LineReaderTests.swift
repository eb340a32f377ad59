import Foundation
import Synchronization
import Testing
import UnixSocket

@Suite("LineReader")
struct LineReaderTests {
    /// Feeds `input` in chunks of `chunk` bytes and collects every line until the end.
    func lines(_ input: [UInt8], limit: Int, chunk: Int) -> [LineReader.Line] {
        var reader = LineReader(limit: limit, chunk: chunk)
        var offset = 0
        var out: [LineReader.Line] = []
        while true {
            let line = reader.next { buffer, count in
                let n = min(count, input.count - offset)
                buffer.append(contentsOf: input[offset..<(offset + n)])
                offset += n
                return n
            }
            out.append(line)
            if line == .end { return out }
        }
    }

    @Test(
        "splits at newlines whatever the chunk size; a last line without newline counts",
        arguments: [1, 2, 5, 64, 4096])
    func splits(chunk: Int) {
        let input = Array("one\ntwo\n\nthree".utf8)
        #expect(
            lines(input, limit: 100, chunk: chunk) == [
                .line(Array("one".utf8)), .line(Array("two".utf8)), .line([]), .line(Array("three".utf8)), .end,
            ])
    }

    @Test(
        "a line over the limit is reported, not kept, and the next line is read whole", arguments: [1, 7, 64, 100_000])
    func overLimit(chunk: Int) {
        let long = [UInt8](repeating: UInt8(ascii: "x"), count: 5000)
        let input = Array("ok\n".utf8) + long + [0x0A] + Array("after\n".utf8) + long
        #expect(
            lines(input, limit: 1000, chunk: chunk) == [
                .line(Array("ok".utf8)), .tooLong(bytes: 5000), .line(Array("after".utf8)), .tooLong(bytes: 5000), .end,
            ])
    }

    @Test("an over-long line is dropped chunk by chunk without holding its bytes; a long line's buffer is given back")
    func releasesBuffers() {
        let chunk = 64 * 1024
        var reader = LineReader(limit: 1 << 20, chunk: chunk)
        var most = 0
        var fed = 0
        // 8 MiB with no newline, then a newline and a short line.
        let total = 8 << 20
        let line = reader.nextLine(reading: { buffer, count, _ in
            most = max(most, buffer.capacity)
            if fed >= total {
                buffer.append(contentsOf: Array("\nok\n".utf8))
                return 4
            }
            buffer.append(contentsOf: [UInt8](repeating: UInt8(ascii: "x"), count: count))
            fed += count
            return count
        })
        #expect(line == .tooLong(bytes: total))
        #expect(most <= 4 << 20, "the buffer held \(most) bytes for a line over a 1 MiB limit")
        #expect(reader.nextLine(reading: { _, _, _ in 0 }) == .line(Array("ok".utf8)))
        #expect(reader.capacity <= 4 * chunk)
        // A line under the limit but long: once read, its room is given back.
        var long = [UInt8](repeating: UInt8(ascii: "y"), count: 900_000) + [0x0A]
        let read = reader.nextLine(reading: { buffer, count, _ in
            let n = min(count, long.count)
            buffer.append(contentsOf: long.prefix(n))
            long.removeFirst(n)
            return n
        })
        #expect(read == .line([UInt8](repeating: UInt8(ascii: "y"), count: 900_000)))
        #expect(
            reader.nextLine(reading: { buffer, _, _ in
                buffer.append(contentsOf: Array("z\n".utf8))
                return 2
            }) == .line(Array("z".utf8)))
        #expect(reader.capacity <= 4 * chunk)
    }

    @Test("exactly at the limit is a line")
    func atLimit() {
        let line = [UInt8](repeating: UInt8(ascii: "y"), count: 64)
        #expect(lines(line + [0x0A], limit: 64, chunk: 16) == [.line(line), .end])
        #expect(lines(line + [0x79, 0x0A], limit: 64, chunk: 16) == [.tooLong(bytes: 65), .end])
    }
}

@Suite("Unix sockets")
struct UnixSocketTests {
    func temporaryPath(_ name: String) -> String {
        FileManager.default.temporaryDirectory.appendingPathComponent("us-\(UUID().uuidString.prefix(8))-\(name)").path
    }

    /// The process's umask, as `/proc/self/status` says (reading it with `umask()` would set it).
    static func processUmask() throws -> mode_t {
        let status = try String(contentsOfFile: "/proc/self/status", encoding: .utf8)
        let line = try #require(status.split(separator: "\n").first { $0.hasPrefix("Umask:") })
        return try #require(mode_t(line.dropFirst("Umask:".count).trimmingCharacters(in: .whitespaces), radix: 8))
    }

    @Test("binding a listener leaves the process's umask alone: what another thread makes meanwhile keeps its mode")
    func bindingLeavesTheUmaskAlone() throws {
        let expected = 0o755 & ~(try Self.processUmask())
        let directory = temporaryPath("dirs")
        defer { rmdir(directory) }
        final class Flag: Sendable { let binding = Atomic<Bool>(true) }
        let flag = Flag()
        let binder = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            defer {
                flag.binding.store(false, ordering: .releasing)
                binder.signal()
            }
            for index in 0..<3_000 {
                let path = temporaryPath("u\(index).sock")
                _ = try? UnixListener.bind(path: path, mode: 0o600)
                unlink(path)
            }
        }
        // A directory made while another thread binds, as a daemon makes a backup's or a
        // blob's while it starts listening: it gets the mode it asked for, less the umask.
        var made = 0
        var wrong: [mode_t] = []
        while flag.binding.load(ordering: .acquiring) {
            guard mkdir(directory, 0o755) == 0 else { break }
            var info = stat()
            if stat(directory, &info) == 0, info.st_mode & 0o777 != expected { wrong.append(info.st_mode & 0o777) }
            rmdir(directory)
            made += 1
        }
        binder.wait()
        #expect(made > 20, "directories made while binding")
        let wrongModes = wrong.count
        #expect(
            wrongModes == 0,
            "\(wrongModes) of \(made) made with modes \(wrong.prefix(3).map { String($0, radix: 8) }), not \(String(expected, radix: 8))"
        )
    }

    @Test("a listener binds with the mode asked for, replaces a stale socket, refuses a live one")
    func listenerRules() throws {
        let path = temporaryPath("a.sock")
        defer { unlink(path) }
        let first = try UnixListener.bind(path: path, mode: 0o600)
        let attributes = try FileManager.default.attributesOfItem(atPath: path)
        #expect(attributes[.posixPermissions] as? Int == 0o600)
        // A client connects; the server sees who it is.
        let client = try UnixConnection.connect(to: path)
        let server = try #require(try first.accept(timeout: 5))
        let credentials = try server.peerCredentials()
        #expect(credentials.pid == getpid() && credentials.uid == getuid() && credentials.gid == getgid())
        // The supplementary groups, as this process holds them (SO_PEERGROUPS).
        var groups = [gid_t](repeating: 0, count: Int(getgroups(0, nil)))
        _ = getgroups(Int32(groups.count), &groups)
        #expect(credentials.groups.map { Set($0) } == Set(groups))
        #expect(Accounts.groupName(of: 0) == "root" && Accounts.userName(of: 0) == "root")
        #expect(Accounts.userID(named: "root") == 0 && Accounts.userID(named: "4242") == 4242)
        #expect(Accounts.userID(named: "no-such-user-evstore") == nil)
        #expect(Accounts.groupList(of: 0, primary: 0).contains(0))
        try client.write(Array("ping\n".utf8))
        var buffer: [UInt8] = []
        let count = try server.read(into: &buffer, count: 16)
        #expect(count == 5)
        #expect(buffer == Array("ping\n".utf8))
        client.close()
        #expect(try server.read(into: &buffer, count: 16) == 0, "end of stream")
        server.close()
        // A second listener on a live socket is refused (its probe is accepted and closed).
        #expect {
            _ = try UnixListener.bind(path: path)
        } throws: { error in
            (error as? SocketError)?.code == EADDRINUSE
        }
        // Leave the file behind as a crashed daemon would: close the descriptor only.
        let stale = temporaryPath("b.sock")
        defer { unlink(stale) }
        let crashed = try UnixListener.bind(path: stale)
        let descriptor = crashed.descriptor
        _ = Foundation.close(descriptor)
        #expect(FileManager.default.fileExists(atPath: stale))
        // A process another test forks at this moment holds the listening socket until it
        // execs (close-on-exec): the file is stale once it has, so allow it a moment.
        var replacement: UnixListener?
        for _ in 0..<200 {
            replacement = try? UnixListener.bind(path: stale)
            if replacement != nil { break }
            Thread.sleep(forTimeInterval: 0.025)
        }
        let replaced = try #require(replacement)
        _ = try UnixConnection.connect(to: stale)
        #expect(try replaced.accept(timeout: 5) != nil)
        first.close()
        #expect(!FileManager.default.fileExists(atPath: path), "close removes the file")
    }

    @Test("a path that is not a socket is never removed; connecting to nothing says so")
    func refusals() throws {
        let path = temporaryPath("file")
        #expect(FileManager.default.createFile(atPath: path, contents: Data("keep".utf8)))
        defer { unlink(path) }
        #expect {
            _ = try UnixListener.bind(path: path)
        } throws: { error in
            (error as? SocketError)?.code == EEXIST
        }
        #expect(FileManager.default.contents(atPath: path) == Data("keep".utf8))
        #expect {
            _ = try UnixConnection.connect(to: temporaryPath("missing.sock"))
        } throws: { error in
            (error as? SocketError)?.isMissing == true
        }
        #expect {
            _ = try UnixConnection.connect(to: "/" + String(repeating: "x", count: 200))
        } throws: { error in
            (error as? SocketError)?.code == ENAMETOOLONG
        }
    }

    @Test("datagrams reach a receiver, also in the abstract namespace")
    func datagrams() throws {
        let path = temporaryPath("n.sock")
        let receiver = try DatagramReceiver(path: path)
        try sendDatagram(Array("READY=1".utf8), to: path)
        #expect(try receiver.receive(timeout: 5) == Array("READY=1".utf8))
        #expect(try receiver.receive(timeout: 0.05) == nil)
    }
}
