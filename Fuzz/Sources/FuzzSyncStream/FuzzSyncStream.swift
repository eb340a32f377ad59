import FuzzDriver
import FuzzEntries

/// The sync stream fuzzer: a flags byte, then the bytes a peer sends (see
/// `DaemonFuzzEntry.syncStream`).
@main
enum FuzzSyncStream {
    static func main() {
        FuzzDriver.run { data, size in
            _ = try? DaemonFuzzEntry.syncStream(FuzzDriver.bytes(data, size))
            return 0
        }
    }
}
