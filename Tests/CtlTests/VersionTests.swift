import Foundation
import TestSupport
import Testing
import Version

/// One version for everything: the programs print `EvstoreVersion.current`, and the
/// copies a Python package needs in its own files (written by `make version`) and the
/// docs' `status` example say the same.
@Suite("One version")
struct VersionTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    func text(_ path: String) throws -> String {
        try String(contentsOf: Self.root.appendingPathComponent(path), encoding: .utf8)
    }

    @Test("evstored, evctl and evstore-nats print the one version")
    func programs() throws {
        for program in ["evstored", "evctl", "evstore-nats"] {
            let result = try runProgram(try builtBinary(program).path, ["--version"])
            #expect(result.stdout == "\(program) \(EvstoreVersion.current)\n", "\(program): \(result.stdout)")
        }
    }

    @Test("the Python client's two copies and the status example in api.md are the one version")
    func copies() throws {
        let version = EvstoreVersion.current
        #expect(try text("clients/python/pyproject.toml").contains("\nversion = \"\(version)\"\n"))
        #expect(try text("clients/python/evstore/__init__.py").contains("\n__version__ = \"\(version)\"\n"))
        #expect(try text("docs/api.md").contains("\"version\":\"\(version)\""))
    }
}
