import EventStore
import FoundationEssentials
import Server
import Wire

#if canImport(Glibc)
    import Glibc
#endif

/// Where a `backup` goes: its directory, opened without following links where a client
/// could plant one, and its `data.mdb`, created by the daemon with mode 0600.
///
/// A client with write access names the path, and the daemon writes there with its own
/// rights, so nothing here trusts the path between two system calls: every step after the
/// first works on descriptors (`openat`, `mkdirat`, `fstat`, `fchmod`). The directory must
/// be the daemon's own with mode 0700 (a directory another user owns could have its
/// `data.mdb` swapped for a link mid-copy, or be read by them), and the file is created
/// with `O_EXCL | O_NOFOLLOW`, so a link planted at its name is refused, never followed.
///
/// With `backup_dir` set, the path must lie under it, and no component below it may be a
/// symbolic link: a link could lead the copy out of it.
struct BackupDestination: ~Copyable {
    /// The backup directory, open.
    let directory: Int32
    /// Its `data.mdb`, created empty and open for writing.
    let file: Int32
    /// The path as given, for messages.
    let path: String
    /// Whether the file was written in full; else it is removed when this ends.
    private var finished = false

    static let fileName = "data.mdb"

    /// Opens (creating what is missing, with mode 0700) the directory `path` and creates its
    /// `data.mdb`. `confinement` is `backup_dir`, when set.
    init(path: String, confinement: String?) throws(RPCError) {
        guard path.hasPrefix("/") else {
            throw RPCError.invalidParams("backup takes \"path\": an absolute directory path the daemon can write")
        }
        let components = path.split(separator: "/").map(String.init)
        guard !components.isEmpty else {
            throw RPCError.invalidParams("backup takes \"path\": a directory to create or an empty one, not /")
        }
        if components.contains(where: { $0 == ".." || $0 == "." }) {
            throw RPCError.invalidParams(
                "the backup path \(path) has a \".\" or \"..\" component: give the directory's path without them")
        }
        var start = "/"
        var below = components
        // Links are followed only above the directory, and never under backup_dir.
        var followsLinks = true
        if let confinement {
            let base = confinement.split(separator: "/").map(String.init)
            guard components.count > base.count, Array(components.prefix(base.count)) == base else {
                throw RPCError.application(
                    .forbidden,
                    "\(path) is not under backup_dir (\(confinement)): this daemon writes backups only there; "
                        + "choose a path such as \(confinement)/\(components.last ?? "backup")")
            }
            start = confinement
            below = Array(components.dropFirst(base.count))
            followsLinks = false
        }
        var current = open(start, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard current >= 0 else {
            throw RPCError.application(
                .unavailable,
                "cannot open \(start) (backup_dir) as the daemon's user: \(Self.describe(errno)); create it, or fix backup_dir"
            )
        }
        var reached = confinement ?? ""
        var created = false
        for (position, name) in below.enumerated() {
            reached += "/" + name
            let last = position == below.count - 1
            let flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC | (last || !followsLinks ? O_NOFOLLOW : 0)
            var next = openat(current, name, flags)
            if next < 0, errno == ENOENT {
                if mkdirat(current, name, 0o700) == 0 {
                    created = last
                } else if errno != EEXIST {
                    let code = errno
                    close(current)
                    throw RPCError.application(
                        .forbidden, "cannot create \(reached) as the daemon's user: \(Self.describe(code))")
                }
                next = openat(current, name, flags)
            }
            var code = errno
            if next < 0, code == ENOTDIR, Self.isLink(name, in: current) { code = ELOOP }
            close(current)
            guard next >= 0 else { throw Self.refusal(opening: reached, code: code, last: last, path: path) }
            current = next
        }
        do throws(RPCError) {
            try Self.check(directory: current, path: path, created: created)
        } catch {
            close(current)
            throw error
        }
        let file = openat(current, Self.fileName, O_CREAT | O_EXCL | O_NOFOLLOW | O_WRONLY | O_CLOEXEC, 0o600)
        guard file >= 0 else {
            let code = errno
            close(current)
            throw RPCError.application(
                code == EEXIST ? .conflict : .forbidden,
                "cannot create \(path)/\(Self.fileName): \(Self.describe(code)); choose a new path for the backup")
        }
        // The umask may have taken bits away; the mode is exact, and set on the descriptor.
        _ = fchmod(file, 0o600)
        self.directory = current
        self.file = file
        self.path = path
    }

    /// Whether `name` in `directory` is a symbolic link (`O_NOFOLLOW | O_DIRECTORY` reports
    /// one as "not a directory").
    private static func isLink(_ name: String, in directory: Int32) -> Bool {
        var info = stat()
        return fstatat(directory, name, &info, AT_SYMLINK_NOFOLLOW) == 0 && info.st_mode & S_IFMT == S_IFLNK
    }

    /// The refusal of a component that would not open.
    private static func refusal(opening reached: String, code: Int32, last: Bool, path: String) -> RPCError {
        switch code {
        case ELOOP:
            return RPCError.application(
                .forbidden,
                "\(reached) is a symbolic link: the daemon does not follow links \(last ? "to a backup directory" : "under backup_dir"); give the real directory's path"
            )
        case ENOTDIR:
            return RPCError.application(
                .conflict, "\(reached) exists and is not a directory: choose a new path for the backup")
        default:
            return RPCError.application(
                .forbidden, "cannot open \(reached) as the daemon's user: \(describe(code)) (backup path \(path))")
        }
    }

    /// An existing directory must be the daemon's own, mode 0700 and empty; one just made
    /// gets mode 0700 exactly (mkdir honours the umask).
    private static func check(directory: Int32, path: String, created: Bool) throws(RPCError) {
        var info = stat()
        guard fstat(directory, &info) == 0 else {
            throw RPCError.application(.unavailable, "cannot read \(path): \(describe(errno))")
        }
        if created, info.st_uid == geteuid() {
            _ = fchmod(directory, 0o700)
            info.st_mode = info.st_mode & ~0o7777 | 0o700
        }
        guard info.st_uid == geteuid() else {
            throw RPCError.application(
                .forbidden,
                "\(path) belongs to uid \(AccessPolicy.name(user: info.st_uid)), not to the daemon's user "
                    + "(uid \(AccessPolicy.name(user: geteuid()))): its owner could read the copy or swap its files; "
                    + "give a path that does not exist, and the daemon creates it")
        }
        guard info.st_mode & 0o7777 == 0o700 else {
            throw RPCError.application(
                .forbidden,
                "\(path) has mode 0\(String(info.st_mode & 0o7777, radix: 8)), not 0700: others could read the copy; "
                    + "`chmod 0700` it, or give a path that does not exist")
        }
        guard let entries = entryCount(directory), entries == 0 else {
            throw RPCError.application(
                .conflict, "\(path) exists and is not an empty directory: choose a new path for the backup")
        }
    }

    /// The entries of an open directory, `.` and `..` left out; nil when it cannot be read.
    private static func entryCount(_ directory: Int32) -> Int? {
        let copy = dup(directory)
        guard copy >= 0, let stream = fdopendir(copy) else {
            if copy >= 0 { close(copy) }
            return nil
        }
        defer { closedir(stream) }
        var count = 0
        while let entry = readdir(stream) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { bytes in
                String(decoding: bytes.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            if name != "." && name != ".." { count += 1 }
        }
        return count
    }

    static func describe(_ code: Int32) -> String { String(cString: strerror(code)) }

    /// Copies the store into the file, flushes it and the directory; the copy's size in bytes.
    mutating func write(from log: EventLog) throws(EventStoreError) -> Int {
        try log.backup(toDescriptor: file)
        _ = fsync(directory)
        finished = true
        var info = stat()
        return fstat(file, &info) == 0 ? Int(info.st_size) : 0
    }

    deinit {
        // A copy that failed halfway is no backup: leave the directory as it was found.
        if !finished { unlinkat(directory, Self.fileName, 0) }
        close(file)
        close(directory)
    }
}
