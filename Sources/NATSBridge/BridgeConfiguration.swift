import FoundationEssentials
import JetStream
import LayeredConfiguration
import Logging
import Projections

#if canImport(Glibc)
    import Glibc
#endif

/// evstore-nats's settings, from (strongest first) flags, `EVSTORE_NATS_*` environment
/// variables, the JSON config file and the defaults, as evstored takes its own.
public struct BridgeConfiguration: Sendable {
    /// Where a consumer the bridge creates starts reading.
    public enum Start: String, Sendable {
        /// Every event the node holds (seq 0).
        case all
        /// Only events stored from now on (the head).
        case new
    }

    public var configFile: String?
    /// The secrets the config file holds, by key (`password`, `token`, `url` with userinfo).
    public var secretsInConfigFile: [String] = []
    /// The secrets given as flags, by flag (`--password`), which every user sees in `ps`.
    public var secretsOnCommandLine: [String] = []
    /// evstored's socket.
    public var socketPath: String
    /// Where the NATS server is and how to authenticate to it (urls, credentials, TLS); the
    /// waits and the bound on publishes in flight come from the settings below
    /// (`natsOptions`).
    public var server = NATSOptions(url: "nats://127.0.0.1:4222")
    /// The JetStream stream the events go to.
    public var stream = "EVSTORE"
    /// The first subject token: an event of type T goes to `<prefix>.T`.
    public var prefix = "evstore"
    /// The durable consumer of the daemon the bridge reads as.
    public var consumer = "nats"
    public var start = Start.all
    /// Whether to create the stream when the server has none of that name.
    public var createStream = true
    /// The duplicate window of a stream the bridge creates: how long JetStream remembers an
    /// event id to drop a copy (another gateway's, or one published again after a crash).
    public var duplicateWindowSeconds = 7 * 86_400
    /// Publishes sent and not yet acknowledged by JetStream.
    public var maxInFlight = 1024
    /// How often what JetStream acknowledged is acknowledged to the daemon, ms.
    public var ackIntervalMilliseconds = 200
    /// Connecting, the JetStream API and each publish's acknowledgement wait this long, s.
    public var timeoutSeconds = 10
    public var backoffBaseSeconds = 1
    public var backoffCapSeconds = 60
    public var logLevel = Logger.Level.info

    public init(socketPath: String) {
        self.socketPath = socketPath
    }

    /// A setting that cannot be used, and where it came from.
    public struct Invalid: Error, CustomStringConvertible {
        public var message: String
        public var description: String { message }
    }

    /// One setting as each source names it.
    public struct Option: Sendable {
        public let key: String
        public let help: String
        /// The flag's name without its dashes: `tls-ca`.
        public var flagName: String { key.replacing("_", with: "-") }
        public var variable: String { "EVSTORE_NATS_" + key.uppercased() }
    }

    public static let options: [Option] = [
        Option(key: "socket", help: "evstored's socket (default: as evctl finds it)"),
        Option(key: "url", help: "NATS server URL, or several separated by commas (nats://127.0.0.1:4222)"),
        Option(key: "credentials", help: "a NATS credentials file (.creds: user JWT and NKey seed)"),
        Option(key: "nkey_seed", help: "a file holding an NKey user seed (SU...); the public key is derived from it"),
        Option(key: "user", help: "user name for user and password authentication"),
        Option(key: "password", help: "password for user and password authentication (prefer the config file)"),
        Option(key: "token", help: "token for token authentication (prefer the config file)"),
        Option(key: "tls_ca", help: "PEM file of the certificate authorities to trust; turns TLS on"),
        Option(key: "tls_cert", help: "client certificate (PEM), for servers that verify clients"),
        Option(key: "tls_key", help: "the client certificate's private key (PEM)"),
        Option(key: "stream", help: "the JetStream stream to publish to (EVSTORE)"),
        Option(key: "prefix", help: "subject prefix: an event of type T goes to PREFIX.T (evstore)"),
        Option(key: "consumer", help: "the daemon's durable consumer the bridge reads as (nats)"),
        Option(key: "start", help: "where a consumer the bridge creates starts: all (every event held) or new (all)"),
        Option(
            key: "create_stream", help: "create the stream when the server has none of that name: true or false (true)"),
        Option(
            key: "duplicate_window_s",
            help:
                "duplicate window of a stream the bridge creates, seconds: at least the longest outage planned for (604800)"
        ),
        Option(key: "max_in_flight", help: "publishes sent and not yet acknowledged by JetStream (1024)"),
        Option(key: "ack_interval_ms", help: "how often progress is acknowledged to the daemon, ms (200)"),
        Option(key: "timeout_s", help: "how long connecting and each acknowledgement may take, seconds (10)"),
        Option(key: "backoff_base_s", help: "first wait after a failure, seconds; it doubles (1)"),
        Option(key: "backoff_cap_s", help: "longest wait after failures, seconds (60)"),
        Option(key: "log_level", help: "debug, info, notice, warning or error (info)"),
    ]

    /// The config file read under systemd when none is given.
    public static let systemConfigFile = "/etc/evstore/evstore-nats.json"

    /// Resolves every setting: `values` from the command line by key, `configFile` from
    /// `--config`, `environment` the process's.
    public static func resolve(values: [String: String], configFile: String?, environment: [String: String])
        throws(Invalid) -> BridgeConfiguration
    {
        var configuration = BridgeConfiguration(socketPath: defaultSocketPath(environment))
        let file =
            configFile ?? environment["EVSTORE_NATS_CONFIG"]
            ?? (environment["INVOCATION_ID"] != nil && FileManager.default.fileExists(atPath: systemConfigFile)
                ? systemConfigFile : nil)
        configuration.configFile = file
        try ConfigurationLayers.load(
            file: file, keys: layerKeys, environment: environment, commandLine: values,
            refusal: { Invalid(message: $0.message) },
            member: { (key, value, source) throws(Invalid) in try configuration.apply(key, value, source: source) },
            value: { (value) throws(Invalid) in
                try configuration.set(value.key, text: value.text, source: value.source)
                if value.layer == .commandLine, isSecret(value.key, value.text) {
                    configuration.secretsOnCommandLine.append(value.source)
                }
            })
        try configuration.check()
        return configuration
    }

    /// The settings as the configuration layers know them.
    static let layerKeys = options.map { ConfigurationLayers.Key($0.key, variable: $0.variable) }

    /// Sets one member of the config file.
    mutating func apply(_ key: String, _ value: Any, source: String) throws(Invalid) {
        let text: String
        switch value {
        case let string as String: text = string
        case let number as Int: text = String(number)
        case let flag as Bool: text = flag ? "true" : "false"
        case let list as [Any] where key == "url":
            let urls = list.compactMap { $0 as? String }
            guard urls.count == list.count else { throw Invalid(message: "\(source) must be a list of URLs") }
            text = urls.joined(separator: ",")
        default: throw Invalid(message: "\(source) must be a string or a number")
        }
        try set(key, text: text, source: source)
        if BridgeConfiguration.isSecret(key, text) { secretsInConfigFile.append(key) }
    }

    /// Sets one setting from its text form.
    mutating func set(_ key: String, text: String, source: String) throws(Invalid) {
        func integer(_ range: ClosedRange<Int>) throws(Invalid) -> Int {
            guard let value = Int(text), range.contains(value) else {
                throw Invalid(
                    message:
                        "\(source) must be an integer from \(range.lowerBound) to \(range.upperBound), not \"\(text)\"")
            }
            return value
        }
        func path() -> String? { text.isEmpty ? nil : text }
        switch key {
        case "socket": socketPath = text
        case "url":
            let urls = text.split(separator: ",").map { String($0.filter { $0 != " " }) }
            guard !urls.isEmpty, urls.allSatisfy({ !$0.isEmpty }) else {
                throw Invalid(message: "\(source) must be a NATS URL such as nats://hq.example.net:4222")
            }
            server.urls = urls
        case "credentials": server.credentialsFile = path()
        case "nkey_seed": server.nkeySeedFile = path()
        case "user": server.user = path()
        case "password": server.password = path()
        case "token": server.token = path()
        case "tls_ca": server.tlsCAFile = path()
        case "tls_cert": server.tlsCertificateFile = path()
        case "tls_key": server.tlsKeyFile = path()
        case "stream":
            guard BridgeConfiguration.isStreamName(text) else {
                throw Invalid(
                    message:
                        "\(source) must be a stream name: 1 to 255 letters, digits, \"_\" and \"-\", not \"\(text)\"")
            }
            stream = text
        case "prefix":
            guard BridgeConfiguration.isSubjectPrefix(text) else {
                throw Invalid(
                    message:
                        "\(source) must be subject tokens separated by dots, each of letters, digits, \"_\" and \"-\" (no wildcards), not \"\(text)\""
                )
            }
            prefix = text
        case "consumer":
            guard BridgeConfiguration.isConsumerName(text) else {
                throw Invalid(
                    message: "\(source) must be 1 to 64 of A-Z, a-z, 0-9, \".\", \"_\" and \"-\", not \"\(text)\"")
            }
            consumer = text
        case "start":
            guard let start = Start(rawValue: text) else {
                throw Invalid(message: "\(source) must be all or new, not \"\(text)\"")
            }
            self.start = start
        case "create_stream":
            guard text == "true" || text == "false" else {
                throw Invalid(message: "\(source) must be true or false, not \"\(text)\"")
            }
            createStream = text == "true"
        case "duplicate_window_s": duplicateWindowSeconds = try integer(1...(366 * 86_400))
        case "max_in_flight": maxInFlight = try integer(1...65_536)
        case "ack_interval_ms": ackIntervalMilliseconds = try integer(10...60_000)
        case "timeout_s": timeoutSeconds = try integer(1...3600)
        case "backoff_base_s": backoffBaseSeconds = try integer(1...3600)
        case "backoff_cap_s": backoffCapSeconds = try integer(1...86_400)
        case "log_level":
            guard let level = Logger.Level(name: text) else {
                throw Invalid(message: "\(source) must be debug, info, notice, warning or error, not \"\(text)\"")
            }
            logLevel = level
        default:
            throw Invalid(message: "unknown setting \(source)")
        }
    }

    /// Whether the setting `key` with `text` holds a password or token: `password`, `token`,
    /// or a URL with userinfo.
    static func isSecret(_ key: String, _ text: String) -> Bool {
        switch key {
        case "password", "token": !text.isEmpty
        case "url": text.split(separator: ",").contains { Redactor.redact(url: String($0)) != String($0) }
        default: false
        }
    }

    /// A warning for each secret others than the bridge's user can read: a file holding a
    /// secret (the config file with a password, token or URL with credentials; the
    /// credentials, NKey seed and TLS key files) whose group or others may read it
    /// (mode & 0o044), and a secret given as a flag. Each names the file and the fix, never
    /// the secret. A file that cannot be examined is left to the read that will fail on it.
    public func exposedSecretWarnings() -> [String] {
        var files: [(path: String, holds: String)] = []
        if let configFile, !secretsInConfigFile.isEmpty {
            let keys = secretsInConfigFile.map { $0 == "url" ? "a URL with credentials" : "the \($0)" }
            files.append((configFile, keys.joined(separator: " and ")))
        }
        if let path = server.credentialsFile { files.append((path, "NATS credentials (a user JWT and its NKey seed)")) }
        if let path = server.nkeySeedFile { files.append((path, "an NKey seed")) }
        if let path = server.tlsKeyFile { files.append((path, "a TLS private key")) }
        var warnings: [String] = []
        for (path, holds) in files {
            var info = stat()
            guard stat(path, &info) == 0 else { continue }
            let mode = info.st_mode & 0o7777
            guard mode & 0o044 != 0 else { continue }
            let readers =
                mode & 0o004 != 0 ? (mode & 0o040 != 0 ? "its group and every user" : "every user") : "its group"
            warnings.append(
                "\(path) holds \(holds) and is readable by \(readers) (mode \(String(mode, radix: 8))): whoever reads it can connect to NATS as this bridge; make it readable by the bridge's user only: chmod 600 \(path) (under systemd, pass it with LoadCredential= rather than through a group)"
            )
        }
        for flag in secretsOnCommandLine {
            warnings.append(
                "\(flag) gives a password or token on the command line, which every user of this machine can read (ps, /proc/PID/cmdline): put it in the config file (mode 600) or the environment instead"
            )
        }
        return warnings
    }

    /// Settings that only go wrong together.
    func check() throws(Invalid) {
        if server.credentialsFile != nil && server.nkeySeedFile != nil {
            throw Invalid(message: "give credentials or nkey_seed, not both: a .creds file holds its own seed")
        }
        if (server.tlsCertificateFile == nil) != (server.tlsKeyFile == nil) {
            throw Invalid(message: "tls_cert and tls_key go together: a client certificate needs its key")
        }
        if backoffCapSeconds < backoffBaseSeconds {
            throw Invalid(
                message: "backoff_cap_s (\(backoffCapSeconds)) is less than backoff_base_s (\(backoffBaseSeconds))")
        }
    }

    /// How to reach NATS, as the JetStream module takes it: `server` with the waits of
    /// `timeout_s` and the bound of `max_in_flight`.
    var natsOptions: NATSOptions {
        var options = server
        options.connectTimeout = .seconds(min(timeoutSeconds, 5))
        options.jetStreamWait = .seconds(timeoutSeconds)
        options.publishAckTimeout = .seconds(timeoutSeconds)
        options.maxPendingPublishes = maxInFlight
        // A silent network (no reset, no FIN) is noticed within a few timeouts, not minutes.
        options.pingInterval = .seconds(max(timeoutSeconds, 5))
        return options
    }

    /// The stream a bridge creates when the server has none.
    var streamConfig: StreamConfig {
        StreamConfig(
            name: stream, subjects: [prefix + ".>"], storage: .file, duplicateWindow: .seconds(duplicateWindowSeconds))
    }

    static func isStreamName(_ text: String) -> Bool {
        (1...255).contains(text.utf8.count) && text.utf8.allSatisfy(isTokenByte)
    }

    static func isSubjectPrefix(_ text: String) -> Bool {
        let tokens = text.split(separator: ".", omittingEmptySubsequences: false)
        return text.utf8.count <= 200 && tokens.allSatisfy { !$0.isEmpty && $0.utf8.allSatisfy(isTokenByte) }
    }

    static func isConsumerName(_ text: String) -> Bool {
        (1...64).contains(text.utf8.count) && text.utf8.allSatisfy { isTokenByte($0) || $0 == UInt8(ascii: ".") }
    }

    static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "_"), UInt8(ascii: "-"):
            return true
        default: return false
        }
    }

    /// evstored's socket as evctl finds it: EVSTORE_SOCKET, else the first that exists of
    /// $XDG_RUNTIME_DIR/evstore/evstored.sock, /run/evstore/evstored.sock and
    /// ./.evstore/evstored.sock, else the system one.
    static func defaultSocketPath(_ environment: [String: String]) -> String {
        if let path = environment["EVSTORE_SOCKET"], !path.isEmpty { return path }
        var candidates: [String] = []
        if let runtime = environment["XDG_RUNTIME_DIR"], !runtime.isEmpty {
            candidates.append(runtime + "/evstore/evstored.sock")
        }
        candidates += ["/run/evstore/evstored.sock", ".evstore/evstored.sock"]
        return candidates.first { FileManager.default.fileExists(atPath: $0) } ?? "/run/evstore/evstored.sock"
    }
}
