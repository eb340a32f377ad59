import EventStore
import Foundation
import Projections
import Synchronization
import TestSupport
import Testing
import UnixSocket

@testable import FuzzEntries
@testable import Replication

/// The `dictionary` capability: a node without a compression dictionary says so in its
/// hello, and a peer that has one sends it before its first batch; the node takes it as its
/// first rather than train one on its own first events.
@Suite("Dictionaries over sync")
struct DictionarySyncTests {
    static let threshold = ["--dictionary-training-events", "200"]

    /// A daemon that has trained its dictionaries on `events` of the replica workload.
    static func trainedDaemon(events: Int = 400, seed: UInt64 = 5) throws -> DaemonProcess {
        let daemon = try DaemonProcess(arguments: ["--node", "trained"] + threshold)
        try ReplicationTests().load(daemon, replicaWorkloads(replicas: 1, eventsEach: events, seed: seed)[0])
        #expect(try daemon.client().call("status")["dictionary_version"] as? Int == 1)
        return daemon
    }

    static func dictionaryVersion(_ daemon: DaemonProcess) throws -> Int? {
        try daemon.client().call("status")["dictionary_version"] as? Int
    }

    /// Waits for `text` in the daemon's log (a responder logs its side once its session
    /// thread is done, maybe after the initiator's answer).
    static func logged(_ daemon: DaemonProcess, _ text: String) -> Bool {
        let deadline = Date().addingTimeInterval(10)
        while !daemon.stderr.contains(text), Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
        return daemon.stderr.contains(text)
    }

    @Test(
        "a new node takes its peer's dictionaries with its first sync, as initiator or responder, stores the events compressed with them and trains none at its threshold",
        arguments: [true, false])
    func newNodeTakesThePeers(newNodeInitiates: Bool) throws {
        let trained = try DictionarySyncTests.trainedDaemon()
        defer { trained.removeFiles() }
        let new = try DaemonProcess(arguments: ["--node", "new"] + DictionarySyncTests.threshold)
        defer { new.removeFiles() }
        #expect(try DictionarySyncTests.dictionaryVersion(new) == 0)

        let (initiator, responder) = newNodeInitiates ? (new, trained) : (trained, new)
        let session = try ReplicationTests().sync(initiator, "unix://\(responder.socketPath)")
        #expect(session["error"] is NSNull, "\(session)")
        let held = try #require(try trained.client().call("status")["events"] as? Int)
        #expect(try new.client().call("status")["events"] as? Int == held)
        #expect(try DictionarySyncTests.dictionaryVersion(new) == 1)
        #expect(DictionarySyncTests.logged(new, "the peer's compression dictionary taken"), "\(new.stderr.suffix(600))")
        #expect(DictionarySyncTests.logged(trained, "compression dictionary sent"), "\(trained.stderr.suffix(600))")
        #expect(!new.stderr.contains("trained compression dictionary"), "\(new.stderr.suffix(600))")
        #expect(try ReplicationTests().states(new) == (try ReplicationTests().states(trained)))

        // Past its own threshold (200 events) it trains nothing: the dictionary taken counts
        // as trained there, and the next training is due at ten times that.
        try ReplicationTests().load(new, replicaWorkloads(replicas: 1, eventsEach: 300, seed: 6)[0])
        #expect(try DictionarySyncTests.dictionaryVersion(new) == 1)
        let rebuilt = try new.client().call("rebuild", #"{"verify":true}"#)
        #expect((rebuilt["mismatched"] as? [String])?.isEmpty == true, "\(rebuilt)")
        #expect(rebuilt["digest_mismatch"] as? Bool == false, "\(rebuilt)")

        // A second session sends no dictionary either way: both have one.
        let again = try ReplicationTests().sync(initiator, "unix://\(responder.socketPath)")
        #expect(again["error"] is NSNull, "\(again)")
        #expect(new.stderr.components(separatedBy: "compression dictionary taken").count == 2)

        // The events stored here read back with the dictionary taken, once restarted; its
        // bytes are the peer's.
        #expect(try new.stop() == 0)
        #expect(try trained.stop() == 0)
        let (ours, theirs) = (
            try EventLog.open(directory: new.dataDirectory), try EventLog.open(directory: trained.dataDirectory)
        )
        let taken = try #require(try ours.currentDictionaries())
        #expect(taken == (try theirs.currentDictionaries()))
        #expect(try ours.statistics().events > held)
        #expect(try ours.rebuild(verify: true).mismatched.isEmpty)
    }

    @Test("a node's hello asks for a dictionary only while it has none, and only of a peer that names the capability")
    func helloAsksWhileItHasNone() throws {
        let fresh = try DaemonProcess()
        defer { fresh.removeFiles() }
        func hello(_ daemon: DaemonProcess, capabilities: [String]) throws -> String {
            let (peer, frame) = try NegotiationTests.open(
                daemon, hello: NegotiationTests.hello(protocols: [1, 2], capabilities: capabilities))
            defer { peer.close() }
            #expect(frame.kind == .hello)
            return String(decoding: frame.payload, as: UTF8.self)
        }
        #expect(try hello(fresh, capabilities: [Frame.dictionaryCapability]).contains(#""needs_dictionary":true"#))
        #expect(try !hello(fresh, capabilities: [Frame.verifyCapability]).contains("needs_dictionary"))
        #expect(try !hello(fresh, capabilities: []).contains("needs_dictionary"))
        let trained = try DictionarySyncTests.trainedDaemon()
        defer { trained.removeFiles() }
        #expect(try !hello(trained, capabilities: [Frame.dictionaryCapability]).contains("needs_dictionary"))
    }

    /// Opens a session with `daemon` as a peer that holds nothing, names `capabilities` and
    /// says it needs a dictionary; sends its done, and returns the kinds of the frames the
    /// daemon sends until its done, acknowledging each batch, with the dictionaries sent.
    func framesToAPeerInNeed(_ daemon: DaemonProcess, capabilities: [String]) throws -> (
        kinds: [Frame.Kind], dictionaries: SharedDictionaries?
    ) {
        var hello = NegotiationTests.hello(protocols: [1, 2], capabilities: capabilities)
        hello.needsDictionary = true
        let (peer, frame) = try NegotiationTests.open(daemon, hello: hello)
        defer { peer.close() }
        try #require(frame.kind == .hello)
        peer.channel.agreement = Frame.Agreement(version: 2, capabilities: Set(capabilities))
        try peer.channel.write(Frame(kind: .done, payload: Messages.encode(Messages.Done(sent: 0, reconciled: 0))))
        var kinds: [Frame.Kind] = []
        var dictionaries: SharedDictionaries?
        while true {
            let next = try peer.channel.read()
            kinds.append(next.kind)
            switch next.kind {
            case .dictionary: dictionaries = try DictionaryFrame.decode(next.payload)
            case .batch:
                try peer.channel.write(
                    Frame(kind: .ack, payload: Messages.encode(Messages.Ack(received: 0, skipped: 0, deadLetters: 0))))
            default: return (kinds, dictionaries)
            }
        }
    }

    @Test("a node sends its dictionaries once, before its first batch, to a peer that asked and named the capability")
    func sentOnceBeforeTheFirstBatch() throws {
        let trained = try DictionarySyncTests.trainedDaemon()
        defer { trained.removeFiles() }
        let (kinds, dictionaries) = try framesToAPeerInNeed(
            trained, capabilities: [Frame.dictionaryCapability, Frame.wideWindowCapability])
        #expect(kinds.first == .dictionary, "\(kinds)")
        #expect(kinds.filter { $0 == .dictionary }.count == 1)
        #expect(kinds.dropFirst().dropLast().allSatisfy { $0 == .batch } && kinds.last == .done, "\(kinds)")
        let sent = try #require(dictionaries)
        #expect(sent.events.starts(with: SharedDictionaries.magic))
        _ = try sent.loaded(level: 3)

        // A peer that asks without naming the capability (a node of another release) gets
        // batches only.
        let plain = try framesToAPeerInNeed(trained, capabilities: [Frame.wideWindowCapability])
        #expect(!plain.kinds.contains(.dictionary) && plain.kinds.contains(.batch), "\(plain.kinds)")
        #expect(DictionarySyncTests.logged(trained, "compression dictionary sent"))
    }

    /// A peer's session that agreed to `dictionary` with `daemon` (which then asks for one,
    /// or not), sending `payload` in a dictionary frame, then one batch of `events` and done.
    /// The daemon's error frame, if it sent one.
    func offer(_ payload: [UInt8], to daemon: DaemonProcess, events: [(id: ULID, json: [UInt8])] = []) throws
        -> Messages.Failure?
    {
        let (peer, frame) = try NegotiationTests.open(
            daemon, hello: NegotiationTests.hello(protocols: [1, 2], capabilities: [Frame.dictionaryCapability]))
        defer { peer.close() }
        try #require(frame.kind == .hello)
        peer.channel.agreement = Frame.Agreement(version: 2, capabilities: [Frame.dictionaryCapability])
        try peer.channel.write(Frame(kind: .dictionary, payload: payload))
        if !events.isEmpty {
            let batch = try BatchCodec.encode(
                events.map { ReplicatedEvent(id: $0.id, json: $0.json) }, compressor: Compressor(level: 3))
            try peer.channel.write(Frame(kind: .batch, payload: batch))
        }
        try peer.channel.write(
            Frame(kind: .done, payload: Messages.encode(Messages.Done(sent: events.count, reconciled: 0))))
        while true {
            let next = try peer.channel.read()
            switch next.kind {
            case .error: return try Messages.decode(Messages.Failure.self, next.payload, frame: "error")
            case .done: return nil
            default: continue
            }
        }
    }

    @Test(
        "a hostile peer's dictionary frame, malformed, not a dictionary, damaged or not asked for, ends its session with protocol; nothing changes and the node serves on",
        arguments: ["lengths", "empty", "raw content", "damaged", "not asked"])
    func hostileOffers(_ kind: String) throws {
        let daemon = kind == "not asked" ? try DictionarySyncTests.trainedDaemon() : try DaemonProcess()
        defer { daemon.removeFiles() }
        let before = try daemon.client().call("status")
        let good = try DictionaryTrainer.train(
            samples: FuzzEntry.sampleEvents(), capacity: 4096, quick: false, level: 3)
        let payload: [UInt8]
        switch kind {
        case "lengths": payload = [0, 0, 0x10, 0] + good.prefix(100)
        case "empty": payload = DictionaryFrame.encode(SharedDictionaries(events: [], records: nil))
        case "raw content":
            payload = DictionaryFrame.encode(
                SharedDictionaries(events: Array(String(repeating: "job/", count: 500).utf8), records: nil))
        case "damaged":
            var damaged = good
            for index in 8..<min(160, damaged.count) { damaged[index] = 0xFF }
            payload = DictionaryFrame.encode(SharedDictionaries(events: damaged, records: nil))
        default: payload = DictionaryFrame.encode(SharedDictionaries(events: good, records: nil))
        }
        let failure = try #require(try offer(payload, to: daemon), "the session went on")
        #expect(failure.reason == "protocol", "\(failure)")
        #expect(failure.message.contains("dictionary"), "\(failure.message)")
        let after = try daemon.client().call("status")
        #expect(after["dictionary_version"] as? Int == before["dictionary_version"] as? Int)
        #expect(after["events"] as? Int == before["events"] as? Int)
        _ = try daemon.client().call(
            "append", eventsParams([#"{"entity":"job/after","kind":"status","status":"new"}"#]))
    }

    @Test(
        "16 hostile peers at once, each sending a dictionary frame of the largest size that is not a dictionary: each refused (protocol, or busy past max_incoming_sessions), in bounded memory; the node then takes a good one"
    )
    func manyHostileOffersAtOnce() throws {
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        let figures = ProcessFigures(pid: daemon.process.processIdentifier)
        let peakBefore = figures.peakRSS
        let garbage = [UInt8](repeating: 0xEC, count: SharedDictionaries.maxBytes)
        let payload = DictionaryFrame.encode(
            SharedDictionaries(events: SharedDictionaries.magic + garbage.dropFirst(4), records: garbage))
        #expect(payload.count == Frame.Kind.dictionary.maxPayloadBytes)
        let reasons = Mutex<[String]>([])
        DispatchQueue.concurrentPerform(iterations: 16) { _ in
            let reason: String
            do {
                reason = try offer(payload, to: daemon)?.reason ?? "taken"
            } catch {
                reason = "\(error)"
            }
            reasons.withLock { $0.append(reason) }
        }
        let seen = reasons.withLock { $0 }
        #expect(seen.count == 16)
        #expect(seen.allSatisfy { $0 == "protocol" || $0 == "busy" }, "\(seen)")
        #expect(seen.contains("protocol"), "\(seen)")
        // Each session holds its frame (2 MiB) and zstd's tables while it tries it: at most
        // max_incoming_sessions (8) at once.
        #expect(
            !memoryBoundsApply || figures.peakRSS - peakBefore < 96 << 20,
            "peak RSS grew \(figures.peakRSS - peakBefore) bytes")
        #expect(try DictionarySyncTests.dictionaryVersion(daemon) == 0)
        let good = try DictionaryTrainer.train(
            samples: FuzzEntry.sampleEvents(), capacity: 4096, quick: false, level: 3)
        #expect(try offer(DictionaryFrame.encode(SharedDictionaries(events: good, records: nil)), to: daemon) == nil)
        #expect(try DictionarySyncTests.dictionaryVersion(daemon) == 1)
    }

    @Test("a peer's valid dictionary is taken by a node that asked, and the batch after it is stored with it")
    func takenFromARawPeer() throws {
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        let good = try DictionaryTrainer.train(
            samples: FuzzEntry.sampleEvents(), capacity: 4096, quick: false, level: 3)
        // The samples carry the fuzz entries' origin; each gets an id of its own.
        let events = FuzzEntry.sampleEvents(count: 20).enumerated().map { index, json in
            (id: ULID(timestamp: 1_700_000_000_000 + UInt64(index), random: (2, UInt64(index))), json: json)
        }
        #expect(
            try offer(
                DictionaryFrame.encode(SharedDictionaries(events: good, records: nil)), to: daemon, events: events)
                == nil)
        #expect(try DictionarySyncTests.dictionaryVersion(daemon) == 1)
        #expect(try daemon.client().call("status")["events"] as? Int == events.count)
        #expect(DictionarySyncTests.logged(daemon, "the peer's compression dictionary taken"))
    }
}
