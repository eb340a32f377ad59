import Foundation
import Testing
import UnixSocket

@Suite("startThread")
struct ThreadsTests {
    @Test("a thread that starts runs its body; one the system cannot make is reported, and its body never runs")
    func checkedStart() {
        let ran = DispatchSemaphore(value: 0)
        #expect(startThread(name: "evstore-test-thread-name") { ran.signal() } == nil)
        #expect(ran.wait(timeout: .now() + 10) == .success)
        // A stack larger than the address space: pthread_create fails (EAGAIN or ENOMEM).
        let never = DispatchSemaphore(value: 0)
        let failure = startThread(name: "too-big", stackBytes: 1 << 60) { never.signal() }
        #expect(failure?.operation == "pthread_create")
        #expect(failure.map { $0.code == EAGAIN || $0.code == ENOMEM } == true, "\(String(describing: failure))")
        #expect(never.wait(timeout: .now() + 0.2) == .timedOut)
    }
}

/// The daemon's writer, outbox and outgoing sessions wait on these in place of
/// Foundation's NSCondition.
@Suite("Condition")
struct ConditionTests {
    @Test("a timed wait nobody signals times out; a broadcast wakes a waiter that sees the change")
    func timedWaitAndBroadcast() {
        let condition = Condition()
        condition.lock()
        let started = ContinuousClock.now
        #expect(condition.wait(seconds: 0.05) == false)
        #expect(condition.wait(until: ContinuousClock.now + .milliseconds(50)) == false)
        #expect(ContinuousClock.now - started >= .milliseconds(90))
        #expect(condition.wait(seconds: 0) == false)
        condition.unlock()

        // The state is guarded by the condition's lock; the waiter loops until it changes.
        final class Flag: @unchecked Sendable { var set = false }
        let flag = Flag()
        let woke = DispatchSemaphore(value: 0)
        #expect(
            startThread(name: "condition-test") {
                condition.lock()
                while !flag.set {
                    if !condition.wait(seconds: 30) { break }
                }
                let seen = flag.set
                condition.unlock()
                if seen { woke.signal() }
            } == nil)
        sleepThread(seconds: 0.05)
        condition.lock()
        flag.set = true
        condition.broadcast()
        condition.unlock()
        #expect(woke.wait(timeout: .now() + 10) == .success)
    }

    @Test("sleepThread sleeps at least as long as asked")
    func sleeps() {
        let started = ContinuousClock.now
        sleepThread(seconds: 0.03)
        #expect(ContinuousClock.now - started >= .milliseconds(30))
    }
}
