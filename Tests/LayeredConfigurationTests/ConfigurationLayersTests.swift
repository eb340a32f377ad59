import Foundation
import LayeredConfiguration
import Testing

/// The configuration layers evstored and evstore-nats share: the file, then the
/// environment, then the command line, each value with where it came from.
@Suite struct ConfigurationLayersTests {
    static let keys = [
        ConfigurationLayers.Key("max_peers", variable: "APP_MAX_PEERS"),
        ConfigurationLayers.Key("socket", variable: "APP_SOCKET"),
        ConfigurationLayers.Key("peers", variable: nil),
    ]

    func file(_ text: String) throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("layers-\(UUID().uuidString).json").path
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    @Test("a file's members come sorted by key, each with its source; values keep their JSON types")
    func fileMembers() throws {
        let path = try file(#"{"socket":"/run/a.sock","max_peers":12,"peers":[{"name":"hq"}]}"#)
        defer { try? FileManager.default.removeItem(atPath: path) }
        let members = try ConfigurationLayers.file(path, keys: Self.keys)
        #expect(members.map(\.key) == ["max_peers", "peers", "socket"])
        #expect(members.map(\.source) == ["max_peers", "peers", "socket"].map { "\"\($0)\" in \(path)" })
        #expect(members[0].value as? Int == 12 && members[2].value as? String == "/run/a.sock")
        #expect((members[1].value as? [[String: Any]])?.first?["name"] as? String == "hq")
    }

    @Test(
        "a file that cannot be used is refused in a sentence naming it",
        arguments: [
            (#"{"colour":"red"}"#, "unknown key \"colour\" in"),
            (#"{"colour":"red"}"#, "the keys are max_peers, socket, peers"),
            ("[1]", "must hold a JSON object"),
            ("{", "is not valid JSON"),
            (String(repeating: " ", count: (1 << 20) + 1) + "{}", "is over 1 MiB"),
        ])
    func refusals(text: String, message: String) throws {
        let path = try file(text)
        defer { try? FileManager.default.removeItem(atPath: path) }
        #expect {
            _ = try ConfigurationLayers.file(path, keys: Self.keys)
        } throws: { error in
            let said = (error as? ConfigurationError)?.message ?? ""
            return said.contains(message) && said.contains(path)
        }
        let missing = path + ".missing"
        #expect {
            _ = try ConfigurationLayers.file(missing, keys: Self.keys)
        } throws: { error in
            (error as? ConfigurationError)?.message.contains("cannot read the config file \(missing)") == true
        }
    }

    @Test("the environment's values come before the command line's, so a flag wins; a file-only key has no variable")
    func overrides() {
        let values = ConfigurationLayers.overrides(
            Self.keys,
            environment: ["APP_MAX_PEERS": "5", "APP_SOCKET": "/e.sock", "APP_PEERS": "ignored", "OTHER": "x"],
            commandLine: ["socket": "/f.sock", "max_peers": "7"])
        #expect(
            values == [
                .init(key: "max_peers", text: "5", source: "APP_MAX_PEERS", layer: .environment),
                .init(key: "socket", text: "/e.sock", source: "APP_SOCKET", layer: .environment),
                .init(key: "max_peers", text: "7", source: "--max-peers", layer: .commandLine),
                .init(key: "socket", text: "/f.sock", source: "--socket", layer: .commandLine),
            ])
        #expect(ConfigurationLayers.overrides(Self.keys, environment: [:], commandLine: [:]).isEmpty)
    }
}
