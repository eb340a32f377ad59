import Foundation
import Testing

/// A named network namespace (`ip netns add`), made by a test and deleted by `delete()`:
/// its links go with it. Only root can make one.
final class NetworkNamespace: @unchecked Sendable {
    let name: String

    /// The `ip` program, when there is one.
    static let ip: String? = ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"].first {
        FileManager.default.isExecutableFile(atPath: $0)
    }

    /// Whether this process can make namespaces and veth pairs in them: it is root, `ip` is
    /// there, and the kernel allows both (a container may not).
    static let usable: Bool = {
        guard getuid() == 0, ip != nil else { return false }
        guard let probe = try? NetworkNamespace(prefix: "evprobe") else { return false }
        defer { probe.delete() }
        return (try? probe.run(["link", "add", "p0", "type", "veth", "peer", "name", "p1"])) != nil
    }()

    static let unusableReason: Comment =
        "needs root, ip (iproute2) and a kernel that allows network namespaces and veth links"

    init(prefix: String = "evnet") throws {
        name = "\(prefix)-\(UUID().uuidString.prefix(8).lowercased())"
        let (status, output) = try runProgram(NetworkNamespace.ip ?? "/usr/sbin/ip", ["netns", "add", name])
        guard status == 0 else { throw DaemonError("ip netns add \(name): \(output)") }
    }

    /// Runs `ip -n NAME ARGUMENTS...`, which must succeed.
    @discardableResult
    func run(_ arguments: [String]) throws -> String {
        try NetworkNamespace.ip(["-n", name] + arguments)
    }

    /// Runs `ip ARGUMENTS...` (in this process's namespace), which must succeed.
    @discardableResult
    static func ip(_ arguments: [String]) throws -> String {
        let (status, output) = try runProgram(ip ?? "/usr/sbin/ip", arguments)
        guard status == 0 else { throw DaemonError("ip \(arguments.joined(separator: " ")): \(output)") }
        return output
    }

    /// The command that runs a program inside the namespace, in place.
    var launcher: [String] { [NetworkNamespace.ip ?? "/usr/sbin/ip", "netns", "exec", name] }

    func delete() {
        _ = try? runProgram(NetworkNamespace.ip ?? "/usr/sbin/ip", ["netns", "delete", name])
    }
}
