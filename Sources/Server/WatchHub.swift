import EventStore
import FoundationEssentials
import Logging
import Projections
import Synchronization
import UnixSocket
import Wire
import Writer

/// A connection's `watch`: which events it wants and where they go.
package final class Subscription: WatchFiltering, @unchecked Sendable {
    package let outbox: Outbox
    package let entity: EntityKey?
    /// `TYPE/`, the prefix of the entities of the type watched.
    package let typePrefix: [UInt8]?
    /// The seq of the last event queued to it, or that its catch-up read past (for
    /// `resume_after`, and so an event is never queued twice). Guarded by the hub's lock
    /// once registered; before that only the registering thread touches it.
    package var lastQueued: UInt64
    /// Whether it counts against the hub's caps: from `admit` until it ends, so the slot is
    /// given back once however it ends. Guarded by the hub's slots lock.
    fileprivate var holdsSlot = false
    /// Its place in the publish in progress (`WatchHub.publish`): `batchIndex` is valid
    /// while `batchGeneration` is the hub's. Touched only with the publish lock held.
    fileprivate var batchGeneration: UInt64 = 0
    fileprivate var batchIndex = 0

    package init(outbox: Outbox, entity: EntityKey?, type: String?, after: UInt64?) {
        self.outbox = outbox
        self.entity = entity
        self.typePrefix = type.map { Array($0.utf8) + [UInt8(ascii: "/")] }
        self.lastQueued = after ?? 0
    }

    package var filter: FeedFilter {
        FeedFilter(entity: entity, type: typePrefix.map { String(decoding: $0.dropLast(), as: UTF8.self) })
    }

    package func wants(_ event: Event) -> Bool { wants(event.entity) }

    package func wants(_ entity: EntityKey) -> Bool {
        if let watched = self.entity, entity != watched { return false }
        if let typePrefix, !entity.bytes.starts(with: typePrefix) { return false }
        return true
    }
}

/// How many watches may be held at once: each one costs every append a little work under
/// the commit lock, and memory until its connection closes.
package struct WatchLimits: Equatable, Sendable {
    /// `max_watches_per_connection`.
    package var perConnection: Int
    /// `max_watches`, over all connections.
    package var total: Int

    package init(perConnection: Int, total: Int) {
        self.perConnection = perConnection
        self.total = total
    }
}

/// The watch slots taken, per connection and overall.
private struct WatchSlots {
    var limits: WatchLimits
    var total = 0
    /// By the connection's outbox; an entry goes when its count reaches zero.
    var perConnection: [ObjectIdentifier: Int] = [:]
}

/// Delivers committed events to the watching connections.
///
/// - Important: The writer holds `publishLock` from before its commit until it has
///   published; a subscriber takes it to read the last events and join. So every event is
///   either in what the subscriber read or in what it is sent, never both, never neither.
package final class WatchHub: CommitPublisher, @unchecked Sendable {
    /// Guards the subscription index and `examined`, and holds a commit (taken by the one
    /// writer from before it until it has published) apart from a watch's last catch-up read
    /// and its join: a watch joining between a commit and its publish would miss its events,
    /// and one reading them after its join would get them twice.
    package let publishLock = Lock()
    /// The live subscriptions, filed by what they watch. Guarded by `publishLock`.
    private var subscriptions = SubscriptionIndex<Subscription>()
    /// Counts the publishes, for each subscription's `batchGeneration`.
    private var publishGeneration: UInt64 = 0
    /// Subscriptions offered an event so far (whether or not they wanted it): the work
    /// publishing did. Guarded by `publishLock`.
    private(set) var examined = 0
    /// The watch slots taken and the caps on them. Taken after `publishLock` when both are.
    private let slots: Mutex<WatchSlots>
    private let logger: Logger

    package init(logger: Logger, limits: WatchLimits) {
        self.logger = logger
        self.slots = Mutex(WatchSlots(limits: limits))
    }

    /// The caps; a reload changes them for the watches started after.
    package var limits: WatchLimits {
        get { slots.withLock { $0.limits } }
        set { slots.withLock { $0.limits = newValue } }
    }

    /// Whether anyone watches. Call with `publishLock` held.
    package var hasSubscribers: Bool { !subscriptions.isEmpty }

    /// The watches holding a slot, overall and on the connection of `outbox`.
    package func slotsTaken(by outbox: Outbox? = nil) -> (total: Int, connection: Int) {
        slots.withLock { slots in (slots.total, outbox.map { slots.perConnection[ObjectIdentifier($0)] ?? 0 } ?? 0) }
    }

    /// Takes a slot for `subscription`, or says which cap refuses it. Call before `start`;
    /// the slot is given back when the subscription is removed or fails to start.
    package func admit(_ subscription: Subscription) -> RPCError? {
        let connection = ObjectIdentifier(subscription.outbox)
        return slots.withLock { (slots) -> RPCError? in
            let held = slots.perConnection[connection] ?? 0
            if held >= slots.limits.perConnection {
                return WatchHub.refusal(
                    "this connection already holds \(held) watches, the most one connection may hold (max_watches_per_connection is \(slots.limits.perConnection)); watch a type, or everything, with one watch instead of one watch per entity, or raise max_watches_per_connection in the daemon's configuration and reload it"
                )
            }
            if slots.total >= slots.limits.total {
                return WatchHub.refusal(
                    "the daemon already holds \(slots.total) watches, as many as it serves at once (max_watches is \(slots.limits.total)); try again once other watchers have closed their connections, or raise max_watches in the daemon's configuration and reload it"
                )
            }
            guard !subscription.holdsSlot else { return nil }
            subscription.holdsSlot = true
            slots.total += 1
            slots.perConnection[connection] = held + 1
            return nil
        }
    }

    /// Gives back the slot of `subscription`, if it holds one.
    private func release(_ subscription: Subscription) {
        let connection = ObjectIdentifier(subscription.outbox)
        slots.withLock { slots in
            guard subscription.holdsSlot else { return }
            subscription.holdsSlot = false
            slots.total -= 1
            let held = (slots.perConnection[connection] ?? 1) - 1
            slots.perConnection[connection] = held > 0 ? held : nil
        }
    }

    private static func refusal(_ message: String) -> RPCError {
        RPCError(
            code: RPCError.applicationCodes["too_many_watches"] ?? RPCError.internalErrorCode, message: message,
            reason: "too_many_watches")
    }

    /// Sends the events a commit stored, in seq order, to whoever wants them: from the
    /// writer's memory, nothing read back. Call with `publishLock` held, right after the
    /// commit.
    package func publish(_ events: [CommittedEvent]) {
        // Each event's notification is made once, by the first subscription that wants it,
        // and shared by every other (the outboxes hold references to the one payload or
        // buffer). Made from the stored payload, it is only a reference to it: the thread
        // that writes it to the socket makes the bytes, so the writer commits on meanwhile.
        // Each subscription's notifications of this commit are queued at once: one slot and
        // one wake of its connection's sender per commit, not per event.
        guard !events.isEmpty else { return }
        publishGeneration &+= 1
        let generation = publishGeneration
        var batches: [NotificationBatch] = []
        // The watches of everything share one list of the commit's notifications: no work
        // per event for each of them.
        var all: [Notification]?
        var allSeqs: [UInt64] = []
        for subscription in subscriptions.unfilteredMembers {
            // A subscription skips what it was sent already (its catch-up read past it).
            let first = events.firstIndex { $0.seq > subscription.lastQueued } ?? events.endIndex
            examined += events.count
            guard first < events.endIndex else { continue }
            let shared: [Notification]
            if let all {
                shared = all
            } else {
                shared = events.map(Notification.init)
                all = shared
                allSeqs = events.map(\.seq)
            }
            var batch = NotificationBatch(subscription)
            batch.parts = first == 0 ? shared : Array(shared[first...])
            batch.seqs = first == 0 ? allSeqs : Array(allSeqs[first...])
            batches.append(batch)
        }
        // The watches of one entity or type find their batch by the index each keeps for
        // this publish: no lookup per event, however many watchers there are.
        if subscriptions.hasFiltered {
            for index in events.indices {
                let seq = events[index].seq
                var made = all?[index]
                subscriptions.forEachFiltered(for: events[index].entity) { subscription in
                    examined += 1
                    guard seq > subscription.lastQueued, subscription.wants(events[index].entity) else { return }
                    if subscription.batchGeneration != generation {
                        subscription.batchGeneration = generation
                        subscription.batchIndex = batches.count
                        batches.append(NotificationBatch(subscription))
                    }
                    let notification: Notification
                    if let made {
                        notification = made
                    } else {
                        notification = Notification(events[index])
                        made = notification
                    }
                    batches[subscription.batchIndex].parts.append(notification)
                    batches[subscription.batchIndex].seqs.append(seq)
                }
            }
        }
        for batch in batches {
            let subscription = batch.subscription
            let taken = subscription.outbox.offerNotifications(batch.parts)
            if taken > 0 { subscription.lastQueued = batch.seqs[taken - 1] }
            guard taken < batch.parts.count else { continue }
            subscriptions.remove(subscription)
            release(subscription)
            subscription.outbox.finish(after: WatchHub.overflow(resumeAfter: subscription.lastQueued))
            logger.info(
                "watch: a consumer fell behind (watch_queue_events \(subscription.outbox.notificationLimit), watch_queue_bytes \(subscription.outbox.notificationByteLimit), or the daemon's max_buffered_bytes spent); disconnected it at seq \(subscription.lastQueued)"
            )
        }
    }

    /// One subscription's notifications of one commit, each shared with the other
    /// subscriptions it goes to, and their events' seqs.
    private struct NotificationBatch {
        let subscription: Subscription
        var parts: [Notification] = []
        var seqs: [UInt64] = []

        init(_ subscription: Subscription) {
            self.subscription = subscription
        }
    }

    /// Streams the held events after seq `after` (all of them when it is 0; none when nil),
    /// then joins the live stream. Runs on the connection's reader thread; waits while the
    /// consumer is behind. False when the connection ended meanwhile. The slot `admit`
    /// took is given back unless it joins.
    ///
    /// The last page is read and the subscription joins with `publishLock` held, so no
    /// commit falls between them: every event is either read or published to it, and the
    /// seq it has reached (`lastQueued`) keeps one from being sent twice.
    package func start(_ subscription: Subscription, after: UInt64?, log: EventLog) throws(EventStoreError) -> Bool {
        var joined = false
        defer { if !joined { release(subscription) } }
        let page = 1000
        if let after {
            subscription.lastQueued = after
            // Catch up without the lock while pages are full...
            while true {
                let (events, more) = try read(subscription, log: log, limit: page)
                let notifications = try events.map { item throws(EventStoreError) in try Notification(item) }
                guard queueWaiting(notifications, to: subscription) else { return false }
                guard more else { break }
            }
        } else {
            subscription.lastQueued = log.sequenceHead
        }
        // ...then read what came meanwhile and join, with the writer held off.
        while true {
            publishLock.lock()
            if after != nil {
                let events: [StoredEvent]
                let more: Bool
                do {
                    (events, more) = try read(subscription, log: log, limit: page)
                } catch {
                    publishLock.unlock()
                    throw error
                }
                // Join only when the rest fits in the queue now (nothing else adds to it
                // before it joins): otherwise queue what does not fit with waiting, outside
                // the lock.
                let notifications: [Notification]
                do {
                    notifications = try events.map { item throws(EventStoreError) in try Notification(item) }
                } catch {
                    publishLock.unlock()
                    throw error
                }
                let taken = more ? 0 : subscription.outbox.offerNotifications(notifications)
                if more || taken < events.count {
                    publishLock.unlock()
                    guard queueWaiting(Array(notifications[taken...]), to: subscription) else { return false }
                    continue
                }
            } else {
                // Live only: from the head as it is now, with no commit in between.
                subscription.lastQueued = max(subscription.lastQueued, log.sequenceHead)
            }
            subscriptions.insert(subscription)
            publishLock.unlock()
            joined = true
            return true
        }
    }

    /// Queues replayed events' notifications, as many at a time as there is room for,
    /// waiting while the consumer is behind (never with the lock held). False when the
    /// connection ended meanwhile.
    private func queueWaiting(_ notifications: [Notification], to subscription: Subscription) -> Bool {
        var queued = 0
        while queued < notifications.count {
            guard let taken = subscription.outbox.pushNotificationsWaiting(notifications[queued...]) else {
                return false
            }
            queued += taken
        }
        return true
    }

    /// Ends a subscription (its connection closed) and gives back its slot.
    package func remove(_ subscription: Subscription) {
        publishLock.lock()
        subscriptions.remove(subscription)
        publishLock.unlock()
        release(subscription)
    }

    /// A page of the events after the subscription's `lastQueued` that it wants, moving
    /// `lastQueued` past every seq the page looked at; `more` whether the log goes on.
    private func read(_ subscription: Subscription, log: EventLog, limit: Int) throws(EventStoreError)
        -> (events: [StoredEvent], more: Bool)
    {
        let page = try log.storedFeed(after: subscription.lastQueued, limit: limit, filter: subscription.filter)
        subscription.lastQueued = page.next ?? max(page.head, page.events.last?.seq ?? subscription.lastQueued)
        return (page.events, page.next != nil)
    }

    package static func notification(_ item: SequencedEvent) -> [UInt8] {
        var out: [UInt8] = []
        notification(item, into: &out)
        return out
    }

    package static func notification(_ item: borrowing SequencedEvent, into out: inout [UInt8]) {
        out.append(contentsOf: notificationHead)
        EventJSON.stored(item, into: &out)
        out.append(contentsOf: notificationTail)
    }

    /// A notification's bytes around its event, as arrays: appended from a string's UTF-8
    /// view, they took a copy through the string each time, on the writer, per event.
    fileprivate static let notificationHead = Array(#"{"jsonrpc":"2.0","method":"event","params":{"event":"#.utf8)
    fileprivate static let notificationTail = Array("}}\n".utf8)

    package static func overflow(resumeAfter: UInt64) -> [UInt8] {
        var out = JSONWriter()
        out.beginObject()
        out.member("jsonrpc", "2.0")
        out.member("method", "watch.overflow")
        out.key("params")
        out.beginObject()
        out.member("reason", "too_far_behind")
        out.key("message")
        out.string(
            "this watch fell too far behind the events being written and was ended; watch again with \"after\" set to resume_after to continue without a gap"
        )
        out.member("resume_after", Int(clamping: resumeAfter))
        out.endObject()
        out.endObject()
        out.bytes.append(0x0A)
        return out.bytes
    }
}

/// One event's notification as a watch queues it: its bytes, or the event's stored payload,
/// which the thread writing it to the socket makes into the same bytes. Either way its size
/// is known when it is queued, for the watch's limits.
package enum Notification: Sendable {
    case encoded([UInt8])
    case spliced(EventJSON.Splice)

    /// From the stored payload, which the bytes are made from when written.
    package init(_ item: borrowing CommittedEvent) {
        let splice =
            if let at = item.idPosition {
                EventJSON.Splice(seq: item.seq, id: item.id, payload: item.payload, idPosition: at)
            } else {
                EventJSON.Splice(seq: item.seq, id: item.id, hasKey: item.hasKey, payload: item.payload)
            }
        if let splice {
            self = .spliced(splice)
        } else if let event = try? EventCodec.decodeStored(item.payload, id: item.id) {
            // A payload whose id's place is not found (none the writer makes): encoded now.
            self = .encoded(WatchHub.notification(SequencedEvent(seq: item.seq, event: event)))
        } else {
            // One that does not decode either: sent as it is, with the id and seq after it.
            var bytes = WatchHub.notificationHead
            EventJSON.appendUnspliced(payload: item.payload, id: item.id, seq: item.seq, to: &bytes)
            bytes.append(contentsOf: WatchHub.notificationTail)
            self = .encoded(bytes)
        }
    }

    /// From a payload read back from the log (a catch-up): made from it when written, as a
    /// commit's are, or decoded and encoded now when the id's place is not found.
    /// - Throws: `corrupt` when such a payload does not decode.
    package init(_ item: StoredEvent) throws(EventStoreError) {
        if let splice = EventJSON.Splice(item) {
            self = .spliced(splice)
        } else {
            self = .encoded(WatchHub.notification(SequencedEvent(seq: item.seq, event: try item.decoded())))
        }
    }

    /// Its bytes on the wire.
    package var count: Int {
        switch self {
        case .encoded(let bytes): bytes.count
        case .spliced(let splice):
            WatchHub.notificationHead.count + splice.count + WatchHub.notificationTail.count
        }
    }

    package func append(to out: inout [UInt8]) {
        switch self {
        case .encoded(let bytes): out.append(contentsOf: bytes)
        case .spliced(let splice):
            out.append(contentsOf: WatchHub.notificationHead)
            // With the notification's tail.
            splice.append(to: &out, closingNotification: true)
        }
    }
}
