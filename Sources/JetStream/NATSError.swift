/// A failure of a NATS or JetStream operation: a stable code to match on, the libnats status
/// and JetStream error code behind it, the call that failed, and a sentence a person can act on.
///
/// Match one with a pattern:
///
///     do { try connection.addStream(config) } catch NATSError.subjectsOverlap { ... }
///
/// Two errors are equal when their codes are equal; the rest is context.
public struct NATSError: Error, Equatable, CustomStringConvertible, Sendable {
    /// What went wrong, as a stable machine-readable reason (`cannot_connect`, `stream_exists`, ...).
    public let code: Code

    /// libnats' `natsStatus`, 0 (`NATS_OK`) when the failure did not come from libnats.
    public let status: Int32

    /// The server's JetStream error code (`jsErrCode`, such as 10065 for overlapping subjects),
    /// 0 when the server gave none.
    public let jetStreamCode: Int

    /// The C function that failed, such as `js_AddStream`; empty for the pattern constants.
    public let operation: String

    /// What was wrong and what to do about it, with libnats' own text when it had one.
    public let message: String

    public init(code: Code, status: Int32 = 0, jetStreamCode: Int = 0, operation: String, message: String) {
        self.code = code
        self.status = status
        self.jetStreamCode = jetStreamCode
        self.operation = operation
        self.message = message
    }

    public var description: String {
        operation.isEmpty ? "\(code): \(message)" : "\(operation) failed (\(code)): \(message)"
    }

    public static func == (lhs: NATSError, rhs: NATSError) -> Bool { lhs.code == rhs.code }

    /// Matches any error with the same code, so that `catch NATSError.timeout` works.
    public static func ~= (pattern: NATSError, value: any Error) -> Bool {
        (value as? NATSError)?.code == pattern.code
    }

    /// A stable reason; its raw value is what logs and tools should match on.
    public struct Code: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        /// No server in the list could be reached: refused, unreachable, or no answer within
        /// the connect timeout.
        public static let cannotConnect = Code(rawValue: "cannot_connect")
        /// The server refused the credentials (user/password, token, NKey, .creds).
        public static let authenticationFailed = Code(rawValue: "authentication_failed")
        /// TLS could not be set up: a handshake or verification failure, or one side wants TLS
        /// and the other does not.
        public static let tls = Code(rawValue: "tls")
        /// The server (or the account) has no JetStream.
        public static let jetStreamNotEnabled = Code(rawValue: "jetstream_not_enabled")
        /// No stream has the given name.
        public static let streamNotFound = Code(rawValue: "stream_not_found")
        /// A stream of that name exists with a different configuration.
        public static let streamExists = Code(rawValue: "stream_exists")
        /// The stream's subjects overlap those of another stream.
        public static let subjectsOverlap = Code(rawValue: "subjects_overlap")
        /// A publish reached no stream: no stream's subjects include the message's subject.
        public static let noStream = Code(rawValue: "no_stream")
        /// A publish for one stream reached another: the stream that takes the subject is
        /// not the one expected. It refused the message (it stored nothing), or, from a
        /// server that does not check, stored it and acknowledged it under its own name.
        public static let streamMismatch = Code(rawValue: "stream_mismatch")
        /// The message (headers and body) is larger than the server's `max_payload`, or than
        /// the stream's maximum message size.
        public static let messageTooLarge = Code(rawValue: "message_too_large")
        /// No answer arrived in time (a JetStream API call, a publish acknowledgement, a wait).
        public static let timeout = Code(rawValue: "timeout")
        /// The connection is closed: the server went away, or `close()` was called.
        public static let connectionClosed = Code(rawValue: "connection_closed")
        /// An option or argument is unusable: a file that cannot be read, a malformed seed, an
        /// empty subject.
        public static let invalidArgument = Code(rawValue: "invalid_argument")
        /// The JetStream API answered with another error; `jetStreamCode` says which.
        public static let jetStream = Code(rawValue: "jetstream_error")
        /// Any other libnats failure; `status` says which.
        public static let library = Code(rawValue: "nats_error")
    }
}

extension NATSError {
    /// The same error with `redactor`'s secrets and URLs hidden in its message.
    public func redacted(by redactor: Redactor) -> NATSError {
        NATSError(
            code: code, status: status, jetStreamCode: jetStreamCode, operation: operation,
            message: redactor.redact(message))
    }
}

extension NATSError {
    private init(_ code: Code) { self.init(code: code, operation: "", message: code.rawValue) }

    /// Patterns for `catch`; see `Code` for what each means.
    public static let cannotConnect = NATSError(.cannotConnect)
    public static let authenticationFailed = NATSError(.authenticationFailed)
    public static let tls = NATSError(.tls)
    public static let jetStreamNotEnabled = NATSError(.jetStreamNotEnabled)
    public static let streamNotFound = NATSError(.streamNotFound)
    public static let streamExists = NATSError(.streamExists)
    public static let subjectsOverlap = NATSError(.subjectsOverlap)
    public static let noStream = NATSError(.noStream)
    public static let streamMismatch = NATSError(.streamMismatch)
    public static let messageTooLarge = NATSError(.messageTooLarge)
    public static let timeout = NATSError(.timeout)
    public static let connectionClosed = NATSError(.connectionClosed)
    public static let invalidArgument = NATSError(.invalidArgument)
    public static let jetStream = NATSError(.jetStream)
    public static let library = NATSError(.library)
}
