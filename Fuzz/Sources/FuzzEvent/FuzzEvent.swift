import EventStore
import FuzzDriver
import FuzzEntries

/// The event codec fuzzer: the first byte picks the form (see `FuzzEntry.event`); the rest
/// also goes through the JSON scanner's canonical encoding on its own.
@main
enum FuzzEvent {
    static func main() {
        FuzzDriver.run { data, size in
            let bytes = FuzzDriver.bytes(data, size)
            _ = try? FuzzEntry.event(bytes)
            _ = try? FuzzEntry.canonicalJSON(Array(bytes.dropFirst()))
            return 0
        }
    }
}
