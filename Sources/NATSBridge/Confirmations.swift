import JetStream
import Synchronization

/// The publishes of one session, in seq order, and how far JetStream has confirmed them
/// without a gap: what the bridge may acknowledge to the daemon.
///
/// Acknowledgements arrive out of order (from libnats' threads); `confirmed` moves only
/// over a run of publishes that are all acknowledged, so an event JetStream refused or
/// never answered for holds it back, and a restart publishes again from there.
final class Confirmations: Sendable {
    private struct State {
        /// The seqs published and not yet confirmed, oldest first, from `head` on.
        var seqs: [UInt64] = []
        var acknowledged: [Bool] = []
        var head = 0
        var confirmed: UInt64
        /// The first failure reported; the session ends on it.
        var failure: NATSError?
        var published = 0
        var duplicates = 0
    }

    private let state: Mutex<State>
    /// Called once, on the first failure (from a libnats thread): ends the session's reads.
    private let onFailure: @Sendable (NATSError) -> Void

    /// `confirmed`: the seq every event up to which is known to be in the stream.
    init(confirmed: UInt64, onFailure: @escaping @Sendable (NATSError) -> Void) {
        state = Mutex(State(confirmed: confirmed))
        self.onFailure = onFailure
    }

    /// A publish of `seq` is on its way (seqs come in increasing order).
    func published(_ seq: UInt64) {
        state.withLock { state in
            assert(state.seqs.last.map { $0 < seq } ?? true, "seqs are published in order")
            state.seqs.append(seq)
            state.acknowledged.append(false)
            state.published += 1
        }
    }

    /// JetStream's answer for the publish of `seq`.
    func complete(_ result: PublishResult) {
        let failed: NATSError? = state.withLock { state in
            switch result.outcome {
            case .success(let ack):
                if ack.duplicate { state.duplicates += 1 }
                // Binary search among the unconfirmed: the seqs are sorted.
                var low = state.head
                var high = state.seqs.count
                while low < high {
                    let middle = (low + high) / 2
                    if state.seqs[middle] < result.tag { low = middle + 1 } else { high = middle }
                }
                guard low < state.seqs.count, state.seqs[low] == result.tag else { return nil }
                state.acknowledged[low] = true
                while state.head < state.seqs.count, state.acknowledged[state.head] {
                    state.confirmed = state.seqs[state.head]
                    state.head += 1
                }
                // Drop what is confirmed once it is most of the arrays.
                if state.head > 4096, state.head * 2 > state.seqs.count {
                    state.seqs.removeFirst(state.head)
                    state.acknowledged.removeFirst(state.head)
                    state.head = 0
                }
                return nil
            case .failure(let error):
                guard state.failure == nil else { return nil }
                state.failure = error
                return error
            }
        }
        if let failed { onFailure(failed) }
    }

    /// The seq every event up to which JetStream has stored (or already held).
    var confirmed: UInt64 { state.withLock { $0.confirmed } }

    /// The first failure of the session, if any.
    var failure: NATSError? { state.withLock { $0.failure } }

    /// Publishes sent and the ones JetStream reported as duplicates, this session.
    var counts: (published: Int, duplicates: Int) { state.withLock { ($0.published, $0.duplicates) } }
}
