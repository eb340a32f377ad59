/// An error from zstd, or a frame this module refuses to decode.
///
/// `code` is zstd's `ZSTD_ErrorCode` (the negated `size_t` a zstd function returned) for
/// errors zstd reports, and one of the constants below (1000 and up) for errors found here.
/// Match one with a pattern: `catch ZstdError.contentTooLarge`.
public struct ZstdError: Error, CustomStringConvertible, Sendable {
    /// The function that failed, such as `ZSTD_decompressStream`.
    public let operation: String
    /// zstd's error code, or one of this module's codes (1000 and up).
    public let code: Int
    /// What went wrong and what to do about it.
    public let message: String

    public init(operation: String, code: Int, message: String) {
        self.operation = operation
        self.code = code
        self.message = message
    }

    public var description: String {
        operation.isEmpty ? message : "\(operation) failed: \(message)"
    }

    /// Matches any error with the same code.
    public static func ~= (pattern: ZstdError, value: any Error) -> Bool {
        (value as? ZstdError)?.code == pattern.code
    }

    private init(_ code: Int, _ message: String) {
        self.init(operation: "", code: code, message: message)
    }

    /// The frame declares or produces more bytes than the caller allows.
    public static let contentTooLarge = ZstdError(1000, "The frame decompresses to more bytes than allowed.")
    /// Bytes follow the end of the frame.
    public static let trailingData = ZstdError(1001, "Bytes follow the end of the zstd frame.")
    /// The input ended before the frame did.
    public static let truncatedFrame = ZstdError(1002, "The zstd frame ends early.")
    /// The input is not a zstd frame.
    public static let notAFrame = ZstdError(1003, "The input is not a zstd frame.")
    /// zstd could not load the dictionary.
    public static let invalidDictionary = ZstdError(1004, "zstd could not load the dictionary.")
    /// There are too few samples, or too little data, to train a dictionary.
    public static let notEnoughSamples = ZstdError(1005, "There are too few samples to train a dictionary.")
}
