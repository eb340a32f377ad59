/// Values by key, bounded in number and in a cost of each (bytes, say): past either bound,
/// the least recently used go first. Not synchronized; its owner holds it in a `Mutex`.
///
/// The entries are nodes of a list in order of use, linked by their places in `nodes`, so a
/// lookup, a use, a set and a removal each cost a hash lookup and a few stores, however many
/// entries it holds (a block cache holds thousands).
struct LeastRecentlyUsed<Key: Hashable, Value> {
    let maxEntries: Int
    /// Changes with `setMaxCost`, which drops what no longer fits.
    private(set) var maxCost: Int
    private(set) var cost = 0

    private struct Node {
        var key: Key
        var value: Value?
        var cost: Int
        /// The places of the nodes used just before and just after it; `none` at either end.
        var older: Int
        var newer: Int
    }

    private static var none: Int { -1 }

    /// The place of each key's node in `nodes`.
    private var places: [Key: Int] = [:]
    private var nodes: [Node] = []
    /// Places in `nodes` that removals left free, taken before `nodes` grows.
    private var free: [Int] = []
    private var oldest = LeastRecentlyUsed.none
    private var newest = LeastRecentlyUsed.none

    init(maxEntries: Int, maxCost: Int = .max) {
        self.maxEntries = maxEntries
        self.maxCost = maxCost
    }

    var count: Int { places.count }

    /// The value of `key` when `isValid` says it is still good, which makes it the most
    /// recently used; nil otherwise (an entry that is not valid stays, for its owner to
    /// replace).
    mutating func value(for key: Key, where isValid: (Value) -> Bool = { _ in true }) -> Value? {
        guard let place = places[key], let value = nodes[place].value, isValid(value) else { return nil }
        if place != newest {
            unlink(place)
            linkNewest(place)
        }
        return value
    }

    /// The keys, least recently used first.
    var keysByUse: [Key] {
        var keys: [Key] = []
        keys.reserveCapacity(places.count)
        var place = oldest
        while place != Self.none {
            keys.append(nodes[place].key)
            place = nodes[place].newer
        }
        return keys
    }

    /// The value of `key` without making it recently used.
    func peek(_ key: Key) -> Value? { places[key].flatMap { nodes[$0].value } }

    /// Keeps `value` under `key` as the most recently used, replacing what was there, and
    /// drops the least recently used past the bounds. A value costing more than `maxCost`
    /// alone is not kept (nor is what was under its key).
    mutating func set(_ value: Value, for key: Key, cost: Int = 0) {
        remove(key)
        guard cost <= maxCost, maxEntries > 0 else { return }
        let node = Node(key: key, value: value, cost: cost, older: Self.none, newer: Self.none)
        let place: Int
        if let reused = free.popLast() {
            place = reused
            nodes[place] = node
        } else {
            place = nodes.count
            nodes.append(node)
        }
        places[key] = place
        linkNewest(place)
        self.cost += cost
        dropPastBounds()
    }

    mutating func remove(_ key: Key) {
        guard let place = places.removeValue(forKey: key) else { return }
        unlink(place)
        cost -= nodes[place].cost
        nodes[place].value = nil
        nodes[place].cost = 0
        free.append(place)
    }

    mutating func removeAll() {
        places = [:]
        nodes = []
        free = []
        oldest = Self.none
        newest = Self.none
        cost = 0
    }

    /// Bounds the entries' cost to `maxCost` from now on, dropping the least recently used
    /// until they fit.
    mutating func setMaxCost(_ maxCost: Int) {
        self.maxCost = maxCost
        dropPastBounds()
    }

    private mutating func dropPastBounds() {
        while oldest != Self.none, cost > maxCost || places.count > maxEntries {
            remove(nodes[oldest].key)
        }
    }

    private mutating func unlink(_ place: Int) {
        let (older, newer) = (nodes[place].older, nodes[place].newer)
        if older == Self.none { oldest = newer } else { nodes[older].newer = newer }
        if newer == Self.none { newest = older } else { nodes[newer].older = older }
    }

    private mutating func linkNewest(_ place: Int) {
        nodes[place].older = newest
        nodes[place].newer = Self.none
        if newest == Self.none { oldest = place } else { nodes[newest].newer = place }
        newest = place
    }
}
