import Arguments
import Dispatch
import FoundationEssentials
import JetStream
import Logging
import Version

#if canImport(Glibc)
    import Glibc
#endif

/// `evstore-nats`: publishes the events of the local evstored into a NATS JetStream stream.
public struct EvstoreNATS: Command {
    public static let version = EvstoreVersion.current

    public static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "evstore-nats",
            abstract: "Publish every event the local evstored stores into a NATS JetStream stream, exactly once.",
            discussion: """
                Reads the daemon's log as the durable consumer "nats" (--consumer), in seq order, \
                and publishes each event to the subject PREFIX.TYPE of the stream (created when \
                missing), its id as Nats-Msg-Id, the headers Evstore-Origin, Evstore-Node and \
                Evstore-Seq, and the event's canonical JSON as the body. A seq is acknowledged to \
                the daemon only once JetStream has acknowledged every event up to it, so after a \
                crash of the bridge, the daemon or the server it goes on from there: the stream \
                drops what it already holds, and skips nothing. Its progress shows as the \
                consumer's lag in `evctl status`.

                Each publish is for the configured stream only (Nats-Expected-Stream): when \
                another stream takes the subjects, it refuses them, nothing is acknowledged to \
                the daemon, and the session fails naming both streams, to go on by itself once \
                the streams are set right. No password or token appears in its output (URLs \
                show as nats://user:***@host); at start it warns about a file holding a secret \
                that its group or others may read.

                Each setting comes from, strongest first: its flag, its EVSTORE_NATS_* environment \
                variable, the JSON config file (--config FILE or EVSTORE_NATS_CONFIG; under \
                systemd also \(BridgeConfiguration.systemConfigFile) when it exists), then the \
                default. The config file's keys are the option names with underscores.
                """,
            usage: ["[--config FILE] [--url URL] [--socket PATH] [OPTION...]"],
            arguments: [.option("config", value: "FILE", help: "The JSON config file (also EVSTORE_NATS_CONFIG).")]
                + BridgeConfiguration.options.map { option in
                    .option(
                        option.flagName, value: "VALUE",
                        help: option.help.prefix(1).uppercased() + option.help.dropFirst()
                            + " (also \(option.variable)).")
                },
            version: version,
            sections: [
                HelpSection(
                    "signals", "SIGTERM or SIGINT: stop reading, acknowledge what JetStream stored, exit 0."),
                HelpSection(
                    "exit status",
                    """
                       0   stopped by a signal
                      64   usage: the command line is wrong
                      78   the configuration is not usable
                    """),
            ],
            manualSection: "8",
            manualSections: [
                HelpSection(
                    "configuration file",
                    """
                    A JSON object; every key is optional, and an unknown key is an error (exit 78). \
                    The keys, with their defaults:

                    """ + BridgeConfiguration.options.map { "  \($0.key)\n      \($0.help)" }.joined(separator: "\n")
                        + """


                        For example:

                          {"url": "tls://nats.hq.example.net:4222",
                           "credentials": "/etc/evstore/nats.creds",
                           "tls_ca": "/etc/evstore/hq-ca.pem",
                           "stream": "FIELD", "prefix": "field.van-7"}
                        """),
                HelpSection(
                    "files",
                    """
                      \(BridgeConfiguration.systemConfigFile)
                          the config file read under systemd
                      /lib/systemd/system/evstore-nats.service
                          the unit (Restart=on-failure, after evstored)
                    """),
                HelpSection("see also", "evstored(8), evctl(1), nats-server(8)"),
            ])
    }

    let values: [String: String]
    let configFile: String?

    public init(_ arguments: ParsedArguments) {
        var values: [String: String] = [:]
        for option in BridgeConfiguration.options {
            if let value = arguments[option.flagName] { values[option.key] = value }
        }
        self.values = values
        configFile = arguments["config"]
    }

    public func run() throws {
        let configuration: BridgeConfiguration
        do {
            configuration = try BridgeConfiguration.resolve(
                values: values, configFile: configFile, environment: ProcessInfo.processInfo.environment)
        } catch {
            // A URL quoted in the message shows no password or token.
            throw CommandFailure(exitCode: 78, "configuration: \(Redactor.redactURLs(in: error.message))")
        }
        let logger = Logger(label: "evstore-nats", level: configuration.logLevel)
        let bridge = Bridge(configuration: configuration, logger: logger)
        for warning in configuration.exposedSecretWarnings() { bridge.logger.warning(warning) }
        signal(SIGPIPE, SIG_IGN)
        var sources: [DispatchSourceSignal] = []
        let queue = DispatchQueue(label: "evstore-nats.signals")
        for number in [SIGTERM, SIGINT] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
            source.setEventHandler {
                logger.info("stopping")
                bridge.stop()
            }
            source.resume()
            sources.append(source)
        }
        let code = bridge.run()
        for source in sources { source.cancel() }
        if code != 0 { throw CommandFailure(exitCode: code, nil) }
    }
}
