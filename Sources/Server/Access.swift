import Logging
import Synchronization
import UnixSocket
import Wire

/// What a client of the socket may do.
package enum AccessLevel: Int, Comparable, Sendable, CustomStringConvertible {
    /// Nothing: every request is refused with `forbidden`.
    case none = 0
    /// The methods that only read the store.
    case read = 1
    /// Reads, appends, sync, peers, maintenance; but not `exec:` peers, whose command runs
    /// as the daemon's user.
    case write = 2
    /// Everything, `exec:` peers included: root, the daemon's own user and the users of
    /// `exec_users`, who may run commands as the daemon's user in any case.
    case full = 3

    package static func < (lhs: AccessLevel, rhs: AccessLevel) -> Bool { lhs.rawValue < rhs.rawValue }

    package var description: String {
        switch self {
        case .none: "no access"
        case .read: "read-only access"
        case .write: "read-write access"
        case .full: "full access"
        }
    }
}

/// The level each method needs. Every method of `Methods.names` is here (a test checks),
/// and a sync session, which ingests events, needs `.write`.
package enum MethodAccess {
    /// A session another node starts on the socket: it stores the events it receives.
    package static let syncSession = AccessLevel.write
}

/// Who may do what: the `read_groups`, `write_groups`, `read_users` and `write_users`
/// settings, resolved to ids.
///
/// Root, the daemon's own user and the users of `exec_users` have full access. Else, with
/// none of the four lists set, whoever can open the socket (its mode and group decide) has
/// read-write access: everything but `exec:` peers, whose command would run as the daemon's
/// user. With any set, a client whose uid is in `write_users` or one of whose groups is in
/// `write_groups` has read-write access; else one in `read_users` or `read_groups` has
/// read-only access; anyone else none.
package struct AccessPolicy: Equatable, Sendable {
    package var readGroups: Set<UInt32> = []
    package var writeGroups: Set<UInt32> = []
    package var readUsers: Set<UInt32> = []
    package var writeUsers: Set<UInt32> = []
    /// `exec_users`: besides root and the daemon's user, who may give `exec:` peer URLs.
    package var execUsers: Set<UInt32> = []
    /// The daemon's effective uid: its own user always has read-write access.
    package var daemonUID: UInt32 = 0

    /// Whether any of the four settings is set: else the socket's mode and group alone decide.
    package var isRestricted: Bool {
        !(readGroups.isEmpty && writeGroups.isEmpty && readUsers.isEmpty && writeUsers.isEmpty)
    }

    /// What a client gets, and the sentence that says why.
    package struct Grant: Equatable, Sendable {
        package var level: AccessLevel
        package var why: String

        package init(level: AccessLevel, why: String) {
            self.level = level
            self.why = why
        }
    }

    /// The access of a client with user `uid` and the groups `groups` (its primary group
    /// first, then its supplementary groups).
    package func grant(uid: UInt32, groups: [UInt32]) -> Grant {
        if uid == 0 { return Grant(level: .full, why: "root") }
        if uid == daemonUID { return Grant(level: .full, why: "the daemon's own user") }
        if execUsers.contains(uid) { return Grant(level: .full, why: "uid \(uid) is in exec_users") }
        guard isRestricted else {
            return Grant(level: .write, why: "no read_groups, write_groups, read_users or write_users is set")
        }
        if writeUsers.contains(uid) { return Grant(level: .write, why: "uid \(uid) is in write_users") }
        if let group = groups.first(where: writeGroups.contains) {
            return Grant(level: .write, why: "group \(AccessPolicy.name(group: group)) is in write_groups")
        }
        if readUsers.contains(uid) { return Grant(level: .read, why: "uid \(uid) is in read_users") }
        if let group = groups.first(where: readGroups.contains) {
            return Grant(level: .read, why: "group \(AccessPolicy.name(group: group)) is in read_groups")
        }
        return Grant(
            level: .none,
            why: "neither the user nor any of its groups is in read_users, read_groups, write_users or write_groups")
    }

    /// `gid (name)`, or the bare number when the group has no name.
    package static func name(group gid: UInt32) -> String {
        Accounts.groupName(of: gid).map { "\(gid) (\($0))" } ?? "\(gid)"
    }

    /// `uid (name)`, or the bare number when the user has no name.
    package static func name(user uid: UInt32) -> String {
        Accounts.userName(of: uid).map { "\(uid) (\($0))" } ?? "\(uid)"
    }

    package init(
        readGroups: Set<UInt32> = [], writeGroups: Set<UInt32> = [], readUsers: Set<UInt32> = [],
        writeUsers: Set<UInt32> = [], execUsers: Set<UInt32> = [], daemonUID: UInt32 = 0
    ) {
        self.readGroups = readGroups
        self.writeGroups = writeGroups
        self.readUsers = readUsers
        self.writeUsers = writeUsers
        self.execUsers = execUsers
        self.daemonUID = daemonUID
    }
}

/// A client as the kernel saw it connect, and what it may do.
package struct ClientAccess: Sendable {
    package var credentials: PeerCredentials?
    /// Its primary group, then its supplementary groups.
    package var groups: [UInt32]
    package var grant: AccessPolicy.Grant

    package init(credentials: PeerCredentials? = nil, groups: [UInt32], grant: AccessPolicy.Grant) {
        self.credentials = credentials
        self.groups = groups
        self.grant = grant
    }
}

extension ClientAccess {
    /// Reads the client's credentials from `socket` and applies `policy`.
    ///
    /// The supplementary groups are the ones the client process held when it connected
    /// (`SO_PEERGROUPS`), as the kernel used them to let it open the socket; on a kernel
    /// that cannot tell them, the group database's list for the client's user
    /// (`getgrouplist`).
    package init(socket: UnixConnection, policy: AccessPolicy) {
        guard let credentials = try? socket.peerCredentials() else {
            self.credentials = nil
            groups = []
            grant =
                policy.isRestricted
                ? AccessPolicy.Grant(level: .none, why: "the client's credentials cannot be read")
                : AccessPolicy.Grant(
                    level: .write, why: "no access list is set, and the client's credentials cannot be read")
            return
        }
        self.credentials = credentials
        var groups = [credentials.gid]
        for group in credentials.groups ?? Accounts.groupList(of: credentials.uid, primary: credentials.gid)
        where !groups.contains(group) {
            groups.append(group)
        }
        self.groups = groups
        grant = policy.grant(uid: credentials.uid, groups: groups)
    }

    /// Who the client is, for messages: `uid 65534 (nobody), gid 65534 (nogroup), groups 4 (adm)`.
    package var who: String {
        guard let credentials else { return "a client whose credentials cannot be read" }
        var text = "uid \(AccessPolicy.name(user: credentials.uid)), gid \(AccessPolicy.name(group: credentials.gid))"
        let others = groups.dropFirst()
        if !others.isEmpty { text += ", groups " + others.map(AccessPolicy.name(group:)).joined(separator: ", ") }
        return text
    }

    /// The refusal of a peer URL given through the API (nil when it is allowed): an `exec:`
    /// command would run as the daemon's user, so it needs full access. Peers of the config
    /// file are not checked: the administrator wrote them.
    package static func refusal(ofPeerURL url: String, level: AccessLevel) -> RPCError? {
        guard level < .full, url.hasPrefix("exec:") else { return nil }
        return RPCError.application(
            .forbidden,
            "an exec: peer runs its command as the daemon's user, so only root, the daemon's own user "
                + "and the users of exec_users may give one: add the user to exec_users in the daemon's "
                + "configuration, add the peer to the peers of the config file instead, or use an ssh:// URL")
    }

    /// The sentence of a refusal: who, what they have and why, and what would allow it.
    package func refusalMessage(doing what: String) -> String {
        switch grant.level {
        case .none:
            return "\(what): \(who) has no access to this daemon (\(grant.why)). "
                + "To allow it, add one of its groups to read_groups (read-only) or write_groups (read-write) "
                + "in the daemon's configuration, or its user to read_users or write_users, and reload the daemon."
        case .read, .write, .full:
            return "\(what): it needs read-write access, and \(who) has read-only access (\(grant.why)). "
                + "To allow it, add one of its groups to write_groups, or its user to write_users, "
                + "in the daemon's configuration, and reload the daemon."
        }
    }
}

/// Logs refusals at notice level, each connection's first only, and at most `limit` lines
/// a minute overall: a client that retries in a loop cannot flood the log.
package final class RefusalLog: Sendable {
    package let logger: Logger
    package let limit: Int
    /// The current minute's start (seconds), the lines logged in it and those left out.
    private let window = Mutex((start: 0.0, logged: 0, suppressed: 0))

    package init(logger: Logger, limit: Int = 20) {
        self.logger = logger
        self.limit = limit
    }

    package func log(_ message: String, now: Double) {
        let (write, suppressedBefore) = window.withLock { window -> (Bool, Int) in
            var suppressedBefore = 0
            if now - window.start >= 60 {
                suppressedBefore = window.suppressed
                window = (now, 0, 0)
            }
            guard window.logged < limit else {
                window.suppressed += 1
                return (false, 0)
            }
            window.logged += 1
            return (true, suppressedBefore)
        }
        guard write else { return }
        if suppressedBefore > 0 {
            logger.notice("\(suppressedBefore) more refused connections were not logged in the last minute")
        }
        logger.notice(message)
    }
}
