import Foundation
import Testing
import UnixSocket

@Suite("ChildProcess")
struct ChildProcessTests {
    /// Everything `connection` reads until the end of the stream.
    func readToEnd(_ connection: UnixConnection) throws -> [UInt8] {
        var bytes: [UInt8] = []
        while try connection.read(into: &bytes, count: 64 * 1024) > 0 {}
        return bytes
    }

    @Test("cat sends back every byte written to it, while it is being written")
    func catRoundTrip() throws {
        let (child, connection) = try ChildProcess.spawn(["cat"])
        defer { connection.close() }
        // 1 MiB is more than the socket buffers hold: reading while writing is needed.
        var generator = SystemRandomNumberGenerator()
        let payload = (0..<(1 << 20)).map { _ in UInt8.random(in: 0...255, using: &generator) }
        let writer = Thread {
            try? connection.write(payload)
            connection.shutdownWriting()
        }
        writer.start()
        #expect(try readToEnd(connection) == payload)
        #expect(child.wait(timeout: 10) == .exited(0))
    }

    @Test("ending the writing side is the end of cat's input: it exits 0")
    func endOfInput() throws {
        let (child, connection) = try ChildProcess.spawn(["cat"])
        defer { connection.close() }
        try connection.write(Array("last line\n".utf8))
        connection.shutdownWriting()
        #expect(try readToEnd(connection) == Array("last line\n".utf8))
        #expect(child.wait(timeout: 10) == .exited(0))
    }

    @Test("the exit status and the end of standard error are kept")
    func exitStatusAndStandardError() throws {
        let (child, connection) = try ChildProcess.spawn(["sh", "-c", "echo oops >&2; exit 3"])
        defer { connection.close() }
        #expect(child.wait(timeout: 10) == .exited(3))
        #expect(child.standardError.contains("oops"))
    }

    @Test("only the last 8 KiB of standard error are kept")
    func standardErrorBound() throws {
        let (child, connection) = try ChildProcess.spawn([
            "sh", "-c", "i=0; while [ $i -lt 2000 ]; do echo line $i >&2; i=$((i+1)); done",
        ])
        defer { connection.close() }
        #expect(child.wait(timeout: 10) == .exited(0))
        #expect(child.standardError.utf8.count == 8 * 1024)
        #expect(child.standardError.hasSuffix("line 1999\n"))
    }

    @Test("a command that is not in PATH is an error naming it")
    func missingCommand() {
        do {
            _ = try ChildProcess.spawn(["evstore-no-such-command", "x"])
            Issue.record("spawning a missing command succeeded")
        } catch {
            #expect(error.code == ENOENT)
            #expect(error.description.contains("evstore-no-such-command"))
        }
    }

    @Test("a read from a child that never answers times out, and terminate ends the child")
    func silentChild() throws {
        let (child, connection) = try ChildProcess.spawn(["sleep", "30"])
        defer { connection.close() }
        try connection.setTimeouts(read: 0.3, write: nil)
        let started = Date()
        var buffer: [UInt8] = []
        do {
            _ = try connection.read(into: &buffer, count: 100)
            Issue.record("the read returned")
        } catch {
            #expect(error.isTimeout)
        }
        #expect(Date().timeIntervalSince(started) < 5)
        #expect(child.wait(timeout: 0.05) == nil)
        // SIGTERM ends it although the test runner may block SIGTERM: the child's mask is empty.
        #expect(child.terminate(grace: 5) == .signalled(SIGTERM))
        #expect(child.wait(timeout: 0) == .signalled(SIGTERM))
    }

    @Test("the child has descriptors 0, 1 and 2 only, even when this process has one open without close-on-exec")
    func noDescriptorLeaks() throws {
        let inherited = Glibc.open("/dev/null", O_RDONLY)
        #expect(inherited >= 0)
        defer { close(inherited) }
        let (child, connection) = try ChildProcess.spawn(["sh", "-c", "ls /proc/$$/fd"])
        defer { connection.close() }
        let listed = String(decoding: try readToEnd(connection), as: UTF8.self)
        #expect(listed.split(separator: "\n") == ["0", "1", "2"])
        #expect(child.wait(timeout: 10) == .exited(0))
    }

    @Test("the environment given is the child's whole environment")
    func environment() throws {
        let (child, connection) = try ChildProcess.spawn(
            ["sh", "-c", "echo \"$EVSTORE_TEST_VALUE|$HOME\""],
            environment: ["EVSTORE_TEST_VALUE": "a b", "PATH": "/usr/bin:/bin"])
        defer { connection.close() }
        #expect(String(decoding: try readToEnd(connection), as: UTF8.self) == "a b|\n")
        #expect(child.wait(timeout: 10) == .exited(0))
    }
}
