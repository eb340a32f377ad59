import CNats

/// Where a failure happened, which decides how it reads: a timeout while connecting and a
/// timeout of the JetStream API call for different advice, and "no responders" means no
/// JetStream to an API call but no stream to a publish.
enum Situation {
    /// Building libnats options (reading certificate and key files).
    case options
    /// Connecting to one of `servers`, with TLS options or without.
    case connect(servers: String, timeout: Duration, tls: Bool)
    /// A JetStream API call to `server`, about `stream` when it names one.
    case jetStreamAPI(server: String, stream: String?, wait: Duration)
    /// Publishing to `subject` on `server`, whose `max_payload` is `maxPayload`, for `stream`
    /// when the publish expects one.
    case publish(server: String, subject: String, maxPayload: Int, ackWait: Duration, stream: String? = nil)
}

/// The server's JetStream error codes this module gives their own reason (libnats'
/// `status.h`, `jsErrCode`).
private enum ServerCode {
    static let notEnabledForAccount = Int(JSNotEnabledForAccountErr.rawValue)
    static let notEnabled = Int(JSNotEnabledErr.rawValue)
    static let messageExceedsMaximum = Int(JSStreamMessageExceedsMaximumErr.rawValue)
    static let streamNameExists = Int(JSStreamNameExistErr.rawValue)
    static let streamNotFound = Int(JSStreamNotFoundErr.rawValue)
    static let subjectOverlap = Int(JSStreamSubjectOverlapErr.rawValue)
    static let streamNotMatch = Int(JSStreamNotMatchErr.rawValue)
}

extension NATSError {
    /// The error a person reads for `failure` in `situation`. One table, so it can be tested whole.
    init(_ failure: NATSFailure, in situation: Situation) {
        let (code, sentence) = Self.classify(failure, situation)
        var message = sentence
        let detail = failure.detail.isEmpty ? NATS.statusText(failure.status) : failure.detail
        if !detail.isEmpty, !sentence.contains(detail) { message += " (libnats: \(detail))" }
        // The servers named are redacted already and libnats' texts are scrubbed as they are
        // read; this holds for a text that came another way.
        self.init(
            code: code, status: Int32(bitPattern: failure.status.rawValue), jetStreamCode: failure.jetStreamCode,
            operation: failure.operation, message: Redactor.redactURLs(in: message))
    }

    private static func classify(_ failure: NATSFailure, _ situation: Situation) -> (Code, String) {
        let server: String
        var stream: String?
        switch situation {
        case .options: server = "the server"
        case .connect(let servers, _, _): server = servers
        case .jetStreamAPI(let at, let name, _):
            server = at
            stream = name
        case .publish(let at, _, _, _, let expected):
            server = at
            stream = expected
        }
        let named = stream.map { "stream \($0)" } ?? "the stream"

        switch failure.jetStreamCode {
        case 0: break
        case ServerCode.notEnabled:
            // Also what libnats sets when no one answered the API request (no responders).
            return (
                .jetStreamNotEnabled,
                "the NATS server at \(server) has no JetStream enabled: start nats-server with -js or enable jetstream in its configuration"
            )
        case ServerCode.notEnabledForAccount:
            return (
                .jetStreamNotEnabled,
                "the NATS server at \(server) has JetStream, but not for this user's account: enable jetstream for the account in the server's configuration"
            )
        case ServerCode.streamNotFound:
            return (.streamNotFound, "the NATS server at \(server) has no \(named): create it first (addStream)")
        case ServerCode.streamNameExists:
            return (
                .streamExists,
                "\(named) already exists on \(server) with a different configuration: change it with updateStream (where the server allows the change), or use another stream name"
            )
        case ServerCode.subjectOverlap:
            return (
                .subjectsOverlap,
                "the subjects of \(named) overlap those of another stream on \(server): a subject may be stored by one stream only, so choose other subjects or remove them from the other stream"
            )
        case ServerCode.streamNotMatch:
            var subject = "its subject"
            if case .publish(_, let name, _, _, _) = situation { subject = name }
            return (
                .streamMismatch,
                "\(named) does not take \(subject) on \(server): another stream does, and refused the message because it was published for \(named) (nothing was stored); give \(named) the subject and take it from the other stream (a subject is stored by one stream only), or publish to the stream that takes it"
            )
        case ServerCode.messageExceedsMaximum:
            return (
                .messageTooLarge,
                "the message is larger than the stream's maximum message size on \(server): send smaller messages or raise the stream's max_msg_size"
            )
        default:
            return (
                .jetStream,
                "the JetStream API at \(server) refused the request (JetStream error \(failure.jetStreamCode))"
            )
        }

        switch failure.status {
        case NATS_NO_RESPONDERS:
            if case .publish(_, let subject, _, _, _) = situation {
                return (
                    .noStream,
                    "no stream on \(server) stores subject \(subject): add a stream whose subjects include it, or publish to a subject an existing stream takes"
                )
            }
            return (
                .jetStreamNotEnabled,
                "the NATS server at \(server) has no JetStream enabled: start nats-server with -js or enable jetstream in its configuration"
            )
        case NATS_TIMEOUT:
            switch situation {
            case .connect(_, let timeout, _):
                return (
                    .cannotConnect,
                    "no NATS server at \(server) answered within \(timeout): check that nats-server runs there and is reachable"
                )
            case .jetStreamAPI(_, _, let wait):
                return (
                    .timeout,
                    "the JetStream API at \(server) did not answer within \(wait): JetStream may be disabled (start nats-server with -js or enable jetstream) or the server overloaded; raise the JetStream wait if it is only slow"
                )
            case .publish(_, let subject, _, let ackWait, _):
                if failure.detail.contains("stalled") {
                    return (
                        .timeout,
                        "the publish to \(subject) waited for a place among the publishes in flight and none was acknowledged: the server at \(server) is not answering"
                    )
                }
                return (
                    .timeout,
                    "no acknowledgement for the message to \(subject) came from \(server) within \(ackWait): it may or may not be stored, so publish it again with the same message ID (the stream drops the copy)"
                )
            case .options:
                return (.timeout, "the operation timed out")
            }
        case NATS_NO_SERVER:
            if case .connect(_, let timeout, _) = situation {
                return (
                    .cannotConnect,
                    "cannot connect to \(server): no server accepted a connection within \(timeout) (refused, unreachable or not answering); check that nats-server runs there and that the address and port are right"
                )
            }
            return (.connectionClosed, "the connection to \(server) failed: connect again")
        case NATS_PROTOCOL_ERROR, NATS_IO_ERROR, NATS_CONNECTION_CLOSED:
            // During the handshake: the server hung up after the TCP (and TLS) connection.
            if case .connect(_, _, let tls) = situation {
                if tls {
                    return (
                        .tls,
                        "the NATS server at \(server) closed the connection during the handshake, which with TLS usually means it refused the client certificate: a server with verify: true needs tlsCertificateFile and tlsKeyFile signed by a CA in its ca_file"
                    )
                }
                return (
                    .cannotConnect,
                    "the NATS server at \(server) closed the connection during the handshake: check its log for why (connection limits, a client address it refuses)"
                )
            }
            if failure.status == NATS_PROTOCOL_ERROR { return (.library, "libnats could not read what \(server) sent") }
            return (.connectionClosed, "the connection to \(server) is closed: connect again")
        case NATS_CONNECTION_AUTH_FAILED:
            return (
                .authenticationFailed,
                "the NATS server at \(server) refused the credentials: check the user and password, token, NKey seed file or .creds file, and that the server's authorization lists this user"
            )
        case NATS_NOT_PERMITTED:
            return (
                .authenticationFailed,
                "the NATS server at \(server) does not permit this operation for this user: check the user's permissions in the server's authorization"
            )
        case NATS_SECURE_CONNECTION_REQUIRED:
            return (
                .tls,
                "the NATS server at \(server) requires TLS: give the CA file that signed its certificate (tlsCAFile), and a client certificate if it verifies clients"
            )
        case NATS_SECURE_CONNECTION_WANTED:
            return (
                .tls,
                "TLS was asked for but the NATS server at \(server) does not offer it: configure tls on the server, or connect without the TLS options"
            )
        case NATS_SSL_ERROR:
            if case .options = situation {
                return (
                    .invalidArgument,
                    "a TLS certificate, key or CA file cannot be loaded: check the paths and that the files are PEM"
                )
            }
            return (
                .tls,
                "the TLS handshake with \(server) failed: check that tlsCAFile signed the server's certificate, that the certificate names the host connected to, and that the client certificate (if the server verifies clients) is signed by a CA it trusts"
            )
        case NATS_MAX_PAYLOAD:
            var size = ""
            if case .publish(_, _, let maxPayload, _, _) = situation { size = " of \(maxPayload) bytes" }
            return (
                .messageTooLarge,
                "the message (headers and body) is larger than the max_payload\(size) of the NATS server at \(server): send smaller messages or raise max_payload in the server's configuration"
            )
        case NATS_CONNECTION_DISCONNECTED, NATS_STALE_CONNECTION:
            return (.connectionClosed, "the connection to \(server) is closed: connect again")
        case NATS_NOT_FOUND:
            if case .jetStreamAPI = situation {
                return (.streamNotFound, "the NATS server at \(server) has no \(named): create it first (addStream)")
            }
            return (.invalidArgument, "a file or item was not found")
        case NATS_INVALID_ARG, NATS_INVALID_SUBJECT, NATS_ADDRESS_MISSING, NATS_INVALID_TIMEOUT:
            return (.invalidArgument, "an argument or option is not valid")
        case NATS_ERR where failure.detail.isEmpty == false:
            if case .jetStreamAPI = situation {
                return (.jetStream, "the JetStream API at \(server) refused the request")
            }
            return (.library, "libnats failed")
        default:
            return (.library, "libnats failed with \(NATS.statusText(failure.status))")
        }
    }
}
