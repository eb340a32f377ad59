import Foundation

/// A FIFO that a consumer thread blocks on; producers never block.
final class BlockingQueue<Element: Sendable>: @unchecked Sendable {
    /// Protects `items` and `closed`, and wakes the consumer.
    private let condition = NSCondition()
    private var items: [Element] = []
    private var closed = false

    /// Adds an element; false (and nothing added) once the queue is closed.
    @discardableResult
    func push(_ element: Element) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        guard !closed else { return false }
        items.append(element)
        condition.signal()
        return true
    }

    /// Waits for elements and takes every one waiting; nil once closed and empty. Once
    /// something waits, waits up to `patience` seconds more until `isComplete` says what
    /// waits is enough (how group commit gathers a group).
    func popAll(patience: Double, until isComplete: ([Element]) -> Bool) -> [Element]? {
        condition.lock()
        defer { condition.unlock() }
        while items.isEmpty && !closed { condition.wait() }
        if !closed && !isComplete(items) {
            let deadline = Date(timeIntervalSinceNow: patience)
            while !closed && !isComplete(items) {
                if !condition.wait(until: deadline) { break }
            }
        }
        if items.isEmpty { return nil }
        let taken = items
        items.removeAll(keepingCapacity: true)
        return taken
    }

    /// Refuses further pushes; the consumer still gets what is queued.
    func close() {
        condition.lock()
        closed = true
        condition.broadcast()
        condition.unlock()
    }
}
