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
