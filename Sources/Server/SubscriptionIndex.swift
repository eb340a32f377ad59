import Projections

/// What a watch asks for, as the index files it: one entity, the entities of one type,
/// or (neither) every event.
package protocol WatchFiltering: AnyObject {
    var entity: EntityKey? { get }
    /// `TYPE/`, the prefix of the entities of the type watched.
    var typePrefix: [UInt8]? { get }
}

/// The subscriptions filed by what they watch, so that an event is offered only to those
/// that can want it: the watchers of its entity, of its type, and the unfiltered ones.
///
/// Publishing runs under the commit lock; a scan of every subscription there made each
/// append as slow as the number of watches anyone held. A watch of an entity and a type
/// is filed under the entity (the narrower); the caller still checks `wants`, which is
/// what decides.
package struct SubscriptionIndex<Member: WatchFiltering> {
    /// The watches with no filter.
    private var unfiltered: [ObjectIdentifier: Member] = [:]
    private var byEntity: [EntityKey: [ObjectIdentifier: Member]] = [:]
    /// Keyed by TYPE, without the `/`.
    private var byType: [[UInt8]: [ObjectIdentifier: Member]] = [:]
    private(set) var count = 0

    package var isEmpty: Bool { count == 0 }

    /// How many keyed lists are held: zero once every member is removed (none is left
    /// behind empty).
    package var bucketCount: Int { byEntity.count + byType.count }

    /// Adds `member`; adding one already held changes nothing.
    package mutating func insert(_ member: Member) {
        let key = ObjectIdentifier(member)
        let added: Bool
        if let entity = member.entity {
            added = byEntity[entity, default: [:]].updateValue(member, forKey: key) == nil
        } else if let prefix = member.typePrefix {
            added = byType[Array(prefix.dropLast()), default: [:]].updateValue(member, forKey: key) == nil
        } else {
            added = unfiltered.updateValue(member, forKey: key) == nil
        }
        if added { count += 1 }
    }

    /// Removes `member`; removing one not held changes nothing.
    package mutating func remove(_ member: Member) {
        let key = ObjectIdentifier(member)
        let removed: Bool
        if let entity = member.entity {
            removed = byEntity[entity]?.removeValue(forKey: key) != nil
            if byEntity[entity]?.isEmpty == true { byEntity[entity] = nil }
        } else if let prefix = member.typePrefix {
            let type = Array(prefix.dropLast())
            removed = byType[type]?.removeValue(forKey: key) != nil
            if byType[type]?.isEmpty == true { byType[type] = nil }
        } else {
            removed = unfiltered.removeValue(forKey: key) != nil
        }
        if removed { count -= 1 }
    }

    /// The members that may want an event of `entity`: a superset of those that do,
    /// and no larger than the three lists it names.
    package func candidates(for entity: EntityKey) -> [Member] {
        var out: [Member] = []
        forEachCandidate(for: entity) { out.append($0) }
        return out
    }

    /// Calls `body` with each member `candidates(for:)` lists, without building the list:
    /// publishing runs this for every event a commit stores. A list that is empty is not
    /// looked up (nor the entity's type made for it).
    package func forEachCandidate(for entity: EntityKey, _ body: (Member) -> Void) {
        for member in unfiltered.values { body(member) }
        forEachFiltered(for: entity, body)
    }

    /// The members with no filter: every event is theirs.
    package var unfilteredMembers: Dictionary<ObjectIdentifier, Member>.Values { unfiltered.values }

    /// Whether any member watches one entity or one type.
    package var hasFiltered: Bool { !byEntity.isEmpty || !byType.isEmpty }

    /// Calls `body` with each member of `candidates(for:)` that has a filter.
    package func forEachFiltered(for entity: EntityKey, _ body: (Member) -> Void) {
        if !byEntity.isEmpty, let members = byEntity[entity] {
            for member in members.values { body(member) }
        }
        if !byType.isEmpty, let members = byType[Array(entity.bytes[..<entity.typeLength])] {
            for member in members.values { body(member) }
        }
    }
}
