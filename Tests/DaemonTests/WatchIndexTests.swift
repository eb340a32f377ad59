import EventStore
import Logging
import Projections
import StoreTestSupport
import TestSupport
import Testing
import UnixSocket

@testable import Daemon
@testable import Server
@testable import Wire
@testable import Writer

/// The subscription index offers each event to the watches that can want it, and no others;
/// the hub's slots count the watches held per connection and overall.
@Suite("Watch index")
struct WatchIndexTests {
    static let types = ["job", "site", "jobs", "j", "van"]

    static func entity(_ text: String) -> EntityKey { EntityKey(validated: Array(text.utf8)) }

    /// An entity from a small pool, so that watches and events meet often; ids with a `/`
    /// and types that are prefixes of others included.
    static func randomEntity(_ rng: inout SeededGenerator) -> EntityKey {
        let type = types.randomElement(using: &rng)!
        let id = ["1", "2", "1/2", "x", "job"].randomElement(using: &rng)!
        return entity("\(type)/\(id)")
    }

    @Test(
        "subscriptions by entity, by type and unfiltered get exactly the events the linear scan gives them",
        arguments: 1...20)
    func matchesLinearScan(seed: UInt64) throws {
        var rng = SeededGenerator(seed: seed * 104_729)
        let (server, client) = try UnixConnection.pair()
        defer {
            server.close()
            client.close()
        }
        let outbox = Outbox(socket: server, notificationLimit: 10)
        var index = SubscriptionIndex<Subscription>()
        var held: [Subscription] = []
        for _ in 0..<400 {
            if !held.isEmpty, Int.random(in: 0..<4, using: &rng) == 0 {
                let gone = held.remove(at: Int.random(in: 0..<held.count, using: &rng))
                index.remove(gone)
                index.remove(gone)  // a second removal changes nothing
            } else {
                let entity = Bool.random(using: &rng) ? WatchIndexTests.randomEntity(&rng) : nil
                let type = Bool.random(using: &rng) ? WatchIndexTests.types.randomElement(using: &rng) : nil
                let subscription = Subscription(outbox: outbox, entity: entity, type: type, after: nil)
                index.insert(subscription)
                held.append(subscription)
            }
            #expect(index.count == held.count)
            let event = WatchIndexTests.randomEntity(&rng)
            let wanted = Set(held.filter { $0.wants(event) }.map(ObjectIdentifier.init))
            let candidates = index.candidates(for: event)
            #expect(Set(candidates.filter { $0.wants(event) }.map(ObjectIdentifier.init)) == wanted)
            #expect(Set(candidates.map(ObjectIdentifier.init)).count == candidates.count, "each offered once")
            // Offered and not wanted: only a watch of this entity under another type, which
            // nothing can satisfy.
            for candidate in candidates where !candidate.wants(event) {
                #expect(candidate.entity == event && candidate.typePrefix != nil)
            }
        }
        for subscription in held { index.remove(subscription) }
        #expect(index.isEmpty && index.bucketCount == 0, "no list is left behind")
    }

    @Test("an event is offered to the watchers of its entity and type, not to the 10,000 watching others")
    func publishWorkIsBounded() throws {
        let (server, client) = try UnixConnection.pair()
        defer {
            server.close()
            client.close()
        }
        let outbox = Outbox(socket: server, notificationLimit: 10)
        var index = SubscriptionIndex<Subscription>()
        for number in 0..<10_000 {
            index.insert(
                Subscription(outbox: outbox, entity: WatchIndexTests.entity("job/\(number)"), type: nil, after: nil))
        }
        for number in 0..<100 {
            index.insert(Subscription(outbox: outbox, entity: nil, type: "site\(number)", after: nil))
        }
        index.insert(Subscription(outbox: outbox, entity: nil, type: "job", after: nil))
        index.insert(Subscription(outbox: outbox, entity: nil, type: nil, after: nil))
        #expect(index.candidates(for: WatchIndexTests.entity("job/42")).count == 3)
        #expect(index.candidates(for: WatchIndexTests.entity("site7/1")).count == 2)
        #expect(index.candidates(for: WatchIndexTests.entity("van/1")).count == 1)
    }

    @Test("the hub publishing one event to 10,000 watchers of other entities examines only the 2 that can want it")
    func hubPublishWork() throws {
        let store = try TempStore()
        defer { store.remove() }
        let (server, client) = try UnixConnection.pair()
        defer {
            server.close()
            client.close()
        }
        let outbox = Outbox(socket: server, notificationLimit: 10)
        let hub = WatchHub(
            logger: Logger(label: "test", level: .error), limits: WatchLimits(perConnection: 20_000, total: 20_000))
        var watchers: [Subscription] = []
        for number in 0..<10_000 {
            watchers.append(
                Subscription(outbox: outbox, entity: WatchIndexTests.entity("job/\(number)"), type: nil, after: nil))
        }
        watchers.append(Subscription(outbox: outbox, entity: nil, type: "job", after: nil))
        for watcher in watchers {
            #expect(hub.admit(watcher) == nil)
            #expect(try hub.start(watcher, after: nil, log: store.log))
        }
        let head = store.log.sequenceHead
        let committed = try store.log.commit(
            [AppendJob([try EventCodec.decodeInput(Array(#"{"entity":"job/42","kind":"delete"}"#.utf8))])],
            keepStored: true)
        hub.publishLock.lock()
        let before = hub.examined
        hub.publish(committed.stored)
        let examined = hub.examined - before
        hub.publishLock.unlock()
        #expect(examined == 2)
        #expect(watchers[42].lastQueued == head + 1 && watchers[10_000].lastQueued == head + 1)
        #expect(watchers[41].lastQueued == head)
        for watcher in watchers { hub.remove(watcher) }
        #expect(hub.slotsTaken() == (0, 0))
        hub.publishLock.lock()
        #expect(!hub.hasSubscribers)
        hub.publishLock.unlock()
    }

    @Test("the hub's slots: refused past each cap with too_many_watches, given back once when a watch ends")
    func slotsCount() throws {
        let pairs = try (0..<3).map { _ in try UnixConnection.pair() }
        defer {
            for (server, client) in pairs {
                server.close()
                client.close()
            }
        }
        let outboxes = pairs.map { Outbox(socket: $0.0, notificationLimit: 10) }
        let hub = WatchHub(
            logger: Logger(label: "test", level: .error), limits: WatchLimits(perConnection: 3, total: 5))
        var made: [Subscription] = []  // held, as their connections hold them
        func watch(_ outbox: Outbox) -> (Subscription, RPCError?) {
            let subscription = Subscription(outbox: outbox, entity: nil, type: nil, after: nil)
            made.append(subscription)
            return (subscription, hub.admit(subscription))
        }
        let first = (0..<3).map { _ in watch(outboxes[0]) }
        #expect(first.allSatisfy { $0.1 == nil })
        let refused = try #require(watch(outboxes[0]).1)
        #expect(refused.reason == "too_many_watches" && refused.code == -32010)
        #expect(refused.message.contains("max_watches_per_connection is 3"))
        #expect(watch(outboxes[1]).1 == nil)
        #expect(watch(outboxes[1]).1 == nil)
        let overall = try #require(watch(outboxes[2]).1)
        #expect(overall.reason == "too_many_watches" && overall.message.contains("max_watches is 5"))
        #expect(hub.slotsTaken(by: outboxes[0]) == (5, 3))

        hub.remove(first[0].0)
        hub.remove(first[0].0)  // a connection's close after an overflow removes it again
        #expect(hub.slotsTaken(by: outboxes[0]) == (4, 2))
        #expect(watch(outboxes[2]).1 == nil)
        for (subscription, _) in first { hub.remove(subscription) }
        #expect(hub.slotsTaken(by: outboxes[0]) == (3, 0))
    }
}
