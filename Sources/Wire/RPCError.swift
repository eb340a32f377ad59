import EventStore

/// An error as a JSON-RPC 2.0 response carries it: a code, a message a person can act on,
/// and `data.reason`, the stable machine reason clients switch on.
struct RPCError: Error, Equatable, Sendable {
    var code: Int
    var message: String
    var reason: String?
    /// For `append`: which event of the batch failed.
    var index: Int?

    // The codes of the JSON-RPC 2.0 specification.
    static let parseErrorCode = -32700
    static let invalidRequestCode = -32600
    static let methodNotFoundCode = -32601
    static let invalidParamsCode = -32602
    static let internalErrorCode = -32603

    /// Application errors: one code per stable reason, in the range the specification
    /// leaves to servers.
    static let applicationCodes: [String: Int] = [
        "not_found": -32001, "conflict": -32002, "deleted": -32003, "too_large": -32004,
        "invalid_event": -32005, "storage_full": -32006, "unavailable": -32007, "forbidden": -32008,
        "corrupt": -32009, "too_many_watches": -32010, "ids_exhausted": -32011, "too_many_consumers": -32012,
        "too_many_peers": -32013,
    ]

    static func parseError(_ detail: String) -> RPCError {
        RPCError(code: parseErrorCode, message: "parse error: \(detail)", reason: "parse_error")
    }

    static func invalidRequest(_ detail: String, reason: String = "invalid_request") -> RPCError {
        RPCError(code: invalidRequestCode, message: "invalid request: \(detail)", reason: reason)
    }

    static func methodNotFound(_ method: String) -> RPCError {
        RPCError(
            code: methodNotFoundCode,
            message: "no method \"\(method)\"; the methods are \(Methods.names.joined(separator: ", "))",
            reason: "method_not_found")
    }

    static func invalidParams(_ detail: String) -> RPCError {
        RPCError(code: invalidParamsCode, message: "invalid params: \(detail)", reason: "invalid_params")
    }

    static func application(_ reason: EventStoreError.Reason, _ message: String) -> RPCError {
        RPCError(
            code: applicationCodes[reason.rawValue] ?? internalErrorCode, message: message, reason: reason.rawValue)
    }

    init(code: Int, message: String, reason: String?, index: Int? = nil) {
        self.code = code
        self.message = message
        self.reason = reason
        self.index = index
    }

    init(_ error: EventStoreError) {
        // A parameter out of range, found by the store (a seq beyond the head): JSON-RPC's
        // own code, with the message as the store said it.
        if error.reason == .invalidParams {
            self.init(
                code: RPCError.invalidParamsCode, message: "invalid params: \(error.message)", reason: "invalid_params")
            return
        }
        self.init(
            code: RPCError.applicationCodes[error.reason.rawValue] ?? RPCError.internalErrorCode,
            message: error.message, reason: error.reason.rawValue, index: error.index)
    }

    /// The `error` member's value.
    func json() -> [UInt8] {
        var out = JSONWriter()
        out.beginObject()
        out.member("code", code)
        out.member("message", message)
        if reason != nil || index != nil {
            out.key("data")
            out.beginObject()
            if let reason {
                out.member("reason", reason)
            }
            if let index {
                out.member("index", index)
            }
            out.endObject()
        }
        out.endObject()
        return out.bytes
    }
}
