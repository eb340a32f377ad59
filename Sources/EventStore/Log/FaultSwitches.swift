#if DEBUG
    #if canImport(Glibc)
        import Glibc
    #endif

    /// Debug builds only: storage failures on demand, for the tests of what a running
    /// daemon process does when a write that no client waits for fails (the peer state, the
    /// periodic fsync); `Environment.injectFailure` does it for tests inside the process.
    /// A fault is on while a file of its name exists in the directory `EVSTORE_FAULT_DIR`
    /// names, so a test can turn it on and off while the daemon runs. Release builds do
    /// not have it.
    enum FaultSwitches {
        /// The periodic fsync of a relaxed store (`EventLog.sync()`).
        static let fsync = "fsync"
        /// A write to the peers table (a peer's sync state, a peer added).
        static let peerEntriesWrite = "peer_entries_write"

        private static let directory: String? = getenv("EVSTORE_FAULT_DIR").map { String(cString: $0) }

        /// Throws EIO's error when `fault` is on.
        static func check(_ fault: String) throws(EventStoreError) {
            guard let directory, access(directory + "/" + fault, F_OK) == 0 else { return }
            throw EventStoreError(.unavailable, "Input/output error (EIO), injected: \(fault)")
        }
    }
#endif
