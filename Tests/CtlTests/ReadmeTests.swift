import Foundation
import TestSupport
import Testing

@Suite("README")
struct ReadmeTests {
    @Test("the evctl lines the README gives to try after `make run` work as shown")
    func readmeCommandsWork() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let readme = try String(contentsOf: root.appendingPathComponent("README.md"), encoding: .utf8)
        let commands = readme.split(separator: "\n").map(String.init).filter { $0.hasPrefix(".build/release/evctl ") }
        #expect(commands.count >= 3)
        let daemon = try RunningDaemon()
        defer { daemon.stop() }
        var outputs: [String] = []
        for command in commands {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/bin/sh")
            process.arguments = [
                "-c", command.replacingOccurrences(of: ".build/release/evctl", with: try builtBinary("evctl").path),
            ]
            process.environment = ["EVSTORE_SOCKET": daemon.socketPath, "PATH": "/usr/bin:/bin"]
            let output = Pipe()
            process.standardOutput = output
            process.standardError = output
            try process.run()
            let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            #expect(process.terminationStatus == 0, "\(command): \(text)")
            outputs.append(text)
        }
        let shown = outputs.joined()
        #expect(shown.contains("en_route") && shown.contains("12 Main St") && shown.contains("floor: 3"))
        #expect(shown.contains("saved locally: 2 events"))
    }
}
