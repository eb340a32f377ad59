import Testing

@testable import EventStore

/// The RFC 3339 times the daemon writes (a dead letter's received_at, a peer's last
/// success), written from whole numbers without Foundation's date formatter.
@Suite("RFC 3339 timestamps")
struct TimestampTests {
    @Test(
        "milliseconds since 1970 as UTC with milliseconds",
        arguments: [
            (UInt64(0), "1970-01-01T00:00:00.000Z"),
            (951_782_400_000, "2000-02-29T00:00:00.000Z"),
            (1_709_164_799_999, "2024-02-28T23:59:59.999Z"),
            (1_772_352_902_125, "2026-03-01T08:15:02.125Z"),
            (4_102_444_800_001, "2100-01-01T00:00:00.001Z"),
            (253_402_300_799_999, "9999-12-31T23:59:59.999Z"),
        ])
    func writes(milliseconds: UInt64, text: String) {
        #expect(EventLog.timestamp(milliseconds: milliseconds) == text)
        #expect(EventLog.milliseconds(fromTimestamp: text) == milliseconds)
    }

    @Test("every day of four years round-trips, at a millisecond that is not a whole number of seconds")
    func everyDay() {
        for day in UInt64(19_000)..<UInt64(19_000 + 4 * 366) {
            let milliseconds = day * 86_400_000 + 45_296_789
            let text = EventLog.timestamp(milliseconds: milliseconds)
            #expect(text.hasSuffix("T12:34:56.789Z"), "\(text)")
            #expect(EventLog.milliseconds(fromTimestamp: text) == milliseconds, "\(text)")
        }
    }

    @Test("text that is not such a time reads as nil")
    func rejects() {
        #expect(EventLog.milliseconds(fromTimestamp: "") == nil)
        #expect(EventLog.milliseconds(fromTimestamp: "yesterday") == nil)
    }
}
