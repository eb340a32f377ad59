import Arguments
@testable import Daemon
import Foundation
@testable import Server
import Testing
@testable import Wire
@testable import Writer

@Suite("Configuration and request decoding")
struct ConfigurationTests {
    func resolve(_ arguments: [String], _ environment: [String: String] = [:]) throws -> Configuration {
        let invocation = try Parser.parse(arguments, root: Evstored.self)
        return try Configuration.resolve(
            commandLine: Evstored(invocation.arguments).commandLine, environment: environment)
    }

    @Test("flags beat the environment, which beats the config file, which beats the defaults")
    func precedence() throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("evstored-\(UUID().uuidString).json")
            .path
        defer { try? FileManager.default.removeItem(atPath: file) }
        try
            #"{"node":"from-file","max_event_bytes":1000,"socket_mode":"0600","durability":"relaxed","peers":[{"name":"hq","url":"ssh://hq"}]}"#
            .write(toFile: file, atomically: true, encoding: .utf8)
        let fileOnly = try resolve(["--config", file])
        #expect(fileOnly.nodeName == "from-file" && fileOnly.maxEventBytes == 1000 && fileOnly.socketMode == 0o600)
        #expect(fileOnly.durability == .relaxed && fileOnly.peers == [.init(name: "hq", url: "ssh://hq")])
        #expect(fileOnly.syncIntervalSeconds == 30 && fileOnly.maxLineBytes == 16 << 20)
        let environment = ["EVSTORE_NODE": "from-env", "EVSTORE_MAX_EVENT_BYTES": "2000", "EVSTORE_CONFIG": file]
        let withEnvironment = try resolve([], environment)
        #expect(withEnvironment.nodeName == "from-env" && withEnvironment.maxEventBytes == 2000)
        #expect(withEnvironment.socketMode == 0o600, "still from the file")
        let withFlags = try resolve(["--node", "from-flag", "--max-event-bytes=3000"], environment)
        #expect(withFlags.nodeName == "from-flag" && withFlags.maxEventBytes == 3000)
    }

    @Test("default places: systemd's directories, then XDG, then ./.evstore")
    func defaultPlaces() throws {
        let systemd = try resolve(
            [], ["STATE_DIRECTORY": "/var/lib/evstore", "RUNTIME_DIRECTORY": "/run/evstore", "XDG_STATE_HOME": "/x"])
        #expect(systemd.dataDirectory == "/var/lib/evstore" && systemd.socketPath == "/run/evstore/evstored.sock")
        let xdg = try resolve([], ["XDG_STATE_HOME": "/home/a/.local/state", "XDG_RUNTIME_DIR": "/run/user/1000"])
        #expect(xdg.dataDirectory == "/home/a/.local/state/evstore")
        #expect(xdg.socketPath == "/run/user/1000/evstore/evstored.sock")
        let bare = try resolve([], [:])
        #expect(bare.dataDirectory == ".evstore/data" && bare.socketPath == ".evstore/evstored.sock")
    }

    @Test(
        "bad settings are refused with the setting named",
        arguments: [
            (["--socket-mode", "999"], "--socket-mode"), (["--max-event-bytes", "-1"], "--max-event-bytes"),
            (["--log-level", "loud"], "--log-level"), (["--durability", "yes"], "--durability"),
            (["--max-outgoing-sessions", "0"], "--max-outgoing-sessions"),
            (["--max-outgoing-sessions", "257"], "--max-outgoing-sessions"),
        ])
    func badSettings(arguments: [String], named: String) throws {
        #expect {
            _ = try resolve(arguments)
        } throws: { error in
            "\(error)".contains(named)
        }
    }

    @Test("max_outgoing_sessions: 4 by default, from the flag or the environment, 1 to 256")
    func outgoingSessions() throws {
        #expect(try resolve([]).maxOutgoingSessions == 4)
        #expect(try resolve(["--max-outgoing-sessions", "16"]).maxOutgoingSessions == 16)
        #expect(try resolve([], ["EVSTORE_MAX_OUTGOING_SESSIONS": "1"]).maxOutgoingSessions == 1)
    }

    @Test("the map's initial size and the dictionary training threshold: defaults, flags, limits")
    func storeTuning() throws {
        let defaults = try resolve([])
        #expect(defaults.mapInitialBytes == 64 << 20 && defaults.dictionaryTrainingEvents == 10_000)
        let set = try resolve(["--map-initial-bytes", "1048576", "--dictionary-training-events", "500"])
        #expect(set.mapInitialBytes == 1 << 20 && set.dictionaryTrainingEvents == 500)
        for arguments in [["--map-initial-bytes", "100"], ["--dictionary-training-events", "5"]] {
            #expect {
                _ = try resolve(arguments)
            } throws: { error in
                "\(error)".contains(arguments[0])
            }
        }
    }

    @Test("a config file with an unknown key or a wrong type is refused")
    func badFile() throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("evstored-\(UUID().uuidString).json")
            .path
        defer { try? FileManager.default.removeItem(atPath: file) }
        for (text, mention) in [
            (#"{"soket":"/tmp/x"}"#, "soket"), (#"{"node":["a"]}"#, "node"), (#"[1]"#, "JSON object"),
            (#"{"peers":[{"name":"a"}]}"#, "peers"),
        ] {
            try text.write(toFile: file, atomically: true, encoding: .utf8)
            #expect {
                _ = try resolve(["--config", file])
            } throws: { error in
                "\(error)".contains(mention)
            }
        }
    }

    /// The version and method are read in place from the line; escaped forms decode to
    /// the same text, anything else is refused as before.
    @Test("request version and method, plain or escaped")
    func requestVersionAndMethod() {
        func method(_ text: String) -> String? {
            if case .single(.request(let request)) = RequestParser.parse(Array(text.utf8)) { return request.method }
            return nil
        }
        func code(_ text: String) -> Int? {
            switch RequestParser.parse(Array(text.utf8)) {
            case .failed(let error), .single(.invalid(_, let error)): return error.code
            default: return nil
            }
        }
        #expect(method(#"{"jsonrpc":"2.0","id":1,"method":"get"}"#) == "get")
        #expect(method(#"{"method":"g\u0065t","jsonrpc":"2\u002e0","id":1}"#) == "get")
        #expect(method(#"{"jsonrpc":"2.0","id":1,"method":"résumé"}"#) == "résumé")
        #expect(
            method(#"{"jsonrpc":"2.0","id":1,"method":"a_method_name_longer_than_fifteen_bytes"}"#)
                == "a_method_name_longer_than_fifteen_bytes")
        for text in [
            #"{"jsonrpc":"2.1","id":1,"method":"get"}"#, #"{"jsonrpc":2.0,"id":1,"method":"get"}"#,
            #"{"jsonrpc":"2.0 ","id":1,"method":"get"}"#, #"{"jsonrpc":"","id":1,"method":"get"}"#,
            #"{"id":1,"method":"get"}"#, #"{"jsonrpc":"2.0","id":1,"method":""}"#,
            #"{"jsonrpc":"2.0","id":1,"method":7}"#, #"{"jsonrpc":"2.0","id":1}"#,
        ] {
            #expect(code(text) == -32600, "\(text)")
        }
        #expect(code(#"{"jsonrpc":"2.0","jsonrpc":"2.0","id":1,"method":"get"}"#) == -32700)
    }

    @Test("request lines: single, batch, notification, errors with the right codes")
    func requestParsing() throws {
        func single(_ text: String) -> ParsedLine.Element? {
            if case .single(let element) = RequestParser.parse(Array(text.utf8)) { return element }
            return nil
        }
        guard
            case .request(let append) = single(
                #"{"params":{"events":[{"entity":"job/1","kind":"delete"}]},"method":"append","jsonrpc":"2.0","id":"a"}"#
            )
        else {
            Issue.record("append with params before method")
            return
        }
        #expect(append.id == Array(#""a""#.utf8))
        guard case .events(let events) = append.params else {
            Issue.record("events decoded")
            return
        }
        #expect(events.count == 1)
        guard case .request(let note) = single(#"{"jsonrpc":"2.0","method":"status"}"#) else {
            Issue.record("notification")
            return
        }
        #expect(note.isNotification)
        guard
            case .request(let invalidEvent) = single(
                #"{"jsonrpc":"2.0","id":1,"method":"append","params":{"events":[{"entity":"job/1"},{"entity":"job/2","kind":"delete"}]}}"#
            ),
            case .invalid(let error) = invalidEvent.params
        else {
            Issue.record("invalid event")
            return
        }
        #expect(error.reason == "invalid_event" && error.index == 0)
        for (text, code) in [
            ("{", -32700), ("nul", -32700), ("[]", -32600), ("1", -32600), (#"{"jsonrpc":"2.0","id":1}"#, -32600),
            (
                #"{"jsonrpc":"2.0","id":1,"method":"append","params":{"events":[{"entity":"job/1","kind":"delete"]}}"#,
                -32700
            ),
        ] {
            switch RequestParser.parse(Array(text.utf8)) {
            case .failed(let error): #expect(error.code == code, "\(text)")
            case .single(.invalid(_, let error)): #expect(error.code == code, "\(text)")
            default: Issue.record("\(text) parsed")
            }
        }
    }
}
