import EventStore
import FoundationEssentials
import LayeredConfiguration
import Logging
import Projections
import Replication
import Server
import UnixSocket

#if canImport(Glibc)
    import Glibc
#endif

/// The daemon's settings, from (strongest first) flags, `EVSTORE_*` environment variables,
/// the JSON config file and the defaults.
package struct Configuration: Equatable, Sendable {
    typealias Peer = NamedPeer

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
    /// Sessions other nodes started that are answered at once; more are refused (`busy`).
    var maxIncomingSessions = 8
    /// Sessions this node starts that run at once (background and `sync`); the other due
    /// peers wait for one to end, so one silent peer never holds the rest back.
    var maxOutgoingSessions = 4
    /// Peers of the config file and of `peers.add` together; `peers.add` past it is
    /// refused, and a config file with more does not load.
    var maxPeers = 64
    /// What one sync session may cost, whatever the peer does (see `SyncLimits`).
    var syncSessionMaxSeconds = 600
    var syncReconcileMaxRounds = 1000
    var syncReconcileMaxBytes = 256 << 20
    var syncReconcileMaxIDs = 1_000_000
    var syncSessionMaxDeadLetters = 1000
    /// Events whose content each session checks with the peer (`SyncLimits.verifyEvents`).
    var syncVerifyEvents = 1024
    /// The ssh client for ssh:// peers, split as a shell splits words.
    var sshCommand = "ssh"
    var maxClockSkewSeconds = 3600
    var maxEventBytes = 65_536
    var mapMaxBytes = 64 << 30
    /// Bytes of decompressed event blocks kept for readers, in total (`StoreOptions`).
    var blockCacheBytes = 32 << 20
    /// The map's size when a store is opened (it grows by doubling, by at least this much).
    var mapInitialBytes = 64 << 20
    /// Events a store holds before its first compression dictionary is trained.
    var dictionaryTrainingEvents = 10_000
    var durability = Durability.full
    var maxLineBytes = 16 << 20
    var watchQueueEvents = 10_000
    var maxWatchesPerConnection = 64
    var maxWatches = 4096
    /// Local clients served at once; one more is refused with an error line.
    var maxConnections = 1024
    /// A connection with no request, nothing to send and no watch is closed after this
    /// long; 0: never.
    var idleTimeoutSeconds = 300
    /// A line begun and not finished within this long closes its connection.
    var lineTimeoutSeconds = 30
    /// Responses one connection may have waiting to be sent before its requests are no
    /// longer read (until the client reads its answers).
    var maxQueuedResponseBytes = 64 << 20
    /// Requests one connection may have read and not yet answered while its answers go
    /// unread; past it the client is sent an error line and cut off.
    var maxUnansweredBytes = 64 << 20
    /// What all connections together may make the daemon hold: partial lines, requests
    /// unanswered, answers and notifications queued (see `BufferBudget`).
    var maxBufferedBytes = 256 << 20
    /// Bytes of notifications one connection's watches may have waiting to be sent; past it
    /// the watch that falls behind is ended with the seq to resume after.
    var watchQueueBytes = 16 << 20
    /// A client whose answers have waited for `slowReadWindowSeconds` while it took fewer
    /// than this many bytes a second of them is cut off; 0: only one that takes none.
    var minReadBytesPerSecond = 16 << 10
    var slowReadWindowSeconds = 30
    /// Threads that wait on the sockets (each owns its share of the connections).
    var eventLoops = 1
    /// Threads that run requests, shared by every connection.
    var requestThreads = 8
    /// Requests one batch line may hold.
    var maxBatchRequests = 1000
    /// Bytes of responses one batch may gather; the members after get `too_large`.
    var maxBatchResponseBytes = 16 << 20
    /// A page of `log` or dead letters ends early (with `next`) once it holds this many bytes.
    var maxPageBytes = Configuration.defaultMaxPageBytes
    static let defaultMaxPageBytes = 8 << 20
    /// Durable consumers the store keeps; a new one past it is refused.
    var maxConsumers = Configuration.defaultMaxConsumers
    static let defaultMaxConsumers = 64
    /// The blob store's bounds: one blob, all of them, the free space they leave, uploads.
    var blobLimits = BlobStore.Limits()
    /// How long a blob nothing needs is kept before retention removes it.
    var blobRetentionSeconds = 30 * 86_400
    var logLevel = Logger.Level.info
    /// Where this host's identity is read (a data directory copied to another machine
    /// takes a fresh node id). Containers that share or lack /etc/machine-id point it at a
    /// file of their own.
    var machineIDFile = "/etc/machine-id"
    /// Who may read and who may write, as given: group or user names, or numeric ids.
    /// `access` holds them resolved to ids.
    var readGroups: [String] = []
    var writeGroups: [String] = []
    var readUsers: [String] = []
    var writeUsers: [String] = []
    /// Users besides root and the daemon's own who may give `exec:` peer URLs through the
    /// API (their command runs as the daemon's user), as given.
    var execUsers: [String] = []
    /// `backup_dir`: when set, `backup` writes only under this directory.
    var backupDirectory: String?
    /// `types_file`: the rules per entity type (none when unset); a SIGHUP reads it again.
    var typesFile: String?
    /// Where each of the four lists came from, for messages.
    var accessSources: [String: String] = [:]
    /// The four lists resolved (names looked up) when the configuration is read.
    var access = AccessPolicy()

    /// One setting as each source names it.
    struct Option: Sendable {
        let key: String
        let help: String
        /// The flag's name without its dashes: data-dir.
        var flagName: String { key.replacing("_", with: "-") }
        var flag: String { "--" + flagName }
        var variable: String { "EVSTORE_" + key.uppercased() }
        /// Settable from the config file only (a list).
        var fileOnly = false
        /// The setting it sets.
        let field: Field
        /// Whether SIGHUP applies a new value to the running daemon; else a restart does,
        /// and the reload's log line says so.
        let reloads: Bool

        init(key: String, help: String, fileOnly: Bool = false, field: Field, reloads: Bool) {
            self.key = key
            self.help = help
            self.fileOnly = fileOnly
            self.field = field
            self.reloads = reloads
        }
    }

    /// One member of a configuration, to copy or compare without naming it.
    struct Field: Sendable {
        /// Sets the member of the first to the second's.
        let copy: @Sendable (inout Configuration, Configuration) -> Void
        /// Whether the two differ in it.
        let differs: @Sendable (Configuration, Configuration) -> Bool

        static func at<Value: Equatable & Sendable>(_ path: WritableKeyPath<Configuration, Value> & Sendable) -> Field {
            Field(copy: { $0[keyPath: path] = $1[keyPath: path] }, differs: { $0[keyPath: path] != $1[keyPath: path] })
        }
    }

    /// Applies to `self` what SIGHUP reloads of `fresh` (and the access policy made of
    /// those); the keys of the others that differ, which a restart applies.
    mutating func reload(_ fresh: Configuration) -> [String] {
        var restartNeeded: [String] = []
        for option in Configuration.options {
            if option.reloads {
                option.field.copy(&self, fresh)
            } else if option.field.differs(self, fresh) {
                restartNeeded.append(option.key)
            }
        }
        access = fresh.access
        accessSources = fresh.accessSources
        return restartNeeded
    }

    static let options: [Option] = [
        Option(
            key: "data_dir", help: "directory of the store (created if missing)", field: .at(\.dataDirectory),
            reloads: false),
        Option(key: "socket", help: "path of the Unix socket to serve", field: .at(\.socketPath), reloads: false),
        Option(
            key: "socket_mode", help: "file mode of the socket, octal (default 0660)", field: .at(\.socketMode),
            reloads: false),
        Option(
            key: "socket_group", help: "group owning the socket (default: the daemon's)", field: .at(\.socketGroup),
            reloads: false),
        Option(
            key: "node", help: "a human name for this node (the node id is generated)", field: .at(\.nodeName),
            reloads: false),
        Option(
            key: "peers", help: "peers to sync with: [{\"name\",\"url\",\"blobs\":\"eager|lazy|none\"}]",
            fileOnly: true, field: .at(\.peers),
            reloads: true),
        Option(
            key: "sync_interval_s", help: "seconds between background syncs with each peer (30)",
            field: .at(\.syncIntervalSeconds), reloads: true),
        Option(
            key: "backoff_base_s", help: "first retry delay after a failed sync, seconds (2)",
            field: .at(\.backoffBaseSeconds), reloads: true),
        Option(
            key: "backoff_cap_s", help: "longest retry delay, seconds (600)", field: .at(\.backoffCapSeconds),
            reloads: true),
        Option(
            key: "sync_timeout_s", help: "a peer silent this long ends the session, seconds (30)",
            field: .at(\.syncTimeoutSeconds), reloads: true),
        Option(
            key: "max_incoming_sessions", help: "sync sessions from other nodes answered at once (8)",
            field: .at(\.maxIncomingSessions), reloads: true),
        Option(
            key: "max_outgoing_sessions", help: "sync sessions with peers this node runs at once (4)",
            field: .at(\.maxOutgoingSessions), reloads: true),
        Option(
            key: "max_peers", help: "peers of the config file and peers.add together (64)", field: .at(\.maxPeers),
            reloads: true),
        Option(
            key: "sync_session_max_s", help: "the longest a sync session may last, seconds (600)",
            field: .at(\.syncSessionMaxSeconds), reloads: true),
        Option(
            key: "sync_reconcile_max_rounds", help: "reconcile frames a peer may send in one session (1000)",
            field: .at(\.syncReconcileMaxRounds), reloads: true),
        Option(
            key: "sync_reconcile_max_bytes", help: "bytes of reconcile frames a peer may send in one session (256 MiB)",
            field: .at(\.syncReconcileMaxBytes), reloads: true),
        Option(
            key: "sync_reconcile_max_ids",
            help: "events reconciliation may find a peer lacks in one session; more wait for the next (1000000)",
            field: .at(\.syncReconcileMaxIDs), reloads: true),
        Option(
            key: "sync_session_max_dead_letters",
            help: "invalid events one session may add to the dead letters; then it ends (1000)",
            field: .at(\.syncSessionMaxDeadLetters), reloads: true),
        Option(
            key: "sync_verify_events",
            help: "events of both nodes whose content each session answered here compares; 0: none (1024)",
            field: .at(\.syncVerifyEvents), reloads: true),
        Option(
            key: "ssh_command", help: "the ssh client for ssh:// peers, with its options (ssh)",
            field: .at(\.sshCommand), reloads: true),
        Option(
            key: "max_clock_skew_s", help: "how far ahead a stored id may be and still move the clock (3600)",
            field: .at(\.maxClockSkewSeconds), reloads: true),
        Option(
            key: "max_event_bytes",
            help:
                "largest event appended or imported here, canonical JSON bytes (65536); peers' events may be up to 16 MiB",
            field: .at(\.maxEventBytes), reloads: false),
        Option(
            key: "map_max_bytes", help: "largest size the store may grow to, bytes (64 GiB)", field: .at(\.mapMaxBytes),
            reloads: true),
        Option(
            key: "block_cache_bytes",
            help: "decompressed blocks of events kept for reads, bytes in total; 0: none (32 MiB)",
            field: .at(\.blockCacheBytes), reloads: true),
        Option(
            key: "map_initial_bytes", help: "size of the map at open, and its least growth step, bytes (64 MiB)",
            field: .at(\.mapInitialBytes), reloads: false),
        Option(
            key: "dictionary_training_events",
            help: "events a store holds before its first compression dictionary is trained (10000)",
            field: .at(\.dictionaryTrainingEvents), reloads: false),
        Option(
            key: "durability", help: "full: every commit reaches the disk; relaxed: flushed each second",
            field: .at(\.durability), reloads: false),
        Option(
            key: "max_line_bytes", help: "longest request line, bytes (16 MiB)", field: .at(\.maxLineBytes),
            reloads: true),
        Option(
            key: "watch_queue_events", help: "notifications a watcher may fall behind before it is dropped (10000)",
            field: .at(\.watchQueueEvents), reloads: true),
        Option(
            key: "max_watches_per_connection", help: "watches one connection may hold at once (64)",
            field: .at(\.maxWatchesPerConnection), reloads: true),
        Option(
            key: "max_watches", help: "watches all connections together may hold at once (4096)",
            field: .at(\.maxWatches), reloads: true),
        Option(
            key: "max_connections", help: "local clients served at once; more are refused (1024)",
            field: .at(\.maxConnections), reloads: true),
        Option(
            key: "idle_timeout_s", help: "an idle connection is closed after this long, seconds; 0: never (300)",
            field: .at(\.idleTimeoutSeconds), reloads: true),
        Option(
            key: "line_timeout_s", help: "a request line must be finished within this long, seconds (30)",
            field: .at(\.lineTimeoutSeconds), reloads: true),
        Option(
            key: "max_queued_response_bytes",
            help: "responses waiting for a slow client before its requests wait, bytes (64 MiB)",
            field: .at(\.maxQueuedResponseBytes), reloads: true),
        Option(
            key: "max_unanswered_bytes",
            help:
                "requests read and not answered while a client leaves its answers unread, bytes; past it the client is cut off (64 MiB)",
            field: .at(\.maxUnansweredBytes), reloads: true),
        Option(
            key: "max_buffered_bytes",
            help:
                "what all clients together may make the daemon hold in partial lines, unanswered requests and queued answers, bytes (256 MiB)",
            field: .at(\.maxBufferedBytes), reloads: true
        ),
        Option(
            key: "watch_queue_bytes",
            help: "notification bytes one connection's watches may fall behind before a watch is ended (16 MiB)",
            field: .at(\.watchQueueBytes), reloads: true),
        Option(
            key: "min_read_bytes_per_s",
            help:
                "a client whose answers wait slow_read_window_s while it reads fewer bytes a second than this is cut off; 0: only one that reads nothing (16384)",
            field: .at(\.minReadBytesPerSecond), reloads: true
        ),
        Option(
            key: "slow_read_window_s", help: "how long a slow reader is measured before it is cut off, seconds (30)",
            field: .at(\.slowReadWindowSeconds), reloads: true),
        Option(
            key: "event_loops", help: "threads that wait on the clients' sockets (1)", field: .at(\.eventLoops),
            reloads: false),
        Option(
            key: "request_threads", help: "threads that run the clients' requests (8)", field: .at(\.requestThreads),
            reloads: false),
        Option(
            key: "max_batch_requests", help: "most requests in one batch line (1000)", field: .at(\.maxBatchRequests),
            reloads: true),
        Option(
            key: "max_batch_response_bytes", help: "most response bytes one batch gathers (16 MiB)",
            field: .at(\.maxBatchResponseBytes), reloads: true),
        Option(
            key: "max_page_bytes", help: "a page of log or dead letters ends early past this many bytes (8 MiB)",
            field: .at(\.maxPageBytes), reloads: false),
        Option(
            key: "max_consumers", help: "durable consumers the store keeps; a new one past it is refused (64)",
            field: .at(\.maxConsumers), reloads: false),
        Option(
            key: "max_blob_bytes", help: "the largest blob, bytes (256 MiB)", field: .at(\.blobLimits.maxBlobBytes),
            reloads: false),
        Option(
            key: "max_blob_store_bytes", help: "all blobs and the uploads under way, bytes (16 GiB)",
            field: .at(\.blobLimits.maxTotalBytes), reloads: false),
        Option(
            key: "blob_reserve_bytes", help: "free space no blob may take, left for the event log, bytes (1 GiB)",
            field: .at(\.blobLimits.reserveBytes), reloads: false),
        Option(
            key: "max_blob_uploads", help: "blob uploads under way at once, in all (16; 2 per connection)",
            field: .at(\.blobLimits.maxUploads), reloads: false),
        Option(
            key: "blob_retention_s",
            help:
                "seconds a blob no live value and no peer's missing event needs is kept before it is removed (2592000, 30 days)",
            field: .at(\.blobRetentionSeconds), reloads: true),
        Option(
            key: "log_level", help: "debug, info, notice, warning or error (info)", field: .at(\.logLevel),
            reloads: true),
        Option(
            key: "machine_id_file", help: "this host's identity, compared at start (/etc/machine-id)",
            field: .at(\.machineIDFile), reloads: false),
        Option(
            key: "read_groups", help: "groups whose members may only read, names or gids, comma-separated",
            field: .at(\.readGroups), reloads: true),
        Option(
            key: "write_groups", help: "groups whose members may read and write, names or gids, comma-separated",
            field: .at(\.writeGroups), reloads: true),
        Option(
            key: "read_users", help: "users who may only read, names or uids, comma-separated", field: .at(\.readUsers),
            reloads: true),
        Option(
            key: "write_users", help: "users who may read and write, names or uids, comma-separated",
            field: .at(\.writeUsers), reloads: true),
        Option(
            key: "exec_users",
            help:
                "users who, besides root and the daemon's user, may give exec: peer URLs (run as the daemon's user), names or uids, comma-separated",
            field: .at(\.execUsers), reloads: true
        ),
        Option(
            key: "backup_dir", help: "when set, backups are written only under this directory (unset: anywhere)",
            field: .at(\.backupDirectory), reloads: false),
        Option(
            key: "types_file",
            help: "JSON file of rules per entity type, checked on local appends (unset: none); a SIGHUP reads it again",
            field: .at(\.typesFile), reloads: true),
    ]

    /// The keys that list users or groups: who may read, who may write, who may give `exec:` URLs.
    static let accessKeys: Set = ["read_groups", "write_groups", "read_users", "write_users", "exec_users"]

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
        var file = commandLine.configFile ?? environment["EVSTORE_CONFIG"]
        if file == nil, environment["STATE_DIRECTORY"] != nil, FileManager.default.fileExists(atPath: systemConfigFile)
        {
            file = systemConfigFile
        }
        configuration.configFile = file
        try ConfigurationLayers.load(
            file: file, keys: layerKeys, environment: environment, commandLine: commandLine.values,
            refusal: { Invalid(message: $0.message) },
            member: { (key, value, source) throws(Invalid) in try configuration.apply(key, value, source: source) },
            value: { (value) throws(Invalid) in try configuration.set(value.key, text: value.text, source: value.source)
            }
        )
        guard configuration.peers.count <= configuration.maxPeers else {
            throw Invalid(
                message:
                    "the config file lists \(configuration.peers.count) peers; max_peers allows \(configuration.maxPeers): raise max_peers or list fewer"
            )
        }
        configuration.access = try configuration.resolveAccess()
        return configuration
    }

    /// The access lists with every name looked up, in the system's user and group databases
    /// as they are now; an unknown name is an error naming the setting.
    func resolveAccess(
        daemonUID: UInt32 = geteuid(), userID: (String) -> UInt32? = Accounts.userID(named:),
        groupID: (String) -> UInt32? = UnixSocket.groupID(named:)
    ) throws(Invalid) -> AccessPolicy {
        func resolve(_ key: String, _ names: [String], group: Bool) throws(Invalid) -> Set<UInt32> {
            var ids: Set<UInt32> = []
            for name in names {
                guard let id = group ? groupID(name) : userID(name) else {
                    let source = accessSources[key] ?? key
                    throw Invalid(
                        message:
                            "\(source) names the \(group ? "group" : "user") \"\(name)\", which does not exist on this system (`getent \(group ? "group" : "passwd") \(name)` finds nothing); create it, or give a numeric id"
                    )
                }
                ids.insert(id)
            }
            return ids
        }
        return AccessPolicy(
            readGroups: try resolve("read_groups", readGroups, group: true),
            writeGroups: try resolve("write_groups", writeGroups, group: true),
            readUsers: try resolve("read_users", readUsers, group: false),
            writeUsers: try resolve("write_users", writeUsers, group: false),
            execUsers: try resolve("exec_users", execUsers, group: false), daemonUID: daemonUID)
    }

    /// One line for the log: who may connect with what access.
    var accessSummary: String {
        let exec =
            "exec: peer URLs from root, the daemon's user"
            + (execUsers.isEmpty ? "" : " and exec_users \(execUsers.joined(separator: ","))") + " only"
        guard access.isRestricted else {
            return
                "whoever may open the socket may read and write (no read_groups, write_groups, read_users or write_users); \(exec)"
        }
        func list(_ key: String, _ names: [String]) -> String? {
            names.isEmpty ? nil : "\(key) \(names.joined(separator: ","))"
        }
        let writers =
            ["root", "the daemon's user (uid \(access.daemonUID))", list("exec_users", execUsers)].compactMap { $0 }
            + [list("write_users", writeUsers), list("write_groups", writeGroups)].compactMap { $0 }
        let readers = [list("read_users", readUsers), list("read_groups", readGroups)].compactMap { $0 }
        return "read-write for \(writers.joined(separator: ", "))"
            + (readers.isEmpty ? "" : "; read-only for \(readers.joined(separator: ", "))") + "; no access for others"
    }

    /// A list of names or ids from its text form: separated by commas or spaces.
    static func nameList(_ text: String, source: String) throws(Invalid) -> [String] {
        let names = text.split(whereSeparator: { $0 == "," || $0.isWhitespace }).map(String.init)
        for name in names {
            let valid =
                UInt32(name) != nil
                || name.utf8.allSatisfy { byte in
                    (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte)
                        || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "-") || byte == UInt8(ascii: ".")
                        || byte == UInt8(ascii: "$")
                }
            guard valid, name.utf8.count <= 256 else {
                throw Invalid(message: "\(source): \"\(name)\" is not a user or group name, nor a numeric id")
            }
        }
        return names
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

    /// The settings as the configuration layers know them (`peers` is the file's only).
    static let layerKeys = options.map { ConfigurationLayers.Key($0.key, variable: $0.fileOnly ? nil : $0.variable) }

    /// Sets one member of the config file.
    mutating func apply(_ key: String, _ value: Any, source: String) throws(Invalid) {
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
                var policy = BlobPolicy.eager
                if let value = item["blobs"] {
                    guard let text = value as? String, let given = BlobPolicy(rawValue: text) else {
                        throw Invalid(
                            message:
                                "peer \"\(name)\" in \(source): \"blobs\" must be \"eager\" (fetch every blob its events name), \"lazy\" (only those a client asks for) or \"none\""
                        )
                    }
                    policy = given
                }
                return Peer(name: name, url: url, blobs: policy)
            }
            return
        }
        let text: String
        switch value {
        case let list as [Any] where Configuration.accessKeys.contains(key):
            // A list of names and ids: ["evstore-read", 1001].
            var items: [String] = []
            for item in list {
                switch item {
                case let string as String: items.append(string)
                case let number as Int: items.append(String(number))
                default: throw Invalid(message: "each of \(source) must be a name (a string) or an id (a number)")
                }
            }
            if items.contains(where: { $0.contains(",") || $0.contains(" ") }) {
                throw Invalid(message: "\(source): a name in the list cannot contain a comma or a space")
            }
            text = items.joined(separator: ",")
        case let string as String: text = string
        case let number as Int: text = String(number)
        case let number as Double: text = "\(number)"
        default: throw Invalid(message: "\(source) must be a string or a number")
        }
        try set(key, text: text, source: source)
    }

    /// Sets one setting from its text form.
    mutating func set(_ key: String, text: String, source: String) throws(Invalid) {
        func integer(_ range: ClosedRange<Int>) throws(Invalid) -> Int {
            guard let value = Int(text.trimmed(keepingNewlines: true)), range.contains(value) else {
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
        case "node":
            // Sent in every hello: a peer refuses a session whose name breaks the rule.
            guard text.isEmpty || NodeName.isValid(text) else {
                throw Invalid(message: "\(source) is not a valid node name: \(NodeName.rule), not \"\(text)\"")
            }
            nodeName = text.isEmpty ? nil : text
        case "sync_interval_s": syncIntervalSeconds = try integer(1...86_400)
        case "backoff_base_s": backoffBaseSeconds = try integer(1...86_400)
        case "backoff_cap_s": backoffCapSeconds = try integer(1...86_400)
        case "sync_timeout_s": syncTimeoutSeconds = try integer(1...86_400)
        case "max_incoming_sessions": maxIncomingSessions = try integer(1...1024)
        case "max_outgoing_sessions": maxOutgoingSessions = try integer(1...256)
        case "max_peers": maxPeers = try integer(1...4096)
        case "sync_session_max_s": syncSessionMaxSeconds = try integer(1...604_800)
        case "sync_reconcile_max_rounds": syncReconcileMaxRounds = try integer(1...1_000_000)
        case "sync_reconcile_max_bytes": syncReconcileMaxBytes = try integer((1 << 20)...(1 << 40))
        case "sync_reconcile_max_ids": syncReconcileMaxIDs = try integer(1000...1_000_000_000)
        case "sync_session_max_dead_letters": syncSessionMaxDeadLetters = try integer(1...100_000_000)
        case "sync_verify_events": syncVerifyEvents = try integer(0...Messages.Hello.maxChecks)
        case "ssh_command":
            guard (try? ShellWords.split(text))?.isEmpty == false else {
                throw Invalid(
                    message: "\(source) must be a command such as \"ssh -i /etc/evstore/id_ed25519\", not \"\(text)\"")
            }
            sshCommand = text
        case "max_clock_skew_s": maxClockSkewSeconds = try integer(0...31_536_000)
        case "max_event_bytes": maxEventBytes = try integer(256...(16 << 20))
        case "map_max_bytes": mapMaxBytes = try integer((1 << 20)...(1 << 50))
        case "block_cache_bytes": blockCacheBytes = try integer(0...(1 << 40))
        case "map_initial_bytes": mapInitialBytes = try integer((64 << 10)...(1 << 50))
        case "dictionary_training_events": dictionaryTrainingEvents = try integer(100...1_000_000_000)
        case "durability":
            guard let value = Durability(rawValue: text) else {
                throw Invalid(message: "\(source) must be \"full\" or \"relaxed\", not \"\(text)\"")
            }
            durability = value
        case "max_line_bytes": maxLineBytes = try integer(1024...(1 << 30))
        case "watch_queue_events": watchQueueEvents = try integer(1...10_000_000)
        case "max_watches_per_connection": maxWatchesPerConnection = try integer(1...1_000_000)
        case "max_watches": maxWatches = try integer(1...1_000_000)
        case "max_connections": maxConnections = try integer(1...1_000_000)
        case "idle_timeout_s": idleTimeoutSeconds = try integer(0...604_800)
        case "line_timeout_s": lineTimeoutSeconds = try integer(1...86_400)
        case "max_queued_response_bytes": maxQueuedResponseBytes = try integer((64 << 10)...(1 << 40))
        case "max_unanswered_bytes": maxUnansweredBytes = try integer((1 << 20)...(1 << 40))
        case "max_buffered_bytes": maxBufferedBytes = try integer((1 << 20)...(1 << 42))
        case "watch_queue_bytes": watchQueueBytes = try integer((64 << 10)...(1 << 40))
        case "min_read_bytes_per_s": minReadBytesPerSecond = try integer(0...(1 << 30))
        case "slow_read_window_s": slowReadWindowSeconds = try integer(1...86_400)
        case "event_loops": eventLoops = try integer(1...64)
        case "request_threads": requestThreads = try integer(1...256)
        case "max_batch_requests": maxBatchRequests = try integer(1...1_000_000)
        case "max_batch_response_bytes": maxBatchResponseBytes = try integer((64 << 10)...(1 << 40))
        case "max_page_bytes": maxPageBytes = try integer((64 << 10)...(1 << 30))
        case "max_consumers": maxConsumers = try integer(1...10_000)
        case "max_blob_bytes": blobLimits.maxBlobBytes = UInt64(try integer(0...(1 << 40)))
        case "max_blob_store_bytes": blobLimits.maxTotalBytes = UInt64(try integer(0...(1 << 50)))
        case "blob_reserve_bytes": blobLimits.reserveBytes = UInt64(try integer(0...(1 << 50)))
        case "max_blob_uploads": blobLimits.maxUploads = try integer(1...1024)
        case "blob_retention_s": blobRetentionSeconds = try integer(0...(100 * 365 * 86_400))
        case "machine_id_file": machineIDFile = text
        case "types_file": typesFile = text.isEmpty ? nil : text
        case "backup_dir":
            guard !text.isEmpty else {
                backupDirectory = nil
                return
            }
            let components = text.split(separator: "/")
            guard text.hasPrefix("/"), !components.contains(where: { $0 == "." || $0 == ".." }) else {
                throw Invalid(
                    message: "\(source) must be an absolute directory path without \".\" or \"..\", not \"\(text)\"")
            }
            backupDirectory = "/" + components.joined(separator: "/")
        case "read_groups", "write_groups", "read_users", "write_users", "exec_users":
            let names = try Configuration.nameList(text, source: source)
            switch key {
            case "read_groups": readGroups = names
            case "write_groups": writeGroups = names
            case "read_users": readUsers = names
            case "exec_users": execUsers = names
            default: writeUsers = names
            }
            accessSources[key] = source
        case "log_level":
            guard let level = Logger.Level(name: text) else {
                throw Invalid(message: "\(source) must be debug, info, notice, warning or error, not \"\(text)\"")
            }
            logLevel = level
        default: throw Invalid(message: "unknown setting \(source)")
        }
    }
}

extension String {
    /// The text without leading and trailing white space (and line breaks, unless
    /// `keepingNewlines`).
    func trimmed(keepingNewlines: Bool = false) -> String {
        func blank(_ c: Character) -> Bool { c.isWhitespace && !(keepingNewlines && c.isNewline) }
        guard let first = firstIndex(where: { !blank($0) }), let last = lastIndex(where: { !blank($0) }) else {
            return ""
        }
        return String(self[first...last])
    }
}

// The settings of each layer, from the configuration.

extension Limits {
    /// The limits `configuration` sets.
    init(_ configuration: Configuration) {
        self.init(
            maxLineBytes: configuration.maxLineBytes,
            watchQueueEvents: configuration.watchQueueEvents,
            maxConnections: configuration.maxConnections,
            idleTimeoutSeconds: configuration.idleTimeoutSeconds,
            lineTimeoutSeconds: configuration.lineTimeoutSeconds,
            maxQueuedResponseBytes: configuration.maxQueuedResponseBytes,
            maxUnansweredBytes: configuration.maxUnansweredBytes,
            maxBatchRequests: configuration.maxBatchRequests,
            maxBatchResponseBytes: configuration.maxBatchResponseBytes,
            watchQueueBytes: configuration.watchQueueBytes,
            minReadBytesPerSecond: configuration.minReadBytesPerSecond,
            slowReadWindowSeconds: configuration.slowReadWindowSeconds,
            maxIncomingSessions: configuration.maxIncomingSessions)
    }
}

extension WatchLimits {
    package init(_ configuration: Configuration) {
        self.init(perConnection: configuration.maxWatchesPerConnection, total: configuration.maxWatches)
    }
}

extension SyncService.Settings {
    package init(_ configuration: Configuration) {
        self.init(
            interval: Double(configuration.syncIntervalSeconds),
            backoffBase: Double(configuration.backoffBaseSeconds),
            backoffCap: Double(configuration.backoffCapSeconds),
            timeout: Double(configuration.syncTimeoutSeconds),
            maxIncomingSessions: configuration.maxIncomingSessions,
            maxOutgoingSessions: configuration.maxOutgoingSessions,
            maxPeers: configuration.maxPeers,
            requestThreads: configuration.requestThreads,
            configPeers: configuration.peers,
            sshCommand: (try? ShellWords.split(configuration.sshCommand)) ?? ["ssh"],
            limits: SyncLimits(
                sessionSeconds: Double(configuration.syncSessionMaxSeconds),
                reconcileRounds: configuration.syncReconcileMaxRounds,
                reconcileBytes: configuration.syncReconcileMaxBytes,
                reconcileIDs: configuration.syncReconcileMaxIDs,
                deadLetters: configuration.syncSessionMaxDeadLetters,
                verifyEvents: configuration.syncVerifyEvents))
    }
}

extension Configuration {
    /// The rules of `types_file` (none when it is unset); an error says why the file
    /// cannot be used.
    func typeRules() throws(TypeRulesError) -> TypeRules {
        guard let path = typesFile else { return TypeRules(localNode: nodeName) }
        // Sized first: what is too large is not read at all.
        if let size = (try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? Int,
            size > TypeRules.maxFileBytes
        {
            throw TypeRulesError("types_file \(path) is \(size) bytes; at most \(TypeRules.maxFileBytes) are read")
        }
        guard let handle = FileManager.default.contents(atPath: path) else {
            throw TypeRulesError("types_file \(path) cannot be read")
        }
        do {
            var rules = try TypeRules(parsing: Array(handle))
            rules.localNode = nodeName
            return rules
        } catch {
            throw TypeRulesError("types_file \(path): \(error.message)")
        }
    }
}

extension Configuration {
    /// Every setting at its default, for a store in `dataDirectory` served on `socketPath`.
    package static func defaults(dataDirectory: String, socketPath: String) -> Configuration {
        Configuration(dataDirectory: dataDirectory, socketPath: socketPath)
    }
}
