import UnixSocket

/// One unit of the sync protocol after the preamble:
///
///     type (1 byte) | length (4 bytes, big-endian) | CRC-32C of the payload (4, big-endian) | payload
///
/// docs/sync.md gives every frame's payload.
package struct Frame: Equatable, Sendable {
    package enum Kind: UInt8, Sendable {
        case hello = 0x48  // "H"
        case reconcile = 0x52  // "R"
        case batch = 0x42  // "B"
        case ack = 0x41  // "A"
        case done = 0x44  // "D"
        case error = 0x45  // "E"
        /// An append handed to the node that makes it (`forward`): a JSON-RPC request line.
        case forward = 0x46  // "F"
        /// That node's answer to it: a JSON-RPC response line.
        case forwarded = 0x66  // "f"
        /// The blobs the sender lacks, each from the offset it holds (`blobs`): JSON.
        case want = 0x57  // "W"
        /// Bytes of one blob (`BlobChunk`): binary.
        case chunk = 0x43  // "C"
        /// The SHA-256 of each chunk of one blob, before its first chunk (`BlobManifest`):
        /// binary.
        case manifest = 0x4D  // "M"
        /// The end of the answer to a want: JSON, the blobs served and those not held.
        case blobsDone = 0x63  // "c"
        /// The answer to `blobs_done`: JSON, the blobs kept whole, all of them on the
        /// receiver's disk by then.
        case blobsKept = 0x6B  // "k"
        /// The sender's compression dictionaries, before its first batch to a peer whose
        /// hello said it has none (`dictionary`): binary (`DictionaryFrame`).
        case dictionary = 0x5A  // "Z"

        /// What a session must have agreed to before either side sends a frame of a kind:
        /// the protocol version that added it, or a capability both hellos named.
        package enum Requirement: Equatable, Sendable {
            case version(Int)
            case capability(String)
        }

        /// Every kind's requirement and the largest payload it may announce, in one table:
        /// a kind a capability adds is a case and a row here, and a peer that has not
        /// agreed to it never sees one. The reader checks the size against the header
        /// before it reads (or makes room for) a byte of the payload, so a peer cannot make
        /// this node buffer 64 MiB to learn that a control frame is over its 8 MiB.
        package var rule: (requires: Requirement, maxPayloadBytes: Int) {
            switch self {
            case .batch: (.version(1), Frame.maxPayloadBytes)
            // A hello carries the version vector and the opening ranges; a reconcile round
            // at most a few thousand ranges and ids.
            case .hello, .reconcile: (.version(1), Messages.maxBytes)
            // A few counters, or a reason and a sentence.
            case .ack, .done, .error: (.version(1), Frame.maxSmallPayloadBytes)
            // An append as a client may send one, and its answer (ids and versions of each event).
            case .forward, .forwarded: (.capability(Frame.forwardCapability), Messages.maxBytes)
            // At most 256 hashes with sizes and offsets; a chunk is a header and 512 KiB; a
            // manifest a header and 32 bytes a chunk, of a blob of up to 16 GiB.
            case .want, .blobsDone, .blobsKept: (.capability(Frame.blobsCapability), Frame.maxSmallPayloadBytes)
            case .chunk: (.capability(Frame.blobsCapability), BlobChunk.headerBytes + BlobChunk.maxBytes)
            case .manifest: (.capability(Frame.blobsCapability), BlobManifest.maxPayloadBytes)
            // Two dictionaries of at most 1 MiB each, with their lengths.
            case .dictionary: (.capability(Frame.dictionaryCapability), DictionaryFrame.maxPayloadBytes)
            }
        }

        package var maxPayloadBytes: Int { rule.maxPayloadBytes }
    }

    /// What one session runs, as the two hellos agreed it: the protocol version and the
    /// capabilities both sides speak.
    package struct Agreement: Equatable, Sendable {
        package var version: Int
        package var capabilities: Set<String>

        package init(version: Int, capabilities: Set<String>) {
            self.version = version
            self.capabilities = capabilities
        }

        /// Before the hellos (and with a node that speaks only protocol 1, as 0.4 does).
        package static let first = Agreement(version: 1, capabilities: [])

        package func allows(_ kind: Kind) -> Bool {
            switch kind.rule.requires {
            case .version(let version): version <= self.version
            case .capability(let name): capabilities.contains(name)
            }
        }
    }

    package var kind: Kind
    package var payload: [UInt8]

    package static let headerBytes = 9
    /// The largest payload either side accepts (a batch's).
    package static let maxPayloadBytes = 64 << 20
    /// The largest ack, done or error frame.
    package static let maxSmallPayloadBytes = 64 << 10

    /// The versions of the protocol this node speaks. A session runs the highest that both
    /// sides speak: protocol 2 is protocol 1 with the versions and capabilities of each side
    /// in its hello, so the frame kinds later capabilities add can be agreed.
    package static let protocolVersions = 1...2
    /// The version the preamble names, and the initiator's hello: the oldest this node
    /// speaks, so that a node that speaks only protocol 1 (0.4) takes the session; the
    /// hellos agree on the rest.
    package static let protocolVersion = 1
    /// The capabilities this node speaks; each names the frame kinds it adds in
    /// `Kind.rule`, or the members it adds to frames of protocol 2.
    package static let capabilities: [String] = [
        verifyCapability, forwardCapability, blobsCapability, wideWindowCapability, dictionaryCapability,
    ]
    /// Content checks: the responder's hello carries a window of the events both sides
    /// hold with its content hashes, the initiator's done the ones it holds otherwise
    /// (`DivergenceLedger`). No frame kind of its own.
    package static let verifyCapability = "verify"
    /// Appends made only at a type's authority (`offline: "refuse"`): a session whose
    /// initiator's hello says `forward` carries one `forward` frame, the responder answers
    /// with one `forwarded` frame, and nothing is synced.
    package static let forwardCapability = "forward"
    /// Attachments: once both sides have sent their events, the initiator sends a `want`
    /// of the blobs it lacks, the responder a `manifest` and the `chunk` frames of each,
    /// then `blobs_done`, and the initiator `blobs_kept` once they are on its disk; then the
    /// other way. A node that keeps no blobs does not name it.
    package static let blobsCapability = "blobs"
    /// A sender keeps up to `SyncSession.wideWindow` batches unacknowledged, not
    /// `SyncSession.window`: the receiver commits those that wait for its writer together,
    /// so on a disk whose flushes are slow a sync makes fewer commits. No frame kind of its
    /// own.
    package static let wideWindowCapability = "window8"
    /// A node without a compression dictionary says so in its hello (`needs_dictionary`);
    /// a peer that has one sends it in a `dictionary` frame before its first batch, and the
    /// node takes it as its first (`EventLog.adoptDictionaries(_:)`) rather than train one
    /// on its own first ten thousand events.
    package static let dictionaryCapability = "dictionary"
    /// Each side's first bytes: "EVSYNC/" and the version in decimal, then a newline.
    package static func preamble(version: Int = protocolVersion) -> [UInt8] { Array("EVSYNC/\(version)\n".utf8) }
    package static let preamblePrefix = Array("EVSYNC/".utf8)

    /// The version a preamble line (without its newline) announces, or nil for any other line.
    package static func preambleVersion(_ line: some Collection<UInt8>) -> Int? {
        guard line.count <= preamblePrefix.count + 9, line.starts(with: preamblePrefix) else { return nil }
        return Int(String(decoding: line.dropFirst(preamblePrefix.count), as: UTF8.self))
    }

    /// A frame's header with room for its length and checksum, to append the payload to;
    /// `endEncoding` fills them in.
    package static func beginEncoding(_ kind: Kind, capacity: Int) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(headerBytes + capacity)
        out.append(kind.rawValue)
        out.append(contentsOf: repeatElement(0, count: 8))
        return out
    }

    package static func endEncoding(_ frame: inout [UInt8]) {
        let length = UInt32(frame.count - headerBytes)
        let checksum = CRC32C.checksum(frame[headerBytes...])
        for (index, shift) in [24, 16, 8, 0].enumerated() {
            frame[1 + index] = UInt8(truncatingIfNeeded: length >> UInt32(shift))
            frame[5 + index] = UInt8(truncatingIfNeeded: checksum >> UInt32(shift))
        }
    }

    package func encoded() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(Frame.headerBytes + payload.count)
        out.append(kind.rawValue)
        appendBigEndian(UInt32(payload.count), to: &out)
        appendBigEndian(CRC32C.checksum(payload), to: &out)
        out.append(contentsOf: payload)
        return out
    }

    package init(kind: Kind, payload: [UInt8]) {
        self.kind = kind
        self.payload = payload
    }
}

package func appendBigEndian(_ value: UInt32, to out: inout [UInt8]) {
    out.append(UInt8(truncatingIfNeeded: value >> 24))
    out.append(UInt8(truncatingIfNeeded: value >> 16))
    out.append(UInt8(truncatingIfNeeded: value >> 8))
    out.append(UInt8(truncatingIfNeeded: value))
}

package func readBigEndian32(_ bytes: [UInt8], at offset: Int) -> UInt32 {
    UInt32(bytes[offset]) << 24 | UInt32(bytes[offset + 1]) << 16 | UInt32(bytes[offset + 2]) << 8
        | UInt32(bytes[offset + 3])
}

/// Frames over a connection, with the bytes counted each way. Every read is bounded by
/// the connection's read timeout, so a silent peer ends the session; and, once
/// `limitSession(toSeconds:)` is called, the whole session by a deadline, so a peer that
/// keeps talking ends it too.
package final class FrameChannel {
    package let connection: UnixConnection
    private var buffer: [UInt8]
    private var start = 0
    private(set) var bytesReceived = 0
    private(set) var bytesSent = 0
    /// What the session agreed to: a frame of a kind it did not is refused as it is read.
    package var agreement = Frame.Agreement.first
    /// The timeout the connection was given, for messages.
    package let timeoutSeconds: Double
    /// When the session must be over, and how long that was from its start (for messages).
    private(set) var deadline: ContinuousClock.Instant?
    private var sessionSeconds = 0.0
    /// The read and write timeout set on the connection: `timeoutSeconds`, less once the
    /// deadline is nearer than that.
    private var appliedTimeout: Double
    /// Writes go out in pieces of this size, so the deadline is checked between them even
    /// when a peer takes a large frame slowly.
    package static let writeChunkBytes = 256 * 1024

    /// `buffered`: bytes already read from the connection (after the preamble line, when the
    /// daemon recognised the session from its first line).
    package init(connection: UnixConnection, timeoutSeconds: Double, buffered: [UInt8] = []) {
        self.connection = connection
        self.timeoutSeconds = timeoutSeconds
        self.buffer = buffered
        self.bytesReceived = buffered.count
        self.appliedTimeout = timeoutSeconds
        try? connection.setTimeouts(read: timeoutSeconds, write: timeoutSeconds)
    }

    /// Ends the session with `session_limit` once `seconds` have passed from now: every
    /// read and write after that fails, and none blocks past it.
    package func limitSession(toSeconds seconds: Double) {
        sessionSeconds = seconds
        deadline = .now + .milliseconds(Int64(clamping: Int((seconds * 1000).rounded())))
    }

    package var isPastDeadline: Bool { deadline.map { ContinuousClock.now >= $0 } ?? false }

    /// Whether bytes from the peer wait to be read (buffered here, or in the socket): a
    /// read would not have to wait for the peer to send more. A hint for when to settle a
    /// batch: a socket that fails the poll counts as nothing waiting, and the read that
    /// follows reports its error.
    package var hasBytesWaiting: Bool {
        buffer.count > start || (try? connection.waitReadable(timeout: 0)) == true
    }

    /// Waits until bytes from the peer wait to be read (true) or `wake` is signalled or
    /// `timeout` seconds pass (false). Like `hasBytesWaiting`, a hint: a socket that fails
    /// the poll counts as bytes waiting, so the read that follows reports its error.
    package func waitForBytes(timeout: Double, or wake: EventFD) -> Bool {
        guard buffer.count <= start else { return true }
        do { return try connection.waitReadable(timeout: timeout, or: wake) == .readable } catch { return true }
    }

    package var deadlineError: SyncError {
        SyncError(
            .sessionLimit,
            "the session went on for \(Int(sessionSeconds)) s, the most one may last (sync_session_max_s); what was committed stays, and the next session goes on from there"
        )
    }

    /// Before each read or write: fails past the deadline, and shortens the connection's
    /// timeouts once the deadline is nearer than `timeoutSeconds`.
    private func checkDeadline() throws(SyncError) {
        guard let deadline else { return }
        let left = deadline - ContinuousClock.now
        let seconds = Double(left.components.seconds) + Double(left.components.attoseconds) / 1e18
        guard seconds > 0 else { throw deadlineError }
        // A timeout of 0 would mean none at all.
        let wanted = min(timeoutSeconds, max(seconds, 0.001))
        if wanted != appliedTimeout {
            try? connection.setTimeouts(read: wanted, write: wanted)
            appliedTimeout = wanted
        }
    }

    package func writePreamble() throws(SyncError) {
        try write(Frame.preamble())
    }

    /// Reads the peer's preamble and returns its protocol version; anything else is
    /// `not_evstore`, which describes what the peer sent and never quotes it.
    package func readPreamble() throws(SyncError) -> Int {
        let prefix = Frame.preamblePrefix
        while true {
            let available = buffer[start...]
            if let newline = available.firstIndex(of: 0x0A) {
                guard let version = Frame.preambleVersion(buffer[start..<newline]) else {
                    if let refusal = Self.refusalLine(buffer[start..<newline]) { throw refusal }
                    throw notEvstore(Array(available))
                }
                start = newline + 1
                return version
            }
            // The preamble is short: a peer that sends more without a newline, or bytes that
            // cannot begin one, is not speaking the protocol.
            let head = Array(available.prefix(prefix.count))
            if !prefix.starts(with: head) || available.count > 32 { throw notEvstore(Array(available)) }
            if try !fill() {
                throw available.isEmpty
                    ? SyncError(.closed, "the peer closed the connection without a word")
                    : notEvstore(Array(available), closed: true)
            }
        }
    }

    /// An evstored that refuses a client with no access answers at connect with one
    /// JSON-RPC error line (`forbidden`), before it reads a preamble: that is `auth` for
    /// the session, described, not quoted.
    private static func refusalLine(_ line: ArraySlice<UInt8>) -> SyncError? {
        let start = Array(#"{"jsonrpc":"2.0","id":null,"error":{"#.utf8)
        guard line.count < 4096, line.starts(with: start) else { return nil }
        let text = String(decoding: line, as: UTF8.self)
        guard text.contains(#""reason":"forbidden""#) else { return nil }
        return SyncError(
            .authentication,
            "the peer's daemon refused the connection before the session began: the user this node reaches it as has no access there (its read_groups, write_groups, read_users or write_users)"
        )
    }

    /// What a peer that does not speak the protocol sent, described by its size alone: the
    /// socket may be another service's (a root-only one, reached through a URL someone gave),
    /// and its bytes must not reach a message, a log line or `status`.
    private func notEvstore(_ sent: [UInt8], closed: Bool = false) -> SyncError {
        SyncError(
            .notEvstore,
            "the peer did not answer with the evstore sync protocol (a captive portal or another service?): it sent \(sent.count) byte\(sent.count == 1 ? "" : "s") that \(sent.count == 1 ? "is" : "are") not a preamble"
                + (closed ? ", then closed the connection" : "")
        )
    }

    package func write(_ frame: Frame) throws(SyncError) {
        try write(frame.encoded())
    }

    /// Writes a frame built in place (`Frame.beginEncoding`, `Frame.endEncoding`): a large
    /// payload is not copied into a frame of its own.
    package func write(encoded frame: [UInt8]) throws(SyncError) {
        try write(frame)
    }

    /// Writes the frame that ends a failed session (an error frame), past the deadline too,
    /// waiting at most a couple of seconds for the peer to take it.
    package func writeLast(_ frame: Frame) throws(SyncError) {
        deadline = nil
        appliedTimeout = min(timeoutSeconds, 2)
        try? connection.setTimeouts(read: appliedTimeout, write: appliedTimeout)
        try write(frame.encoded())
    }

    private func write(_ bytes: [UInt8]) throws(SyncError) {
        var offset = 0
        while offset < bytes.count {
            try checkDeadline()
            let end = min(bytes.count, offset + FrameChannel.writeChunkBytes)
            do {
                try connection.write(end - offset == bytes.count ? bytes : Array(bytes[offset..<end]))
            } catch {
                if isPastDeadline { throw deadlineError }
                if error.isTimeout {
                    throw SyncError(.timeout, "the peer took no data for \(Int(timeoutSeconds)) s (sync_timeout_s)")
                }
                throw SyncError(.closed, "the peer closed the connection (\(error))")
            }
            bytesSent += end - offset
            offset = end
        }
    }

    /// The next frame, its checksum verified.
    package func read() throws(SyncError) -> Frame {
        try need(Frame.headerBytes, what: "a frame header")
        let typeByte = buffer[start]
        let length = Int(readBigEndian32(buffer, at: start + 1))
        let checksum = readBigEndian32(buffer, at: start + 5)
        guard let kind = Frame.Kind(rawValue: typeByte) else {
            throw SyncError(.protocolError, "the peer sent a frame of unknown type 0x\(String(typeByte, radix: 16))")
        }
        guard agreement.allows(kind) else {
            throw SyncError(
                .protocolError,
                "the peer sent a \(kind) frame, which this session (protocol \(agreement.version)) did not agree to")
        }
        // Before a byte of the payload is read: a header may announce anything.
        guard length <= kind.maxPayloadBytes else {
            throw SyncError(
                .protocolError,
                "the peer announced a \(kind) frame of \(length) bytes; the limit for \(kind) frames is \(kind.maxPayloadBytes)"
            )
        }
        try need(Frame.headerBytes + length, what: "a frame of \(length) bytes")
        let payload = Array(buffer[(start + Frame.headerBytes)..<(start + Frame.headerBytes + length)])
        start += Frame.headerBytes + length
        guard CRC32C.checksum(payload) == checksum else {
            throw SyncError(
                .corruptBatch, "a frame of \(length) bytes failed its checksum: the connection corrupted it")
        }
        return Frame(kind: kind, payload: payload)
    }

    /// Reads until `count` unread bytes are buffered.
    private func need(_ count: Int, what: String) throws(SyncError) {
        while buffer.count - start < count {
            if try !fill() {
                throw SyncError(
                    .closed,
                    buffer.count == start
                        ? "the peer closed the connection before the session ended"
                        : "the peer closed the connection in the middle of \(what) (truncated after \(buffer.count - start) bytes)"
                )
            }
        }
    }

    /// Reads more; false at the end of the stream.
    private func fill() throws(SyncError) -> Bool {
        if start > 0, start >= buffer.count / 2 {
            buffer.removeFirst(start)
            start = 0
        }
        try checkDeadline()
        do {
            let n = try connection.read(into: &buffer, count: 256 * 1024)
            bytesReceived += n
            return n > 0
        } catch {
            if isPastDeadline { throw deadlineError }
            if error.isTimeout {
                throw SyncError(.timeout, "the peer sent nothing for \(Int(timeoutSeconds)) s (sync_timeout_s)")
            }
            throw SyncError(.closed, "reading from the peer failed: \(error)")
        }
    }
}
