import Foundation
import Testing

@Suite("Docs")
struct DocsTests {
    @Test(
        "the Python client in docs/api.md runs against the daemon",
        .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/python3")))
    func pythonClientRuns() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let doc = try String(contentsOf: root.appendingPathComponent("docs/api.md"), encoding: .utf8)
        let start = try #require(doc.range(of: "```python\n"))
        let end = try #require(doc.range(of: "\n```", range: start.upperBound..<doc.endIndex))
        let code = String(doc[start.upperBound..<end.lowerBound])
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        let script = daemon.root + "/evstore_client.py"
        try code.write(toFile: script, atomically: true, encoding: .utf8)
        let (status, text) = try runProgram("/usr/bin/python3", [script, daemon.socketPath])
        #expect(status == 0, "\(text)")
        #expect(text.contains("job/42 is en_route at version"))
        #expect(text.contains("not found: not_found"))
        #expect(text.contains("first event of job/42: status"))
        #expect(text.contains("events held: 1"))
        try daemon.stop()
    }
}
