import EventStore
import UnixSocket

/// Who is told of each commit's events (the watch hub).
///
/// - Important: The writer holds `publishLock` from before its commit until it has
///   published, so a subscriber that takes it to read the last events and join gets every
///   event either in what it read or in what it is sent, never both, never neither.
package protocol CommitPublisher: AnyObject, Sendable {
    var publishLock: Lock { get }
    /// Whether anyone listens. Called with `publishLock` held.
    var hasSubscribers: Bool { get }
    /// The events of a commit, in seq order. Called with `publishLock` held.
    func publish(_ events: [CommittedEvent])
}
