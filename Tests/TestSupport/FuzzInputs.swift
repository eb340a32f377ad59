import Foundation

/// The fuzzers' input files (docs/fuzzing.md), for the tests that replay them.
public enum FuzzInputs {
    /// The repository's Fuzz directory.
    public static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Fuzz")

    /// The files of Fuzz/<kind>/<fuzzer> (kind: Corpus or Regressions), by name.
    public static func files(_ kind: String, _ fuzzer: String) -> [(name: String, bytes: [UInt8])] {
        let folder = directory.appendingPathComponent("\(kind)/\(fuzzer)")
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []).sorted()
        return names.compactMap { name in
            guard let data = FileManager.default.contents(atPath: folder.appendingPathComponent(name).path) else {
                return nil
            }
            return (name, Array(data))
        }
    }
}
