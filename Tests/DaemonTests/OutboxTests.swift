import Foundation
import Synchronization
import Testing
import UnixSocket

@testable import Daemon
@testable import Server
@testable import Writer

/// Plays a connection's event loop for `outbox` in a test: flushes it whenever it asks,
/// and again while the socket is full, until it is done.
func startFlusher(_ outbox: Outbox) -> DispatchSemaphore {
    let asked = DispatchSemaphore(value: 0)
    outbox.onReady = { asked.signal() }
    let done = DispatchSemaphore(value: 0)
    Thread.detachNewThread {
        while true {
            let state = outbox.flush()
            if state == .done { break }
            _ = asked.wait(timeout: .now() + (state == .idle ? 0.05 : 0.002))
        }
        done.signal()
    }
    return done
}

/// The outbox over a socket pair: the test plays the client at the other end.
@Suite("Outbox")
struct OutboxTests {
    /// Reads `count` newline-terminated lines from `socket`.
    func readLines(_ socket: UnixConnection, count: Int) throws -> [String] {
        var reader = LineReader(limit: 1 << 24)
        var lines: [String] = []
        while lines.count < count {
            switch try reader.next(reading: { buffer, n in try socket.read(into: &buffer, count: n) }) {
            case .line(let bytes): lines.append(String(decoding: bytes, as: UTF8.self))
            case .tooLong, .end: return lines
            }
        }
        return lines
    }

    /// Flushes the outbox as a connection's event loop does, until it is done.
    func startSender(_ outbox: Outbox, _ socket: UnixConnection) -> DispatchSemaphore {
        startFlusher(outbox)
    }

    @Test("responses filled out of order, pushed by one thread and filled by another, go out in request order")
    func order() throws {
        let (server, client) = try UnixConnection.pair()
        let outbox = Outbox(socket: server, notificationLimit: 10)
        let sender = startSender(outbox, server)
        // Request i is an "append" (filled later, by another thread, in reverse order) when
        // i % 3 == 0, else a read answered at once.
        var slots: [(Int, Outbox.Slot)] = []
        for index in 0..<300 {
            if index % 3 == 0 {
                slots.append((index, outbox.reserve(isAppend: true)))
            } else {
                outbox.push(Array("\(index)\n".utf8))
            }
        }
        let filler = DispatchSemaphore(value: 0)
        let pending = slots
        Thread.detachNewThread {
            for (index, slot) in pending.reversed() { outbox.fill(slot, with: Array("\(index)\n".utf8)) }
            filler.signal()
        }
        let lines = try readLines(client, count: 300)
        filler.wait()
        #expect(lines == (0..<300).map(String.init))
        outbox.finish()
        sender.wait()
    }

    @Test(
        "a client that does not read: what the socket cannot take waits for the sender, in order, and nothing is lost")
    func slowClient() throws {
        let (server, client) = try UnixConnection.pair()
        let outbox = Outbox(socket: server, notificationLimit: 10)
        let sender = startSender(outbox, server)
        // Far more than a socket buffer holds, so writes that must not block come up short.
        let big = String(repeating: "x", count: 200_000)
        var expected: [String] = []
        for index in 0..<40 {
            let line = "\(index) " + (index % 2 == 0 ? big : "small")
            expected.append(line)
            if index % 4 == 1 {
                let slot = outbox.reserve(isAppend: true)
                outbox.fill(slot, with: Array((line + "\n").utf8))
            } else {
                outbox.push(Array((line + "\n").utf8))
            }
        }
        Thread.sleep(forTimeInterval: 0.1)  // the client only starts reading now
        let lines = try readLines(client, count: 40)
        #expect(lines.count == 40)
        #expect(lines == expected)
        outbox.finish()
        sender.wait()
    }

    @Test("a read is admitted once the connection's appends are answered, and told so")
    func admitsAfterAppends() throws {
        let (server, client) = try UnixConnection.pair()
        let outbox = Outbox(socket: server, notificationLimit: 10)
        let resumed = DispatchSemaphore(value: 0)
        outbox.onResume = { resumed.signal() }
        let sender = startSender(outbox, server)
        let slot = outbox.reserve(isAppend: true)
        #expect(outbox.admits(needsAppends: false), "another append goes to the writer at once")
        #expect(!outbox.admits(needsAppends: true), "a read waits for the append")
        outbox.fill(slot, with: Array("1\n".utf8))
        #expect(resumed.wait(timeout: .now() + 10) == .success)
        #expect(outbox.admits(needsAppends: true))
        #expect(try readLines(client, count: 1) == ["1"])
        outbox.finish()
        sender.wait()
    }

    @Test("a reader waiting for its appends wakes when the last one is answered")
    func waitForAppends() throws {
        let (server, client) = try UnixConnection.pair()
        let outbox = Outbox(socket: server, notificationLimit: 10)
        let sender = startSender(outbox, server)
        let first = outbox.reserve(isAppend: true)
        let second = outbox.reserve(isAppend: true)
        let waited = Atomic<Bool>(false)
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            outbox.waitForAppends()
            waited.store(true, ordering: .sequentiallyConsistent)
            done.signal()
        }
        outbox.fill(second, with: Array("2\n".utf8))
        Thread.sleep(forTimeInterval: 0.05)
        let early = waited.load(ordering: .sequentiallyConsistent)
        #expect(!early)
        outbox.fill(first, with: Array("1\n".utf8))
        done.wait()
        #expect(try readLines(client, count: 2) == ["1", "2"])
        outbox.finish()
        sender.wait()
    }

    @Test("the sender ends only once the last response is written, and after a failed write")
    func ending() throws {
        let (server, client) = try UnixConnection.pair()
        let outbox = Outbox(socket: server, notificationLimit: 10)
        let sender = startSender(outbox, server)
        let slot = outbox.reserve(isAppend: true)
        outbox.finish()
        #expect(sender.wait(timeout: .now() + 0.1) == .timedOut, "an append is still to be answered")
        outbox.fill(slot, with: Array("last\n".utf8))
        sender.wait()
        #expect(try readLines(client, count: 1) == ["last"])

        let (server2, client2) = try UnixConnection.pair()
        let broken = Outbox(socket: server2, notificationLimit: 10)
        let sender2 = startSender(broken, server2)
        client2.close()
        let pending = broken.reserve(isAppend: true)
        broken.fill(pending, with: Array("to nobody\n".utf8))
        sender2.wait()
        #expect(broken.isEnding)
        #expect(broken.writeFailure != nil)
    }

    @Test("past byteLimit queued, no request is admitted until the client has read enough; nothing is lost")
    func waitForRoom() throws {
        let (server, client) = try UnixConnection.pair()
        let outbox = Outbox(socket: server, notificationLimit: 10, byteLimit: 1 << 20)
        let done = DispatchSemaphore(value: 0)
        outbox.onResume = { done.signal() }
        let sender = startSender(outbox, server)
        // 4 MiB of answers: far more than the socket's buffers and the 1 MiB limit.
        let line = String(repeating: "x", count: 64 * 1024 - 1)
        for _ in 0..<64 { outbox.push(Array((line + "\n").utf8)) }
        #expect(!outbox.admits(needsAppends: false), "no request runs while the client reads nothing")
        #expect(done.wait(timeout: .now() + 0.3) == .timedOut)
        let lines = try readLines(client, count: 64)
        #expect(done.wait(timeout: .now() + 10) == .success, "requests run again once the answers are read")
        #expect(outbox.admits(needsAppends: false))
        #expect(lines.count == 64 && lines.allSatisfy { $0 == line })
        outbox.finish()
        sender.wait()
    }

    @Test("a commit's notifications past the queue's limits are taken as far as they fit, by count and by bytes")
    func notificationsTakenAsFarAsTheyFit() throws {
        let (server, client) = try UnixConnection.pair()
        defer { client.close() }
        // Nobody sends: what is offered stays queued.
        let byCount = Outbox(socket: server, notificationLimit: 100, notificationByteLimit: 1 << 20)
        let small = (0..<250).map { Notification.encoded(Array("{\"n\":\($0)}\n".utf8)) }
        #expect(byCount.offerNotifications(small) == 100)
        #expect(byCount.notificationBytes == small.prefix(100).reduce(0) { $0 + $1.count })
        #expect(byCount.offerNotifications(Array(small.prefix(1))) == 0)
        let (otherServer, otherClient) = try UnixConnection.pair()
        defer { otherClient.close() }
        let byBytes = Outbox(socket: otherServer, notificationLimit: 100, notificationByteLimit: 1000)
        let large = (0..<10).map { _ in Notification.encoded(Array(repeating: UInt8(ascii: "x"), count: 300)) }
        #expect(byBytes.offerNotifications(large) == 3)
        #expect(byBytes.notificationBytes == 900)
        // Room for all of them: all taken at once.
        #expect(byBytes.offerNotifications([]) == 0)
        let (thirdServer, thirdClient) = try UnixConnection.pair()
        defer { thirdClient.close() }
        let roomy = Outbox(socket: thirdServer, notificationLimit: 1000, notificationByteLimit: 1 << 20)
        #expect(roomy.offerNotifications(small) == 250)
        #expect(roomy.notificationBytes == small.reduce(0) { $0 + $1.count })
        for outbox in [byCount, byBytes, roomy] { outbox.abort() }
    }

    @Test("a stream of notifications the socket takes a little at a time arrives whole and in order")
    func notificationsThroughPartialWrites() throws {
        let (server, client) = try UnixConnection.pair()
        let outbox = Outbox(
            socket: server, notificationLimit: 200_000, byteLimit: 64 << 20, notificationByteLimit: 64 << 20)
        let sender = startSender(outbox, server)
        // 40,000 notifications of 180 to 420 bytes: each write the sender makes (up to
        // 256 KiB) is taken by the socket a part at a time while the client reads slowly.
        let lines = (0..<40_000).map { index in
            Array("{\"n\":\(index),\"pad\":\"\(String(repeating: "y", count: 160 + index % 241))\"}\n".utf8)
        }
        let expected = lines.reduce(0) { $0 + $1.count }
        let received = Mutex<[String]>([])
        let finished = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            var reader = LineReader(limit: 1 << 20)
            var count = 0
            while count < lines.count {
                guard
                    case .line(let bytes) = try? reader.next(reading: { buffer, n in
                        try client.read(into: &buffer, count: min(n, 4096))
                    })
                else { break }
                received.withLock { $0.append(String(decoding: bytes, as: UTF8.self)) }
                count += 1
                if count % 2000 == 0 { usleep(2000) }
            }
            finished.signal()
        }
        for start in stride(from: 0, to: lines.count, by: 1000) {
            #expect(outbox.offerNotifications(lines[start..<start + 1000].map { .encoded($0) }) == 1000)
        }
        #expect(finished.wait(timeout: .now() + 60) == .success)
        let got = received.withLock { $0 }
        #expect(got.count == lines.count)
        #expect(got == lines.map { String(decoding: $0.dropLast(), as: UTF8.self) })
        #expect(outbox.written == expected)
        // A stream that went wrong would leave the sender writing to nobody: cut it off.
        if got.count != lines.count || outbox.written != expected { outbox.abort() }
        outbox.finish()
        #expect(sender.wait(timeout: .now() + 10) == .success)
    }
}

@Suite("SendBuffers")
struct SendBuffersTests {
    @Test("a buffer given back is taken again empty with its room; past the bounds buffers are let go")
    func keepsWithinBounds() {
        let buffers = SendBuffers(keep: 2, smallest: 1 << 12, largest: 1 << 16)
        var first = buffers.take(capacity: 100)
        // Read into values of their own: a buffer an expectation still held when given back
        // would be copied to be emptied, into an allocation whose room is the allocator's.
        let (firstEmpty, firstRoom) = (first.isEmpty, first.capacity)
        first.append(contentsOf: repeatElement(7, count: 3000))
        let room = first.capacity
        // Its last reference, as an outbox gives it.
        buffers.giveBack(consume first)
        #expect(firstEmpty)
        #expect(firstRoom >= 1 << 12)
        #expect(buffers.count == 1)
        let again = buffers.take(capacity: 10)
        #expect(again.isEmpty)
        #expect(again.capacity == room)
        #expect(buffers.count == 0)
        // Larger than `largest`: not kept.
        buffers.giveBack(buffers.take(capacity: 1 << 17))
        #expect(buffers.count == 0)
        // No more than `keep`, however many are given back.
        for _ in 0..<5 { buffers.giveBack(buffers.take(capacity: 1 << 12) + [1]) }
        let many = (0..<5).map { _ in buffers.take(capacity: 1 << 12) }
        for buffer in many { buffers.giveBack(buffer) }
        #expect(buffers.count == 2)
    }

    @Test("an outbox takes a kept buffer for a stream's writes and gives it back; a few notifications go without one")
    func outboxUsesThemForStreamsOnly() throws {
        let buffers = SendBuffers(keep: 2, smallest: 1 << 16, largest: 1 << 20)
        let (server, client) = try UnixConnection.pair()
        let outbox = Outbox(
            socket: server, notificationLimit: 100_000, byteLimit: 64 << 20, notificationByteLimit: 64 << 20,
            sendBuffers: buffers)
        let line = Array("{\"n\":1}\n".utf8)
        // A few bytes: written at once by this thread, in a buffer of their size.
        #expect(outbox.offerNotifications([.encoded(line), .encoded(line)]) == 2)
        #expect(outbox.flush() == .idle)
        #expect(readLines(client, count: 2) == ["{\"n\":1}", "{\"n\":1}"])
        #expect(buffers.count == 0)
        // A stream's worth: made into a kept buffer, given back once the socket took it all.
        let many = [[UInt8]](repeating: line, count: 4000)
        #expect(outbox.offerNotifications(many.map { .encoded($0) }) == 4000)
        #expect(outbox.flush() == .idle)
        #expect(readLines(client, count: 4000).count == 4000)
        #expect(buffers.count == 1)
        outbox.finish()
        #expect(outbox.flush() == .done)
    }

    /// Reads `count` lines from `socket`.
    func readLines(_ socket: UnixConnection, count: Int) -> [String] {
        var reader = LineReader(limit: 1 << 20)
        var lines: [String] = []
        while lines.count < count {
            guard
                case .line(let bytes) = try? reader.next(reading: { buffer, n in
                    try socket.read(into: &buffer, count: n)
                })
            else { break }
            lines.append(String(decoding: bytes, as: UTF8.self))
        }
        return lines
    }
}
