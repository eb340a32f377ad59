/// Values by key, bounded in number and in a cost of each (bytes, say): past either bound,
/// the least recently used go first. Not synchronized; its owner holds it in a `Mutex`.
struct LeastRecentlyUsed<Key: Hashable, Value> {
    let maxEntries: Int
    let maxCost: Int
    private var entries: [Key: (value: Value, cost: Int)] = [:]
    /// Keys, least recently used first.
    private var order: [Key] = []
    private(set) var cost = 0

    init(maxEntries: Int, maxCost: Int = .max) {
        self.maxEntries = maxEntries
        self.maxCost = maxCost
    }

    var count: Int { order.count }

    /// The value of `key` when `isValid` says it is still good, which makes it the most
    /// recently used; nil otherwise (an entry that is not valid stays, for its owner to
    /// replace).
    mutating func value(for key: Key, where isValid: (Value) -> Bool = { _ in true }) -> Value? {
        guard let entry = entries[key], isValid(entry.value) else { return nil }
        if let index = order.lastIndex(of: key), index != order.count - 1 {
            order.remove(at: index)
            order.append(key)
        }
        return entry.value
    }

    /// The value of `key` without making it recently used.
    func peek(_ key: Key) -> Value? { entries[key]?.value }

    /// Keeps `value` under `key` as the most recently used, replacing what was there, and
    /// drops the least recently used past the bounds. A value costing more than `maxCost`
    /// alone is not kept (nor is what was under its key).
    mutating func set(_ value: Value, for key: Key, cost: Int = 0) {
        remove(key)
        guard cost <= maxCost else { return }
        entries[key] = (value, cost)
        order.append(key)
        self.cost += cost
        while self.cost > maxCost || order.count > maxEntries { remove(order[0]) }
    }

    mutating func remove(_ key: Key) {
        guard let entry = entries.removeValue(forKey: key) else { return }
        cost -= entry.cost
        if let index = order.firstIndex(of: key) { order.remove(at: index) }
    }

    mutating func removeAll() {
        entries = [:]
        order = []
        cost = 0
    }
}
