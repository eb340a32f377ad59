import Server
import Wire

/// One method of the socket API: its name, the access it needs, the members its params may
/// have and who answers it.
struct Method: Sendable {
    enum Handler: Sendable {
        /// Answered at once by `Methods`, on the request thread; given the client's access
        /// level, which decides the peer URLs it may give.
        case methods(@Sendable (Methods, Request, AccessLevel) throws -> [UInt8])
        /// Answered at once by `Methods`, given the client's connection, which owns what the
        /// method begins until it ends (a blob upload) and holds what the client passed (a
        /// descriptor).
        case owned(@Sendable (Methods, Request, Caller) throws -> [UInt8])
        /// Answered by the connection, which owns its ordering: `append` (through the
        /// writer, in the connection's order) and `watch` (a subscription to the hub).
        case connection
    }

    let name: String
    /// The least access a client needs to call it.
    let access: AccessLevel
    /// The members its params may have; any other is `invalid_params`.
    let params: [String]
    /// Of those, the ones kept as raw JSON text (`import`'s events).
    var verbatim: [String] = []
    let handler: Handler
}

/// The connection a request came on, as a method that holds something for it sees it.
package struct Caller: Sendable {
    /// Its identifier: what it begins is its own until it ends.
    let connection: Int
    /// The oldest descriptor the client passed with its requests that no request has taken
    /// (the method's to close); nil when there is none.
    let takeDescriptor: @Sendable () -> Int32?

    package init(connection: Int, takeDescriptor: @escaping @Sendable () -> Int32? = { nil }) {
        self.connection = connection
        self.takeDescriptor = takeDescriptor
    }
}

/// Every method of the socket API, in one table that the server dispatches by, the access
/// check reads its levels from, the params check its members from, and the fuzz entry and
/// `method_not_found` list the names of.
package enum MethodTable {
    /// The two the connection answers itself (`Handler.connection`), whose names the
    /// transport and the request parser look for.
    package static let append = RequestParser.appendMethod
    package static let watch = "watch"

    static let methods: [Method] = [
        Method(name: append, access: .write, params: ["events"], handler: .connection),
        Method(
            name: "get", access: .read, params: ["entity", "sync"],
            handler: .methods { methods, request, _ in try methods.get(request) }),
        Method(
            name: "list", access: .read,
            params: ["type", "status", "include_deleted", "limit", "after", "pending_for"],
            handler: .methods { methods, request, _ in try methods.list(request) }),
        Method(
            name: "log", access: .read, params: ["after", "limit", "entity", "origin", "type", "order", "consumer"],
            handler: .methods { methods, request, _ in try methods.logPage(request) }),
        Method(name: watch, access: .read, params: ["after", "entity", "type", "consumer"], handler: .connection),
        Method(
            name: "status", access: .read, params: [],
            handler: .methods { methods, request, _ in try methods.status(request) }),
        Method(
            name: "types", access: .read, params: [],
            handler: .methods { methods, request, _ in try methods.types(request) }),
        Method(
            name: "conflicts", access: .read, params: ["type", "limit", "after"],
            handler: .methods { methods, request, _ in try methods.conflicts(request) }),
        Method(
            name: "dead_letters", access: .read, params: ["limit", "after"],
            handler: .methods { methods, request, _ in try methods.deadLetters(request) }),
        Method(
            name: "rebuild", access: .write, params: ["verify"],
            handler: .methods { methods, request, _ in try methods.rebuild(request) }),
        // Writes a copy of the whole store wherever the daemon's user may write.
        Method(
            name: "backup", access: .write, params: ["path"],
            handler: .methods { methods, request, _ in try methods.backup(request) }),
        Method(
            name: "sync", access: .write, params: ["peer"],
            handler: .methods { methods, request, level in try methods.syncNow(request, level: level) }),
        Method(
            name: "peers.add", access: .write, params: ["name", "url", "blobs"],
            handler: .methods { methods, request, level in try methods.peers(request, level: level) }),
        Method(
            name: "peers.remove", access: .write, params: ["name"],
            handler: .methods { methods, request, level in try methods.peers(request, level: level) }),
        Method(
            name: "peers.list", access: .read, params: [],
            handler: .methods { methods, request, level in try methods.peers(request, level: level) }),
        // Stores events as a sync session does.
        Method(
            name: "import", access: .write, params: ["events", "dry_run"], verbatim: ["events"],
            handler: .methods { methods, request, _ in try methods.importEvents(request) }),
        // Store or remove what peers sent, as a sync session does.
        Method(
            name: "dead_letters.retry", access: .write, params: ["ids"],
            handler: .methods { methods, request, _ in try methods.retryDeadLetters(request) }),
        Method(
            name: "dead_letters.drop", access: .write, params: ["ids"],
            handler: .methods { methods, request, _ in try methods.dropDeadLetters(request) }),
        Method(
            name: "divergent.dismiss", access: .write, params: ["ids"],
            handler: .methods { methods, request, _ in try methods.dismissDivergent(request) }),
        Method(
            name: "rule_violations.dismiss", access: .write, params: ["ids"],
            handler: .methods { methods, request, _ in try methods.dismissRuleViolations(request) }),
        Method(
            name: "attention", access: .read, params: ["limit", "after"],
            handler: .methods { methods, request, _ in try methods.attention(request) }),
        Method(
            name: "peers.show", access: .read, params: ["name"],
            handler: .methods { methods, request, _ in try methods.peerShow(request) }),
        Method(
            name: "consumers.list", access: .read, params: [],
            handler: .methods { methods, request, _ in try methods.consumersList(request) }),
        // Moving a consumer another process reads would make it skip events.
        Method(
            name: "consumers.ack", access: .write, params: ["name", "seq"],
            handler: .methods { methods, request, _ in try methods.consumersAck(request) }),
        Method(
            name: "consumers.remove", access: .write, params: ["name"],
            handler: .methods { methods, request, _ in try methods.consumersRemove(request) }),
        // Blobs: bytes in base64, in pieces a line can carry; an upload is its connection's.
        Method(
            name: "blob.put", access: .write, params: ["data", "hash", "fd"],
            handler: .owned { methods, request, caller in try methods.blobPut(request, caller: caller) }),
        Method(
            name: "blob.upload", access: .write, params: ["size"],
            handler: .owned { methods, request, caller in try methods.blobUpload(request, connection: caller.connection)
            }
        ),
        Method(
            name: "blob.write", access: .write, params: ["upload", "offset", "data"],
            handler: .owned { methods, request, caller in try methods.blobWrite(request, connection: caller.connection)
            }),
        Method(
            name: "blob.commit", access: .write, params: ["upload", "hash"],
            handler: .owned { methods, request, caller in try methods.blobCommit(request, connection: caller.connection)
            }
        ),
        Method(
            name: "blob.abort", access: .write, params: ["upload"],
            handler: .owned { methods, request, caller in try methods.blobAbort(request, connection: caller.connection)
            }),
        Method(
            name: "blob.get", access: .read, params: ["hash", "offset", "length", "fd", "fetch"],
            handler: .owned { methods, request, caller in try methods.blobGet(request, caller: caller) }),
        Method(
            name: "blob.stat", access: .read, params: ["hash"],
            handler: .methods { methods, request, _ in try methods.blobStat(request) }),
        Method(
            name: "blob.gc", access: .write, params: ["dry_run"],
            handler: .methods { methods, request, _ in try methods.blobGC(request) }),
    ]

    static let byName: [String: Method] = Dictionary(uniqueKeysWithValues: methods.map { ($0.name, $0) })

    static var names: [String] { methods.map(\.name) }

    static subscript(name: String) -> Method? { byName[name] }
}

extension Params {
    /// The params of `request`, checked against its method's entry in the table.
    package init(_ request: Request) throws(RPCError) {
        let method = MethodTable[request.method]
        try self.init(
            request.params, method: request.method, accepts: method?.params ?? [], verbatim: method?.verbatim ?? [])
    }
}

extension MethodAccess {
    /// Each method's level, from the method table.
    static var required: [String: AccessLevel] { MethodTable.byName.mapValues(\.access) }

    /// The level `method` needs; an unknown method needs `.read`, so a reader learns it does
    /// not exist and a client with no access learns nothing.
    static func level(for method: String) -> AccessLevel { MethodTable[method]?.access ?? .read }
}

extension ClientAccess {
    /// The refusal of `method` (nil when it is allowed).
    func refusal(of method: String) -> RPCError? {
        let needed = MethodAccess.level(for: method)
        guard grant.level < needed else { return nil }
        return RPCError.application(.forbidden, refusalMessage(doing: "\(method) is refused"))
    }
}
