/// How to reach a NATS server with JetStream: where, as whom, over what, and how long to wait.
///
/// Every file path is read by libnats when it connects (and, for the NKey seed, by this
/// module first, to derive the public key), so the files must stay where they are while
/// connections are made.
public struct NATSOptions: Sendable {
    /// Server URLs such as `nats://127.0.0.1:4222`; several for a cluster (libnats tries them
    /// in random order and connects to the first that answers).
    public var urls: [String]

    /// The connection's name, shown by the server's monitoring (`connz`) and in its logs.
    public var name: String?

    /// A `.creds` file holding a user JWT and its NKey seed (decentralized authentication).
    /// The corresponding C function is `natsOptions_SetUserCredentialsFromFiles`.
    public var credentialsFile: String?

    /// A file holding an NKey user seed (`SU...`), for a server that lists the user's public
    /// key (`authorization { users = [ { nkey: U... } ] }`). Only the seed is needed: the
    /// public key is derived from it, as nats.go's `NkeyOptionFromSeed` does.
    public var nkeySeedFile: String?

    /// User and password authentication.
    public var user: String?
    public var password: String?

    /// Token authentication.
    public var token: String?

    /// A PEM file of the certificate authorities to trust; setting it turns TLS on.
    public var tlsCAFile: String?

    /// A client certificate (PEM) and its private key, for servers that verify clients.
    public var tlsCertificateFile: String?
    public var tlsKeyFile: String?

    /// How long to wait for a server to accept the connection (TCP, TLS and the NATS
    /// handshake together), per server tried.
    public var connectTimeout: Duration = .seconds(2)

    /// How long to wait for an answer from the JetStream API (stream lookups and changes,
    /// reading a message, and the check at connect that JetStream is enabled).
    public var jetStreamWait: Duration = .seconds(5)

    /// How long a publish waits for its acknowledgement before it is reported as timed out.
    /// A timed-out message may still have been stored: publish it again with the same
    /// message ID and the stream drops the copy.
    public var publishAckTimeout: Duration = .seconds(5)

    /// The most asynchronous publishes in flight (sent, not yet acknowledged); a publish
    /// beyond it blocks until an acknowledgement frees a place. libnats' `PublishAsync.MaxPending`.
    public var maxPendingPublishes: Int = 1024

    /// How often the client pings the server; two unanswered pings close the connection.
    /// This is how a silent network failure (no reset, no FIN) is noticed; nil keeps libnats'
    /// default of two minutes.
    public var pingInterval: Duration?

    public init(urls: [String]) {
        self.urls = urls
    }

    public init(url: String) {
        self.urls = [url]
    }
}
