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
