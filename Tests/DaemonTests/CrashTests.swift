import Foundation
import Synchronization
import TestSupport
import Testing

/// `kill -9` of the daemon in the middle of a bulk `evctl append --file`, again and again.
@Suite("Crash: kill -9 during bulk appends", .serialized)
struct DaemonCrashTests {
    /// (entity, kind) of each line of a workload file, in order.
    func summaries(_ path: String) throws -> [String] {
        try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n").map { line in
            let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
            return "\(object?["entity"] as? String ?? "?") \(object?["kind"] as? String ?? "?")"
        }
    }

    /// Every event of the store, in id order, as (id, "entity kind").
    func storedEvents(_ daemon: DaemonProcess) throws -> [(id: String, summary: String)] {
        let client = try daemon.client()
        var out: [(String, String)] = []
        var after: Int?
        repeat {
            let page = try client.call("log", after.map { #"{"after":\#($0),"limit":5000}"# } ?? #"{"limit":5000}"#)
            for event in page["events"] as? [[String: Any]] ?? [] {
                out.append(
                    (
                        event["id"] as? String ?? "",
                        "\(event["entity"] as? String ?? "?") \(event["kind"] as? String ?? "?")"
                    ))
            }
            after = page["next"] as? Int
        } while after != nil
        return out
    }

    /// Writes `count` events to `file`: the field workload when its generator is at hand,
    /// else jobs that are edited and walked through statuses.
    func writeWorkload(_ file: String, count: Int, seed: Int) throws {
        if let script = workloadScript() {
            let generate = Process()
            generate.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            generate.arguments = ["python3", script, "--events", "\(count)", "--seed", "\(seed)"]
            _ = FileManager.default.createFile(atPath: file, contents: nil)
            generate.standardOutput = FileHandle(forWritingAtPath: file)
            try generate.run()
            generate.waitUntilExit()
            if generate.terminationStatus == 0 { return }
        }
        let statuses = ["assigned", "en_route", "on_site", "done"]
        var text = ""
        for index in 0..<count {
            let job = "job/s\(seed)-\(index / 5)"
            if index % 5 == 0 {
                text +=
                    #"{"entity":"\#(job)","kind":"edit","fields":{"customer":"c\#(index)","address":"\#(index) Main St"}}"#
            } else {
                text += #"{"entity":"\#(job)","kind":"status","status":"\#(statuses[index % 5 - 1])"}"#
            }
            text += "\n"
        }
        try text.write(toFile: file, atomically: true, encoding: .utf8)
    }

    @Test("acknowledged events survive kill -9, once each, and what was committed is a prefix of the file")
    func killDuringBulkAppend() throws {
        let evctl = try builtBinary("evctl")
        var daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        let root = daemon.root
        var rng = SystemRandomNumberGenerator()
        var held: [(id: String, summary: String)] = []
        var midway = 0
        for round in 0..<10 {
            let file = root + "/workload-\(round).ndjson"
            try writeWorkload(file, count: 20_000, seed: 100 + round)
            let lines = try summaries(file)

            let client = Process()
            client.executableURL = evctl
            client.arguments = ["--socket", daemon.socketPath, "--json", "append", "--file", file, "--batch", "500"]
            let output = Pipe()
            client.standardOutput = output
            client.standardError = FileHandle.nullDevice
            try client.run()
            // Kill once the first batch is acknowledged, at a random moment after it.
            var received = Data()
            while !received.contains(0x0A) {
                let chunk = output.fileHandleForReading.availableData
                if chunk.isEmpty { break }
                received += chunk
            }
            Thread.sleep(forTimeInterval: Double.random(in: 0...0.5, using: &rng))
            daemon.signal(SIGKILL)
            received += output.fileHandleForReading.readDataToEndOfFile()
            let text = String(decoding: received, as: UTF8.self)
            client.waitUntilExit()
            _ = try daemon.waitForExit()
            var acknowledged: [String] = []
            for line in text.split(separator: "\n") {
                let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
                acknowledged += object?["ids"] as? [String] ?? []
            }

            daemon = try DaemonProcess(root: root)
            let now = try storedEvents(daemon)
            let before = Set(held.map(\.id))
            let fresh = now.filter { !before.contains($0.id) }
            #expect(now.count == held.count + fresh.count, "round \(round): nothing held before was lost")
            #expect(Set(now.map(\.id)).count == now.count, "round \(round): no id twice")
            #expect(
                Set(acknowledged).isSubset(of: Set(fresh.map(\.id))),
                "round \(round): every acknowledged event is there")
            #expect(fresh.count >= acknowledged.count)
            // The round's events, in id order, are the file's first lines, in order: no line
            // twice, none skipped, batches all or nothing.
            #expect(fresh.map(\.summary) == Array(lines.prefix(fresh.count)), "round \(round)")
            #expect(fresh.count == lines.count || fresh.count % 500 == 0, "round \(round): whole batches only")
            if !acknowledged.isEmpty && fresh.count < lines.count { midway += 1 }
            held = now
        }
        #expect(midway >= 5, "kills that landed mid-file: \(midway) of 10")
        let rebuild = try daemon.client().call("rebuild", #"{"verify":true}"#)
        #expect((rebuild["mismatched"] as? [Any])?.isEmpty == true && rebuild["digest_mismatch"] as? Bool == false)
        try daemon.stop()
    }
}

/// `kill -9` while the daemon takes local appends, a sync brings a peer's events in and a
/// client imports a third node's export, all at the same time: the commit sequence stays
/// dense and strictly increasing, with no seq given twice, whichever path stored each event,
/// and every acknowledged append and import is held once.
@Suite("Crash: kill -9 during appends, incoming sync and import", .serialized)
struct SequenceCrashTests {
    /// Every event of the store in seq order, as (seq, id, entity).
    func sequence(_ daemon: DaemonProcess) throws -> [(seq: Int, id: String, entity: String)] {
        let client = try daemon.client()
        var out: [(Int, String, String)] = []
        var after = 0
        while true {
            let page = try client.call("log", #"{"after":\#(after),"limit":5000}"#)
            for event in page["events"] as? [[String: Any]] ?? [] {
                out.append((event["seq"] as? Int ?? -1, event["id"] as? String ?? "", event["entity"] as? String ?? ""))
            }
            guard let next = page["next"] as? Int else { break }
            after = next
        }
        return out
    }

    /// A node's export in batches of `size`: its stored events in id order, as `evctl
    /// export` reads them, with their ids.
    func exportBatches(_ daemon: DaemonProcess, size: Int) throws -> [(events: [String], ids: [String])] {
        let client = try daemon.client()
        var batches: [(events: [String], ids: [String])] = []
        var after: String?
        repeat {
            let marker = after.map { #","after":"\#($0)""# } ?? ""
            let page = try client.call("log", #"{"order":"id","limit":\#(size)\#(marker)}"#)
            let events = page["events"] as? [[String: Any]] ?? []
            if events.isEmpty { break }
            batches.append(
                (
                    try events.map {
                        String(
                            decoding: try JSONSerialization.data(withJSONObject: $0, options: [.sortedKeys]),
                            as: UTF8.self)
                    },
                    events.map { $0["id"] as? String ?? "" }
                ))
            after = page["next"] as? String
        } while after != nil
        return batches
    }

    /// What the import client did while a daemon lived: the batches acknowledged and the
    /// events they stored.
    struct ImportProgress {
        var acknowledged: [Int] = []
        var imported = 0
    }

    @Test(
        "acknowledged events survive kill -9 during appends, an incoming sync and imports; seqs are 1...N, each once")
    func killDuringAppendsSyncAndImport() throws {
        let seed: UInt64 = 16_016
        var rng = SeededGenerator(seed: seed)
        let evctl = try builtBinary("evctl")
        let peer = try DaemonProcess(arguments: ["--node", "peer"])
        let source = try DaemonProcess(arguments: ["--node", "source"])
        var daemon = try DaemonProcess(arguments: ["--node", "local"])
        defer {
            daemon.removeFiles()
            source.removeFiles()
            peer.removeFiles()
        }
        // A third node whose export is imported, 500 events a request, resumed each round
        // from the first batch not acknowledged (held ones are skipped).
        let sourceEvents = (0..<12_000).map {
            #"{"entity":"asset/i\#($0 % 211)","kind":"edit","fields":{"n":\#($0)}}"#
        }
        for start in stride(from: 0, to: sourceEvents.count, by: 2000) {
            _ = try source.client().call("append", eventsParams(Array(sourceEvents[start..<start + 2000])))
        }
        let batches = try exportBatches(source, size: 500)
        _ = try source.stop()
        #expect(batches.flatMap(\.ids).count == sourceEvents.count)
        var nextBatch = 0
        var acknowledgedBatches = Set<Int>()

        let root = daemon.root
        var heldIDs = Set<String>()
        var roundsWithAll = 0
        for round in 0..<4 {
            let context = "seed \(seed), round \(round)"
            // New events on the peer for this round's sync to bring in.
            let peerEvents = (0..<4000).map {
                #"{"entity":"site/r\#(round)-\#($0 % 97)","kind":"edit","fields":{"n":\#($0)}}"#
            }
            for start in stride(from: 0, to: peerEvents.count, by: 1000) {
                _ = try peer.client().call("append", eventsParams(Array(peerEvents[start..<start + 1000])))
            }
            let file = root + "/local-\(round).ndjson"
            let lines = (0..<20_000).map {
                #"{"entity":"job/r\#(round)-\#($0 % 500)","kind":"edit","fields":{"n":\#($0)}}"#
            }
            try lines.joined(separator: "\n").write(toFile: file, atomically: true, encoding: .utf8)

            let client = Process()
            client.executableURL = evctl
            client.arguments = ["--socket", daemon.socketPath, "--json", "append", "--file", file, "--batch", "500"]
            let output = Pipe()
            client.standardOutput = output
            client.standardError = FileHandle.nullDevice
            try client.run()
            // The sync and the imports run beside the appends; they fail when the daemon
            // dies, as they should.
            let socket = daemon.socketPath
            let peerURL = "unix://\(peer.socketPath)"
            let syncer = Thread {
                _ = try? RPCClient(path: socket).call("sync", #"{"peer":"\#(peerURL)"}"#)
            }
            syncer.start()
            let progress = Mutex(ImportProgress())
            let importsDone = DispatchSemaphore(value: 0)
            let firstBatch = nextBatch
            let importThread = Thread { [batches] in
                defer { importsDone.signal() }
                guard let importer = try? RPCClient(path: socket) else { return }
                for index in firstBatch..<batches.count {
                    guard let result = try? importer.call("import", eventsParams(batches[index].events)) else { break }
                    progress.withLock {
                        $0.acknowledged.append(index)
                        $0.imported += result["imported"] as? Int ?? 0
                    }
                }
            }
            importThread.start()
            var received = Data()
            while !received.contains(0x0A) {
                let chunk = output.fileHandleForReading.availableData
                if chunk.isEmpty { break }
                received += chunk
            }
            // Kill once an import is acknowledged and the sync has stored some of the
            // peer's events (received beyond what the imports stored, one batch in flight
            // counted), or after 5 s, at a random moment after.
            let watcher = try daemon.client()
            let deadline = Date().addingTimeInterval(5)
            while Date() < deadline {
                let appends = try watcher.call("status")["appends"] as? [String: Any]
                let (batchesDone, importedSoFar) = progress.withLock { ($0.acknowledged.count, $0.imported) }
                if batchesDone > 0 && (appends?["received_total"] as? Int ?? 0) > importedSoFar + 500 { break }
                Thread.sleep(forTimeInterval: 0.005)
            }
            Thread.sleep(forTimeInterval: Double.random(in: 0...0.1, using: &rng))
            daemon.signal(SIGKILL)
            received += output.fileHandleForReading.readDataToEndOfFile()
            client.waitUntilExit()
            _ = try daemon.waitForExit()
            #expect(
                importsDone.wait(timeout: .now() + 10) == .success,
                "\(context): the import client stopped with the daemon")
            let imports = progress.withLock { $0 }
            var acknowledged: [String] = []
            for line in String(decoding: received, as: UTF8.self).split(separator: "\n") {
                let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
                acknowledged += object?["ids"] as? [String] ?? []
            }
            acknowledgedBatches.formUnion(imports.acknowledged)
            if let last = imports.acknowledged.last { nextBatch = last + 1 }

            daemon = try DaemonProcess(root: root, arguments: ["--node", "local"])
            let sequence = try sequence(daemon)
            let ids = sequence.map(\.id)
            let held = Set(ids)
            #expect(
                sequence.map(\.seq) == (0..<sequence.count).map { $0 + 1 },
                "\(context): seqs are 1...N in order, none twice, none skipped")
            #expect(held.count == ids.count, "\(context): no event twice")
            #expect(heldIDs.isSubset(of: held), "\(context): nothing held before was lost")
            #expect(Set(acknowledged).isSubset(of: held), "\(context): every acknowledged append is there")
            for (index, batch) in batches.enumerated() {
                let present = batch.ids.filter(held.contains).count
                if acknowledgedBatches.contains(index) {
                    #expect(present == batch.ids.count, "\(context): acknowledged import batch \(index) is held whole")
                } else {
                    #expect(
                        present == 0 || present == batch.ids.count,
                        "\(context): import batch \(index) is all or nothing (\(present) of \(batch.ids.count))")
                }
            }
            let status = try daemon.client().call("status")
            #expect(
                status["seq"] as? Int == sequence.count && status["events"] as? Int == sequence.count,
                "\(context): status.seq is the head")
            // What this round stored by each path.
            let stored = sequence.filter { !heldIDs.contains($0.id) }
            let synced = stored.filter { $0.entity.hasPrefix("site/") }.count
            let appended = stored.filter { $0.entity.hasPrefix("job/") }.count
            let imported = stored.filter { $0.entity.hasPrefix("asset/") }.count
            if synced > 0 && appended > 0 && imported > 0 { roundsWithAll += 1 }
            heldIDs = held
        }
        #expect(
            roundsWithAll >= 1,
            "seed \(seed): rounds where the kill found appends, synced and imported events stored")
        // A last, uninterrupted sync and import complete what the cut ones left.
        _ = try daemon.client().call("sync", #"{"peer":"unix://\#(peer.socketPath)"}"#)
        for index in nextBatch..<batches.count {
            _ = try daemon.client().call("import", eventsParams(batches[index].events))
        }
        let final = try sequence(daemon)
        #expect(final.map(\.seq) == Array(1...final.count), "seed \(seed)")
        #expect(
            Set(batches.flatMap(\.ids)).isSubset(of: Set(final.map(\.id))), "seed \(seed): every import is held")
        #expect(try daemon.client().call("status")["seq"] as? Int == final.count, "seed \(seed)")
        let rebuild = try daemon.client().call("rebuild", #"{"verify":true}"#)
        #expect(
            (rebuild["mismatched"] as? [Any])?.isEmpty == true && rebuild["digest_mismatch"] as? Bool == false,
            "seed \(seed): \(rebuild)")
        #expect(rebuild["unsequenced"] as? Int == 0, "seed \(seed)")
        _ = try daemon.stop()
        _ = try peer.stop()
    }
}
