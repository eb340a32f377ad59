import Foundation
import Testing
import UnixSocket

@Suite("Epoll and non-blocking reads")
struct EpollTests {
    @Test(
        "epoll reports a socket with its tag once it is readable; an eventfd wakes a wait; removed, it is not reported")
    func readiness() throws {
        let epoll = try Epoll()
        let (server, client) = try UnixConnection.pair()
        let wakeup = try EventFD()
        try epoll.add(server.descriptor, events: .readable, tag: 42)
        try epoll.add(wakeup.descriptor, events: .readable, tag: 0)
        #expect(epoll.wait(timeout: 0).isEmpty)
        try client.write(Array("hello\n".utf8))
        let ready = epoll.wait(timeout: 5)
        #expect(ready.map(\.tag) == [42])
        #expect(ready.first?.events.contains(.readable) == true)
        wakeup.signal()
        #expect(Set(epoll.wait(timeout: 5).map(\.tag)) == [0, 42])
        wakeup.drain()
        epoll.remove(server.descriptor)
        #expect(epoll.wait(timeout: 0).isEmpty)
        // Watched for writing only: a socket with room is reported writable.
        try epoll.add(server.descriptor, events: .writable, tag: 7)
        #expect(epoll.wait(timeout: 5).first?.events.contains(.writable) == true)
    }

    @Test(
        "waitReadable(or:) ends at the socket's bytes, at a signal from another thread (drained), at the end of the stream, or at its timeout"
    )
    func waitReadableOrSignalled() throws {
        let (server, client) = try UnixConnection.pair()
        let wake = try EventFD()
        #expect(try server.waitReadable(timeout: 0.01, or: wake) == .timedOut)
        // From another thread while the wait is under way.
        let signaller = Thread {
            Thread.sleep(forTimeInterval: 0.05)
            wake.signal()
        }
        signaller.start()
        #expect(try server.waitReadable(timeout: 30, or: wake) == .signalled)
        #expect(try server.waitReadable(timeout: 0, or: wake) == .timedOut, "the signal is drained")
        try client.write(Array("x".utf8))
        wake.signal()
        #expect(try server.waitReadable(timeout: 30, or: wake) == .readable, "bytes win when both are there")
        #expect(try server.waitReadable(timeout: 0, or: wake) == .readable, "…and the signal is drained still")
        var byte: [UInt8] = []
        _ = try server.read(into: &byte, count: 1)
        #expect(try server.waitReadable(timeout: 0, or: wake) == .timedOut)
        client.close()
        #expect(try server.waitReadable(timeout: 30, or: wake) == .readable, "the end of the stream is read")
    }

    @Test("readAvailable: nil while nothing is there, the bytes once they are, 0 at the end")
    func readAvailable() throws {
        let (server, client) = try UnixConnection.pair()
        let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 4096, alignment: 16)
        defer { scratch.deallocate() }
        var buffer: [UInt8] = []
        #expect(try server.readAvailable(into: &buffer, count: 4096, scratch: scratch) == nil)
        try client.write(Array("abc".utf8))
        #expect(try server.readAvailable(into: &buffer, count: 4096, scratch: scratch) == 3)
        #expect(buffer == Array("abc".utf8))
        client.close()
        #expect(try server.readAvailable(into: &buffer, count: 4096, scratch: scratch) == 0)
    }

    @Test("a line reader gives its buffer back once it holds nothing unread")
    func shrink() throws {
        var reader = LineReader(limit: 1 << 20)
        var input = Array(String(repeating: "x", count: 100_000).utf8) + [0x0A] + Array("half".utf8)
        let line = reader.next(reading: { buffer, count in
            let taken = min(count, input.count)
            buffer.append(contentsOf: input.prefix(taken))
            input.removeFirst(taken)
            return taken
        })
        #expect(line == .line(Array(String(repeating: "x", count: 100_000).utf8)))
        #expect(reader.isMidLine)
        reader.shrinkIfEmpty()
        #expect(reader.capacity > 0, "a line begun is kept")
        var rest = Array("\n".utf8)
        _ = reader.next(reading: { buffer, _ in
            buffer.append(contentsOf: rest)
            defer { rest = [] }
            return rest.count
        })
        #expect(!reader.isMidLine)
        reader.shrinkIfEmpty()
        #expect(reader.capacity == 0)
    }
}
