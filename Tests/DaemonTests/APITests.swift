import Foundation
import Synchronization
import Testing
import UnixSocket

/// Every method of the socket API against a real daemon.
@Suite("Socket API")
struct APITests {
    @Test("append, get, list, log, status, conflicts, dead_letters, rebuild, backup")
    func everyMethod() throws {
        let daemon = try DaemonProcess(arguments: ["--node", "van-7"])
        defer { daemon.removeFiles() }
        let client = try daemon.client()

        let appended = try client.call(
            "append",
            eventsParams([
                #"{"entity":"job/1","kind":"edit","fields":{"address":"12 Main St","floor":3}}"#,
                #"{"entity":"job/1","kind":"status","status":"assigned","key":"k-1"}"#,
                #"{"entity":"job/2","kind":"status","status":"on_site"}"#,
                #"{"entity":"site/9","kind":"add","set":"parts","element":"valve-3"}"#,
            ]))
        let ids = try #require(appended["ids"] as? [String])
        #expect(ids.count == 4 && Set(ids).count == 4)
        let versions = try #require(appended["versions"] as? [String: String])
        #expect(versions == ["job/1": ids[1], "job/2": ids[2], "site/9": ids[3]])
        #expect(appended["appended"] as? Int == 4)

        // An idempotency key seen before returns the first id and writes nothing.
        let again = try client.call(
            "append", eventsParams([#"{"entity":"job/1","kind":"status","status":"x","key":"k-1"}"#]))
        #expect(again["ids"] as? [String] == [ids[1]])
        #expect(again["appended"] as? Int == 0)

        let state = try client.call("get", #"{"entity":"job/1"}"#)
        #expect(state["entity"] as? String == "job/1")
        #expect(state["version"] as? String == ids[1])
        #expect((state["fields"] as? [String: Any])?["address"] as? String == "12 Main St")
        #expect((state["status"] as? [String: Any])?["current"] as? String == "assigned")
        #expect(try client.failure("get", #"{"entity":"job/404"}"#).reason == "not_found")
        #expect(try client.failure("get", #"{"entity":"Job/1"}"#).code == -32602)
        #expect(try client.failure("get", #"{}"#).code == -32602)
        #expect(try client.failure("get", #"{"entity":"job/1","extra":1}"#).message.contains("unknown parameter"))

        let all = try client.call("list")
        let listed = try #require(all["entities"] as? [[String: Any]])
        #expect(listed.compactMap { $0["entity"] as? String } == ["job/1", "job/2", "site/9"])
        #expect(all["next"] is NSNull)
        let onSite = try client.call("list", #"{"type":"job","status":"on_site"}"#)
        #expect((onSite["entities"] as? [[String: Any]])?.compactMap { $0["entity"] as? String } == ["job/2"])
        let paged = try client.call("list", #"{"limit":2}"#)
        #expect(paged["next"] as? String == "job/2")
        let rest = try client.call("list", #"{"limit":2,"after":"job/2"}"#)
        #expect((rest["entities"] as? [[String: Any]])?.compactMap { $0["entity"] as? String } == ["site/9"])

        let log = try client.call("log")
        let events = try #require(log["events"] as? [[String: Any]])
        #expect(events.compactMap { $0["id"] as? String } == ids)
        #expect(events.compactMap { $0["seq"] as? Int } == [1, 2, 3, 4])
        #expect(log["next"] is NSNull && log["head"] as? Int == 4)
        #expect(events[1]["key"] as? String == "k-1")
        let status = try client.call("status")
        let node = try #require(status["node"] as? [String: Any])
        #expect(node["name"] as? String == "van-7")
        let nodeID = try #require(node["id"] as? String)
        #expect(events.allSatisfy { $0["origin"] as? String == nodeID })
        let byEntity = try client.call("log", #"{"entity":"job/1"}"#)
        #expect((byEntity["events"] as? [[String: Any]])?.count == 2)
        let byOrigin = try client.call("log", #"{"origin":"\#(nodeID)","after":1,"limit":2}"#)
        #expect((byOrigin["events"] as? [[String: Any]])?.compactMap { $0["id"] as? String } == [ids[1], ids[2]])
        #expect(byOrigin["next"] as? Int == 3 && byOrigin["head"] as? Int == 4)
        let byType = try client.call("log", #"{"type":"site"}"#)
        #expect(
            (byType["events"] as? [[String: Any]])?.allSatisfy { ($0["entity"] as? String)?.hasPrefix("site/") == true }
                == true)
        #expect(try client.failure("log", #"{"after":"not-a-seq"}"#).code == -32602)
        // An event id, what 0.4 took, is refused with what to pass instead.
        let byID = try client.failure("log", #"{"after":"\#(ids[0])"}"#)
        #expect(byID.code == -32602 && byID.message.contains("takes a seq"), "\(byID)")
        // In id order, as export reads it: no seq, ids as cursors.
        let inIDOrder = try client.call("log", #"{"order":"id","after":"\#(ids[0])","limit":2}"#)
        let idOrdered = try #require(inIDOrder["events"] as? [[String: Any]])
        #expect(
            idOrdered.compactMap { $0["id"] as? String } == [ids[1], ids[2]]
                && idOrdered.allSatisfy { $0["seq"] == nil })
        #expect(inIDOrder["next"] as? String == ids[2])

        #expect(status["events"] as? Int == 4)
        #expect(status["entities"] as? Int == 3)
        #expect((status["bytes"] as? Int ?? 0) > 0)
        #expect((status["digest"] as? String)?.count == 32)
        let attention = try #require(status["needs_attention"] as? [String: Any])
        #expect(attention["conflicts"] as? Int == 0 && attention["dead_letters"] as? Int == 0)
        #expect((status["clock"] as? [String: Any])?["max_skew_ms"] as? Int == 3_600_000)

        let conflicts = try client.call("conflicts")
        #expect((conflicts["entities"] as? [Any])?.isEmpty == true)
        let letters = try client.call("dead_letters")
        #expect((letters["dead_letters"] as? [Any])?.isEmpty == true)

        let rebuild = try client.call("rebuild", #"{"verify":true}"#)
        #expect(rebuild["events"] as? Int == 4 && rebuild["entities"] as? Int == 3)
        #expect((rebuild["mismatched"] as? [Any])?.isEmpty == true && rebuild["digest_mismatch"] as? Bool == false)

        let backupPath = daemon.root + "/backup"
        let backup = try client.call("backup", #"{"path":"\#(backupPath)"}"#)
        #expect(backup["path"] as? String == backupPath && (backup["bytes"] as? Int ?? 0) > 0)
        #expect(try client.failure("backup", #"{"path":"\#(backupPath)"}"#).reason == "conflict")
        #expect(try client.failure("backup", #"{"path":"relative/dir"}"#).code == -32602)

        // The backup is a store of its own with the same events and digest.
        let restored = try DaemonProcess(root: daemon.root + "/restored-root")
        defer { restored.removeFiles() }
        try restored.stop()
        try FileManager.default.removeItem(atPath: restored.dataDirectory)
        try FileManager.default.copyItem(atPath: backupPath, toPath: restored.dataDirectory)
        let reopened = try DaemonProcess(root: restored.root)
        let restoredStatus = try reopened.client().call("status")
        #expect(restoredStatus["events"] as? Int == 4)
        #expect(restoredStatus["digest"] as? String == status["digest"] as? String)
        try reopened.stop()
        #expect(try daemon.stop() == 0)
    }

    @Test("append errors: invalid events, if_match, deleted entities, too large; nothing is written")
    func appendErrors() throws {
        let daemon = try DaemonProcess(arguments: ["--max-event-bytes", "1024"])
        defer { daemon.removeFiles() }
        let client = try daemon.client()
        let first = try client.call("append", eventsParams([#"{"entity":"job/1","kind":"status","status":"new"}"#]))
        let rev = try #require((first["revs"] as? [String: Any])?["job/1"] as? Int)

        let invalid = try client.failure(
            "append",
            eventsParams([
                #"{"entity":"job/2","kind":"status","status":"new"}"#, #"{"entity":"job/2","kind":"teleport"}"#,
            ]))
        #expect(invalid.reason == "invalid_event" && invalid.code == -32005)
        let response = try client.request(
            "append", eventsParams([#"{"entity":"job/2"}"#, #"{"entity":"job/2","kind":"delete","by":7}"#]))
        #expect(((response["error"] as? [String: Any])?["data"] as? [String: Any])?["index"] as? Int == 0)

        let conflict = try client.failure(
            "append",
            eventsParams([
                #"{"entity":"job/1","kind":"status","status":"done","if_match":\#(rev + 100)}"#
            ]))
        #expect(conflict.reason == "conflict")
        let stale = try client.failure(
            "append",
            eventsParams([
                #"{"entity":"job/1","kind":"status","status":"done","if_match":"01ARZ3NDEKTSV4RRFFQ69G5FAV"}"#
            ]))
        #expect(stale.reason == "invalid_event" && stale.message.contains("pass \"rev\""))
        _ = try client.call(
            "append", eventsParams([#"{"entity":"job/1","kind":"status","status":"done","if_match":\#(rev)}"#]))

        _ = try client.call("append", eventsParams([#"{"entity":"job/1","kind":"delete"}"#]))
        #expect(
            try client.failure("append", eventsParams([#"{"entity":"job/1","kind":"edit","fields":{"a":1}}"#])).reason
                == "deleted")
        let big = String(repeating: "x", count: 2000)
        #expect(
            try client.failure("append", eventsParams([#"{"entity":"job/3","kind":"edit","fields":{"a":"\#(big)"}}"#]))
                .reason
                == "too_large")
        #expect(try client.failure("append", #"{"events":{}}"#).code == -32602)
        #expect(try client.failure("append", #"{"evnts":[]}"#).code == -32602)

        let status = try client.call("status")
        #expect(status["events"] as? Int == 3)
        #expect(try client.failure("get", #"{"entity":"job/2"}"#).reason == "not_found")
        try daemon.stop()
    }

    @Test("JSON-RPC 2.0 to the letter: batches, notifications, the error codes and ids")
    func jsonRPCShapes() throws {
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        let client = try daemon.client()
        // A notification gets no reply: the next line is the answer to the request after it.
        try client.send(
            #"{"jsonrpc":"2.0","method":"append","params":{"events":[{"entity":"job/n","kind":"delete"}]}}"#)
        try client.send(#"{"jsonrpc":"2.0","method":"nope"}"#)
        try client.send(#"{"jsonrpc":"2.0","id":"s-1","method":"get","params":{"entity":"job/n"}}"#)
        let reply = try client.readJSON()
        #expect(reply["id"] as? String == "s-1")
        #expect((reply["result"] as? [String: Any])?["deleted"] as? Bool == true)

        try client.send(#"{"jsonrpc":"1.0","id":5,"method":"get"}"#)
        let wrongVersion = try client.readJSON()
        #expect((wrongVersion["error"] as? [String: Any])?["code"] as? Int == -32600)
        #expect(wrongVersion["id"] as? Int == 5)
        try client.send(#"{"jsonrpc":"2.0","id":{"a":1},"method":"get"}"#)
        let badID = try client.readJSON()
        #expect((badID["error"] as? [String: Any])?["code"] as? Int == -32600 && badID["id"] is NSNull)
        try client.send(#"{"jsonrpc":"2.0","id":6,"method":"nope"}"#)
        #expect((try client.readJSON()["error"] as? [String: Any])?["code"] as? Int == -32601)
        try client.send(#"{"jsonrpc":"2.0","id":7,"method":"get","params":["job/n"]}"#)
        #expect((try client.readJSON()["error"] as? [String: Any])?["code"] as? Int == -32602)
        try client.send(#"{"jsonrpc":"2.0","id":8,"method":"get","params":"job/n"}"#)
        #expect((try client.readJSON()["error"] as? [String: Any])?["code"] as? Int == -32600)
        try client.send(#"{"jsonrpc":"2.0","id":9,"method":"status"} trailing"#)
        #expect((try client.readJSON()["error"] as? [String: Any])?["code"] as? Int == -32700)

        // A batch: one array back, in order, notifications left out; an empty batch is one error.
        try client.send(
            #"[{"jsonrpc":"2.0","id":1,"method":"append","params":{"events":[{"entity":"job/b","kind":"status","status":"new"}]}},"#
                + #"{"jsonrpc":"2.0","method":"status"},42,{"jsonrpc":"2.0","id":2,"method":"get","params":{"entity":"job/b"}}]"#
        )
        let line = try #require(try client.readLine())
        let batch = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [[String: Any]])
        #expect(batch.count == 3)
        #expect(batch[0]["id"] as? Int == 1 && batch[0]["result"] != nil)
        #expect(batch[1]["id"] is NSNull && (batch[1]["error"] as? [String: Any])?["code"] as? Int == -32600)
        #expect(((batch[2]["result"] as? [String: Any])?["status"] as? [String: Any])?["current"] as? String == "new")
        try client.send("[]")
        let empty = try client.readJSON()
        #expect((empty["error"] as? [String: Any])?["code"] as? Int == -32600)
        try client.send(#"[{"jsonrpc":"2.0","method":"status"}]"#)
        try client.send(#"{"jsonrpc":"2.0","id":10,"method":"status"}"#)
        #expect(try client.readJSON()["id"] as? Int == 10)
        try daemon.stop()
    }

    @Test("pipelined requests are answered in order, and reads see the connection's earlier appends")
    func pipelining() throws {
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        let client = try daemon.client()
        var lines: [UInt8] = []
        for index in 0..<300 {
            let request: String
            if index % 3 == 2 {
                request = #"{"jsonrpc":"2.0","id":\#(index),"method":"get","params":{"entity":"job/\#(index - 1)"}}"#
            } else {
                request =
                    #"{"jsonrpc":"2.0","id":\#(index),"method":"append","params":{"events":[{"entity":"job/\#(index)","kind":"edit","fields":{"n":\#(index)}}]}}"#
            }
            lines += Array(request.utf8) + [0x0A]
        }
        try client.send(lines)  // all at once, before reading anything
        for index in 0..<300 {
            let response = try client.readJSON()
            #expect(response["id"] as? Int == index)
            if index % 3 == 2 {
                let fields = (response["result"] as? [String: Any])?["fields"] as? [String: Any]
                #expect(fields?["n"] as? Int == index - 1, "get after a pipelined append sees it")
            } else {
                #expect((response["result"] as? [String: Any])?["ids"] != nil)
            }
        }
        try daemon.stop()
    }

    @Test(
        "a client that reads its answers late gets every one in order: reads answered at once, appends after their commit, errors, large responses"
    )
    func pipeliningWithLargeResponses() throws {
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        let client = try daemon.client()
        // An entity whose get is ~60 KB: a few of them fill the socket's buffer, so the
        // daemon cannot write the answers at once and the sender has to wait for the client.
        let large = String(repeating: "y", count: 60_000)
        _ = try client.call(
            "append", eventsParams([#"{"entity":"job/large","kind":"edit","fields":{"notes":"\#(large)"}}"#]))
        var lines: [UInt8] = []
        var kinds: [String] = []
        for index in 0..<200 {
            let request: String
            switch index % 5 {
            case 0:
                request =
                    #"{"jsonrpc":"2.0","id":\#(index),"method":"append","params":{"events":[{"entity":"job/p\#(index)","kind":"edit","fields":{"n":\#(index)}}]}}"#
                kinds.append("append")
            case 1:
                request = #"{"jsonrpc":"2.0","id":\#(index),"method":"get","params":{"entity":"job/large"}}"#
                kinds.append("large")
            case 2:
                request = #"{"jsonrpc":"2.0","id":\#(index),"method":"get","params":{"entity":"job/p\#(index - 2)"}}"#
                kinds.append("get")
            case 3:
                request = #"{"jsonrpc":"2.0","id":\#(index),"method":"no_such_method"}"#
                kinds.append("error")
            default:
                // A notification between them: no answer.
                request =
                    #"{"jsonrpc":"2.0","method":"append","params":{"events":[{"entity":"job/quiet","kind":"edit","fields":{"n":\#(index)}}]}}"#
                kinds.append("none")
            }
            lines += Array(request.utf8) + [0x0A]
        }
        try client.send(lines)
        Thread.sleep(forTimeInterval: 0.5)  // let the daemon run into a full socket buffer
        for (index, kind) in kinds.enumerated() where kind != "none" {
            let response = try client.readJSON()
            #expect(response["id"] as? Int == index)
            let result = response["result"] as? [String: Any]
            switch kind {
            case "append": #expect(result?["ids"] != nil)
            case "large": #expect((result?["fields"] as? [String: Any])?["notes"] as? String == large)
            case "get": #expect((result?["fields"] as? [String: Any])?["n"] as? Int == index - 2)
            default: #expect((response["error"] as? [String: Any])?["code"] as? Int == -32601)
            }
        }
        let quiet = try client.call("get", #"{"entity":"job/quiet"}"#)
        #expect((quiet["fields"] as? [String: Any])?["n"] as? Int == 199)
        try daemon.stop()
    }

    @Test("16 clients each pipelining appends and gets of their own entity: each reads its own writes, in order")
    func concurrentPipelines() throws {
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        let failures = Mutex<[String]>([])
        let group = DispatchGroup()
        for clientIndex in 0..<16 {
            group.enter()
            Thread.detachNewThread {
                defer { group.leave() }
                do {
                    let client = try daemon.client()
                    for round in 0..<10 {
                        // A burst: append n, get (sees n), append n+1, append n+2, get (sees n+2).
                        var burst: [UInt8] = []
                        for step in 0..<5 {
                            let id = round * 5 + step
                            let n = round * 3 + [0, 0, 1, 2, 2][step]
                            let request =
                                step == 1 || step == 4
                                ? #"{"jsonrpc":"2.0","id":\#(id),"method":"get","params":{"entity":"job/c\#(clientIndex)"}}"#
                                : #"{"jsonrpc":"2.0","id":\#(id),"method":"append","params":{"events":[{"entity":"job/c\#(clientIndex)","kind":"edit","fields":{"n":\#(n)}}]}}"#
                            burst += Array(request.utf8) + [0x0A]
                        }
                        try client.send(burst)
                        for step in 0..<5 {
                            let response = try client.readJSON()
                            let id = round * 5 + step
                            if response["id"] as? Int != id {
                                failures.withLock { $0.append("client \(clientIndex): \(id) answered as \(response)") }
                            }
                            if step == 1 || step == 4 {
                                let fields = (response["result"] as? [String: Any])?["fields"] as? [String: Any]
                                let n = round * 3 + (step == 1 ? 0 : 2)
                                if fields?["n"] as? Int != n {
                                    failures.withLock { $0.append("client \(clientIndex): get \(id) saw \(response)") }
                                }
                            }
                        }
                    }
                } catch {
                    failures.withLock { $0.append("client \(clientIndex): \(error)") }
                }
            }
        }
        group.wait()
        #expect(failures.withLock { $0 } == [])
        try daemon.stop()
    }

    @Test("a read on another connection is answered while a large append is written, and sees all of it or none")
    func readsDoNotWaitForTheWriter() throws {
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        let reader = try daemon.client()
        _ = try reader.call("append", eventsParams([#"{"entity":"job/r","kind":"status","status":"new"}"#]))
        let writer = try daemon.client()
        let big = (0..<40_000).map { #"{"entity":"job/b\#($0 % 4000)","kind":"edit","fields":{"n":\#($0)}}"# }
        try writer.send(#"{"jsonrpc":"2.0","id":1,"method":"append","params":\#(eventsParams(big))}"#)
        // While the writer decodes and commits 40,000 events, another connection reads.
        let state = try reader.call("get", #"{"entity":"job/r"}"#)
        #expect((state["status"] as? [String: Any])?["current"] as? String == "new")
        // It sees the store before that commit or after it (a slow machine may finish the
        // append first), never part of it.
        let during = try reader.call("status")["events"] as? Int
        #expect(during == 1 || during == 40_001, "events: \(during ?? -1)")
        let appended = try writer.readJSON()
        #expect(((appended["result"] as? [String: Any])?["ids"] as? [Any])?.count == 40_000)
        #expect(try reader.call("status")["events"] as? Int == 40_001)
        try daemon.stop()
    }

    @Test("32 clients appending and reading at once: every acknowledged event is there, once")
    func concurrentClients() throws {
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        let acknowledged = Collector()
        DispatchQueue.concurrentPerform(iterations: 32) { client in
            do {
                let connection = try daemon.client()
                for round in 0..<25 {
                    let entity = "job/c\(client)-\(round % 5)"
                    let result = try connection.call(
                        "append",
                        eventsParams([
                            #"{"entity":"\#(entity)","kind":"edit","fields":{"round":\#(round)}}"#,
                            #"{"entity":"\#(entity)","kind":"status","status":"s\#(round)"}"#,
                        ]))
                    acknowledged.add(result["ids"] as? [String] ?? [])
                    let state = try connection.call("get", #"{"entity":"\#(entity)"}"#)
                    if (state["fields"] as? [String: Any])?["round"] as? Int != round {
                        acknowledged.fail("client \(client) did not read its own write")
                    }
                }
            } catch {
                acknowledged.fail("client \(client): \(error)")
            }
        }
        #expect(acknowledged.failures.isEmpty, "\(acknowledged.failures)")
        let ids = acknowledged.ids
        #expect(ids.count == 32 * 25 * 2 && Set(ids).count == ids.count)
        // Restart, then read the whole log back.
        try daemon.stop()
        let again = try DaemonProcess(root: daemon.root)
        let client = try again.client()
        var logged: [String] = []
        var after: Int?
        repeat {
            let page = try client.call("log", after.map { #"{"after":\#($0),"limit":500}"# } ?? #"{"limit":500}"#)
            logged += (page["events"] as? [[String: Any]] ?? []).compactMap { $0["id"] as? String }
            after = page["next"] as? Int
        } while after != nil
        #expect(logged.count == ids.count && Set(logged) == Set(ids))
        let rebuild = try client.call("rebuild", #"{"verify":true}"#)
        #expect((rebuild["mismatched"] as? [Any])?.isEmpty == true)
        try again.stop()
    }
}

/// Collects results from many threads.
final class Collector: @unchecked Sendable {
    private let lock = NSLock()
    private var collected: [String] = []
    private var failed: [String] = []
    func add(_ ids: [String]) { lock.withLock { collected += ids } }
    func fail(_ message: String) { lock.withLock { failed.append(message) } }
    var ids: [String] { lock.withLock { collected } }
    var failures: [String] { lock.withLock { failed } }
}
