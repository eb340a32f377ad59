import FoundationEssentials
import Synchronization
import Wire

/// What became of an append handed to a type's authority.
package enum ForwardOutcome: Sendable, Equatable {
    /// The authority answered: its JSON-RPC response line, for the client as it is (its
    /// result, ids included, or its refusal).
    case answered([UInt8])
    /// No peer that is the authority took it within `sync_timeout_s`; nothing was handed
    /// on. Why, in a sentence.
    case unreachable(String)
    /// The append left for the authority and no answer came back: it may be stored there.
    case unanswered(String)
}

extension SyncService {
    /// Hands an `append` (its JSON-RPC request line) to the node called `authority` over a
    /// peer link, in a session of its own that syncs nothing, and waits for its answer for
    /// `sync_timeout_s` at most.
    ///
    /// The peers tried are the one named `authority`, then those whose hello gave that name;
    /// one that does not speak `forward`, calls itself otherwise or cannot be reached is
    /// passed over. Like a `sync` call, the wait holds the caller's request thread, so these
    /// and `sync` calls together hold at most half the request threads: past that the
    /// append is unreachable at once.
    package func forward(_ request: [UInt8], to authority: String) -> ForwardOutcome {
        let settings = settings.withLock { $0 }
        let callers = max(1, settings.requestThreads / 2)
        guard syncCalls.add(1, ordering: .relaxed).newValue <= callers else {
            syncCalls.subtract(1, ordering: .relaxed)
            return .unreachable(
                "\(callers) sync calls and appends handed to an authority are waiting already, the most that may at once (half of request_threads)"
            )
        }
        defer { syncCalls.subtract(1, ordering: .relaxed) }
        let named = helloNames.withLock { $0 }
        let all = peers()
        let candidates =
            all.filter { $0.name == authority } + all.filter { $0.name != authority && named[$0.name] == authority }
        guard !candidates.isEmpty else {
            return .unreachable(
                "this node has no peer that is \(authority) (`evctl peers add \(authority) URL` adds one)")
        }
        let deadline = ContinuousClock.now + .seconds(settings.timeout)
        var reasons: [String] = []
        for peer in candidates {
            let left = deadline - ContinuousClock.now
            let seconds = Double(left.components.seconds) + Double(left.components.attoseconds) / 1e18
            guard seconds > 0.05, !stopping.load(ordering: .relaxed) else { break }
            switch forward(request, to: authority, via: peer, seconds: seconds, settings: settings) {
            case .success(let answer):
                logger.info("handed an append to \(authority) through peer \(peer.name)")
                return .answered(answer)
            case .failure(let failure) where failure.sent:
                logger.warning(
                    "an append handed to \(authority) through peer \(peer.name) got no answer: \(failure.error)")
                return .unanswered("peer \(peer.name): \(failure.error.message)")
            case .failure(let failure):
                logger.info("could not hand an append to \(authority) through peer \(peer.name): \(failure.error)")
                reasons.append("peer \(peer.name): \(failure.error.message)")
            }
        }
        if reasons.isEmpty { reasons.append("sync_timeout_s passed") }
        return .unreachable(reasons.joined(separator: "; "))
    }

    private struct ForwardFailure: Error {
        var error: SyncError
        /// The request had left: the append may be stored at the peer.
        var sent: Bool
    }

    private func forward(
        _ request: [UInt8], to authority: String, via peer: Peer, seconds: Double, settings: Settings
    ) -> Result<[UInt8], ForwardFailure> {
        let link: PeerLink
        do throws(SyncError) {
            link = try PeerLink.open(try PeerURL(peer.url), ssh: settings.sshCommand, timeout: seconds)
        } catch {
            return .failure(ForwardFailure(error: error, sent: false))
        }
        outgoing.hold(link.connection)
        defer { outgoing.forget(link.connection) }
        var limits = settings.limits
        limits.sessionSeconds = seconds
        let session = SyncSession(
            node: node, channel: FrameChannel(connection: link.connection, timeoutSeconds: seconds),
            peerLabel: peer.name, limits: limits)
        var answer: [UInt8] = []
        var failure: SyncError?
        do {
            answer = try session.forward(request, to: authority)
        } catch {
            failure = error
        }
        if let error = link.close(after: failure, timeout: 1) {
            return .failure(ForwardFailure(error: error, sent: session.forwardSent))
        }
        return .success(answer)
    }
}
