import Foundation
import Testing

@testable import NATSBridge

/// evstore-nats's settings: where each comes from, and what is refused before it connects.
@Suite("The bridge's configuration")
struct ConfigurationTests {
    func file(_ text: String) throws -> String {
        let path = NSTemporaryDirectory() + "evstore-nats-\(UUID().uuidString.prefix(8)).json"
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    @Test("flags beat the environment, which beats the file, which beats the defaults")
    func precedence() throws {
        let path = try file(
            #"{"url":["nats://a:4222","nats://b:4222"],"stream":"FIELD","prefix":"field.van-7","max_in_flight":64,"create_stream":false,"socket":"/run/x.sock"}"#
        )
        defer { try? FileManager.default.removeItem(atPath: path) }
        let fromFile = try BridgeConfiguration.resolve(values: [:], configFile: path, environment: [:])
        #expect(fromFile.server.urls == ["nats://a:4222", "nats://b:4222"])
        #expect(fromFile.stream == "FIELD" && fromFile.prefix == "field.van-7" && fromFile.maxInFlight == 64)
        #expect(!fromFile.createStream && fromFile.socketPath == "/run/x.sock")
        #expect(fromFile.consumer == "nats" && fromFile.duplicateWindowSeconds == 604_800)
        let environment = ["EVSTORE_NATS_STREAM": "ENV", "EVSTORE_NATS_MAX_IN_FLIGHT": "8"]
        let withEnvironment = try BridgeConfiguration.resolve(values: [:], configFile: path, environment: environment)
        #expect(withEnvironment.stream == "ENV" && withEnvironment.maxInFlight == 8)
        let withFlags = try BridgeConfiguration.resolve(
            values: ["stream": "FLAG", "url": "nats://c:4222"], configFile: path, environment: environment)
        #expect(withFlags.stream == "FLAG" && withFlags.server.urls == ["nats://c:4222"] && withFlags.maxInFlight == 8)
        let defaults = try BridgeConfiguration.resolve(
            values: [:], configFile: nil, environment: ["EVSTORE_SOCKET": "/tmp/e.sock"])
        #expect(
            defaults.server.urls == ["nats://127.0.0.1:4222"] && defaults.stream == "EVSTORE"
                && defaults.prefix == "evstore")
        #expect(defaults.socketPath == "/tmp/e.sock")
        #expect(defaults.streamConfig.subjects == ["evstore.>"])
        #expect(defaults.streamConfig.duplicateWindow == .seconds(604_800))
    }

    @Test(
        "what cannot work is refused with the setting named",
        arguments: [
            (#"{"colour":"red"}"#, "unknown key \"colour\""),
            (#"{"prefix":"evstore.*"}"#, "\"prefix\""),
            (#"{"prefix":"a..b"}"#, "\"prefix\""),
            (#"{"stream":"a.b"}"#, "stream name"),
            (#"{"consumer":"a b"}"#, "\"consumer\""),
            (#"{"max_in_flight":0}"#, "from 1 to 65536"),
            (#"{"start":"middle"}"#, "all or new"),
            (#"{"credentials":"/a","nkey_seed":"/b"}"#, "not both"),
            (#"{"tls_cert":"/a"}"#, "go together"),
            (#"{"backoff_base_s":30,"backoff_cap_s":10}"#, "backoff_cap_s"),
            (#"{"log_level":"loud"}"#, "debug, info"),
            ("[1]", "JSON object"),
            ("{", "not valid JSON"),
        ])
    func refusals(text: String, message: String) throws {
        let path = try file(text)
        defer { try? FileManager.default.removeItem(atPath: path) }
        do {
            _ = try BridgeConfiguration.resolve(values: [:], configFile: path, environment: [:])
            Issue.record("\(text) was taken")
        } catch {
            #expect(error.message.contains(message), "\(error.message)")
        }
    }

    @Test(
        "a config file holding a secret is named when its group or others may read it",
        arguments: [
            (#"{"token":"t0ken-1"}"#, 0o644, "the token and is readable by its group and every user (mode 644)"),
            (
                #"{"url":"nats://u:pw-2@h:4222"}"#, 0o604,
                "a URL with credentials and is readable by every user (mode 604)"
            ),
            (#"{"user":"u","password":"pw-3"}"#, 0o640, "the password and is readable by its group (mode 640)"),
            (#"{"url":"nats://u:pw-4@h:4222"}"#, 0o600, nil),
            (#"{"url":"nats://h:4222","user":"u"}"#, 0o644, nil),
        ] as [(String, Int, String?)])
    func readableSecrets(text: String, mode: Int, warning: String?) throws {
        let path = try file(text)
        defer { try? FileManager.default.removeItem(atPath: path) }
        #expect(chmod(path, mode_t(mode)) == 0)
        let configuration = try BridgeConfiguration.resolve(values: [:], configFile: path, environment: [:])
        let warnings = configuration.exposedSecretWarnings()
        if let warning {
            #expect(warnings.count == 1 && warnings[0].contains("\(path) holds \(warning)"), "\(warnings)")
            #expect(warnings[0].contains("chmod 600 \(path)"))
            #expect(!warnings[0].contains("pw-") && !warnings[0].contains("t0ken"))
        } else {
            #expect(warnings.isEmpty, "\(warnings)")
        }
    }

    @Test("a password, token or credentialed URL given as a flag is named, never shown")
    func secretsOnTheCommandLine() throws {
        let configuration = try BridgeConfiguration.resolve(
            values: ["url": "nats://u:pw-5@h:4222", "token": "t0ken-6", "stream": "S"], configFile: nil,
            environment: ["EVSTORE_NATS_PASSWORD": "pw-7"])
        let warnings = configuration.exposedSecretWarnings()
        #expect(warnings.count == 2, "\(warnings)")
        #expect(warnings.contains { $0.hasPrefix("--url gives a password or token on the command line") })
        #expect(warnings.contains { $0.hasPrefix("--token gives a password or token on the command line") })
        #expect(!warnings.joined().contains("pw-") && !warnings.joined().contains("t0ken"))
    }

    @Test("a backoff doubles from the base with jitter and never passes the cap", arguments: [1, 2, 3, 6, 12, 40, 200])
    func backoffStaysWithinItsBounds(failures: Int) throws {
        var configuration = BridgeConfiguration(socketPath: "/x")
        configuration.backoffBaseSeconds = 2
        configuration.backoffCapSeconds = 60
        let bridge = Bridge(configuration: configuration, logger: .init(label: "test", journal: false))
        let nominal = min(60, 2 * pow(2, Double(failures - 1)))
        for _ in 0..<200 {
            let delay = bridge.backoff(failures: failures)
            #expect(delay <= 60 && delay >= nominal * 0.5 && delay <= nominal * 1.5, "\(delay)")
        }
    }
}
