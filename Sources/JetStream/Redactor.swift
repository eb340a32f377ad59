/// Keeps the passwords and tokens of NATS server URLs and options out of text a person reads:
/// log lines, error messages, anything shown.
///
/// A URL's userinfo is libnats' way to authenticate: `nats://user:password@host:4222` (user
/// and password) or `nats://token@host:4222` (a token alone), and libnats hands the URL back
/// whole, credentials included, as the server connected to. So every URL this module puts in
/// a message goes through `redact(url:)`, which keeps the user and hides the rest:
/// `nats://user:***@host:4222`, `nats://***@host:4222`. Text from libnats is scrubbed the same
/// way (`redactURLs(in:)`), since it may quote a URL.
///
/// A `Redactor` made from the options also knows the secrets themselves, the password and
/// token options and those in the URLs, and replaces them wherever they appear, URL or not:
/// the last line of defence for a log. A secret of fewer than four bytes is replaced only
/// where it stands in a URL, so that a short one cannot garble every message.
public struct Redactor: Sendable {
    /// The configured URLs that have userinfo, each with its redacted form, longest first (a
    /// schemeless `user:password@host` is found only this way).
    private let urls: [(plain: String, redacted: String)]
    /// The passwords and tokens to replace wherever they appear, longest first.
    private let secrets: [String]

    /// What replaces a secret.
    public static let mask = "***"

    /// The shortest secret replaced wherever it appears, not only in a URL.
    static let shortestReplacedSecret = 4

    public init(_ options: NATSOptions) {
        var secrets = [options.password, options.token].compactMap { $0 }
        var urls: [(String, String)] = []
        for url in options.urls {
            guard let userinfo = Self.userinfo(of: url) else { continue }
            urls.append((url, Self.redact(url: url)))
            if let colon = userinfo.firstIndex(of: ":") {
                secrets.append(String(userinfo[userinfo.index(after: colon)...]))
            } else {
                secrets.append(String(userinfo))
            }
        }
        self.urls = urls.sorted { $0.0.utf8.count > $1.0.utf8.count }
        self.secrets = Set(secrets.filter { $0.utf8.count >= Self.shortestReplacedSecret }).sorted {
            $0.utf8.count > $1.utf8.count
        }
    }

    /// `text` without any password or token: the configured URLs in their redacted form, any
    /// other URL's userinfo hidden, and the known secrets replaced.
    public func redact(_ text: String) -> String {
        var result = text
        for url in urls where result.contains(url.plain) { result = result.replacing(url.plain, with: url.redacted) }
        result = Self.redactURLs(in: result)
        for secret in secrets where result.contains(secret) { result = result.replacing(secret, with: Self.mask) }
        return result
    }

    /// One server URL with its password or token hidden: `nats://user:***@host:4222`, a
    /// token alone as `nats://***@host:4222`. A URL without userinfo is returned as it is.
    public static func redact(url: String) -> String {
        guard url.contains("://") else {
            // libnats takes `user:password@host` without a scheme too.
            guard let at = url.lastIndex(of: "@") else { return url }
            return maskUserinfo(url[..<at]) + url[at...]
        }
        return redactURLs(in: url)
    }

    /// `text` with the userinfo of every `scheme://userinfo@host` in it hidden. A URL ends at
    /// white space, a comma (between the URLs of a list) or a quote; its userinfo ends at the
    /// last `@`, as libnats reads it.
    public static func redactURLs(in text: String) -> String {
        let bytes = Array(text.utf8)
        guard bytes.count >= 3 else { return text }
        var output: [UInt8] = []
        output.reserveCapacity(bytes.count)
        var index = 0
        while index < bytes.count {
            guard index + 2 < bytes.count, bytes[index] == UInt8(ascii: ":"), bytes[index + 1] == UInt8(ascii: "/"),
                bytes[index + 2] == UInt8(ascii: "/")
            else {
                output.append(bytes[index])
                index += 1
                continue
            }
            let start = index + 3
            var end = start
            while end < bytes.count, !endsURL(bytes[end]) { end += 1 }
            output += bytes[index..<start]
            if let at = bytes[start..<end].lastIndex(of: UInt8(ascii: "@")) {
                output += maskUserinfo(bytes[start..<at])
                output += bytes[at..<end]
            } else {
                output += bytes[start..<end]
            }
            index = end
        }
        return String(decoding: output, as: UTF8.self)
    }

    // MARK: Internal

    /// The userinfo of `url` (before its last `@`), nil when it has none.
    static func userinfo(of url: String) -> Substring? {
        let rest = url.firstRange(of: "://").map { url[$0.upperBound...] } ?? url[...]
        let authority = rest[..<(rest.utf8.firstIndex(where: endsURL) ?? rest.endIndex)]
        guard let at = authority.lastIndex(of: "@") else { return nil }
        return authority[..<at]
    }

    /// `user:***` for `user:password`, `***` for a token alone.
    private static func maskUserinfo(_ userinfo: Substring) -> String {
        guard let colon = userinfo.firstIndex(of: ":") else { return mask }
        return userinfo[...colon] + mask
    }

    private static func maskUserinfo(_ userinfo: ArraySlice<UInt8>) -> [UInt8] {
        guard let colon = userinfo.firstIndex(of: UInt8(ascii: ":")) else { return Array(mask.utf8) }
        return Array(userinfo[...colon]) + Array(mask.utf8)
    }

    private static func endsURL(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: " "), UInt8(ascii: "\t"), UInt8(ascii: "\n"), UInt8(ascii: "\r"), UInt8(ascii: ","),
            UInt8(ascii: "\""), UInt8(ascii: "'"), UInt8(ascii: "<"), UInt8(ascii: ">"):
            return true
        default: return false
        }
    }
}

extension NATSOptions {
    /// The server URLs as they may be shown: passwords and tokens hidden.
    public var redactedURLs: [String] { urls.map(Redactor.redact(url:)) }
}
