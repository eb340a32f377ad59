import Arguments

/// The forms of a peer URL, for help texts and for telling a URL from a name.
enum PeerURLForms {
    static let schemes = ["unix://", "ssh://", "exec:"]

    static let helpText = """
          unix:///path/to/evstored.sock
              another daemon's socket on this machine
          ssh://user@host[:port][/socket/path]
              runs `evctl sync-serve` on the host over ssh, as git does (with
              --socket /socket/path when a path is given)
          exec:COMMAND
              a command that speaks the sync protocol on its standard input and
              output, split into words as a shell would:
              exec:evctl --socket /run/evstore-2/evstored.sock sync-serve
        """

    /// A PEER with a colon is meant as a URL; a name has none.
    static func isURL(_ word: String) -> Bool { word.contains(":") }

    /// Checks a URL's scheme; the daemon checks the rest.
    static func check(url: String) throws(UsageError) {
        guard !schemes.contains(where: url.hasPrefix) else { return }
        throw UsageError("'\(url)' is not a peer URL: use unix:///path, ssh://user@host[:port][/path] or exec:COMMAND")
    }
}
