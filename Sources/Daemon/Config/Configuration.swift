import Foundation
import UnixSocket

/// The daemon's settings, from (strongest first) flags, `EVSTORE_*` environment variables,
/// the JSON config file and the defaults.
struct Configuration: Equatable, Sendable {
    struct Peer: Equatable, Sendable {
        var name: String
        var url: String
    }

    enum Durability: String, Sendable {
        /// Every commit waits for the disk.
        case full
        /// Commits return before the disk has them; flushed every second. A power cut may
        /// lose the last second of acknowledged writes, never corrupt the store.
        case relaxed
    }

    var configFile: String?
    var dataDirectory: String
    var socketPath: String
    var socketMode: UInt32 = 0o660
    var socketGroup: String?
    var nodeName: String?
    var peers: [Peer] = []
    var syncIntervalSeconds = 30
    var backoffBaseSeconds = 2
    var backoffCapSeconds = 600
    var syncTimeoutSeconds = 30
    /// The ssh client for ssh:// peers, split as a shell splits words.
    var sshCommand = "ssh"
    var maxClockSkewSeconds = 3600
    var maxEventBytes = 65_536
    var mapMaxBytes = 64 << 30
    /// The map's size when a store is opened (it grows by doubling, by at least this much).
    var mapInitialBytes = 64 << 20
    /// Events a store holds before its first compression dictionary is trained.
    var dictionaryTrainingEvents = 10_000
    var durability = Durability.full
    var maxLineBytes = 16 << 20
    var watchQueueEvents = 10_000
    var logLevel = Logger.Level.info
    /// Where this host's identity is read (a data directory copied to another machine
    /// takes a fresh node id). Containers that share or lack /etc/machine-id point it at a
    /// file of their own.
    var machineIDFile = "/etc/machine-id"

    /// One setting as each source names it.
    struct Option: Sendable {
        let key: String
        let help: String
        /// The flag's name without its dashes: data-dir.
        var flagName: String { key.replacingOccurrences(of: "_", with: "-") }
        var flag: String { "--" + flagName }
        var variable: String { "EVSTORE_" + key.uppercased() }
        /// Settable from the config file only (a list).
        var fileOnly = false
    }

    static let options: [Option] = [
        Option(key: "data_dir", help: "directory of the store (created if missing)"),
        Option(key: "socket", help: "path of the Unix socket to serve"),
        Option(key: "socket_mode", help: "file mode of the socket, octal (default 0660)"),
        Option(key: "socket_group", help: "group owning the socket (default: the daemon's)"),
        Option(key: "node", help: "a human name for this node (the node id is generated)"),
        Option(key: "peers", help: "peers to sync with: [{\"name\",\"url\"}]", fileOnly: true),
        Option(key: "sync_interval_s", help: "seconds between background syncs with each peer (30)"),
        Option(key: "backoff_base_s", help: "first retry delay after a failed sync, seconds (2)"),
        Option(key: "backoff_cap_s", help: "longest retry delay, seconds (600)"),
        Option(key: "sync_timeout_s", help: "a peer silent this long ends the session, seconds (30)"),
        Option(key: "ssh_command", help: "the ssh client for ssh:// peers, with its options (ssh)"),
        Option(key: "max_clock_skew_s", help: "how far ahead a stored id may be and still move the clock (3600)"),
        Option(key: "max_event_bytes", help: "largest event, canonical JSON bytes (65536)"),
        Option(key: "map_max_bytes", help: "largest size the store may grow to, bytes (64 GiB)"),
        Option(key: "map_initial_bytes", help: "size of the map at open, and its least growth step, bytes (64 MiB)"),
        Option(
            key: "dictionary_training_events",
            help: "events a store holds before its first compression dictionary is trained (10000)"),
        Option(key: "durability", help: "full: every commit reaches the disk; relaxed: flushed each second"),
        Option(key: "max_line_bytes", help: "longest request line, bytes (16 MiB)"),
        Option(key: "watch_queue_events", help: "notifications a watcher may fall behind before it is dropped (10000)"),
        Option(key: "log_level", help: "debug, info, notice, warning or error (info)"),
        Option(key: "machine_id_file", help: "this host's identity, compared at start (/etc/machine-id)"),
    ]

    /// A setting that cannot be used, and where it came from.
    struct Invalid: Error, CustomStringConvertible {
        var message: String
        var description: String { message }
    }

    /// What the command line set: the config file and the settings given as flags.
    struct CommandLine: Equatable, Sendable {
        var values: [String: String] = [:]
        var configFile: String?
    }

    /// Resolves every setting. `environment` is the process environment.
    static func resolve(commandLine: CommandLine, environment: [String: String]) throws(Invalid) -> Configuration {
        var configuration = Configuration(
            dataDirectory: defaultDataDirectory(environment), socketPath: defaultSocketPath(environment))
        let file = commandLine.configFile ?? environment["EVSTORE_CONFIG"]
        if let file {
            configuration.configFile = file
            try configuration.apply(file: try readFile(file))
        } else if environment["STATE_DIRECTORY"] != nil, FileManager.default.fileExists(atPath: systemConfigFile) {
            configuration.configFile = systemConfigFile
            try configuration.apply(file: try readFile(systemConfigFile))
        }
        for option in options where !option.fileOnly {
            if let value = environment[option.variable] {
                try configuration.set(option.key, text: value, source: option.variable)
            }
        }
        for (key, value) in commandLine.values.sorted(by: { $0.key < $1.key }) {
            try configuration.set(key, text: value, source: "--" + key.replacingOccurrences(of: "_", with: "-"))
        }
        return configuration
    }

    static let systemConfigFile = "/etc/evstore/evstored.json"

    static func defaultDataDirectory(_ environment: [String: String]) -> String {
        if let state = environment["STATE_DIRECTORY"]?.split(separator: ":").first { return String(state) }
        if let xdg = environment["XDG_STATE_HOME"], !xdg.isEmpty { return xdg + "/evstore" }
        return ".evstore/data"
    }

    static func defaultSocketPath(_ environment: [String: String]) -> String {
        if let runtime = environment["RUNTIME_DIRECTORY"]?.split(separator: ":").first {
            return runtime + "/evstored.sock"
        }
        if let xdg = environment["XDG_RUNTIME_DIR"], !xdg.isEmpty { return xdg + "/evstore/evstored.sock" }
        return ".evstore/evstored.sock"
    }

    static func readFile(_ path: String) throws(Invalid) -> [String: Any] {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw Invalid(message: "cannot read the config file \(path): it does not exist or is not readable")
        }
        guard let object = try? JSONSerialization.jsonObject(with: data), let members = object as? [String: Any] else {
            throw Invalid(message: "the config file \(path) is not a JSON object")
        }
        return members
    }

    mutating func apply(file members: [String: Any]) throws(Invalid) {
        for (key, value) in members.sorted(by: { $0.key < $1.key }) {
            let source = "\"\(key)\" in \(configFile ?? "the config file")"
            guard Configuration.options.contains(where: { $0.key == key }) else {
                let known = Configuration.options.map(\.key).joined(separator: ", ")
                throw Invalid(message: "unknown key \(source); the keys are \(known)")
            }
            if key == "peers" {
                guard let list = value as? [[String: Any]] else {
                    throw Invalid(message: "\(source) must be a list of {\"name\",\"url\"}")
                }
                peers = try list.map { item throws(Invalid) in
                    guard let name = item["name"] as? String, let url = item["url"] as? String, !name.isEmpty,
                        !url.isEmpty
                    else { throw Invalid(message: "each of \(source) needs a \"name\" and a \"url\"") }
                    guard PeerName.isValid(name) else {
                        throw Invalid(message: "peer name \"\(name)\" in \(source) is not valid: \(PeerName.rule)")
                    }
                    do throws(SyncError) {
                        _ = try PeerURL(url)
                    } catch {
                        throw Invalid(message: "peer \"\(name)\" in \(source): \(error.message)")
                    }
                    return Peer(name: name, url: url)
                }
                continue
            }
            let text: String
            switch value {
            case let string as String: text = string
            case let number as NSNumber: text = number.stringValue
            default: throw Invalid(message: "\(source) must be a string or a number")
            }
            try set(key, text: text, source: source)
        }
    }

    /// Sets one setting from its text form.
    mutating func set(_ key: String, text: String, source: String) throws(Invalid) {
        func integer(_ range: ClosedRange<Int>) throws(Invalid) -> Int {
            guard let value = Int(text.trimmingCharacters(in: .whitespaces)), range.contains(value) else {
                throw Invalid(
                    message:
                        "\(source) must be an integer from \(range.lowerBound) to \(range.upperBound), not \"\(text)\"")
            }
            return value
        }
        switch key {
        case "data_dir": dataDirectory = text
        case "socket": socketPath = text
        case "socket_mode":
            guard let mode = UInt32(text, radix: 8), mode <= 0o777 else {
                throw Invalid(message: "\(source) must be an octal file mode such as 0660, not \"\(text)\"")
            }
            socketMode = mode
        case "socket_group": socketGroup = text.isEmpty ? nil : text
        case "node": nodeName = text.isEmpty ? nil : text
        case "sync_interval_s": syncIntervalSeconds = try integer(1...86_400)
        case "backoff_base_s": backoffBaseSeconds = try integer(1...86_400)
        case "backoff_cap_s": backoffCapSeconds = try integer(1...86_400)
        case "sync_timeout_s": syncTimeoutSeconds = try integer(1...86_400)
        case "ssh_command":
            guard (try? ShellWords.split(text))?.isEmpty == false else {
                throw Invalid(
                    message: "\(source) must be a command such as \"ssh -i /etc/evstore/id_ed25519\", not \"\(text)\"")
            }
            sshCommand = text
        case "max_clock_skew_s": maxClockSkewSeconds = try integer(0...31_536_000)
        case "max_event_bytes": maxEventBytes = try integer(256...(16 << 20))
        case "map_max_bytes": mapMaxBytes = try integer((1 << 20)...(1 << 50))
        case "map_initial_bytes": mapInitialBytes = try integer((64 << 10)...(1 << 50))
        case "dictionary_training_events": dictionaryTrainingEvents = try integer(100...1_000_000_000)
        case "durability":
            guard let value = Durability(rawValue: text) else {
                throw Invalid(message: "\(source) must be \"full\" or \"relaxed\", not \"\(text)\"")
            }
            durability = value
        case "max_line_bytes": maxLineBytes = try integer(1024...(1 << 30))
        case "watch_queue_events": watchQueueEvents = try integer(1...10_000_000)
        case "machine_id_file": machineIDFile = text
        case "log_level":
            guard let level = Logger.Level(name: text) else {
                throw Invalid(message: "\(source) must be debug, info, notice, warning or error, not \"\(text)\"")
            }
            logLevel = level
        default: throw Invalid(message: "unknown setting \(source)")
        }
    }
}
