#if canImport(Glibc)
    import Glibc
#endif

/// Lookups in the system's user and group databases (`/etc/passwd`, `/etc/group`, or
/// whatever NSS is configured to use).
public enum Accounts {
    /// The id of the user named `name` (or given as a number), nil when there is none.
    /// The corresponding C function is `getpwnam_r`.
    public static func userID(named name: String) -> UInt32? {
        if let number = UInt32(name) { return number }
        var entry = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 16 * 1024)
        guard getpwnam_r(name, &entry, &buffer, buffer.count, &result) == 0, result != nil else { return nil }
        return entry.pw_uid
    }

    /// The name of user `uid`, nil when it has none. The corresponding C function is `getpwuid_r`.
    public static func userName(of uid: UInt32) -> String? {
        var entry = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 16 * 1024)
        guard getpwuid_r(uid, &entry, &buffer, buffer.count, &result) == 0, result != nil, let name = entry.pw_name
        else { return nil }
        return String(cString: name)
    }

    /// The name of group `gid`, nil when it has none. The corresponding C function is `getgrgid_r`.
    public static func groupName(of gid: UInt32) -> String? {
        var entry = group()
        var result: UnsafeMutablePointer<group>?
        var buffer = [CChar](repeating: 0, count: 16 * 1024)
        guard getgrgid_r(gid, &entry, &buffer, buffer.count, &result) == 0, result != nil, let name = entry.gr_name
        else { return nil }
        return String(cString: name)
    }

    /// The groups the group database gives user `uid` (with `gid`, its primary group): what
    /// a login of that user would have. Empty when the user has no name.
    /// The corresponding C function is `getgrouplist`.
    public static func groupList(of uid: UInt32, primary gid: UInt32) -> [UInt32] {
        guard let name = userName(of: uid) else { return [] }
        var count: Int32 = 64
        while true {
            var groups = [gid_t](repeating: 0, count: Int(count))
            var found = count
            if getgrouplist(name, gid, &groups, &found) >= 0 {
                return Array(groups.prefix(Int(found)))
            }
            // Too small: `found` holds the size it needs.
            count = max(found, count * 2)
            if count > 65_536 { return [] }
        }
    }
}
