import Foundation
import Synchronization
import TestSupport
import Testing

/// Blobs on real daemons: `evctl blob put/get` round trips checked against `sha256sum`, the
/// references events make and the appends refused for them, `get`'s present and pending,
/// and the bounds on uploads attacked by many connections at once.
@Suite("Blobs")
struct BlobTests {
    static let hasSha256sum = FileManager.default.isExecutableFile(atPath: "/usr/bin/sha256sum")

    func evctl(_ daemon: DaemonProcess, _ arguments: [String]) throws -> (status: Int32, output: String) {
        try runProgram(try builtBinary("evctl").path, ["--socket", daemon.socketPath] + arguments)
    }

    func sha256sum(_ path: String) throws -> String {
        let (status, output) = try runProgram("/usr/bin/sha256sum", [path])
        #expect(status == 0)
        return "sha256:" + output.prefix(64)
    }

    /// A file of `size` random bytes (from /dev/urandom: a debug build's generator is slow
    /// for 100 MiB).
    func writeRandomFile(_ path: String, size: Int) throws {
        let random = try #require(FileHandle(forReadingAtPath: "/dev/urandom"))
        defer { try? random.close() }
        try random.readData(ofLength: size).write(to: URL(fileURLWithPath: path))
    }

    /// The reference `evctl blob put` printed.
    func reference(_ output: String) throws -> [String: Any] {
        let line = try #require(output.split(separator: "\n").last, "\(output)")
        let object = try JSONSerialization.jsonObject(with: Data(line.utf8))
        return try #require(object as? [String: Any], "\(output)")
    }

    @Test(
        "evctl blob put and get: 0 and 1 bytes, a piece's size and one either side, and 100 MiB, equal to sha256sum",
        .enabled(if: hasSha256sum))
    func putAndGetRoundTrips() throws {
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        let piece = 3 << 20
        var held = 0
        for (index, size) in [0, 1, piece - 1, piece, piece + 1, 100 << 20].enumerated() {
            let path = daemon.root + "/in-\(index)"
            try writeRandomFile(path, size: size)
            let (status, output) = try evctl(daemon, ["blob", "put", path, "--type", "application/octet-stream"])
            #expect(status == 0, "\(output)")
            let reference = try reference(output)
            let hash = try sha256sum(path)
            #expect(reference["$blob"] as? String == hash, "size \(size)")
            #expect(reference["size"] as? Int == size)
            #expect(reference["type"] as? String == "application/octet-stream")
            held += size

            let copy = daemon.root + "/out-\(index)"
            let (got, said) = try evctl(daemon, ["blob", "get", hash, copy])
            #expect(got == 0, "\(said)")
            #expect(try sha256sum(copy) == hash, "size \(size)")
            if size <= piece + 1 {
                // The base64 pieces, both ways: put again (held already) and got through a pipe.
                let (again, output) = try evctl(daemon, ["blob", "put", "--base64", "--json", path])
                #expect(again == 0 && output.contains(#""existed":true"#), "\(output)")
                let piped = daemon.root + "/piped-\(index)"
                let (status, said) = try runProgram(
                    "/bin/sh",
                    [
                        "-c",
                        "'\(try builtBinary("evctl").path)' --socket '\(daemon.socketPath)' blob get \(hash) | cat > '\(piped)'",
                    ])
                #expect(status == 0, "\(said)")
                #expect(try sha256sum(piped) == hash, "size \(size)")
            }
            let stat = try daemon.client().call("blob.stat", #"{"hash":"\#(hash)"}"#)
            #expect(stat["state"] as? String == "present" && stat["size"] as? Int == size)
            try FileManager.default.removeItem(atPath: copy)
        }
        let blobs = try daemon.client().call("status")["blobs"] as? [String: Any]
        #expect(blobs?["count"] as? Int == 6 && blobs?["bytes"] as? Int == held && blobs?["uploads"] as? Int == 0)

        // Over the plain JSON-RPC path, in one request, as the Python client puts small blobs.
        let client = try daemon.client()
        let put = try client.call("blob.put", #"{"data":"aGVsbG8="}"#)
        #expect(put["hash"] as? String == "sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824")
        let got = try client.call("blob.get", #"{"hash":"\#(put["hash"]!)","offset":1,"length":3}"#)
        #expect(got["data"] as? String == "ZWxs" && got["size"] as? Int == 5)
        let (printed, text) = try evctl(daemon, ["blob", "get", put["hash"] as? String ?? ""])
        #expect(printed == 0 && text == "hello", "\(text)")

        // Unknown, malformed: clear errors, the daemon serving.
        let unknown = "sha256:" + String(repeating: "0", count: 64)
        let (missing, why) = try evctl(daemon, ["blob", "get", unknown, daemon.root + "/never"])
        #expect(missing == 2 && why.contains("holds no blob"), "\(why)")
        #expect(!FileManager.default.fileExists(atPath: daemon.root + "/never"))
        #expect(try client.failure("blob.get", #"{"hash":"sha256:12"}"#).reason == "invalid_params")
        #expect(try client.failure("blob.put", #"{"data":"a b"}"#).reason == "invalid_params")
        #expect(try client.call("blob.stat", #"{"hash":"\#(unknown)"}"#)["state"] as? String == "unknown")
        #expect(try client.call("status")["events"] as? Int == 0)
    }

    @Test(
        "descriptors passed on the socket: one a request does not claim is kept at most two per connection and closed with it; a request with fd and none passed, or a pipe, is refused"
    )
    func passedDescriptorsAreBounded() throws {
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        let probe = try daemon.client()
        #expect(try probe.failure("blob.put", #"{"fd":true}"#).message.contains("none came"))
        let pid = daemon.process.processIdentifier
        func openDescriptors() throws -> Int {
            try FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").count
        }
        let before = try openDescriptors()
        // 40 connections at once, each passing five descriptors with requests that claim none.
        let clients = try (0..<40).map { _ in try daemon.client() }
        let file = open(daemon.root + "/passed", O_RDWR | O_CREAT, 0o600)
        defer { close(file) }
        DispatchQueue.concurrentPerform(iterations: clients.count) { index in
            for _ in 0..<5 {
                try? clients[index].connection.write(
                    Array(#"{"jsonrpc":"2.0","id":1,"method":"status"}"#.utf8) + [0x0A], passing: file)
                _ = try? clients[index].readJSON()
            }
        }
        let held = try openDescriptors() - before
        // The 40 connections themselves, and at most two descriptors each.
        #expect(held >= 40 && held <= 40 * 3, "\(held) descriptors more than before")
        for client in clients { client.connection.close() }
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline, try openDescriptors() > before { Thread.sleep(forTimeInterval: 0.05) }
        #expect(try openDescriptors() <= before)

        // A pipe is not a file to store or to write a blob to.
        var ends: [Int32] = [0, 0]
        #expect(pipe(&ends) == 0)
        defer {
            close(ends[0])
            close(ends[1])
        }
        let client = try daemon.client()
        try client.connection.write(
            Array(#"{"jsonrpc":"2.0","id":1,"method":"blob.put","params":{"fd":true}}"#.utf8) + [0x0A], passing: ends[0]
        )
        let refused = try client.readJSON()["error"] as? [String: Any]
        #expect(
            (refused?["message"] as? String)?.contains("not of a regular file") == true,
            "\(String(describing: refused))")
        #expect((try probe.call("status")["blobs"] as? [String: Any])?["count"] as? Int == 0)
    }

    @Test(
        "a blob over max_blob_bytes is refused with nothing stored; so is a commit whose bytes are not the hash given")
    func oversizedAndMisHashedRefused() throws {
        let daemon = try DaemonProcess(arguments: ["--max-blob-bytes", "1000"])
        defer { daemon.removeFiles() }
        let path = daemon.root + "/big"
        try writeRandomFile(path, size: 1001)
        let (status, output) = try evctl(daemon, ["blob", "put", path])
        #expect(status != 0 && output.contains("max_blob_bytes"), "\(output)")
        let client = try daemon.client()
        #expect(try client.failure("blob.upload", #"{"size":1001}"#).reason == "too_large")
        let upload = try client.call("blob.upload", #"{"size":5}"#)["upload"] as? Int ?? 0
        _ = try client.call("blob.write", #"{"upload":\#(upload),"offset":0,"data":"aGVsbG8="}"#)
        let wrong = "sha256:" + String(repeating: "a", count: 64)
        let refused = try client.failure("blob.commit", #"{"upload":\#(upload),"hash":"\#(wrong)"}"#)
        #expect(refused.reason == "invalid_params" && refused.message.contains("nothing was stored"), "\(refused)")
        let blobs = try client.call("status")["blobs"] as? [String: Any]
        #expect(blobs?["count"] as? Int == 0 && blobs?["uploads"] as? Int == 0)
        #expect(try FileManager.default.contentsOfDirectory(atPath: daemon.dataDirectory + "/blobs/uploads").isEmpty)
    }

    @Test(
        "an event naming a blob this node lacks, or with the wrong size, or a malformed reference: refused, nothing stored"
    )
    func referencesAreChecked() throws {
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        let client = try daemon.client()
        let put = try client.call("blob.put", #"{"data":"aGVsbG8="}"#)
        let hash = try #require(put["hash"] as? String)
        func edit(_ entity: String, _ value: String) -> String {
            #"{"entity":"\#(entity)","kind":"edit","fields":{"photo":\#(value)}}"#
        }
        let unknown = "sha256:" + String(repeating: "1", count: 64)
        let cases: [(String, String)] = [
            (edit("job/1", #"{"$blob":"\#(unknown)","size":5}"#), "put the blob first"),
            (edit("job/1", #"{"$blob":"\#(hash)","size":6}"#), "is 5"),
            (edit("job/1", #"{"$blob":"sha256:XYZ","size":5}"#), "64 lowercase hex"),
            (edit("job/1", #"{"$blob":"\#(hash)","size":-5}"#), "0 or more"),
            (edit("job/1", #"{"$blob":"\#(hash)"}"#), "\"size\""),
            (
                #"{"entity":"job/1","kind":"add","set":"photos","element":{"$blob":"\#(unknown)","size":5}}"#,
                "put the blob first"
            ),
        ]
        for (event, words) in cases {
            // Alone, and second in a batch whose first event is fine: the batch is refused whole.
            for batch in [[event], [edit("job/2", "1"), event]] {
                let refused = try client.failure("append", eventsParams(batch))
                #expect(refused.reason == "invalid_event" && refused.message.contains(words), "\(refused)")
            }
        }
        #expect(try client.call("status")["events"] as? Int == 0)

        // Held and right: stored, and `get` says its bytes are here.
        let value = #"{"$blob":"\#(hash)","size":5,"type":"text/plain"}"#
        _ = try client.call("append", eventsParams([edit("job/1", value)]))
        let state = try client.call("get", #"{"entity":"job/1"}"#)
        #expect((state["blobs"] as? [String: String]) == [hash: "present"], "\(state)")
        #expect(((state["fields"] as? [String: Any])?["photo"] as? [String: Any])?["type"] as? String == "text/plain")
        // An entity naming no blob has no "blobs".
        _ = try client.call("append", eventsParams([edit("job/3", "\"plain\"")]))
        #expect(try client.call("get", #"{"entity":"job/3"}"#)["blobs"] == nil)
        let (_, shown) = try evctl(daemon, ["get", "job/1"])
        #expect(shown.contains("\(hash): present"), "\(shown)")
    }

    @Test("an event that arrives by sync naming a blob this node lacks is stored, and get shows the blob pending")
    func replicatedReferenceIsPending() throws {
        let a = try DaemonProcess(arguments: ["--node", "a"])
        let b = try DaemonProcess(arguments: ["--node", "b"])
        defer {
            a.removeFiles()
            b.removeFiles()
        }
        let put = try a.client().call("blob.put", #"{"data":"aGVsbG8="}"#)
        let hash = try #require(put["hash"] as? String)
        _ = try a.client().call(
            "append",
            eventsParams([#"{"entity":"job/9","kind":"edit","fields":{"photo":{"$blob":"\#(hash)","size":5}}}"#]))
        // Policy none: the event comes, its blob does not.
        let added = try b.client().call("peers.add", #"{"name":"a","url":"unix://\#(a.socketPath)","blobs":"none"}"#)
        #expect((added["peers"] as? [[String: Any]])?.first?["blobs"] as? String == "none", "\(added)")
        _ = try b.client().call("sync", #"{"peer":"a"}"#)
        let state = try b.client().call("get", #"{"entity":"job/9"}"#)
        #expect((state["blobs"] as? [String: String]) == [hash: "pending"], "\(state)")
        #expect(try a.client().call("get", #"{"entity":"job/9"}"#)["blobs"] as? [String: String] == [hash: "present"])
        // The states are the same on both nodes: presence is beside the state, not in it.
        #expect(
            try a.client().call("status")["digest"] as? String == (try b.client().call("status")["digest"] as? String))
        // Once the bytes are put here too, present.
        _ = try b.client().call("blob.put", #"{"data":"aGVsbG8="}"#)
        #expect(try b.client().call("get", #"{"entity":"job/9"}"#)["blobs"] as? [String: String] == [hash: "present"])
        // The policy changes when the peer is added again with another; a bad one is refused.
        let lazy = try b.client().call("peers.add", #"{"name":"a","url":"unix://\#(a.socketPath)","blobs":"lazy"}"#)
        #expect((lazy["peers"] as? [[String: Any]])?.first?["blobs"] as? String == "lazy", "\(lazy)")
        let refused = try b.client().failure(
            "peers.add", #"{"name":"c","url":"unix://\#(a.socketPath)","blobs":"sometimes"}"#)
        #expect(refused.reason == "invalid_params" && refused.message.contains("lazy"), "\(refused)")
    }

    @Test(
        "32 connections at once each beginning three uploads: two per connection, max_blob_uploads in all, the rest refused; all go with their connections"
    )
    func uploadsAreBoundedUnderAttack() throws {
        let daemon = try DaemonProcess(arguments: ["--max-blob-uploads", "6"])
        defer { daemon.removeFiles() }
        let clients = try (0..<32).map { _ in try daemon.client() }
        let outcomes = Mutex<[String]>([])
        DispatchQueue.concurrentPerform(iterations: clients.count) { index in
            for _ in 0..<3 {
                let response = (try? clients[index].request("blob.upload", #"{"size":1000}"#)) ?? [:]
                let outcome: String
                if response["result"] != nil {
                    outcome = "begun"
                } else {
                    let error = response["error"] as? [String: Any]
                    let message = error?["message"] as? String ?? "none"
                    outcome =
                        message.contains("max_blob_uploads")
                        ? "total" : message.contains("this connection") ? "connection" : message
                }
                outcomes.withLock { $0.append(outcome) }
            }
        }
        let counted: [String: Int] = outcomes.withLock { Dictionary($0.map { ($0, 1) }, uniquingKeysWith: +) }
        #expect(counted["begun"] == 6, "\(counted)")
        #expect((counted["total"] ?? 0) + (counted["connection"] ?? 0) == 90, "\(counted)")
        #expect(Set(counted.keys).isSubset(of: ["begun", "total", "connection"]), "\(counted)")
        // The daemon serves meanwhile, and says what is under way.
        let probe = try daemon.client()
        #expect((try probe.call("status")["blobs"] as? [String: Any])?["uploads"] as? Int == 6)
        for client in clients { client.connection.close() }
        let deadline = Date().addingTimeInterval(10)
        var uploads = -1
        while Date() < deadline {
            uploads = (try probe.call("status")["blobs"] as? [String: Any])?["uploads"] as? Int ?? -1
            if uploads == 0 { break }
            Thread.sleep(forTimeInterval: 0.05)
        }
        #expect(uploads == 0)
        #expect(try FileManager.default.contentsOfDirectory(atPath: daemon.dataDirectory + "/blobs/uploads").isEmpty)
        #expect(try probe.call("blob.upload", #"{"size":1}"#)["upload"] != nil)
    }

    @Test(
        "a put cut off halfway (evctl killed, then the daemon killed mid-upload): nothing half-stored is visible, the daemon serving"
    )
    func interruptedPutsLeaveNothing() throws {
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        let path = daemon.root + "/big"
        try writeRandomFile(path, size: 64 << 20)
        let hash = try sha256sum(path)

        // The client killed mid-put, in base64 pieces. (With the file's descriptor passed,
        // the daemon reads the file itself, and the put ends whole whether evctl waits or not.)
        let put = Process()
        put.executableURL = try builtBinary("evctl")
        put.arguments = ["--socket", daemon.socketPath, "blob", "put", "--base64", path]
        put.standardOutput = FileHandle.nullDevice
        put.standardError = FileHandle.nullDevice
        try put.run()
        let client = try daemon.client()
        let deadline = Date().addingTimeInterval(20)
        while Date() < deadline, (try client.call("status")["blobs"] as? [String: Any])?["uploads"] as? Int != 1 {
            Thread.sleep(forTimeInterval: 0.01)
        }
        kill(put.processIdentifier, SIGKILL)
        reap(put)
        while (try client.call("status")["blobs"] as? [String: Any])?["uploads"] as? Int != 0 {
            Thread.sleep(forTimeInterval: 0.02)
        }
        #expect(try client.call("blob.stat", #"{"hash":"\#(hash)"}"#)["state"] as? String == "unknown")

        // The daemon killed mid-upload: its next start removes what the upload left.
        let upload = try client.call("blob.upload", #"{"size":1000000}"#)["upload"] as? Int ?? 0
        _ = try client.call("blob.write", #"{"upload":\#(upload),"offset":0,"data":"aGVsbG8="}"#)
        daemon.signal(SIGKILL)
        try daemon.waitForExit()
        let again = try DaemonProcess(root: daemon.root)
        defer { again.removeFiles() }
        #expect(try FileManager.default.contentsOfDirectory(atPath: daemon.dataDirectory + "/blobs/uploads").isEmpty)
        let blobs = try again.client().call("status")["blobs"] as? [String: Any]
        #expect(blobs?["count"] as? Int == 0 && blobs?["uploads"] as? Int == 0)
        // And the same put, whole this time.
        let (status, output) = try evctl(again, ["blob", "put", path])
        #expect(status == 0, "\(output)")
        #expect(try reference(output)["$blob"] as? String == hash, "\(output)")
    }
}
