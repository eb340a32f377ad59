import Arguments
import UnixSocket

#if canImport(Glibc)
    import Glibc
#endif

/// A file replaced whole, so that a reader (node_exporter's textfile collector, whoever
/// opens an export) sees either the old content or the new one, never a part.
enum TextFile {
    /// Writes `bytes` to a new file beside `path` (mode 0644 whatever the umask), syncs it,
    /// renames it over `path` and syncs the directory. On failure the temporary file is
    /// removed and `path` is left as it was.
    static func replace(_ path: String, with bytes: [UInt8]) throws(CommandFailure) {
        try replace(path, mode: 0o644) { (file: Int32) throws(CommandFailure) in
            do {
                try FileDescriptor.write(bytes, to: file)
            } catch {
                throw CommandFailure(exitCode: ExitStatus.failed, "cannot write beside \(path): \(error)")
            }
        }
    }

    /// The same, with `write` writing the content to the new file as it goes (an export too
    /// large to hold in memory) to the descriptor it is given; what it throws leaves `path`
    /// as it was.
    static func replace(
        _ path: String, mode: mode_t, write: (Int32) throws(CommandFailure) -> Void
    ) throws(CommandFailure) {
        // The temporary file goes in the directory the path names, as the kernel resolves it.
        let slash = path.lastIndex(of: "/")
        let directory = slash.map { $0 == path.startIndex ? "/" : String(path[..<$0]) } ?? "."
        let name = slash.map { path[path.index(after: $0)...] } ?? path[...]
        // node_exporter reads only *.prom files: the temporary name does not end so.
        let temporary = (directory == "/" ? "" : directory) + "/." + name + "." + System.randomHex(8) + ".tmp"
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode)
        guard descriptor >= 0 else { throw failure("cannot create a file in \(directory)", errno) }
        var unclosed = true
        defer { if unclosed { close(descriptor) } }
        do throws(CommandFailure) {
            guard fchmod(descriptor, mode) == 0 else { throw failure("cannot set the mode of \(temporary)", errno) }
            try write(descriptor)
            guard fsync(descriptor) == 0 else { throw failure("cannot write \(temporary)", errno) }
            unclosed = false
            guard close(descriptor) == 0 else { throw failure("cannot write \(temporary)", errno) }
            guard rename(temporary, path) == 0 else { throw failure("cannot rename \(temporary) to \(path)", errno) }
        } catch {
            unlink(temporary)
            throw error
        }
        // The rename is durable once the directory is synced; a failure here leaves the new
        // file in place, so it is not an error.
        let directoryDescriptor = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if directoryDescriptor >= 0 {
            _ = fsync(directoryDescriptor)
            close(directoryDescriptor)
        }
    }

    private static func failure(_ what: String, _ code: Int32) -> CommandFailure {
        CommandFailure(exitCode: ExitStatus.failed, "\(what): \(String(cString: strerror(code))).")
    }
}
