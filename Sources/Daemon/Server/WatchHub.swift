import EventStore
import Foundation
import Projections

/// A connection's `watch`: which events it wants and where they go.
final class Subscription: WatchFiltering, @unchecked Sendable {
    let outbox: Outbox
    let entity: EntityKey?
    /// `TYPE/`, the prefix of the entities of the type watched.
    let typePrefix: [UInt8]?
    /// The id of the last event queued to it (for `resume_after`). Guarded by the hub's lock
    /// once registered; before that only the registering thread touches it.
    var lastQueued: ULID?

    init(outbox: Outbox, entity: EntityKey?, type: String?, after: ULID?) {
        self.outbox = outbox
        self.entity = entity
        self.typePrefix = type.map { Array($0.utf8) + [UInt8(ascii: "/")] }
        self.lastQueued = after
    }

    func wants(_ event: Event) -> Bool { wants(event.entity) }

    func wants(_ entity: EntityKey) -> Bool {
        if let watched = self.entity, entity != watched { return false }
        if let typePrefix, !entity.bytes.starts(with: typePrefix) { return false }
        return true
    }
}

/// Delivers committed events to the watching connections.
///
/// - Important: The writer holds `publishLock` from before its commit until it has
///   published; a subscriber takes it to read the last events and join. So every event is
///   either in what the subscriber read or in what it is sent, never both, never neither.
final class WatchHub: @unchecked Sendable {
    /// Serializes commit-and-publish against a subscriber's switch from reading to live.
    let publishLock = NSLock()
    /// The live subscriptions, filed by what they watch. Guarded by `publishLock`.
    private var subscriptions = SubscriptionIndex<Subscription>()
    /// Subscriptions offered an event so far (whether or not they wanted it): the work
    /// publishing did. Guarded by `publishLock`.
    private(set) var examined = 0
    private let logger: Logger

    init(logger: Logger) {
        self.logger = logger
    }

    /// Whether anyone watches. Call with `publishLock` held.
    var hasSubscribers: Bool { !subscriptions.isEmpty }

    /// Sends the events with these ids to whoever wants them. Call with `publishLock` held,
    /// right after the commit that wrote them.
    func publish(_ ids: [ULID], log: EventLog) {
        guard !subscriptions.isEmpty, !ids.isEmpty else { return }
        let events: [Event]
        do {
            events = try log.events(ids: ids)
        } catch {
            logger.error("watch: reading back committed events failed: \(error)")
            return
        }
        for event in events {
            var notification: [UInt8]?
            let candidates = subscriptions.candidates(for: event.entity)
            examined += candidates.count
            for subscription in candidates where subscription.wants(event) {
                let bytes = notification ?? WatchHub.notification(event)
                notification = bytes
                if subscription.outbox.offerNotification(bytes) {
                    subscription.lastQueued = event.id
                } else {
                    subscriptions.remove(subscription)
                    subscription.outbox.finish(after: WatchHub.overflow(resumeAfter: subscription.lastQueued))
                    logger.info(
                        "watch: a consumer fell \(subscription.outbox.notificationLimit) events behind; disconnected it"
                    )
                }
            }
        }
    }

    /// Streams the held events after `after` (all of them when it is the zero id; none
    /// when nil), then joins the live stream. Runs on the connection's reader thread;
    /// waits while the consumer is behind. False when the connection ended meanwhile.
    func start(_ subscription: Subscription, after: ULID?, log: EventLog) throws(EventStoreError) -> Bool {
        let page = 1000
        var cursor: ULID? = after == ULID.zero ? nil : after
        if after != nil {
            // Catch up without the lock while pages are full...
            while true {
                let (events, scanned, more) = try read(subscription, after: cursor, log: log, limit: page)
                guard queueWaiting(events, to: subscription) else { return false }
                cursor = scanned
                guard more else { break }
            }
        }
        // ...then read what came meanwhile and join, with the writer held off.
        while true {
            publishLock.lock()
            if after != nil {
                let events: [Event]
                let scanned: ULID?
                let more: Bool
                do {
                    (events, scanned, more) = try read(subscription, after: cursor, log: log, limit: page)
                } catch {
                    publishLock.unlock()
                    throw error
                }
                cursor = scanned
                // Join only when the rest fits in the queue now (nothing else adds to it
                // before it joins): otherwise queue it with waiting, outside the lock.
                if more || events.count > subscription.outbox.notificationRoom {
                    publishLock.unlock()
                    guard queueWaiting(events, to: subscription) else { return false }
                    continue
                }
                for event in events {
                    let queued = subscription.outbox.offerNotification(WatchHub.notification(event))
                    assert(queued, "room was checked under the lock")
                    subscription.lastQueued = event.id
                }
            }
            subscriptions.insert(subscription)
            publishLock.unlock()
            return true
        }
    }

    /// Queues replayed events, waiting while the consumer is behind (never with the lock
    /// held). False when the connection ended meanwhile.
    private func queueWaiting(_ events: [Event], to subscription: Subscription) -> Bool {
        for event in events {
            guard subscription.outbox.pushNotificationWaiting(WatchHub.notification(event)) else { return false }
            subscription.lastQueued = event.id
        }
        return true
    }

    /// Ends a subscription (its connection closed).
    func remove(_ subscription: Subscription) {
        publishLock.lock()
        subscriptions.remove(subscription)
        publishLock.unlock()
    }

    /// A page of the events after `after` that the subscription wants; `scanned` is the
    /// last id read (where the next page starts) and `more` whether the log goes on.
    private func read(_ subscription: Subscription, after: ULID?, log: EventLog, limit: Int) throws(EventStoreError)
        -> (events: [Event], scanned: ULID?, more: Bool)
    {
        let page: (events: [Event], next: ULID?)
        if let entity = subscription.entity {
            page = try log.events(ofEntity: entity, after: after, limit: limit)
        } else {
            page = try log.events(after: after, limit: limit)
        }
        return (page.events.filter(subscription.wants), page.events.last?.id ?? after, page.next != nil)
    }

    static func notification(_ event: Event) -> [UInt8] {
        var out = Array(#"{"jsonrpc":"2.0","method":"event","params":{"event":"#.utf8)
        EventCodec.encodeStored(event, includeID: true, into: &out)
        out.append(contentsOf: Array("}}\n".utf8))
        return out
    }

    static func overflow(resumeAfter: ULID?) -> [UInt8] {
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
        out.member("resume_after", resumeAfter?.description)
        out.endObject()
        out.endObject()
        out.bytes.append(0x0A)
        return out.bytes
    }
}
