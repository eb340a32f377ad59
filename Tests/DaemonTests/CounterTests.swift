import Foundation
import TestSupport
import Testing

/// Counters (`incr`) on real daemons: they add up on one node, refuse a local sum outside
/// 64 bits with nothing stored, and concurrent increments on two nodes converge to the sum.
@Suite("Counters")
struct CounterTests {
    func incr(_ entity: String, _ counter: String, _ amount: String) -> String {
        #"{"entity":"\#(entity)","kind":"incr","counter":"\#(counter)","amount":\#(amount)}"#
    }

    func counters(_ daemon: DaemonProcess, _ entity: String) throws -> [String: Any]? {
        try daemon.client().call("get", #"{"entity":"\#(entity)"}"#)["counters"] as? [String: Any]
    }

    @Test("increments add up; a sum outside 64 bits is refused with the batch, nothing stored")
    func addUpAndRefuseOverflow() throws {
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        let client = try daemon.client()
        _ = try client.call(
            "append", eventsParams([incr("job/42", "parts_used", "2"), incr("job/42", "parts_used", "3")]))
        _ = try client.call("append", eventsParams([incr("job/42", "returns", "-1")]))
        #expect(try counters(daemon, "job/42")?["parts_used"] as? Int == 5)
        #expect(try counters(daemon, "job/42")?["returns"] as? Int == -1)
        // No counter, no member: the state is as it was before counters.
        _ = try client.call("append", eventsParams([#"{"entity":"job/7","kind":"status","status":"new"}"#]))
        #expect(try counters(daemon, "job/7") == nil)

        _ = try client.call("append", eventsParams([incr("job/42", "big", "9223372036854775807")]))
        let events = try client.call("status")["events"] as? Int
        let refused = try client.failure(
            "append", eventsParams([incr("job/42", "parts_used", "1"), incr("job/42", "big", "1")]))
        #expect(refused.reason == "invalid_event")
        #expect(refused.message.contains("big") && refused.message.contains("64-bit"), "\(refused.message)")
        #expect(try client.call("status")["events"] as? Int == events)
        #expect(try counters(daemon, "job/42")?["parts_used"] as? Int == 5)
        // Within the bounds from below too.
        _ = try client.call("append", eventsParams([incr("job/42", "big", "-9223372036854775807")]))
        _ = try client.call("append", eventsParams([incr("job/42", "big", "-9223372036854775808")]))
        #expect(try counters(daemon, "job/42")?["big"] as? Int == Int.min)
        #expect(try client.failure("append", eventsParams([incr("job/42", "big", "-1")])).reason == "invalid_event")

        let (code, output) = try runProgram(
            try builtBinary("evctl").path,
            ["--socket", daemon.socketPath, "append", "job/42", "incr", "parts_used", "-2"])
        #expect(code == 0, "\(output)")
        let (_, shown) = try runProgram(
            try builtBinary("evctl").path, ["--socket", daemon.socketPath, "get", "job/42"])
        #expect(shown.contains("counters:") && shown.contains("parts_used: 3"), "\(shown)")
        let (usage, said) = try runProgram(
            try builtBinary("evctl").path,
            ["--socket", daemon.socketPath, "append", "job/42", "incr", "parts_used", "x"])
        #expect(usage != 0 && said.contains("incr takes COUNTER AMOUNT"), "\(said)")
    }

    @Test("concurrent increments on two nodes, past 64 bits together, converge to their sum")
    func concurrentIncrementsConverge() throws {
        let a = try DaemonProcess(arguments: ["--node", "a"])
        let b = try DaemonProcess(arguments: ["--node", "b"])
        defer {
            a.removeFiles()
            b.removeFiles()
        }
        _ = try a.client().call(
            "append", eventsParams([incr("job/1", "n", "9223372036854775807"), incr("job/1", "m", "4")]))
        _ = try b.client().call(
            "append", eventsParams([incr("job/1", "n", "9223372036854775807"), incr("job/1", "m", "-1")]))
        _ = try a.client().call("peers.add", #"{"name":"b","url":"unix://\#(b.socketPath)"}"#)
        let result = try a.client().call("sync", #"{"peer":"b"}"#)
        #expect((result["peers"] as? [[String: Any]])?.first?["error"] is NSNull, "\(result)")
        for daemon in [a, b] {
            // 2 × (2^63 − 1): kept exact, not wrapped or clamped, on both nodes (read as the
            // answer's text: a JSON parser may make a double of it).
            let client = try daemon.client()
            try client.send(#"{"jsonrpc":"2.0","id":1,"method":"get","params":{"entity":"job/1"}}"#)
            let line = try #require(try client.readLine())
            #expect(line.contains(#""counters":{"m":3,"n":18446744073709551614}"#), "\(line)")
        }
        let digests = try [a, b].map { try $0.client().call("status")["digest"] as? String }
        #expect(digests[0] != nil && digests[0] == digests[1])
        // A local append to the counter past 64 bits is refused there.
        #expect(try a.client().failure("append", eventsParams([incr("job/1", "n", "1")])).reason == "invalid_event")
    }
}
