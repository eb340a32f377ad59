import Testing

@testable import EventStore

@Suite("Least recently used")
struct LeastRecentlyUsedTests {
    @Test("past the entries it keeps, the least recently used go first; a use makes one the most recent")
    func entriesBound() {
        var cache = LeastRecentlyUsed<Int, String>(maxEntries: 3)
        for key in 1...3 { cache.set("v\(key)", for: key) }
        #expect(cache.value(for: 1) == "v1")
        cache.set("v4", for: 4)
        #expect(cache.peek(2) == nil, "2 was the least recently used")
        #expect(cache.peek(1) == "v1" && cache.peek(3) == "v3" && cache.peek(4) == "v4")
        #expect(cache.count == 3)
        // Set again under a key: replaced, not counted twice.
        cache.set("w3", for: 3)
        #expect(cache.count == 3 && cache.peek(3) == "w3")
    }

    @Test("past the cost it keeps, the least recently used go first; one costing more than all is not kept")
    func costBound() {
        var cache = LeastRecentlyUsed<Int, Int>(maxEntries: 100, maxCost: 10)
        cache.set(1, for: 1, cost: 4)
        cache.set(2, for: 2, cost: 4)
        cache.set(3, for: 3, cost: 4)
        #expect(cache.peek(1) == nil && cache.cost == 8)
        cache.set(9, for: 2, cost: 11)
        #expect(cache.peek(2) == nil && cache.cost == 4, "too costly alone: neither it nor the old value")
        cache.remove(3)
        #expect(cache.cost == 0 && cache.count == 0)
    }

    @Test("a value that is no longer valid is not given, and stays for its owner to replace")
    func validity() {
        var cache = LeastRecentlyUsed<String, Int>(maxEntries: 2)
        cache.set(7, for: "a")
        #expect(cache.value(for: "a") { $0 == 8 } == nil)
        #expect(cache.value(for: "a") { $0 == 7 } == 7)
        cache.removeAll()
        #expect(cache.count == 0 && cache.peek("a") == nil)
    }
}
