/// What a stream answered for one asynchronous publish.
public struct PublishAck: Sendable, Equatable {
    /// The stream that stored the message.
    public let stream: String
    /// Its sequence in the stream (for a duplicate: the sequence of the copy stored first).
    public let sequence: UInt64
    /// The stream already held a message with this message ID, stored within its
    /// duplicate window, and did not store this one.
    public let duplicate: Bool
}

/// The outcome of one asynchronous publish, reported once through the connection's
/// `onPublishResult`.
public struct PublishResult: Sendable {
    /// The tag given to `publishAsync`.
    public let tag: UInt64
    /// The acknowledgement, or why there is none: the stream refused the message, no stream
    /// takes its subject, the acknowledgement did not arrive in time, or the connection
    /// closed first. After an error the message may or may not be stored; publishing it again
    /// with the same message ID is safe within the stream's duplicate window.
    public let outcome: Result<PublishAck, NATSError>
}
