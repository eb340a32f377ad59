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

    @Test("a lowered cost bound drops the least recently used until the rest fit, and later sets keep to it")
    func loweredCostBound() {
        var cache = LeastRecentlyUsed<Int, Int>(maxEntries: 100, maxCost: 100)
        for key in 1...5 { cache.set(key, for: key, cost: 10) }
        _ = cache.value(for: 1)
        cache.setMaxCost(25)
        #expect(cache.count == 2 && cache.cost == 20)
        #expect(cache.peek(1) == 1 && cache.peek(5) == 5, "1 was used last, 5 set last")
        cache.set(6, for: 6, cost: 10)
        #expect(cache.peek(5) == nil && cache.peek(1) == 1 && cache.peek(6) == 6, "5 was the least recently used")
        cache.setMaxCost(0)
        #expect(cache.count == 0 && cache.cost == 0)
        cache.set(7, for: 7, cost: 1)
        #expect(cache.count == 0, "nothing costing more than 0 is kept")
        cache.set(8, for: 8, cost: 0)
        #expect(cache.peek(8) == 8)
    }

    @Test(
        "random sets, uses and removals leave the same entries, in the same order of use, as a plain list of them",
        arguments: [1, 2, 3, 4])
    func matchesAList(seed: UInt64) {
        var random = SplitMix64(seed: seed)
        let maxEntries = 8
        let maxCost = 40
        var cache = LeastRecentlyUsed<Int, Int>(maxEntries: maxEntries, maxCost: maxCost)
        // The model: (key, value, cost), least recently used first.
        var model: [(key: Int, value: Int, cost: Int)] = []
        for step in 0..<5_000 {
            let key = Int(random.next() % 16)
            switch random.next() % 10 {
            case 0..<4:
                let cost = Int(random.next() % 12)
                cache.set(step, for: key, cost: cost)
                model.removeAll { $0.key == key }
                if cost <= maxCost {
                    model.append((key, step, cost))
                    while model.count > maxEntries || model.reduce(0, { $0 + $1.cost }) > maxCost {
                        model.removeFirst()
                    }
                }
            case 4..<8:
                let found = cache.value(for: key)
                if let index = model.firstIndex(where: { $0.key == key }) {
                    #expect(found == model[index].value, "step \(step)")
                    model.append(model.remove(at: index))
                } else {
                    #expect(found == nil, "step \(step)")
                }
            case 8:
                cache.remove(key)
                model.removeAll { $0.key == key }
            default:
                #expect(cache.peek(key) == model.first { $0.key == key }?.value, "step \(step)")
            }
            #expect(cache.count == model.count && cache.cost == model.reduce(0) { $0 + $1.cost }, "step \(step)")
            #expect(cache.keysByUse == model.map(\.key), "step \(step)")
        }
    }
}
