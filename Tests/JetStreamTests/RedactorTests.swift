import JetStream
import Testing

/// Passwords and tokens of server URLs and options never reach a message.
@Suite struct RedactorTests {
    @Test(
        "a URL keeps its user and host and hides its password or token",
        arguments: [
            ("nats://user:s3cret@host:4222", "nats://user:***@host:4222"),
            ("nats://s3cr3t@host", "nats://***@host"),
            ("tls://u:p@ss:w0rd@hq.example.net:4222", "tls://u:***@hq.example.net:4222"),
            ("nats://:only-password@host:4222", "nats://:***@host:4222"),
            ("nats://host:4222", "nats://host:4222"),
            ("nats://u:pw@[::1]:4222", "nats://u:***@[::1]:4222"),
            ("u:pw@host:4222", "u:***@host:4222"),
            ("tok@host", "***@host"),
            ("host:4222", "host:4222"),
        ])
    func oneURL(url: String, shown: String) {
        #expect(Redactor.redact(url: url) == shown)
    }

    @Test func everyURLOfAListAndOfASentence() {
        let text =
            "cannot connect to nats://a:pw1@h1:4222, nats://tok2@h2:4222,nats://h3:4222 (libnats: 'nats://b:pw3@h4')"
        let shown = Redactor.redactURLs(in: text)
        #expect(
            shown
                == "cannot connect to nats://a:***@h1:4222, nats://***@h2:4222,nats://h3:4222 (libnats: 'nats://b:***@h4')"
        )
        #expect(Redactor.redactURLs(in: "no URL here: a@b, c://") == "no URL here: a@b, c://")
    }

    @Test func theOptionsSecretsWhereverTheyAppear() {
        var options = NATSOptions(urls: ["nats://evstore:url-pass-1@h1:4222", "pass-as-token@h2:4222"])
        options.password = "option password"
        options.token = "tkn"
        let redactor = Redactor(options)
        let text =
            "at pass-as-token@h2:4222: refused 'option password' and url-pass-1 (quoted without its URL); tkn kept"
        let shown = redactor.redact(text)
        for secret in ["url-pass-1", "pass-as-token", "option password"] {
            #expect(!shown.contains(secret), "\(shown)")
        }
        #expect(shown.contains("***@h2:4222"), "\(shown)")
        // A secret under four bytes is hidden in a URL only: it would garble every word holding it.
        #expect(shown.hasSuffix("tkn kept"), "\(shown)")
        #expect(redactor.redact("nats://tkn@h") == "nats://***@h")
        #expect(options.redactedURLs == ["nats://evstore:***@h1:4222", "***@h2:4222"])
    }
}
