import Daemon
import EventStore
import FoundationEssentials
import Logging
import Projections
import Replication
import Server
import Synchronization
import UnixSocket
import Wire
import Writer

/// Entry points for the fuzzers in `Fuzz/` and for the tests that replay their corpora and
/// regressions. Each runs one input through the code the daemon runs and returns what came
/// of it or throws the error a peer or client would get; what must hold for every input is
/// checked with `precondition`, so the fuzzer reports a broken one as a finding.
public enum DaemonFuzzEntry {
    /// One input for the sync stream decoder: the bytes a peer sends, from its preamble on,
    /// read as a session reads them (`FrameChannel`), each frame decoded as the session
    /// decodes its kind, each batch's events validated as `EventLog.ingest` validates them.
    ///
    /// The first byte is not sent: it holds flags that let a fuzzer past the checksums.
    /// Bit 0: each frame's CRC-32C is recomputed before sending. Bit 1 (with bit 0): each
    /// batch payload is `count | records` uncompressed and is compressed before sending.
    ///
    /// Returns the number of frames decoded when the stream ends cleanly after a frame.
    public static func syncStream(_ data: [UInt8]) throws -> Int {
        guard let flags = data.first else { throw SyncError(.closed, "an empty input") }
        var stream = Array(data.dropFirst())
        if flags & 1 != 0 { stream = repairFrames(stream, compressBatches: flags & 2 != 0) }
        let (mine, theirs) = try UnixConnection.pair()
        theirs.close()
        defer { mine.close() }
        let channel = FrameChannel(connection: mine, timeoutSeconds: 5, buffered: stream)
        // Every capability agreed, so that the frames they add are decoded too.
        channel.agreement = Frame.Agreement(version: 2, capabilities: Set(Frame.capabilities))
        let version = try channel.readPreamble()
        guard Frame.protocolVersions.contains(version) else {
            throw SyncError(.protocolMismatch, "the peer speaks protocol \(version)")
        }
        let decompressor = Decompressor(windowLogMax: SyncSession.windowLogMax)
        var frames = 0
        while true {
            let frame: Frame
            do {
                frame = try channel.read()
            } catch {
                // The stream ending between frames is the clean end of the input.
                if error.reason == .closed, error.message.contains("before the session ended") { return frames }
                throw error
            }
            frames += 1
            try decode(frame, decompressor: decompressor)
        }
    }

    /// Decodes one frame's payload as the session decodes a frame of its kind.
    static func decode(_ frame: Frame, decompressor: Decompressor) throws {
        switch frame.kind {
        case .hello:
            let hello = try Messages.decode(Messages.Hello.self, frame.payload, frame: "hello")
            _ = try hello.validatedName()
            _ = try hello.decodedVector()
            for range in hello.ranges ?? [] { _ = try range.decoded() }
        case .reconcile:
            let message = try Messages.decode(Messages.Reconcile.self, frame.payload, frame: "reconcile")
            for text in message.needs where ULID(text) == nil {
                throw SyncError(.protocolError, "the peer needs \(text), which is not an id")
            }
            for range in message.ranges { _ = try range.decoded() }
        case .batch:
            let events = try BatchCodec.decode(
                frame.payload, decompressor: decompressor, maxEventBytes: StoreOptions.absoluteMaxEventBytes)
            for event in events {
                // What ingest does with each: a failure is a dead letter, not a failed batch.
                if let decoded = try? EventCodec.decodeStored(event.json, id: event.id) {
                    precondition(decoded.id == event.id, "a batch record decoded under another id")
                }
            }
        case .ack: _ = try Messages.decode(Messages.Ack.self, frame.payload, frame: "ack")
        case .done: _ = try Messages.decode(Messages.Done.self, frame.payload, frame: "done")
        case .error: _ = try Messages.decode(Messages.Failure.self, frame.payload, frame: "error")
        // What the authority and the node that handed it an append read of each other.
        case .forward: _ = RequestParser.parse(frame.payload, maxBatch: 1)
        case .forwarded: _ = Response.read(frame.payload)
        case .want:
            let wants = try Messages.decode(Messages.Wants.self, frame.payload, frame: "want")
            for want in wants.blobs { _ = BlobHash(want.hash) }
        case .chunk: _ = try BlobChunk.decode(frame.payload)
        case .manifest: _ = try BlobManifest.decode(frame.payload)
        case .blobsDone: _ = try Messages.decode(Messages.BlobsDone.self, frame.payload, frame: "blobs_done")
        case .blobsKept: _ = try Messages.decode(Messages.BlobsKept.self, frame.payload, frame: "blobs_kept")
        // zstd's loader and a trial compression, as a node checks a peer's dictionaries.
        case .dictionary: _ = try DictionaryFrame.decode(frame.payload).loaded(level: 3)
        }
    }

    /// Rewrites each whole frame of `stream` (after the preamble line) with its checksum
    /// recomputed, and with its batch payload compressed when `compressBatches`. Bytes that
    /// do not make a whole frame are left as they are.
    static func repairFrames(_ stream: [UInt8], compressBatches: Bool) -> [UInt8] {
        guard let newline = stream.firstIndex(of: 0x0A) else { return stream }
        var out = Array(stream[...newline])
        var offset = newline + 1
        while stream.count - offset >= Frame.headerBytes {
            let length = Int(readBigEndian32(stream, at: offset + 1))
            guard let kind = Frame.Kind(rawValue: stream[offset]),
                length <= stream.count - offset - Frame.headerBytes
            else { break }
            var payload = Array(stream[(offset + Frame.headerBytes)..<(offset + Frame.headerBytes + length)])
            if compressBatches, kind == .batch, payload.count >= 4,
                let compressed = try? Compressor(level: 1).compress(Array(payload[4...]), dictionary: nil)
            {
                payload = Array(payload[..<4]) + compressed
            }
            out.append(contentsOf: Frame(kind: kind, payload: payload).encoded())
            offset += Frame.headerBytes + length
        }
        out.append(contentsOf: stream[offset...])
        return out
    }

    /// The bytes a peer sends for a session that offers `events` (each a stored event's
    /// JSON without its id, under the id beside it), in the input form of `syncStream`
    /// with `flags`: a seed for the sync fuzzer.
    public static func sampleSyncStream(
        flags: UInt8, node: ULID, events: [(id: ULID, json: [UInt8])], ack: Bool = true
    ) -> [UInt8] {
        var out: [UInt8] = [flags]
        out.append(contentsOf: Frame.preamble())
        var vector: [String: String] = [:]
        if let last = events.last { vector[node.description] = last.id.description }
        let hello = Messages.Hello(
            protocolVersion: Frame.protocolVersion, node: node.description, name: "fuzz", vector: vector,
            ranges: events.isEmpty
                ? nil
                : [
                    Messages.WireRange(
                        origin: node.description, after: nil, through: events[events.count - 1].id.description,
                        count: nil, hash: nil, ids: events.map(\.id.description))
                ])
        out.append(contentsOf: Frame(kind: .hello, payload: Messages.encode(hello)).encoded())
        if !events.isEmpty {
            let replicated = events.map { ReplicatedEvent(id: $0.id, json: $0.json) }
            var payload: [UInt8]
            if flags & 3 == 3 {
                payload = []
                appendBigEndian(UInt32(replicated.count), to: &payload)
                for event in events {
                    event.id.append(to: &payload)
                    appendBigEndian(UInt32(event.json.count), to: &payload)
                    payload.append(contentsOf: event.json)
                }
            } else {
                payload = (try? BatchCodec.encode(replicated, compressor: Compressor(level: 1))) ?? []
            }
            out.append(contentsOf: Frame(kind: .batch, payload: payload).encoded())
        }
        if ack {
            out.append(
                contentsOf: Frame(
                    kind: .ack, payload: Messages.encode(Messages.Ack(received: 1, skipped: 0, deadLetters: 0))
                )
                .encoded())
        }
        out.append(
            contentsOf: Frame(kind: .done, payload: Messages.encode(Messages.Done(sent: events.count, reconciled: 0)))
                .encoded())
        return out
    }
}

/// The socket API without a socket: a store in a directory of its own, the writer and the
/// methods a connection reaches, for the request fuzzer. Lines go through the parser and
/// the dispatcher as a connection sends them, one at a time.
///
/// Nothing here leaves the directory: `backup` and `sync` have their parameters checked but
/// are not run (one writes where the request says, the other starts the peers' commands),
/// and `watch` is answered without subscribing. The store is made afresh every
/// `requestsPerStore` lines, so it stays small and fast; before it goes, its projections are
/// checked against a rebuild from its log.
public final class FuzzDispatcher: Sendable {
    /// The client the fuzzer's requests come from: one that may write.
    private static let client = ClientAccess(
        credentials: nil, groups: [], grant: AccessPolicy.Grant(level: .write, why: "the fuzzer's client"))

    private struct Parts: Sendable {
        var log: EventLog
        var writer: Writer
        var methods: Methods
        var directory: String
    }

    public let directory: String
    private let requestsPerStore: Int
    /// The store and its services, replaced every `requestsPerStore` lines; the count of
    /// lines the current store has served.
    private let state: Mutex<(parts: Parts?, served: Int)>
    private let logger = Logger(label: "fuzz", level: .error, journal: false)
    private let generation = Atomic<Int>(0)

    /// Keeps its stores in `directory`, which must exist and be for it alone.
    public init(directory: String, requestsPerStore: Int = 2000) throws {
        self.directory = directory
        self.requestsPerStore = requestsPerStore
        self.state = Mutex((nil, 0))
    }

    /// Answers one request line: the response bytes a connection would send (empty for
    /// notifications). Every response line must be valid JSON.
    public func respond(to line: [UInt8]) throws -> [UInt8] {
        let parts = try current()
        var out: [UInt8]
        switch RequestParser.parse(line) {
        case .failed(let error):
            out = Response.line(id: RequestParser.nullID, error: error)
        case .single(.invalid(let id, let error)):
            out = Response.line(id: id, error: error)
        case .single(.request(let request)):
            out = respond(request, parts: parts)
            precondition(request.isNotification || !out.isEmpty, "a request with an id got no answer")
        case .batch(let elements):
            var responses: [[UInt8]] = []
            for element in elements {
                switch element {
                case .invalid(let id, let error): responses.append(Response.line(id: id, error: error))
                case .request(let request):
                    let line = respond(request, parts: parts)
                    if !line.isEmpty { responses.append(line) }
                }
            }
            // One array of the answers, as a connection joins them; nothing when all are notifications.
            out = []
            for (index, response) in responses.enumerated() {
                out.append(index == 0 ? UInt8(ascii: "[") : UInt8(ascii: ","))
                out.append(contentsOf: response.dropLast())
            }
            if !out.isEmpty { out.append(contentsOf: [UInt8(ascii: "]"), 0x0A]) }
        }
        if !out.isEmpty {
            precondition(out.last == 0x0A, "a response does not end its line")
            FuzzEntry.checkJSON(Array(out.dropLast()), "the response to \(FuzzEntry.quote(line))")
        }
        return out
    }

    /// Stops the writer, checks the store against a rebuild, and deletes it.
    public func stop() {
        state.withLock { state in
            if let parts = state.parts {
                parts.writer.stop()
                FuzzDispatcher.verify(parts.log)
                try? FileManager.default.removeItem(atPath: parts.directory)
            }
            state.parts = nil
        }
    }

    /// The store's projections and digest must equal a rebuild from its log, whatever the
    /// requests were (the spec's `rebuild --verify`).
    static func verify(_ log: EventLog) {
        do {
            let report = try log.rebuild(verify: true)
            precondition(
                report.mismatched.isEmpty && !report.digestMismatch,
                "the projections differ from a rebuild: \(report.mismatched.prefix(5)), digest \(report.digestMismatch)"
            )
        } catch {
            preconditionFailure("rebuilding the fuzzer's store failed: \(error)")
        }
    }

    private func respond(_ request: Request, parts: Parts) -> [UInt8] {
        let result: Result<[UInt8], RPCError>
        switch request.method {
        case MethodTable.append:
            if case .events(let events) = request.params {
                let line = Admission().decide(events, from: Self.client).responseLine(
                    id: request.id ?? RequestParser.nullID, writer: parts.writer, source: 1)
                return request.id == nil ? [] : line
            }
            if case .invalid(let error) = request.params {
                result = .failure(error)
            } else {
                result = .failure(.invalidParams("append takes \"events\": an array of events"))
            }
        case MethodTable.watch:
            result = Result { () throws(RPCError) in
                let params = try Params(request)
                _ = (try params.seq("after"), try params.entity("entity"), try params.type("type"))
                return Array(#"{"watching":true}"#.utf8)
            }
        case "backup":
            result = Result { () throws(RPCError) in
                let params = try Params(request)
                _ = try params.string("path")
                throw RPCError.application(.forbidden, "backup is not run by the fuzzer")
            }
        case "sync":
            result = Result { () throws(RPCError) in
                let params = try Params(request)
                _ = try params.string("peer")
                throw RPCError.application(.unavailable, "sync is not run by the fuzzer")
            }
        default:
            result = Result { () throws(RPCError) in try parts.methods.call(request) }
        }
        guard let id = request.id else { return [] }
        switch result {
        case .success(let bytes): return Response.line(id: id, result: bytes)
        case .failure(let error): return Response.line(id: id, error: error)
        }
    }

    /// The store for this line, made afresh when the last one has served its share.
    private func current() throws -> Parts {
        try state.withLock { state in
            if let parts = state.parts, state.served < requestsPerStore {
                state.served += 1
                return parts
            }
            if let old = state.parts {
                old.writer.stop()
                FuzzDispatcher.verify(old.log)
                try? FileManager.default.removeItem(atPath: old.directory)
                state.parts = nil
            }
            let number = generation.add(1, ordering: .relaxed).newValue
            let path = directory + "/store-\(number)"
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
            var options = StoreOptions()
            options.environment = EnvironmentOptions(initialMapSize: 1 << 20, maxMapSize: 256 << 20, durable: false)
            // Small enough that the fuzzer reaches the dictionary paths.
            options.dictionaryTrainingThreshold = 64
            options.dictionarySampleCount = 256
            options.dictionaryCapacity = 4096
            options.machineID = nil
            let log = try EventLog.open(directory: path, options: options)
            let configuration = Configuration.defaults(dataDirectory: path, socketPath: path + "/socket")
            let hub = WatchHub(logger: logger, limits: WatchLimits(configuration))
            let writer = Writer(log: log, hub: hub, logger: logger)
            writer.start()
            let sync = SyncService(
                node: SyncNode(log: log, name: "fuzz", writer: writer),
                settings: SyncService.Settings(configuration), logger: logger)
            let methods = Methods.withDefaults(
                log: log, node: Methods.NodeInfo(name: "fuzz", dataDirectory: path), startedAt: Date(),
                writer: writer, sync: sync)
            let parts = Parts(log: log, writer: writer, methods: methods, directory: path)
            state = (parts, 1)
            return parts
        }
    }
}
