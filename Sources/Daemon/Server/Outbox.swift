import FoundationEssentials
import UnixSocket

/// What a connection has to send, in order: responses (some still being computed, like an
/// append waiting for its commit) and watch notifications.
///
/// Responses go out in request order however they complete. One thread writes to the
/// socket at a time. The thread that completes the response at the head of the order —
/// the reader answering a read, the writer answering an append — writes it at once when
/// nobody else is writing, as much as the socket takes without blocking; the sender
/// thread writes the rest, and everything a client is slow to take (it may block). So a
/// client that reads its answers is answered without waking the sender.
///
/// Notifications pushed by the writer never block it: past `notificationLimit` queued,
/// the offer is refused and the caller disconnects the consumer. Past `byteLimit` bytes
/// waiting to be sent, the reader waits (`waitForRoom`) before it takes another request:
/// a client that does not read its answers cannot make the daemon hold more than that
/// and the response being made.
final class Outbox: @unchecked Sendable {
    /// A place in the order, filled when its response is ready.
    final class Slot: @unchecked Sendable {
        /// Guarded by the outbox's condition.
        fileprivate var bytes: [UInt8]?
        fileprivate let isAppend: Bool
        /// How many notifications its bytes hold (0: a response).
        fileprivate let notifications: Int

        fileprivate init(bytes: [UInt8]?, isAppend: Bool, notifications: Int = 0) {
            self.bytes = bytes
            self.isAppend = isAppend
            self.notifications = notifications
        }
    }

    let notificationLimit: Int
    let byteLimit: Int
    /// Where responses go; written by one thread at a time (`writing`).
    private let socket: UnixConnection
    /// Protects every var below (and each slot's bytes); wakes the sender and waiters.
    private let condition = Condition()
    private var slots: [Slot] = []
    private var head = 0
    /// Bytes taken from the head that a write without blocking could not send: they go
    /// before anything else, and only the sender writes them.
    private var unsent: [UInt8] = []
    /// A thread is writing to the socket (the sender, or one writing what it completed).
    private var writing = false
    /// Who waits on the condition: the sender for something to write, the reader for its
    /// appends or for room for notifications. Nobody else is woken (a futex wake and a
    /// context switch each).
    private var senderWaiting = false
    private var readerWaiting = false
    private var queuedNotifications = 0
    /// Bytes of ready slots not yet taken, and of `unsent`.
    private var queuedBytes = 0
    /// Bytes the sender took and is writing.
    private var sendingBytes = 0
    private var appendsInFlight = 0
    /// No more pushes; the sender ends once everything queued is written.
    private var finishing = false
    /// The sender must stop now (the peer is gone).
    private var aborted = false
    /// Why a write without blocking failed, for the sender to report.
    private var failure: SocketError?

    init(socket: UnixConnection, notificationLimit: Int, byteLimit: Int = 64 << 20) {
        self.socket = socket
        self.notificationLimit = notificationLimit
        self.byteLimit = byteLimit
    }

    /// Takes the next place in the order for a response computed later.
    func reserve(isAppend: Bool = false) -> Slot {
        let slot = Slot(bytes: nil, isAppend: isAppend)
        condition.lock()
        slots.append(slot)
        if isAppend { appendsInFlight += 1 }
        condition.unlock()
        return slot
    }

    /// Fills a reserved place (empty bytes for a notification request: nothing is sent),
    /// and writes it when it is next.
    func fill(_ slot: Slot, with bytes: [UInt8]) {
        condition.lock()
        slot.bytes = bytes
        queuedBytes += bytes.count
        if slot.isAppend {
            appendsInFlight -= 1
            // A reader waits for this connection's appends before a read.
            if appendsInFlight == 0 && readerWaiting { condition.broadcast() }
        }
        if head < slots.count, slots[head] === slot {
            writeReady()
        }
        condition.unlock()
    }

    /// Queues a response that is ready now, and writes it when it is next.
    func push(_ bytes: [UInt8]) {
        condition.lock()
        defer { condition.unlock() }
        guard !finishing && !aborted, !bytes.isEmpty else { return }
        if head == slots.count, !writing, unsent.isEmpty {
            // Nothing before it: no slot needed.
            write(bytes)
        } else {
            slots.append(Slot(bytes: bytes, isAppend: false))
            queuedBytes += bytes.count
            wakeSender()
        }
    }

    /// Queues a notification unless `notificationLimit` are already waiting. Never blocks
    /// (the sender writes it).
    func offerNotification(_ bytes: [UInt8]) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        guard !finishing && !aborted else { return true }
        guard queuedNotifications < notificationLimit else { return false }
        appendNotification(bytes)
        return true
    }

    /// Queues the notifications of one commit, one after the other in `bytes`, each ending
    /// at its offset in `ends`, in one slot (one wake of the sender): as many as there is
    /// room for under `notificationLimit`, from the first.
    /// - Returns: how many were queued (all of them when the connection is ending: they
    ///   are dropped with it).
    func offerNotifications(_ bytes: [UInt8], ends: [Int]) -> Int {
        condition.lock()
        defer { condition.unlock() }
        guard !finishing && !aborted else { return ends.count }
        let taken = min(ends.count, max(0, notificationLimit - queuedNotifications))
        guard taken > 0 else { return 0 }
        appendNotification(taken == ends.count ? bytes : Array(bytes[..<ends[taken - 1]]), count: taken)
        return taken
    }

    /// Queues a notification, waiting while `notificationLimit` are waiting (catch-up: a
    /// reader thread may wait, the writer never does). False when the connection is ending.
    func pushNotificationWaiting(_ bytes: [UInt8]) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        while queuedNotifications >= notificationLimit && !finishing && !aborted { readerWait() }
        guard !finishing && !aborted else { return false }
        appendNotification(bytes)
        return true
    }

    /// Queues a last message after everything else and ends the connection once written.
    func finish(after last: [UInt8]? = nil) {
        condition.lock()
        if let last, !finishing && !aborted {
            slots.append(Slot(bytes: last, isAppend: false))
            queuedBytes += last.count
        }
        finishing = true
        condition.broadcast()
        condition.unlock()
    }

    /// Drops whatever is queued: the peer is gone.
    func abort() {
        condition.lock()
        aborted = true
        condition.broadcast()
        condition.unlock()
    }

    /// How many more notifications fit under `notificationLimit` now.
    var notificationRoom: Int {
        condition.lock()
        defer { condition.unlock() }
        return max(0, notificationLimit - queuedNotifications)
    }

    /// Waits while more than `byteLimit` bytes wait to be sent: the reader calls it before
    /// each request, so a client that does not read stops being read.
    func waitForRoom() {
        condition.lock()
        while queuedBytes + sendingBytes > byteLimit && !aborted && !finishing { readerWait() }
        condition.unlock()
    }

    /// Nothing waits to be sent or to be answered: the connection is idle.
    var isIdle: Bool {
        condition.lock()
        defer { condition.unlock() }
        return head == slots.count && unsent.isEmpty && !writing && appendsInFlight == 0
    }

    /// Waits until every append this connection sent has its response.
    func waitForAppends() {
        condition.lock()
        while appendsInFlight > 0 && !aborted { readerWait() }
        condition.unlock()
    }

    var isEnding: Bool {
        condition.lock()
        defer { condition.unlock() }
        return finishing || aborted
    }

    /// For the sender: waits until there is something to write and nobody else writes,
    /// and returns it as one write; nil when the connection is done. Call `wrote()` once
    /// it is written.
    func nextWrite() -> [UInt8]? {
        condition.lock()
        defer { condition.unlock() }
        while true {
            // Never while another thread writes: the socket is closed once the sender ends.
            if !writing {
                if aborted { return nil }
                let out = takeReady()
                if !out.isEmpty {
                    writing = true
                    sendingBytes = out.count
                    return out
                }
                if finishing && head == slots.count { return nil }
            }
            senderWaiting = true
            condition.wait()
            senderWaiting = false
        }
    }

    /// For the sender: what `nextWrite()` returned is written (or failed).
    func wrote() {
        condition.lock()
        writing = false
        sendingBytes = 0
        if readerWaiting { condition.broadcast() }
        condition.unlock()
    }

    /// Why a write that did not block failed, if one did.
    var writeFailure: SocketError? {
        condition.lock()
        defer { condition.unlock() }
        return failure
    }

    /// Whatever is ready at the head, one write's worth; notifications taken make room.
    /// Call with the condition's lock held.
    private func takeReady() -> [UInt8] {
        var out: [UInt8] = []
        swap(&out, &unsent)
        queuedBytes -= out.count
        var released = 0
        while head < slots.count, let bytes = slots[head].bytes {
            if out.isEmpty { out = bytes } else { out.append(contentsOf: bytes) }
            released += slots[head].notifications
            queuedBytes -= bytes.count
            head += 1
            if out.count >= 1 << 20 { break }
        }
        if head == slots.count {
            slots.removeAll(keepingCapacity: slots.count <= 1024)
            head = 0
        } else if head > 1024 && head * 2 > slots.count {
            slots.removeFirst(head)
            head = 0
        }
        if released > 0 {
            queuedNotifications -= released
            if readerWaiting { condition.broadcast() }
        }
        return out
    }

    /// Writes what is ready at the head on the calling thread when nobody else writes.
    /// Call with the condition's lock held.
    private func writeReady() {
        guard !writing, unsent.isEmpty, !aborted else {
            wakeSender()
            return
        }
        let out = takeReady()
        if !out.isEmpty { write(out) }
    }

    /// Writes `bytes`, which are next in order, without blocking; what the socket does not
    /// take goes to the sender. Call with the condition's lock held and nobody writing:
    /// the lock is let go during the system call.
    private func write(_ bytes: [UInt8]) {
        writing = true
        condition.unlock()
        let result: Result<Int, SocketError>
        do throws(SocketError) {
            result = .success(try socket.writeAvailable(bytes))
        } catch {
            result = .failure(error)
        }
        condition.lock()
        writing = false
        switch result {
        case .success(let written):
            if written < bytes.count {
                unsent = Array(bytes[written...])
                queuedBytes += unsent.count
            }
        case .failure(let error):
            failure = error
            aborted = true
            condition.broadcast()
            return
        }
        // What completed meanwhile, the rest of these bytes, or the end: the sender's.
        if !unsent.isEmpty || finishing || aborted || (head < slots.count && slots[head].bytes != nil) {
            wakeSender()
        }
    }

    private func readerWait() {
        readerWaiting = true
        condition.wait()
        readerWaiting = false
    }

    private func wakeSender() {
        if senderWaiting { condition.broadcast() }
    }

    private func appendNotification(_ bytes: [UInt8], count: Int = 1) {
        slots.append(Slot(bytes: bytes, isAppend: false, notifications: count))
        queuedBytes += bytes.count
        queuedNotifications += count
        wakeSender()
    }
}
