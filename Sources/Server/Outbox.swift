import FoundationEssentials
import UnixSocket

/// What a connection has to send, in order: responses (some still being computed, like an
/// append waiting for its commit) and watch notifications.
///
/// Responses go out in request order however they complete. One thread writes to the
/// socket at a time, never blocking. The thread that completes the response at the head
/// of the order — a request thread answering a read, the writer answering an append —
/// writes it at once when nobody else is writing, as much as the socket takes; the rest,
/// and everything a client is slow to take, is left for the connection's event loop
/// (`onReady` wakes it; it calls `flush()`, again once the socket is writable). So a
/// client that reads its answers is answered without a hop through the loop.
///
/// Notifications pushed by the writer never block it: past `notificationLimit` queued, or
/// `notificationByteLimit` bytes of them, the offer is refused and the caller disconnects
/// the consumer. A notification's bytes are shared by every subscription it is queued to
/// (one copy per commit, not one per watch). Past `byteLimit` bytes waiting to be sent,
/// the connection runs no more requests (`admits`) until the client has read enough: a
/// client that does not read its answers cannot make the daemon hold more than that and
/// the response being made. What waits is charged to the daemon's `BufferBudget`; while
/// that is spent, a connection holding more than its floor runs no more requests and takes
/// no more notifications either.
package final class Outbox: @unchecked Sendable {
    /// A place in the order, filled when its response is ready.
    package final class Slot: @unchecked Sendable {
        /// Guarded by the outbox's condition.
        fileprivate var bytes: [UInt8]?
        /// Notifications, each shared with the other subscriptions it went to; sent after
        /// `bytes`.
        fileprivate let parts: [Notification]
        /// Their bytes on the wire.
        fileprivate let partsSize: Int
        fileprivate let isAppend: Bool

        fileprivate init(bytes: [UInt8]?, isAppend: Bool, parts: [Notification] = [], partsSize: Int = 0) {
            self.bytes = bytes
            self.isAppend = isAppend
            self.parts = parts
            self.partsSize = partsSize
        }

        /// Its bytes on the wire, once filled.
        fileprivate var size: Int { (bytes?.count ?? 0) + partsSize }
    }

    /// What one write takes from the head of the order: a response alone, sent as it is,
    /// or slots made into one buffer by the writing thread after it has let the lock go
    /// (notifications queued as stored payloads are encoded there, not under the lock the
    /// writer takes to queue the next ones).
    private struct Taken {
        var alone: [UInt8] = []
        var slots: [Slot] = []
        /// The bytes it makes.
        var size = 0
        /// Whether `alone` is a buffer of `SendBuffers` (what a write could not send of
        /// slots made into one), to be given back once written.
        var pooled = false

        init(alone: [UInt8] = [], pooled: Bool = false) {
            self.alone = alone
            self.size = alone.count
            self.pooled = pooled
        }

        /// Whether its bytes are made into a buffer of `SendBuffers`, or are one: slots of a
        /// stream's size (a few notifications go into a buffer of their size, not one of
        /// `SendBuffers`' when none is kept).
        var makesPooled: Bool { pooled || (!slots.isEmpty && size >= SendBuffers.pooledFrom) }

        /// Its bytes, in order. The slots were taken out of the order with the lock held;
        /// nothing changes them after.
        consuming func bytes(using buffers: SendBuffers) -> [UInt8] {
            guard !slots.isEmpty else { return alone }
            var out: [UInt8] = []
            if makesPooled {
                out = buffers.take(capacity: size)
            } else {
                out.reserveCapacity(size)
            }
            for slot in slots {
                if let bytes = slot.bytes { out.append(contentsOf: bytes) }
                for part in slot.parts { part.append(to: &out) }
            }
            assert(out.count == size, "notifications made into more or fewer bytes than they were queued at")
            return out
        }
    }

    /// What `flush()` left.
    package enum FlushState: Equatable {
        /// Everything ready is written.
        case idle
        /// The socket takes no more now: flush again once it is writable.
        case blocked
        /// Another thread is writing; it hands what it cannot write back through `onReady`.
        case busy
        /// Finished and written, or aborted: nothing more will be written.
        case done
    }

    /// What one write takes from the ready slots, at most (or one slot, when larger).
    static let writeBytes = 256 << 10

    package let notificationLimit: Int
    package let notificationByteLimit: Int
    package let byteLimit: Int
    /// What every connection's outbox, reader and queue together may hold.
    package let budget: BufferBudget
    /// Where a write of notifications is made, and given back to once written.
    private let sendBuffers: SendBuffers
    /// Where responses go; written by one thread at a time (`writing`).
    private let socket: UnixConnection
    /// Protects every var below (and each slot's bytes); wakes the sender and waiters.
    private let condition = Condition()
    private var slots: [Slot] = []
    private var head = 0
    /// Bytes taken from the head that a write without blocking could not send, from
    /// `unsentStart` on: they go before anything else, and only the sender writes them.
    /// The buffer is kept whole and the start moves, so a write the socket takes a little
    /// of at a time (a watcher's stream, up to a mebibyte a write against a socket buffer of
    /// a few hundred kilobytes) copies nothing again.
    private var unsent: [UInt8] = []
    private var unsentStart = 0
    /// Whether `unsent` is a buffer of `SendBuffers`.
    private var unsentPooled = false
    /// A thread is writing to the socket (the loop, or one writing what it completed).
    private var writing = false
    /// Whether a request thread waits on the condition (for its appends, or for room for
    /// notifications). Nobody else is woken (a futex wake and a context switch each).
    private var readerWaiting = false
    /// The loop was asked to flush and has not yet: it is not asked again meanwhile.
    private var loopAsked = false
    /// A request was held back (`admits`) for want of room, or until this connection's
    /// appends are answered: `onResume` is called once that has changed.
    private var roomWanted = false
    private var appendsWanted = false
    private var queuedNotifications = 0
    /// Bytes of the notifications queued.
    private var queuedNotificationBytes = 0
    /// What this outbox holds, charged to `budget`.
    private let charge: BufferBudget.Charge
    /// Bytes of ready slots not yet taken, and of `unsent`.
    private var queuedBytes = 0
    /// Bytes the sender took and is writing.
    private var sendingBytes = 0
    private var appendsInFlight = 0
    /// No more pushes; the connection ends once everything queued is written.
    private var finishing = false
    /// Nothing more is written (the peer is gone, or was cut off).
    private var aborted = false
    /// Why a write failed, for the loop to report.
    private var failure: SocketError?
    /// Bytes the socket has taken so far: a client that takes none for long is dropped.
    private var bytesWritten = 0
    /// Asks the connection's loop to call `flush()`; set before the outbox is used. Called
    /// with the outbox's lock held: it must not call back into the outbox.
    package var onReady: @Sendable () -> Void = {}
    /// Tells the connection that a request `admits` held back may run now. Called with the
    /// outbox's lock held, like `onReady`.
    package var onResume: @Sendable () -> Void = {}

    package init(
        socket: UnixConnection, notificationLimit: Int, byteLimit: Int = 64 << 20,
        notificationByteLimit: Int = 16 << 20, budget: BufferBudget = BufferBudget(limit: .max),
        sendBuffers: SendBuffers = .shared
    ) {
        self.sendBuffers = sendBuffers
        self.socket = socket
        self.notificationLimit = notificationLimit
        self.notificationByteLimit = notificationByteLimit
        self.byteLimit = byteLimit
        self.budget = budget
        self.charge = BufferBudget.Charge(budget)
    }

    /// Takes the next place in the order for a response computed later.
    package func reserve(isAppend: Bool = false) -> Slot {
        let slot = Slot(bytes: nil, isAppend: isAppend)
        condition.lock()
        slots.append(slot)
        if isAppend { appendsInFlight += 1 }
        condition.unlock()
        return slot
    }

    /// Fills a reserved place (empty bytes for a notification request: nothing is sent),
    /// and writes it when it is next.
    package func fill(_ slot: Slot, with bytes: [UInt8]) {
        condition.lock()
        slot.bytes = bytes
        queuedBytes += bytes.count
        recharge()
        if slot.isAppend {
            appendsInFlight -= 1
            // A read waits for this connection's appends.
            if appendsInFlight == 0 {
                if readerWaiting { condition.broadcast() }
                if appendsWanted {
                    appendsWanted = false
                    onResume()
                }
            }
        }
        if head < slots.count, slots[head] === slot {
            writeReady()
        }
        condition.unlock()
    }

    /// Queues a response that is ready now, and writes it when it is next.
    package func push(_ bytes: [UInt8]) {
        condition.lock()
        defer { condition.unlock() }
        guard !finishing && !aborted, !bytes.isEmpty else { return }
        if head == slots.count, !writing, unsent.isEmpty {
            // Nothing before it: no slot needed.
            write(bytes)
        } else {
            slots.append(Slot(bytes: bytes, isAppend: false))
            queuedBytes += bytes.count
            recharge()
            wakeLoop()
        }
    }

    /// Queues a notification if there is room for it (`hasRoom`). Never blocks (the sender
    /// writes it).
    package func offerNotification(_ bytes: [UInt8]) -> Bool {
        offerNotifications([.encoded(bytes)]) == 1
    }

    /// Queues the notifications of one commit, each shared with whoever else it goes to, in
    /// one slot (one wake of the sender): as many as there is room for under
    /// `notificationLimit`, `notificationByteLimit` and the budget, from the first.
    /// - Returns: how many were queued (all of them when the connection is ending: they
    ///   are dropped with it).
    package func offerNotifications(_ parts: [Notification]) -> Int {
        // The sizes before the lock is taken: they depend on nothing it guards.
        let total = parts.reduce(0) { $0 + $1.count }
        condition.lock()
        defer { condition.unlock() }
        guard !finishing && !aborted else { return parts.count }
        // Room for all of them, as almost always: room for each first part too.
        if hasRoom(for: total, count: parts.count) {
            if !parts.isEmpty { appendNotifications(parts, bytes: total) }
            return parts.count
        }
        var taken = 0
        var bytes = 0
        while taken < parts.count, hasRoom(for: bytes + parts[taken].count, count: taken + 1) {
            bytes += parts[taken].count
            taken += 1
        }
        guard taken > 0 else { return 0 }
        appendNotifications(Array(parts[..<taken]), bytes: bytes)
        return taken
    }

    /// Queues as many of `parts` as there is room for, from the first, in one slot,
    /// waiting while there is room for none (catch-up: a request thread may wait, the
    /// writer never does).
    /// - Returns: how many were queued (one at least), nil when the connection is ending.
    package func pushNotificationsWaiting(_ parts: ArraySlice<Notification>) -> Int? {
        guard let first = parts.first else { return 0 }
        condition.lock()
        defer { condition.unlock() }
        while !hasRoom(for: first.count, count: 1) && !finishing && !aborted { readerWait(timeout: 0.25) }
        guard !finishing && !aborted else { return nil }
        var taken = 1
        var bytes = first.count
        for part in parts.dropFirst() {
            guard hasRoom(for: bytes + part.count, count: taken + 1) else { break }
            bytes += part.count
            taken += 1
        }
        appendNotifications(Array(parts.prefix(taken)), bytes: bytes)
        return taken
    }

    /// Whether `count` more notifications of `bytes` in all fit: under the count and byte
    /// limits (one alone always fits when none is queued), and, while the budget is spent,
    /// only within this connection's floor. Call with the condition's lock held.
    private func hasRoom(for bytes: Int, count: Int) -> Bool {
        guard queuedNotifications + count <= notificationLimit else { return false }
        if queuedNotifications > 0 || count > 1 {
            guard queuedNotificationBytes + bytes <= notificationByteLimit else { return false }
        }
        return budget.allows(holding: queuedBytes + sendingBytes + bytes)
    }

    /// Queues a last message after everything else and ends the connection once written.
    package func finish(after last: [UInt8]? = nil) {
        condition.lock()
        if let last, !finishing && !aborted {
            slots.append(Slot(bytes: last, isAppend: false))
            queuedBytes += last.count
            recharge()
        }
        finishing = true
        condition.broadcast()
        wakeLoop()
        resumeWaiting()
        condition.unlock()
    }

    /// Drops whatever is queued: the peer is gone.
    package func abort() {
        condition.lock()
        aborted = true
        condition.broadcast()
        wakeLoop()
        resumeWaiting()
        condition.unlock()
    }

    /// Sends `line` if the socket takes it now (after the rest of a response begun, so it
    /// stays a line of its own), and drops everything else: the client is cut off.
    package func cutOff(with line: [UInt8]) {
        condition.lock()
        defer { condition.unlock() }
        guard !aborted else { return }
        aborted = true
        condition.broadcast()
        wakeLoop()
        resumeWaiting()
        guard !writing else { return }
        let out = Array(unsent[unsentStart...]) + line
        unsent = []
        unsentStart = 0
        unsentPooled = false
        writing = true
        condition.unlock()
        _ = try? socket.writeAvailable(out)
        condition.lock()
        writing = false
    }

    /// Whether more than `byteLimit` bytes wait to be sent (the client is not reading).
    package var isOverLimit: Bool {
        condition.lock()
        defer { condition.unlock() }
        return queuedBytes + sendingBytes > byteLimit && !aborted
    }

    /// The bytes of answers waiting for the client to take them.
    package var waitingBytes: Int {
        condition.lock()
        defer { condition.unlock() }
        return queuedBytes + sendingBytes
    }

    /// Whether the next request may run now: not while more than `byteLimit` bytes wait to
    /// be sent (a client that does not read has no more requests run), nor, when it reads
    /// (`needsAppends`), while this connection's appends are unanswered (it must see its
    /// own writes). When not, `onResume` is called once it may.
    package func admits(needsAppends: Bool) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        if aborted || finishing { return true }
        if queuedBytes + sendingBytes > byteLimit || !budget.allows(holding: queuedBytes + sendingBytes) {
            roomWanted = true
            return false
        }
        if needsAppends && appendsInFlight > 0 {
            appendsWanted = true
            return false
        }
        return true
    }

    /// Nothing waits to be sent or to be answered: the connection is idle.
    package var isIdle: Bool {
        condition.lock()
        defer { condition.unlock() }
        return everyAnswerHanded && !writing
    }

    /// Every answer is with the socket or being handed to it: none waits in a slot or is
    /// left unsent, and no append is in flight. Unlike `isIdle`, a write still in its
    /// system call does not count: its client may already have the answer and have sent
    /// its next request, which the loop can then take (what it answers queues behind the
    /// write).
    package var isAnswered: Bool {
        condition.lock()
        defer { condition.unlock() }
        return everyAnswerHanded
    }

    /// What `isIdle` and `isAnswered` share; read under the lock.
    private var everyAnswerHanded: Bool {
        head == slots.count && unsent.isEmpty && appendsInFlight == 0
    }

    /// Waits until every append this connection sent has its response.
    package func waitForAppends() {
        condition.lock()
        while appendsInFlight > 0 && !aborted { readerWait() }
        condition.unlock()
    }

    package var isEnding: Bool {
        condition.lock()
        defer { condition.unlock() }
        return finishing || aborted
    }

    /// For the loop: writes what is ready, in order, as much as the socket takes.
    package func flush() -> FlushState {
        condition.lock()
        defer { condition.unlock() }
        loopAsked = false
        while true {
            // Never while another thread writes, even aborted: the socket is closed once
            // this says done.
            if writing { return .busy }
            if aborted { return .done }
            if !unsent.isEmpty {
                let out = unsent
                let start = unsentStart
                let pooled = unsentPooled
                unsent = []
                unsentStart = 0
                unsentPooled = false
                queuedBytes -= out.count - start
                write(Taken(alone: consume out, pooled: pooled), from: start, fromLoop: true)
                if !unsent.isEmpty { return aborted ? .done : .blocked }
                continue
            }
            let taken = takeReady()
            if taken.size == 0 { return finishing && head == slots.count ? .done : .idle }
            write(taken, fromLoop: true)
        }
    }

    /// How many bytes the socket has taken so far.
    package var written: Int {
        condition.lock()
        defer { condition.unlock() }
        return bytesWritten
    }

    /// Why a write failed, if one did.
    package var writeFailure: SocketError? {
        condition.lock()
        defer { condition.unlock() }
        return failure
    }

    /// Whatever is ready at the head, one write's worth; notifications taken make room.
    /// Call with the condition's lock held.
    private func takeReady() -> Taken {
        // The sender writes `unsent` first, so nothing is left of it here.
        assert(unsent.isEmpty, "ready bytes taken before the unsent ones")
        var taken = Taken()
        // One response alone is written as it is, without a copy.
        if head < slots.count, let bytes = slots[head].bytes, slots[head].parts.isEmpty,
            head + 1 == slots.count || slots[head + 1].bytes == nil || bytes.count >= Outbox.writeBytes
        {
            taken = Taken(alone: bytes)
            queuedBytes -= bytes.count
            head += 1
        } else {
            // The ready slots one write takes (a watcher's stream is thousands of small
            // notifications a write), made into bytes once the lock is let go.
            var released = 0
            var releasedBytes = 0
            while head < slots.count, let bytes = slots[head].bytes, taken.size < Outbox.writeBytes {
                let slot = slots[head]
                taken.slots.append(slot)
                taken.size += slot.size
                released += slot.parts.count
                releasedBytes += slot.partsSize
                queuedBytes -= bytes.count
                head += 1
            }
            queuedBytes -= releasedBytes
            if released > 0 {
                queuedNotifications -= released
                queuedNotificationBytes -= releasedBytes
                if readerWaiting { condition.broadcast() }
            }
        }
        if head == slots.count {
            slots.removeAll(keepingCapacity: slots.count <= 1024)
            head = 0
        } else if head > 1024 && head * 2 > slots.count {
            slots.removeFirst(head)
            head = 0
        }
        // Taken bytes are charged as `sendingBytes` by the write that follows.
        charge.set(queuedBytes + taken.size)
        return taken
    }

    /// Calls `onResume` when a request waits for room and there is room again. Call with
    /// the condition's lock held.
    private func checkRoom() {
        if roomWanted && queuedBytes + sendingBytes <= byteLimit && budget.allows(holding: queuedBytes + sendingBytes) {
            roomWanted = false
            onResume()
        }
    }

    /// Writes what is ready at the head on the calling thread when nobody else writes.
    /// Call with the condition's lock held.
    private func writeReady() {
        guard !writing, unsent.isEmpty, !aborted else {
            wakeLoop()
            return
        }
        let taken = takeReady()
        if taken.size > 0 { write(taken) }
    }

    /// Writes `bytes` from `start` on, which are next in order, without blocking; what the
    /// socket does not take is kept for the loop. Call with the condition's lock held and
    /// nobody writing: the lock is let go during the system call.
    private func write(_ bytes: [UInt8]) {
        write(Taken(alone: bytes))
    }

    /// Writes what `taken` makes, from `start` on (the bytes are made with the lock let go).
    private func write(_ taken: consuming Taken, from start: Int = 0, fromLoop: Bool = false) {
        writing = true
        sendingBytes = taken.size - start
        let pooled = taken.makesPooled
        condition.unlock()
        let bytes = taken.bytes(using: sendBuffers)
        let result: Result<Int, SocketError>
        do throws(SocketError) {
            result = .success(try socket.writeAvailable(bytes, from: start))
        } catch {
            result = .failure(error)
        }
        condition.lock()
        writing = false
        sendingBytes = 0
        defer { recharge() }
        switch result {
        case .success(let written):
            bytesWritten += written
            if start + written < bytes.count {
                unsent = bytes
                unsentStart = start + written
                unsentPooled = pooled
                queuedBytes += bytes.count - unsentStart
            } else if pooled {
                sendBuffers.giveBack(consume bytes)
            }
        case .failure(let error):
            failure = error
            aborted = true
            condition.broadcast()
            wakeLoop()
            resumeWaiting()
            return
        }
        checkRoom()
        // What completed meanwhile, the rest of these bytes, or the end: the loop's.
        if !fromLoop,
            !unsent.isEmpty || finishing || aborted || (head < slots.count && slots[head].bytes != nil)
        {
            wakeLoop()
        }
    }

    /// Waits on the condition, for at most `timeout` seconds when given (room the budget
    /// gives back is not signalled here).
    private func readerWait(timeout: Double? = nil) {
        readerWaiting = true
        if let timeout {
            _ = condition.wait(until: .now + .milliseconds(Int(timeout * 1000)))
        } else {
            condition.wait()
        }
        readerWaiting = false
    }

    /// Charges what waits to be sent to the budget, with the part of `unsent` already sent,
    /// which its buffer still holds. Call with the condition's lock held.
    private func recharge() {
        charge.set(queuedBytes + sendingBytes + unsentStart)
    }

    /// Looks again whether a request held back for room may run: the budget may have room
    /// again though nothing of this connection's changed (the loop calls it now and then).
    package func recheckRoom() {
        condition.lock()
        checkRoom()
        condition.unlock()
    }

    /// Bytes of notifications queued.
    package var notificationBytes: Int {
        condition.lock()
        defer { condition.unlock() }
        return queuedNotificationBytes
    }

    /// The connection is ending: a request held back runs now (and sees it).
    private func resumeWaiting() {
        guard roomWanted || appendsWanted else { return }
        roomWanted = false
        appendsWanted = false
        onResume()
    }

    /// Asks the loop to flush, once until it does.
    private func wakeLoop() {
        guard !loopAsked else { return }
        loopAsked = true
        onReady()
    }

    private func appendNotifications(_ parts: [Notification], bytes: Int) {
        slots.append(Slot(bytes: [], isAppend: false, parts: parts, partsSize: bytes))
        queuedBytes += bytes
        queuedNotifications += parts.count
        queuedNotificationBytes += bytes
        recharge()
        wakeLoop()
    }
}
