import EventStore
import Projections

/// A range of one origin's ids, `(after, through]`, described by its fingerprint or listed.
package struct IDRange: Equatable, Sendable {
    package enum Content: Equatable, Sendable {
        case fingerprint(Fingerprint)
        case ids([ULID])
    }

    package var origin: ULID
    /// nil: from the origin's first id.
    package var after: ULID?
    package var through: ULID
    package var content: Content
}

/// Where the reconciler reads this node's ids: the event log, or a set in tests.
package protocol IDSource {
    func fingerprint(origin: ULID, after: ULID?, through: ULID?) throws(EventStoreError) -> Fingerprint
    func ids(origin: ULID, after: ULID?, through: ULID?) throws(EventStoreError) -> [ULID]
    /// The ids among `ids` this node holds.
    func held(_ ids: [ULID]) throws(EventStoreError) -> [ULID]
}

extension EventLog: IDSource {}

/// Range-based set reconciliation (the method of negentropy), per origin, for the
/// holdings version vectors cannot see: a node restored from an old backup, or one that
/// holds a set that is not a prefix of an origin's events.
///
/// Both sides compare fingerprints of the range they both cover (up to the smaller of
/// their vector entries). On a mismatch the side that finds it splits the range into
/// `fanOut` parts of its own ids and sends their fingerprints; a side holding at most
/// `idListLimit` ids of a mismatched range sends them outright, and the other side then
/// knows exactly which ids each lacks. Every round narrows the ranges sixteenfold, so a
/// few differences among a million ids take a handful of round trips.
package struct Reconciler {
    package static let fanOut = 16
    package static let idListLimit = 64

    package let source: any IDSource
    /// Ids this node holds that the peer lacks (found so far), beyond its version vector:
    /// at most `maxIDs` of them.
    private(set) var theyLack: Set<ULID> = []
    /// The most ids `theyLack` keeps. More are left for a later session, which finds them
    /// again once the peer holds the ones kept: a peer cannot make a session hold
    /// unbounded memory, and two honest nodes far apart still converge, session by session.
    package let maxIDs: Int
    /// Whether ids beyond `maxIDs` were found and left out.
    private(set) var overflowed = false

    /// Roughly how many bytes of new ranges (splits and id lists) one reply may hold.
    /// Mismatched ranges beyond it go back unsplit, with this side's fingerprint, for the
    /// next round: a reply stays well under `Messages.maxBytes` however far two nodes
    /// have drifted apart, and every round still settles `replyBudget` worth of ranges.
    package let replyBudget: Int

    package init(source: any IDSource, replyBudget: Int = 2 << 20, maxIDs: Int = .max) {
        self.source = source
        self.replyBudget = replyBudget
        self.maxIDs = maxIDs
    }

    private mutating func keep(_ ids: some Sequence<ULID>) {
        for id in ids {
            guard theyLack.count < maxIDs else {
                if !theyLack.contains(id) { overflowed = true }
                continue
            }
            theyLack.insert(id)
        }
    }

    /// Wire size of a range, near enough: the JSON of its bounds and fingerprint or ids.
    package static func estimatedBytes(_ range: IDRange) -> Int {
        switch range.content {
        case .fingerprint: 150
        case .ids(let ids): 110 + 29 * ids.count
        }
    }

    /// The opening ranges: for each origin both hold, the fingerprint of what both
    /// vectors cover.
    package func opening(mine: [ULID: ULID], theirs: [ULID: ULID]) throws(EventStoreError) -> [IDRange] {
        var ranges: [IDRange] = []
        for (origin, last) in mine.sorted(by: { $0.key < $1.key }) {
            guard let theirLast = theirs[origin] else { continue }
            let through = min(last, theirLast)
            ranges.append(
                IDRange(
                    origin: origin, after: nil, through: through,
                    content: .fingerprint(try source.fingerprint(origin: origin, after: nil, through: through))))
        }
        return ranges
    }

    /// Answers the peer's ranges: nothing for those that match, smaller ranges or id lists
    /// for those that do not; `needs` lists ids the peer listed that this node lacks.
    ///
    /// Past `deadline` it stops where it is and returns what it has: the caller ends the
    /// session, so a frame of many ranges over a large store cannot keep it busy for long.
    package mutating func respond(to incoming: [IDRange], until deadline: ContinuousClock.Instant? = nil)
        throws(EventStoreError) -> (ranges: [IDRange], needs: [ULID])
    {
        var reply: [IDRange] = []
        var needs: [ULID] = []
        var spent = 0
        for range in incoming {
            if let deadline, ContinuousClock.now >= deadline { break }
            switch range.content {
            case .fingerprint(let theirs):
                let mine = try source.fingerprint(origin: range.origin, after: range.after, through: range.through)
                if mine == theirs { continue }
                if theirs.count == 0 {
                    // They hold nothing here: all of ours is theirs to take.
                    keep(try source.ids(origin: range.origin, after: range.after, through: range.through))
                    continue
                }
                if spent >= replyBudget {
                    // Settled in a later round: the peer compares and splits it itself.
                    reply.append(
                        IDRange(
                            origin: range.origin, after: range.after, through: range.through,
                            content: .fingerprint(mine)))
                    continue
                }
                let ids = try source.ids(origin: range.origin, after: range.after, through: range.through)
                let answer =
                    mine.count <= Reconciler.idListLimit
                    ? [IDRange(origin: range.origin, after: range.after, through: range.through, content: .ids(ids))]
                    : Reconciler.split(range, ids: ids)
                spent += answer.reduce(0) { $0 + Reconciler.estimatedBytes($1) }
                reply.append(contentsOf: answer)
            case .ids(let theirs):
                let mine = try source.ids(origin: range.origin, after: range.after, through: range.through)
                let theirSet = Set(theirs)
                let mineSet = Set(mine)
                keep(mine.filter { !theirSet.contains($0) })
                let missing = theirs.filter { !mineSet.contains($0) }
                needs.append(contentsOf: missing)
            }
        }
        return (reply, needs)
    }

    /// The peer's list of ids it lacks and this node holds. Ids this node does not hold
    /// are ignored: an honest peer only names ids this node listed, and keeping the others
    /// would let a peer grow the set without bound.
    package mutating func take(needs: [ULID]) throws(EventStoreError) {
        keep(try source.held(needs))
    }

    /// `fanOut` consecutive parts of `range`, each with the fingerprint of its share of `ids`.
    package static func split(_ range: IDRange, ids: [ULID]) -> [IDRange] {
        let parts = min(fanOut, ids.count)
        var out: [IDRange] = []
        var lower = range.after
        var begin = 0
        for part in 0..<parts {
            let end = ids.count * (part + 1) / parts
            let through = part == parts - 1 ? range.through : ids[end - 1]
            out.append(
                IDRange(
                    origin: range.origin, after: lower, through: through,
                    content: .fingerprint(Fingerprint(ids[begin..<end]))))
            lower = through
            begin = end
        }
        return out
    }
}
