// Daemon: the methods, the admission stage, the configuration and the composition of the
// layers below it; the only target that knows them all.

import Arguments
import Dispatch
import EventStore
import FoundationEssentials
import Lifecycle
import Logging
import Replication
import Server
import Synchronization
import UnixSocket
import Version
import Writer

#if canImport(Glibc)
    import Glibc
#endif

/// `evstored`: reads the configuration, opens the store, serves the socket until SIGTERM.
public struct Evstored: Command {
    public static let version = EvstoreVersion.current

    /// sysexits(3) codes, as the help text lists them.
    enum Exit {
        static let unavailable: Int32 = 69
        static let cantCreate: Int32 = 73
        static let ioError: Int32 = 74
        static let config: Int32 = 78
    }

    public static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "evstored",
            abstract: "The evstore daemon: serves the event store to local clients on a Unix socket.",
            discussion: """
                Runs in the foreground and speaks newline-delimited JSON-RPC 2.0 on its socket.

                Each setting comes from, strongest first: its flag, its EVSTORE_* environment \
                variable, the JSON config file (--config FILE or EVSTORE_CONFIG; under systemd also \
                \(Configuration.systemConfigFile) when it exists), then the default. The config \
                file's keys are the option names with underscores: data_dir, socket, ...
                """,
            usage: ["[--config FILE] [--data-dir DIR] [--socket PATH] [--node NAME] [OPTION...]"],
            arguments: [.option("config", value: "FILE", help: "The JSON config file (also EVSTORE_CONFIG).")]
                + Configuration.options.filter { !$0.fileOnly }.map { option in
                    .option(
                        option.flagName, value: "VALUE",
                        help: option.help.prefix(1).uppercased() + option.help.dropFirst()
                            + " (also \(option.variable)).")
                },
            version: version,
            sections: [
                HelpSection(
                    "defaults",
                    """
                    The data directory: $STATE_DIRECTORY (under systemd), else $XDG_STATE_HOME/evstore, \
                    else ./.evstore/data. The socket: $RUNTIME_DIRECTORY/evstored.sock, else \
                    $XDG_RUNTIME_DIR/evstore/evstored.sock, else ./.evstore/evstored.sock. Peers are \
                    set only in the config file ("peers") or with `evctl peers add`.
                    """),
                HelpSection("signals", "SIGTERM or SIGINT drain and stop (exit 0); SIGHUP re-reads the config file."),
                HelpSection(
                    "exit status",
                    """
                       0   stopped cleanly
                      64   usage: the command line is wrong
                      69   the socket or the data directory is in use by another daemon
                      73   the data directory or the socket cannot be created
                      74   the store cannot be opened
                      78   the configuration is not usable
                    """),
            ],
            manualSection: "8",
            manualSections: manualSections)
    }

    /// The manual page's own sections: every config file key, the files and the environment.
    static var manualSections: [HelpSection] {
        [
            HelpSection(
                "configuration file",
                """
                A JSON object; every key is optional. Unknown keys are an error (exit 78), so a typo \
                does not pass unnoticed. The keys, with their defaults:

                """ + Configuration.options.map { "  \($0.key)\n      \($0.help)" }.joined(separator: "\n") + """


                    For example:

                      {"node": "van-7", "durability": "full",
                       "peers": [{"name": "hq", "url": "ssh://evstore@hq.example.net"}],
                       "write_groups": ["evstore"], "read_groups": ["adm"]}
                    """),
            HelpSection(
                "files",
                """
                  \(Configuration.systemConfigFile)
                      the config file read under systemd (a conffile of the package)
                  /var/lib/evstore/data.mdb
                      the store under systemd ($STATE_DIRECTORY); back it up with `evctl backup`
                  /run/evstore/evstored.sock
                      the socket under systemd ($RUNTIME_DIRECTORY), or held by evstored.socket
                  /lib/systemd/system/evstored.service, evstored.socket
                      the units (the package enables the socket); evstore-metrics.timer, when
                      enabled, writes metrics for node_exporter every minute
                """),
            HelpSection(
                "environment",
                """
                EVSTORE_CONFIG and one EVSTORE_* variable per setting (EVSTORE_DATA_DIR, \
                EVSTORE_SOCKET, ...: the key in capitals). STATE_DIRECTORY and RUNTIME_DIRECTORY \
                (set by systemd) place the store and the socket; LISTEN_FDS, LISTEN_PID and \
                LISTEN_FDNAMES pass a socket-activated listener; NOTIFY_SOCKET and WATCHDOG_USEC \
                carry the readiness and watchdog messages.
                """),
            HelpSection("see also", "evctl(1), systemd.service(5), systemd.socket(5)"),
        ]
    }

    let commandLine: Configuration.CommandLine

    public init(_ arguments: ParsedArguments) {
        var commandLine = Configuration.CommandLine(configFile: arguments["config"])
        for option in Configuration.options where !option.fileOnly {
            if let value = arguments[option.flagName] { commandLine.values[option.key] = value }
        }
        self.commandLine = commandLine
    }

    public func run() throws {
        let environment = ProcessInfo.processInfo.environment
        let configuration: Configuration
        do {
            configuration = try Configuration.resolve(commandLine: commandLine, environment: environment)
        } catch {
            throw CommandFailure(exitCode: Exit.config, "configuration: \(error)")
        }
        let daemon = Daemon(configuration: configuration, commandLine: commandLine, environment: environment)
        let code = daemon.serve()
        if code != 0 { throw CommandFailure(exitCode: code, nil) }
    }
}

/// One run of the daemon, from open to stop.
final class Daemon: Sendable {
    let commandLine: Configuration.CommandLine
    let environment: [String: String]
    let logger: Logger
    let systemd: Systemd
    let initial: Configuration
    /// The configuration in force (SIGHUP replaces the reloadable parts).
    let configuration: Mutex<Configuration>

    init(configuration: Configuration, commandLine: Configuration.CommandLine, environment: [String: String]) {
        self.initial = configuration
        self.configuration = Mutex(configuration)
        self.commandLine = commandLine
        self.environment = environment
        self.logger = Logger(label: "evstored", level: configuration.logLevel)
        self.systemd = Systemd(environment: environment)
    }

    /// Serves until SIGTERM or SIGINT; returns the exit code.
    func serve() -> Int32 {
        let configuration = initial
        Allocator.returnLargeBuffers()
        Allocator.limitHeaps(to: Int32(clamping: sysconf(Int32(_SC_NPROCESSORS_ONLN))))
        signal(SIGPIPE, SIG_IGN)
        for stop in [SIGTERM, SIGINT, SIGHUP] { signal(stop, SIG_IGN) }
        // Signals are taken from the start: a SIGTERM while the store opens still stops us.
        let stopRequested = DispatchSemaphore(value: 0)
        let servingContext = Mutex<Serving?>(nil)
        let signalQueue = DispatchQueue(label: "evstored.signals")
        var sources: [any DispatchSourceSignal] = []
        for number in [SIGTERM, SIGINT] {
            let source = DispatchSource.makeSignalSource(signal: number, queue: signalQueue)
            source.setEventHandler { [logger] in
                logger.info("\(number == SIGTERM ? "SIGTERM" : "SIGINT"): stopping")
                stopRequested.signal()
            }
            source.resume()
            sources.append(source)
        }
        let hangup = DispatchSource.makeSignalSource(signal: SIGHUP, queue: signalQueue)
        hangup.setEventHandler { [self] in
            if let serving = servingContext.withLock({ $0 }) { reload(serving) }
        }
        hangup.resume()
        sources.append(hangup)
        defer { for source in sources { source.cancel() } }

        // Held until the process ends: the store stays this daemon's while it is open.
        let lock: DataDirectoryLock
        switch prepareDirectories(configuration) {
        case .success(let taken): lock = taken
        case .failure(let failure): return failure.code
        }
        defer { withExtendedLifetime(lock) {} }
        let (code, store) = serveStore(configuration, stopRequested: stopRequested, servingContext: servingContext)
        guard code == 0 else { return code }
        // Every user of the store has ended; the last references go as their threads exit.
        let deadline = Date().addingTimeInterval(2)
        while store.log != nil, Date() < deadline { sleepThread(seconds: 0.01) }
        if store.log == nil {
            logger.info("stopped cleanly; the store is closed")
        } else {
            logger.warning("stopped; the store was still referenced, the system closes it at exit")
        }
        return 0
    }

    /// Holds the log weakly, to tell whether it was closed.
    final class WeakLog {
        weak var log: EventLog?
        init(_ log: EventLog?) { self.log = log }
    }

    /// An exit status, for a start that cannot go on.
    struct StartFailure: Error {
        var code: Int32
    }

    /// Makes the socket's directory and the data directory, each with its documented mode,
    /// and takes the data directory's lock, before the store opens.
    ///
    /// The socket's directory comes first: when the data directory lies inside it (the
    /// default `./.evstore`), making the data directory first would make it with the data
    /// directory's 0700, and the socket's group could not reach the socket.
    private func prepareDirectories(_ configuration: Configuration) -> Result<DataDirectoryLock, StartFailure> {
        let activated = !Systemd.listenDescriptors(environment: environment).isEmpty
        if !activated { makeSocketDirectory(configuration) }
        do {
            try FileManager.default.createDirectory(
                atPath: configuration.dataDirectory, withIntermediateDirectories: true,
                attributes: [.posixPermissions: 0o700])
        } catch {
            logger.error(
                "cannot create the data directory \(configuration.dataDirectory): \(error)")
            return .failure(StartFailure(code: Evstored.Exit.cantCreate))
        }
        var directoryInfo = stat()
        if stat(configuration.dataDirectory, &directoryInfo) == 0, directoryInfo.st_mode & 0o007 != 0 {
            logger.notice(
                "the data directory \(configuration.dataDirectory) is mode \(String(directoryInfo.st_mode & 0o777, radix: 8)): other users may list it; `chmod 0700` it (the store's files are 0600 either way)"
            )
        }
        let socket = activated ? "\(configuration.socketPath) (passed by systemd)" : configuration.socketPath
        do {
            return .success(try DataDirectoryLock(directory: configuration.dataDirectory, socket: socket))
        } catch {
            switch error {
            case .held(let pid, let holder):
                logger.error(
                    "the data directory \(configuration.dataDirectory) is in use by another evstored (pid \(pid ?? "unknown"), socket \(holder ?? "unknown")): two daemons on one store would each miss the appends made through the other; stop that one, or give this one its own data_dir"
                )
                return .failure(StartFailure(code: Evstored.Exit.unavailable))
            case .unusable(let reason):
                logger.error("cannot lock the data directory \(configuration.dataDirectory): \(reason)")
                return .failure(StartFailure(code: Evstored.Exit.cantCreate))
            }
        }
    }

    /// Opens the store, serves until a stop is requested, drains; the exit code.
    private func serveStore(
        _ configuration: Configuration, stopRequested: DispatchSemaphore,
        servingContext: borrowing Mutex<Serving?>
    ) -> (Int32, WeakLog) {
        let blobs: BlobStore
        do {
            blobs = try BlobStore(directory: configuration.dataDirectory + "/blobs", limits: configuration.blobLimits)
        } catch {
            logger.error("cannot open the blob store in \(configuration.dataDirectory)/blobs: \(error)")
            return (Evstored.Exit.ioError, WeakLog(nil))
        }
        let log: EventLog
        let trainingDue = DispatchSemaphore(value: 0)
        do {
            var options = StoreOptions()
            options.blobPresent = { [blobs] hash in blobs.contains(hash) }
            options.maxEventBytes = configuration.maxEventBytes
            options.maxClockSkewMilliseconds = UInt64(configuration.maxClockSkewSeconds) * 1000
            options.environment.maxMapSize = configuration.mapMaxBytes
            options.blockCacheBytes = configuration.blockCacheBytes
            options.environment.initialMapSize = min(configuration.mapInitialBytes, configuration.mapMaxBytes)
            options.dictionaryTrainingThreshold = configuration.dictionaryTrainingEvents
            options.environment.durable = configuration.durability == .full
            options.environment.maxReaders = 1024
            // Trained on the maintenance thread, so no append waits for it; woken as soon as
            // a commit makes it due. The first one excepted: the writer trains it inline, so
            // what a bulk load or a first sync stores meanwhile is not left without one.
            options.trainsDictionaryAutomatically = false
            options.trainsFirstDictionaryInline = true
            options.trainingDue = { [trainingDue] in trainingDue.signal() }
            options.machineID = Daemon.machineID(from: configuration.machineIDFile)
            log = try EventLog.open(directory: configuration.dataDirectory, options: options)
        } catch {
            logger.error("cannot open the store in \(configuration.dataDirectory): \(error)")
            return (Evstored.Exit.ioError, WeakLog(nil))
        }
        do {
            log.typeRules = try configuration.typeRules()
            Daemon.describeAuthorities(log.typeRules, logger: logger)
        } catch {
            logger.error("cannot start: \(error)")
            return (Evstored.Exit.config, WeakLog(nil))
        }
        if log.storedFormat < EventLog.formatVersion {
            logger.notice("upgraded the store from format \(log.storedFormat) to \(EventLog.formatVersion)")
        }
        if let previous = log.previousNodeID {
            logger.warning(
                "this data directory was first used on another machine (its /etc/machine-id differs): this node now creates events as \(log.nodeID) instead of \(previous), so the two never share an origin"
            )
        }

        let listener: UnixListener
        do {
            listener = try listen(configuration)
        } catch {
            logger.error("cannot serve the socket: \(error)")
            return (error.code == EADDRINUSE ? Evstored.Exit.unavailable : Evstored.Exit.cantCreate, WeakLog(nil))
        }

        let hub = WatchHub(logger: logger, limits: WatchLimits(configuration))
        let writer = Writer(log: log, hub: hub, logger: logger)
        let health = Health()
        var node = SyncNode(
            log: log, name: configuration.nodeName, writer: writer,
            forwarded: { [log] line in Admission.answerForwarded(line, rules: { log.typeRules }, writer: writer) })
        node.blobs = Daemon.syncBlobs(blobs, log: log, writer: writer, logger: logger)
        let sync = SyncService(
            node: node, settings: SyncService.Settings(configuration), logger: logger, health: health)
        let retention = BlobRetentionService(
            log: log, store: blobs, writer: writer, sync: sync, logger: logger,
            retentionSeconds: configuration.blobRetentionSeconds)
        let methods = Methods(
            log: log, node: Methods.NodeInfo(name: configuration.nodeName, dataDirectory: configuration.dataDirectory),
            startedAt: Date(), writer: writer, sync: sync, backupDirectory: configuration.backupDirectory,
            maxPageBytes: configuration.maxPageBytes, maxConsumers: configuration.maxConsumers, blobs: blobs,
            retention: retention)
        let context = ServerContext(
            writer: writer, hub: hub, sessions: RPCSessions(methods: methods), incoming: sync, logger: logger,
            limits: Limits(configuration),
            access: configuration.access, requestThreads: configuration.requestThreads,
            maxBufferedBytes: configuration.maxBufferedBytes)
        let server: Server
        do {
            server = try Server(listener: listener, context: context, eventLoops: configuration.eventLoops)
        } catch {
            logger.error("cannot start serving the socket: \(error)")
            return (Evstored.Exit.unavailable, WeakLog(nil))
        }
        let maintenance = Maintenance(
            log: log, writer: writer, logger: logger, systemd: systemd, durability: configuration.durability,
            health: health, trainingDue: trainingDue)
        // Each may use those before it: the writer first, as everything writes through it;
        // maintenance stores dictionaries through the writer; the server and the sessions
        // write through it.
        var services = [
            Service("writer", start: writer.start, stop: writer.stop),
            Service("maintenance thread", start: maintenance.start, stop: maintenance.stop),
            Service(
                "server", start: { if let error = server.start() { throw error } }, stop: { server.stop(timeout: 20) }),
            Service("sync scheduler", start: sync.start, stop: sync.stop),
            Service("blob retention", start: retention.start, stop: retention.stop),
        ]
        #if os(Linux)
            let network = NetworkWatch(sync: sync, logger: logger)
            services.append(Service("network watch", start: network.start, stop: network.stop))
        #endif
        let group = ServiceGroup(services)
        do {
            try group.start()
        } catch {
            logger.error("\(error)")
            return (Evstored.Exit.unavailable, WeakLog(nil))
        }
        servingContext.withLock { $0 = Serving(context: context, sync: sync, log: log, retention: retention) }
        Daemon.decidePendingProposals(writer, logger: logger)

        logger.info("access: \(configuration.accessSummary)")
        let events: String
        do {
            events = "\(try log.statistics().events)"
        } catch {
            logger.error("cannot read the store's statistics: \(error)")
            events = "an unknown number of"
        }
        let summary = "serving \(events) events on \(listener.path ?? "the activated socket")"
        logger.info(
            "node \(log.nodeID)\(configuration.nodeName.map { " (\($0))" } ?? ""): \(summary), data in \(configuration.dataDirectory)"
        )
        systemd.ready(status: summary)

        stopRequested.wait()
        systemd.stopping(status: "draining \(server.connectionCount) connections")
        // The network watch and the sessions first, then the clients, the writer last.
        group.stop()
        if configuration.durability == .relaxed {
            do {
                try log.sync()
            } catch {
                logger.error("cannot flush the store to disk at stop: \(error); the last second of appends may be lost")
                servingContext.withLock { $0 = nil }
                return (Evstored.Exit.ioError, WeakLog(log))
            }
        }
        servingContext.withLock { $0 = nil }
        return (0, WeakLog(log))
    }

    /// The node's blobs for sync: what it lacks comes from the store's pending list, from a
    /// place chosen at random each time, so blobs no peer holds never keep the rest from
    /// being asked for; what arrives leaves the list through the writer.
    static func syncBlobs(_ store: BlobStore, log: EventLog, writer: Writer, logger: Logger) -> SyncBlobs {
        SyncBlobs(
            store: store,
            pending: { [log] (limit) throws(EventStoreError) in
                let start = BlobHash(digest: (0..<32).map { _ in UInt8.random(in: 0...255) })
                var found = try log.pendingBlobs(after: start, limit: limit)
                if found.count < limit {
                    found += try log.pendingBlobs(limit: limit - found.count).filter { $0.hash.hex <= start.hex }
                }
                return found.map { ($0.hash, $0.size) }
            },
            arrived: { [writer] hashes in
                do {
                    try writer.perform(BlobsArrivedJob(hashes), from: -3)
                } catch {
                    // Still listed, it is only asked for again and found held.
                    logger.warning("cannot take \(hashes.count) received blobs off the pending list: \(error)")
                }
            })
    }

    /// The socket systemd passed, or a new one at the configured path.
    private func listen(_ configuration: Configuration) throws(SocketError) -> UnixListener {
        if let descriptor = Systemd.listenDescriptors(environment: environment).first {
            logger.info("serving the socket systemd passed (descriptor \(descriptor))")
            return UnixListener.adopting(descriptor: descriptor)
        }
        var group: UInt32?
        if let name = configuration.socketGroup {
            guard let id = groupID(named: name) else {
                throw SocketError(
                    "chown", path: configuration.socketPath, code: EINVAL, message: "no group \"\(name)\"")
            }
            group = id
        }
        return try UnixListener.bind(
            path: configuration.socketPath, mode: mode_t(configuration.socketMode), group: group)
    }

    /// Makes the socket's directory when it is missing. It lets through whom the socket's
    /// mode lets in: mode 0750 and the socket's group (socket_group's, when set), or 0755
    /// when the mode grants others. One that exists is left alone.
    private func makeSocketDirectory(_ configuration: Configuration) {
        let directory = parentDirectory(of: configuration.socketPath)
        guard !directory.isEmpty, !FileManager.default.fileExists(atPath: directory) else { return }
        let mode = configuration.socketMode & 0o007 != 0 ? 0o755 : 0o750
        try? FileManager.default.createDirectory(
            atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: mode])
        // An unknown group stops the start when the socket is bound, with its message.
        if let name = configuration.socketGroup, let group = groupID(named: name) {
            _ = chown(directory, uid_t.max, group)
        }
    }

    /// SIGHUP: re-reads the config file and applies what can change while serving.
    /// `authority` and `offline` are read and shown, not yet enforced: said once per load,
    /// so nobody takes a status decided anywhere for one decided by the authority.
    /// Decides the proposals this node holds undecided of the types it is the authority of:
    /// those that reached it before its types file or its name made it their authority.
    static func decidePendingProposals(_ writer: Writer, logger: Logger) {
        // Only an authority decides: elsewhere no job goes to the writer (nor a commit).
        let rules = writer.log.typeRules
        guard let local = rules.localNode, rules.types.values.contains(where: { $0.authority == local }) else { return }
        var total = 0
        do {
            while true {
                let (decided, more) = try writer.perform(DecidePendingJob(), from: -10)
                total += decided
                guard more else { break }
            }
        } catch {
            logger.error("cannot decide the proposals this node holds: \(error)")
            return
        }
        if total > 0 { logger.notice("decided \(total) proposals held from before this node was their authority") }
    }

    static func describeAuthorities(_ rules: TypeRules, logger: Logger) {
        let handed = rules.types.filter { $0.value.offline == "refuse" && $0.value.authority != rules.localNode }
        for (type, authority) in handed.compactMapValues(\.authority).sorted(by: { $0.key < $1.key }) {
            logger.info(
                "types_file: appends of \(type) are made only at \(authority): this node hands them to it over a peer that reaches it, and refuses them (unavailable) when none answers"
            )
        }
        let authorities = Set(rules.types.values.compactMap(\.authority))
        if rules.localNode == nil, !authorities.isEmpty {
            logger.warning(
                "types_file names authorities (\(authorities.sorted().joined(separator: ", "))) but this node has no node_name: it decides nothing, and its status events of those types are proposals"
            )
        }
    }

    /// What a reload changes while the daemon serves.
    struct Serving: Sendable {
        let context: ServerContext
        let sync: SyncService
        let log: EventLog
        let retention: BlobRetentionService
    }

    private func reload(_ serving: Serving) {
        let context = serving.context
        do {
            let fresh = try Configuration.resolve(commandLine: commandLine, environment: environment)
            // What the option table marks as reloading is applied; the rest waits for a restart.
            // The settings in force from now: the running ones with what reloads replaced.
            let (old, current, restartNeeded) = configuration.withLock { running in
                let previous = running
                let restartNeeded = running.reload(fresh)
                return (previous, running, restartNeeded)
            }
            logger.level = current.logLevel
            context.limits = Limits(current)
            context.budget.limit = current.maxBufferedBytes
            context.access = current.access
            context.hub.limits = WatchLimits(current)
            if current.access != old.access {
                logger.info("SIGHUP: access for new connections: \(current.accessSummary)")
            }
            serving.sync.update(SyncService.Settings(current))
            serving.retention.retentionSeconds.store(current.blobRetentionSeconds, ordering: .relaxed)
            if current.mapMaxBytes != old.mapMaxBytes { serving.log.setMaxStorageBytes(current.mapMaxBytes) }
            if current.blockCacheBytes != old.blockCacheBytes {
                serving.log.setBlockCacheBytes(current.blockCacheBytes)
            }
            // The writer's clock takes it at its next write: a dead letter refused for its
            // lead can be retried under the new bound.
            serving.log.setMaxClockSkew(milliseconds: UInt64(current.maxClockSkewSeconds) * 1000)
            // Read again whether or not its path changed: editing the file and sending a SIGHUP
            // is how a fleet gets new rules. A file that cannot be used leaves the rules as
            // they were.
            do {
                let rules = try current.typeRules()
                if rules != serving.log.typeRules {
                    serving.log.typeRules = rules
                    Daemon.describeAuthorities(rules, logger: logger)
                    Daemon.decidePendingProposals(context.writer, logger: logger)
                    logger.info(
                        "SIGHUP: rules for \(rules.types.count) types from \(current.typesFile ?? "no types file")")
                }
            } catch {
                logger.error("SIGHUP: \(error); the rules before stay in force")
            }
            logger.info(
                "SIGHUP: configuration reloaded\(restartNeeded.isEmpty ? "" : "; a restart applies \(restartNeeded.joined(separator: ", "))")"
            )
            systemd.status("configuration reloaded")
        } catch {
            logger.error("SIGHUP: the configuration was not reloaded: \(error)")
        }
    }

    /// This host's identity, from `path` (or D-Bus's copy of /etc/machine-id); nil when
    /// there is none, and then the check is skipped.
    static func machineID(from path: String) -> String? {
        for path in [path, "/var/lib/dbus/machine-id"] {
            if let text = try? String(contentsOfFile: path, encoding: .utf8) {
                let id = text.trimmed()
                if !id.isEmpty { return id }
            }
        }
        return nil
    }
}

/// Background chores on one thread: flushing relaxed commits, training the compression
/// dictionary when due, and the systemd watchdog.
final class Maintenance: Sendable {
    let log: EventLog
    let writer: Writer
    let logger: Logger
    let systemd: Systemd
    let durability: Configuration.Durability
    let health: Health
    /// Signalled by the writer after the commit that makes a dictionary due, and by `stop`.
    private let wake: DispatchSemaphore
    private let stopping = Atomic<Bool>(false)
    private let done = DispatchSemaphore(value: 0)

    init(
        log: EventLog, writer: Writer, logger: Logger, systemd: Systemd, durability: Configuration.Durability,
        health: Health, trainingDue: DispatchSemaphore
    ) {
        self.wake = trainingDue
        self.log = log
        self.health = health
        self.writer = writer
        self.logger = logger
        self.systemd = systemd
        self.durability = durability
    }

    func start() {
        startServiceThread(name: "evstored-maintenance") { [self] in
            run()
            done.signal()
        }
    }

    func stop() {
        stopping.store(true, ordering: .releasing)
        wake.signal()
        done.wait()
    }

    /// Whether a read of the store succeeds.
    private func storeAnswers() -> Bool {
        do {
            _ = try log.statistics()
            return true
        } catch {
            return false
        }
    }

    private func run() {
        let tick = min(1.0, (systemd.watchdogInterval ?? 2) / 2)
        var lastTraining = Date.distantPast
        while true {
            // Woken early: a commit made a dictionary due (or the daemon is stopping).
            let woken = wake.wait(timeout: .now() + tick) == .success
            if stopping.load(ordering: .acquiring) { break }
            if durability == .relaxed {
                do {
                    try log.sync()
                } catch {
                    logger.error("cannot flush the store to disk: \(error)")
                    health.raise(.fsync, "cannot flush the store to disk: \(error)")
                }
            }
            if woken || Date().timeIntervalSince(lastTraining) >= 5 {
                lastTraining = Date()
                let started = ContinuousClock.now
                do {
                    if let version = try writer.trainDictionaryIfDue() {
                        let took = (ContinuousClock.now - started).components
                        let milliseconds = took.seconds * 1000 + took.attoseconds / 1_000_000_000_000_000
                        logger.info(
                            "trained compression dictionary version \(version) in \(milliseconds) ms, \(woken ? "as soon as a commit made one due" : "at the five-second round")"
                        )
                    }
                } catch {
                    logger.warning("dictionary training failed: \(error)")
                }
            }
            // The watchdog hears from us only while the store answers and its writes succeed.
            if systemd.watchdogInterval != nil, health.isHealthy, storeAnswers() { systemd.watchdogPing() }
        }
    }
}

/// The directory part of `path`: `/run/evstore` of `/run/evstore/evstored.sock`, `/` of
/// `/x`, empty for a bare name (trailing slashes do not count).
func parentDirectory(of path: String) -> String {
    var path = Substring(path)
    while path.count > 1, path.hasSuffix("/") { path.removeLast() }
    guard let slash = path.lastIndex(of: "/") else { return "" }
    return slash == path.startIndex ? "/" : String(path[..<slash])
}
