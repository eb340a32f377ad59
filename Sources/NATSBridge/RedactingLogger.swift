import JetStream
import Logging

/// The bridge's log: every line goes through the redactor before it is written, so a
/// password or token that reached a message by any road (a URL libnats handed back, an
/// error quoting one) is hidden. The messages are built from redacted URLs in the first
/// place; this is the last line of defence.
struct RedactingLogger: Sendable {
    let logger: Logger
    let redactor: Redactor

    func debug(_ message: @autoclosure () -> String) { logger.debug(redactor.redact(message())) }
    func info(_ message: @autoclosure () -> String) { logger.info(redactor.redact(message())) }
    func notice(_ message: @autoclosure () -> String) { logger.notice(redactor.redact(message())) }
    func warning(_ message: @autoclosure () -> String) { logger.warning(redactor.redact(message())) }
    func error(_ message: @autoclosure () -> String) { logger.error(redactor.redact(message())) }
}
