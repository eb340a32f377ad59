import Foundation
import JetStream
import Synchronization
import TestSupport

/// Every result a connection reported, by tag, to check that each publish got exactly one.
final class PublishResults: Sendable {
    private let byTag = Mutex<[UInt64: [PublishResult]]>([:])

    func record(_ result: PublishResult) {
        byTag.withLock { $0[result.tag, default: []].append(result) }
    }

    /// How many results came, counting repeats.
    var count: Int { byTag.withLock { $0.values.reduce(0) { $0 + $1.count } } }

    var successes: Int {
        byTag.withLock { $0.values.reduce(0) { $0 + $1.filter { (try? $0.outcome.get()) != nil }.count } }
    }

    var all: [UInt64: [PublishResult]] { byTag.withLock { $0 } }

    /// Waits until `count` results came; whether they did within `timeout`.
    func wait(for expected: Int, timeout: Duration = .seconds(10)) -> Bool {
        let deadline = ContinuousClock.now + timeout
        while count < expected {
            if ContinuousClock.now > deadline { return false }
            Thread.sleep(forTimeInterval: 0.005)
        }
        return true
    }

    /// The acknowledgement of `tag`, nil unless it got exactly one result and it was a success.
    func ack(_ tag: UInt64) -> PublishAck? {
        byTag.withLock { results in
            guard let only = results[tag], only.count == 1 else { return nil }
            return try? only[0].outcome.get()
        }
    }
}

/// Something done once, from whichever thread gets there first.
final class Once: Sendable {
    private let done = Atomic<Bool>(false)

    /// Whether this call is the first.
    func claim() -> Bool { !done.exchange(true, ordering: .acquiringAndReleasing) }
}

/// Runs a program to its end and returns its exit status and output; reaps the child itself
/// (see `NATSServer`) and kills it after `timeout`.
func runTool(_ path: String, _ arguments: [String], in directory: String, timeout: Double = 60) throws -> (
    status: Int32, output: String
) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: path)
    process.arguments = arguments
    process.currentDirectoryURL = URL(fileURLWithPath: directory)
    let outputPath = directory + "/tool-\(UUID().uuidString.prefix(8)).out"
    _ = FileManager.default.createFile(atPath: outputPath, contents: nil)
    let output = FileHandle(forWritingAtPath: outputPath)
    process.standardOutput = output
    process.standardError = output
    try process.run()
    var status: Int32 = -1
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
        if !process.isRunning {
            status = process.terminationStatus
            break
        }
        var raw: Int32 = 0
        if waitpid(process.processIdentifier, &raw, WNOHANG) == process.processIdentifier {
            status = raw & 0x7F == 0 ? (raw >> 8) & 0xFF : 128 + (raw & 0x7F)
            break
        }
        Thread.sleep(forTimeInterval: 0.01)
    }
    if status == -1 { kill(process.processIdentifier, SIGKILL) }
    try? output?.close()
    let text = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
    try? FileManager.default.removeItem(atPath: outputPath)
    return (status, text)
}

/// A certificate authority, a server certificate for 127.0.0.1 and a client certificate, made
/// with the `openssl` command in `directory`.
struct TestCertificates {
    static let openssl: String? = ["/usr/bin/openssl", "/usr/local/bin/openssl"].first {
        FileManager.default.isExecutableFile(atPath: $0)
    }

    let ca: String
    let serverCertificate: String
    let serverKey: String
    let clientCertificate: String
    let clientKey: String

    init(in directory: String) throws {
        guard let openssl = Self.openssl else { throw NATSServerError("openssl is not installed") }
        ca = directory + "/ca.pem"
        serverCertificate = directory + "/server.pem"
        serverKey = directory + "/server-key.pem"
        clientCertificate = directory + "/client.pem"
        clientKey = directory + "/client-key.pem"
        let key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        try Self.run(
            openssl,
            ["req", "-x509"] + key + [
                "-keyout", "ca-key.pem", "-out", ca, "-days", "2", "-subj", "/CN=evstore test CA",
                "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            ], in: directory)
        for (name, certificate, usage, alternativeNames) in [
            ("server", serverCertificate, "serverAuth", "subjectAltName=IP:127.0.0.1,DNS:localhost\n"),
            ("client", clientCertificate, "clientAuth", ""),
        ] {
            try Self.run(
                openssl, ["req"] + key + ["-keyout", "\(name)-key.pem", "-out", "\(name).csr", "-subj", "/CN=\(name)"],
                in: directory)
            try "\(alternativeNames)extendedKeyUsage=\(usage)\n".write(
                toFile: directory + "/\(name).ext", atomically: true, encoding: .utf8)
            try Self.run(
                openssl,
                [
                    "x509", "-req", "-in", "\(name).csr", "-CA", ca, "-CAkey", "ca-key.pem", "-CAcreateserial",
                    "-out", certificate, "-days", "2", "-extfile", "\(name).ext",
                ], in: directory)
        }
    }

    private static func run(_ openssl: String, _ arguments: [String], in directory: String) throws {
        let (status, output) = try runTool(openssl, arguments, in: directory)
        guard status == 0 else { throw NATSServerError("openssl \(arguments.joined(separator: " ")): \(output)") }
    }
}
