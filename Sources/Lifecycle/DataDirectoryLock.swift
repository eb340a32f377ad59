import FoundationEssentials

#if canImport(Glibc)
    import Glibc
#endif

/// The data directory's `evstored.lock`, held locked (`flock(LOCK_EX)`) by the one daemon
/// that serves the store, from before the store opens until the process ends.
///
/// LMDB lets many processes open one store, but two daemons on it would each run their
/// own watches and sync scheduler: a watcher of one misses the appends made through the
/// other. The file holds the holder's pid and socket, written after it took the lock, so
/// a second daemon can say whom it found. The kernel drops the lock when the holder exits,
/// however it exits, so a file left by a killed daemon never blocks the next.
package final class DataDirectoryLock: Sendable {
    package static let fileName = "evstored.lock"

    /// Why the lock was not taken.
    package enum Failure: Error {
        /// Another process holds it; its pid and socket as its file records them.
        case held(pid: String?, socket: String?)
        /// The file cannot be created or locked.
        case unusable(String)
    }

    private let descriptor: Int32

    /// Takes the lock of `directory` (which exists), without waiting, and records this
    /// process's pid and `socket` in the file.
    package init(directory: String, socket: String) throws(Failure) {
        let path = directory + "/" + Self.fileName
        let descriptor = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw Failure.unusable("cannot open \(path): \(String(cString: strerror(errno)))")
        }
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
            let code = errno
            defer { close(descriptor) }
            guard code == EWOULDBLOCK else {
                throw Failure.unusable("cannot lock \(path): \(String(cString: strerror(code)))")
            }
            let fields = Self.fields(Self.contents(of: descriptor))
            throw Failure.held(pid: fields["pid"], socket: fields["socket"])
        }
        let record = Array("pid \(getpid())\nsocket \(socket)\n".utf8)
        guard ftruncate(descriptor, 0) == 0, pwrite(descriptor, record, record.count, 0) == record.count else {
            let code = errno
            close(descriptor)
            throw Failure.unusable("cannot write \(path): \(String(cString: strerror(code)))")
        }
        self.descriptor = descriptor
    }

    deinit { close(descriptor) }

    /// The file's first 4 KiB, as text.
    private static func contents(of descriptor: Int32) -> String {
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = pread(descriptor, &buffer, buffer.count, 0)
        return String(decoding: buffer.prefix(max(count, 0)), as: UTF8.self)
    }

    /// `key value` lines as a dictionary.
    package static func fields(_ text: String) -> [String: String] {
        var fields: [String: String] = [:]
        for line in text.split(separator: "\n") {
            guard let space = line.firstIndex(of: " ") else { continue }
            fields[String(line[..<space])] = String(line[line.index(after: space)...])
        }
        return fields
    }
}
