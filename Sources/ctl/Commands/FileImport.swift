import Arguments
import Dispatch
import Projections
import Synchronization
import UnixSocket

/// `evctl append --file`: the events of an NDJSON input, in batches, several requests in
/// flight on one connection.
///
/// This thread writes the requests; a second one reads the replies, which come back in
/// request order. At most `inFlight` requests wait for their reply at once, so neither
/// side's socket buffer fills while the other waits.
struct FileImport {
    let path: String
    let batchSize: Int
    let skip: Int
    let json: Bool

    static let maxRequestBytes = 4 * 1024 * 1024
    static let inFlight = 4

    /// Returns the exit status; what went wrong is already said.
    func run(_ global: GlobalOptions) throws -> Int32 {
        let input = try NDJSONInput(bytes: NDJSONInput.read(path), skip: skip)
        let connection = try global.connect()
        let progress = ImportProgress(
            total: input.lines.count, skipped: input.skipped, json: json,
            showProgress: !input.lines.isEmpty && Terminal.standardErrorIsTerminal)
        // Made empty and then filled: a semaphore disposed of below its initial value traps,
        // and when the daemon goes away, slots are left taken.
        let slots = DispatchSemaphore(value: 0)
        for _ in 0..<FileImport.inFlight { slots.signal() }
        let sent = DispatchSemaphore(value: 0)
        let finished = DispatchSemaphore(value: 0)

        if let error = startThread(name: "evctl-replies", {
            progress.readReplies(from: connection, sent: sent, slots: slots)
            finished.signal()
        }) {
            throw CommandFailure(exitCode: ExitStatus.failed, "cannot start a thread: \(error.message)")
        }

        var next = 0
        var number = 0
        while next < input.lines.count {
            slots.wait()
            if progress.stopped { break }
            let end = batchEnd(input, from: next)
            number += 1
            let lines = input.lines[next..<end]
            var request = Array(#"{"jsonrpc":"2.0","id":"#.utf8) + Array(String(number).utf8)
            request += Array(#","method":"append","params":{"events":["#.utf8)
            for (index, line) in lines.enumerated() {
                if index > 0 { request.append(UInt8(ascii: ",")) }
                request += input.bytes[line.range]
            }
            request += Array("]}}\n".utf8)
            progress.willSend(
                SentBatch(number: number, lineNumbers: lines.map(\.number)))
            sent.signal()
            next = end
            do {
                try connection.socket.write(request)
            } catch {
                progress.lose(connection.lostReason(error))
                connection.close()
                break
            }
        }
        sent.signal()  // the end: the reader stops once no batch is pending
        finished.wait()
        return progress.report()
    }

    /// Where the batch that starts at `start` ends: `batchSize` events or the request size
    /// limit, whichever comes first, and at least one event.
    func batchEnd(_ input: NDJSONInput, from start: Int) -> Int {
        FileImport.batchEnd(input, from: start, batchSize: batchSize, maxRequestBytes: FileImport.maxRequestBytes)
    }

    /// The same for any batch size and request size (`evctl import` sends smaller requests).
    static func batchEnd(_ input: NDJSONInput, from start: Int, batchSize: Int, maxRequestBytes: Int) -> Int {
        var end = start
        var bytes = 128
        while end < input.lines.count, end - start < batchSize {
            let size = input.lines[end].range.count + 1
            if end > start, bytes + size > maxRequestBytes { break }
            bytes += size
            end += 1
        }
        return end
    }
}

/// A batch that was sent and waits for its reply.
struct SentBatch: Sendable {
    var number: Int
    /// The input line of each event, in order.
    var lineNumbers: [Int]
}

/// What the import has done so far, shared by the writing and the reading thread.
final class ImportProgress: Sendable {
    struct Failure {
        var line: Int
        var batch: SentBatch
        var error: RPCError
    }

    struct State {
        /// Sent batches without a reply yet, in the order sent.
        var pending: [SentBatch] = []
        /// Set once nothing more may be sent: a batch failed or the connection is gone.
        var stopped = false
        var sentEvents = 0
        var acknowledgedEvents = 0
        var acknowledgedBatches = 0
        var alreadyPresent = 0
        /// Events acknowledged before the first failure, and the last line among them.
        var acknowledgedBeforeFailure = 0
        var lastAcknowledgedLine = 0
        /// Batches acknowledged after a failed one (they were in flight when it failed).
        var acknowledgedAfterFailure: [SentBatch] = []
        var failure: Failure?
        var lost: String?
        var lastProgress: ContinuousClock.Instant?
    }

    /// Everything above; the two threads and the final report read it only under this lock.
    let state = Mutex(State())
    let total: Int
    let skipped: Int
    let json: Bool
    let showProgress: Bool
    let started = ContinuousClock.now

    init(total: Int, skipped: Int, json: Bool, showProgress: Bool) {
        self.total = total
        self.skipped = skipped
        self.json = json
        self.showProgress = showProgress
    }

    var stopped: Bool { state.withLock { $0.stopped } }

    func willSend(_ batch: SentBatch) {
        state.withLock {
            $0.pending.append(batch)
            $0.sentEvents += batch.lineNumbers.count
        }
    }

    func lose(_ message: String) {
        state.withLock {
            if $0.lost == nil { $0.lost = message }
            $0.stopped = true
        }
    }

    var elapsed: Double {
        (ContinuousClock.now - started).seconds
    }

    // MARK: The reading thread

    /// Reads one reply per sent batch (`sent` is signalled once per batch and once at the end).
    func readReplies(from connection: Connection, sent: DispatchSemaphore, slots: DispatchSemaphore) {
        while true {
            sent.wait()
            guard let batch = state.withLock({ $0.pending.first }) else { break }
            let reply: Reply
            do {
                guard let message = try readReply(connection) else {
                    lose("the daemon at \(connection.path) closed the connection")
                    break
                }
                reply = message
            } catch {
                lose(error.message ?? "the connection to the daemon was lost")
                break
            }
            handle(reply, for: batch)
            slots.signal()
        }
        // Wake the writer if it waits for a slot; it sees `stopped`.
        for _ in 0..<FileImport.inFlight { slots.signal() }
        if showProgress { Terminal.writeError("\r\u{1B}[K") }
    }

    func readReply(_ connection: Connection) throws(CommandFailure) -> Reply? {
        while true {
            guard let line = try connection.receiveLineOrEnd() else { return nil }
            if let reply = Connection.appendReply(line) { return reply }
            switch try Connection.decode(line) {
            case .notification: continue
            case .reply(let reply): return reply
            }
        }
    }

    func handle(_ reply: Reply, for batch: SentBatch) {
        let idCount = reply.appendCounts?.ids ?? ((reply.result as? [String: Any])?["ids"] as? [String])?.count ?? 0
        var line: [UInt8]?
        state.withLock { state in
            state.pending.removeFirst()
            if let error = reply.error {
                if state.failure == nil {
                    let index = min(max(error.index ?? 0, 0), batch.lineNumbers.count - 1)
                    state.failure = Failure(line: batch.lineNumbers[index], batch: batch, error: error)
                }
                state.stopped = true
                return
            }
            state.acknowledgedEvents += batch.lineNumbers.count
            state.acknowledgedBatches += 1
            // The daemon counts what it wrote; an idempotency key seen before writes nothing.
            let written =
                reply.appendCounts.map { $0.appended ?? $0.ids }
                ?? ((reply.result as? [String: Any])?["appended"] as? Int) ?? idCount
            state.alreadyPresent += max(0, idCount - written)
            if state.failure == nil {
                state.acknowledgedBeforeFailure += batch.lineNumbers.count
                state.lastAcknowledgedLine = batch.lineNumbers.last ?? state.lastAcknowledgedLine
            } else {
                state.acknowledgedAfterFailure.append(batch)
            }
            if json {
                var object = JSONObjectWriter()
                object.add("batch", batch.number)
                object.add("first_line", batch.lineNumbers.first)
                object.add("last_line", batch.lineNumbers.last)
                object.add("ids", json: RawJSON.member("ids", of: reply.resultBytes) ?? Array("[]".utf8))
                line = object.bytes + [0x0A]
            }
        }
        // Printed at once: a process watching evctl learns what is saved even if evctl dies next.
        if let line { StandardOutput.write(line) }
        if showProgress { printProgress() }
    }

    func printProgress() {
        let now = ContinuousClock.now
        let text: String? = state.withLock { state in
            if let last = state.lastProgress, now - last < .milliseconds(100) { return nil }
            state.lastProgress = now
            let rate = Int(Double(state.acknowledgedEvents) / max(elapsed, 0.001))
            return "sent \(state.sentEvents), acknowledged \(state.acknowledgedEvents) of \(total) events "
                + "(\(rate) events/s)"
        }
        if let text { Terminal.writeError("\r" + text + "\u{1B}[K") }
    }

    // MARK: The end

    /// Prints the summary (or what went wrong) and returns the exit status.
    func report() -> Int32 {
        let state = state.withLock { $0 }
        let seconds = elapsed
        let rate = Int(Double(state.acknowledgedEvents) / max(seconds, 0.001))
        if json {
            var summary = JSONObjectWriter()
            summary.add("appended", state.acknowledgedEvents)
            summary.add("already_present", state.alreadyPresent)
            summary.add("batches", state.acknowledgedBatches)
            summary.add("seconds", json: Array(Format.fixed(seconds, decimals: 3).utf8))
            if let failure = state.failure {
                var error = JSONObjectWriter()
                error.add("line", failure.line)
                error.add("reason", failure.error.reason)
                error.add("message", failure.error.message)
                summary.add("error", json: error.bytes)
            } else if let lost = state.lost {
                var error = JSONObjectWriter()
                error.add("reason", "unavailable")
                error.add("message", lost)
                error.add("skip", skipped + state.acknowledgedBeforeFailure)
                summary.add("error", json: error.bytes)
            }
            StandardOutput.write(summary.bytes + [0x0A])
        }

        if let failure = state.failure {
            Terminal.note(failureText(failure, state))
            return failure.error.exitStatus
        }
        if let lost = state.lost {
            Terminal.note(lostText(lost, state))
            return ExitStatus.unavailable
        }
        if !json {
            var output = StandardOutput()
            output.line(
                "appended \(Format.count(state.acknowledgedEvents, "event")) (\(state.alreadyPresent) already present)"
                    + " in \(Format.fixed(seconds, decimals: 2)) s (\(rate) events/s)")
            output.flush()
        }
        return ExitStatus.ok
    }

    /// What a rejected batch means: which line, what was appended, how to go on.
    func failureText(_ failure: Failure, _ state: State) -> String {
        let lines = failure.batch.lineNumbers
        let resume = skipped + state.acknowledgedBeforeFailure
        var text = "line \(failure.line): \(failure.error.description)\n"
        text +=
            "evctl: nothing of lines \(lines.first ?? 0)-\(lines.last ?? 0) was appended (a batch is all or nothing)"
        if state.acknowledgedBeforeFailure > 0 {
            text += "; the \(Format.count(state.acknowledgedBeforeFailure, "event")) before it"
            text += " (up to line \(state.lastAcknowledgedLine)) were appended"
        }
        text += "."
        if let first = state.acknowledgedAfterFailure.first, let last = state.acknowledgedAfterFailure.last {
            let count = state.acknowledgedAfterFailure.reduce(0) { $0 + $1.lineNumbers.count }
            text += "\nevctl: \(Format.count(count, "event")) sent after it were appended too"
            text += " (lines \(first.lineNumbers.first ?? 0)-\(last.lineNumbers.last ?? 0))."
        }
        if failure.error.reason == "too_large", failure.error.index == nil {
            text += "\nevctl: the request was longer than the daemon takes; re-run with a smaller --batch"
            text += " and --skip \(resume)."
        } else {
            text += "\nevctl: fix line \(failure.line), then re-run with --skip \(resume)."
        }
        return text
    }

    /// What a lost connection means: what is acknowledged, how to go on.
    func lostText(_ lost: String, _ state: State) -> String {
        var text = lost + "\nevctl: the daemon acknowledged \(Format.count(state.acknowledgedEvents, "event"))"
        if state.lastAcknowledgedLine > 0 { text += " (up to line \(state.lastAcknowledgedLine))" }
        text += "; those sent after them may or may not be saved."
        text += "\nevctl: to continue, run the same command with --skip \(skipped + state.acknowledgedBeforeFailure)"
        text += " (events with a \"key\" are never appended twice)."
        return text
    }
}
