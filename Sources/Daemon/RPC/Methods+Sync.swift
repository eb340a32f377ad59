import EventStore
import FoundationEssentials
import Replication
import Server
import Wire

/// Replication through the socket: `sync` now, and the peers of `peers.add`, `.remove`
/// and `.list`.
extension Methods {
    /// The refusal of a `unix://` URL given through the API (nil when allowed): the daemon
    /// connects with its own user and groups, so a socket the client could not open itself,
    /// or another daemon whose access lists leave the client out, would be read and written
    /// with the daemon's rights. Like `exec:`, it needs full access (root, the daemon's own
    /// user, `exec_users`) unless it reaches a configured peer; `peers.add` of one needs full
    /// access in any case, or adding would be the way around the rule.
    static func refusal(ofSocketURL url: String, level: AccessLevel) -> RPCError? {
        guard level < .full, url.hasPrefix("unix://") else { return nil }
        return RPCError.application(
            .forbidden,
            "a unix:// peer is reached with the daemon's own user and groups, so only root, the daemon's own user "
                + "and the users of exec_users may give one that is not a configured peer: sync with the peer by "
                + "its name, add it to the peers of the config file, or have one of those users add it (peers.add)")
    }

    /// `sync`: with a peer by name or URL, or with every peer. A URL that reaches no
    /// configured peer is the client's own: `exec:` and `unix://` ones need full access.
    func syncNow(_ request: Request, level: AccessLevel) throws -> [UInt8] {
        let params = try Params(request)
        let peer = try params.string("peer")
        // A peer's name holds no colon: this is a URL.
        if let peer, level < .full, peer.contains(":"), sync.peer(reaching: peer) == nil {
            if let refusal = ClientAccess.refusal(ofPeerURL: peer, level: level) { throw refusal }
            if let refusal = Methods.refusal(ofSocketURL: peer, level: level) { throw refusal }
        }
        let outcomes = try sync.syncNow(peer)
        var out = JSONWriter()
        out.beginObject()
        out.key("peers")
        out.beginArray()
        for outcome in outcomes {
            out.beginObject()
            out.member("name", outcome.name)
            out.member("url", outcome.url)
            out.member("sent", outcome.report.sent)
            out.member("received", outcome.report.received)
            out.member("skipped", outcome.report.skipped)
            out.member("dead_letters", outcome.report.deadLettered)
            out.member("reconciled", outcome.report.reconciledSent + outcome.report.reconciledReceived)
            // Events whose content was compared with the peer's, and those it holds otherwise.
            out.member("verified", outcome.report.verified)
            out.member("divergent", outcome.report.divergent)
            out.member("bytes_sent", outcome.report.bytesSent)
            out.member("bytes_received", outcome.report.bytesReceived)
            // Blobs (`blobs`): whole ones each way with their bytes, those the peer did not
            // hold, and those it asked for that this node holds and did not send whole.
            out.key("blobs")
            out.beginObject()
            out.member("asked", outcome.report.blobsAsked)
            out.member("received", outcome.report.blobsReceived)
            out.member("bytes_received", outcome.report.blobBytesReceived)
            out.member("missing", outcome.report.blobsMissing)
            out.member("sent", outcome.report.blobsSent)
            out.member("bytes_sent", outcome.report.blobBytesSent)
            out.member("peer_wants", outcome.report.blobsPeerWants)
            out.endObject()
            out.member("duration_ms", outcome.milliseconds)
            // The sync protocol the session ran, once the hellos agreed on one.
            out.key("protocol")
            if let version = outcome.report.protocolVersion { out.int(version) } else { out.null() }
            out.key("error")
            Methods.write(outcome.error, to: &out)
            out.endObject()
        }
        out.endArray()
        out.endObject()
        return out.bytes
    }

    func peers(_ request: Request, level: AccessLevel) throws -> [UInt8] {
        let list: [SyncService.Peer]
        switch request.method {
        case "peers.add":
            let params = try Params(request)
            guard let name = try params.string("name"), let url = try params.string("url") else {
                throw RPCError.invalidParams("peers.add takes \"name\" and \"url\"")
            }
            if let refusal = ClientAccess.refusal(ofPeerURL: url, level: level) { throw refusal }
            if let refusal = Methods.refusal(ofSocketURL: url, level: level) { throw refusal }
            var policy = BlobPolicy.eager
            if let text = try params.string("blobs") {
                guard let chosen = BlobPolicy(rawValue: text) else {
                    throw RPCError.invalidParams(
                        "\"blobs\" is \"eager\" (fetch every blob its events name), \"lazy\" (only those a client asks for) or \"none\", not \"\(text.prefix(40))\""
                    )
                }
                policy = chosen
            }
            list = try sync.add(name: name, url: url, blobs: policy)
        case "peers.remove":
            let params = try Params(request)
            guard let name = try params.string("name") else {
                throw RPCError.invalidParams("peers.remove takes \"name\"")
            }
            list = try sync.remove(name: name)
        default:
            _ = try Params(request)
            list = sync.peers()
        }
        return JSONWriter.page("peers", list, next: nil) { out, peer in
            out.beginObject()
            out.member("name", peer.name)
            out.member("url", peer.url)
            out.member("source", peer.fromConfig ? "config" : "api")
            out.member("blobs", peer.blobs.rawValue)
            out.endObject()
        }
    }

    static func write(_ error: SyncError?, to out: inout JSONWriter) {
        guard let error else {
            out.null()
            return
        }
        out.beginObject()
        out.member("reason", error.reason.rawValue)
        out.member("message", error.message)
        out.endObject()
    }
}
