import EventStore

/// An error as a JSON-RPC 2.0 response carries it: a code, a message a person can act on,
/// and `data.reason`, the stable machine reason clients switch on.
package struct RPCError: Error, Equatable, Sendable {
    package var code: Int
    package var message: String
    package var reason: String?
    /// For `append`: which event of the batch failed.
    package var index: Int?

    // The codes of the JSON-RPC 2.0 specification.
    package static let parseErrorCode = -32700
    package static let invalidRequestCode = -32600
    package static let methodNotFoundCode = -32601
    package static let invalidParamsCode = -32602
    package static let internalErrorCode = -32603

    /// Application errors: one code per stable reason, in the range the specification
    /// leaves to servers.
    package static let applicationCodes: [String: Int] = [
        "not_found": -32001, "conflict": -32002, "deleted": -32003, "too_large": -32004,
        "invalid_event": -32005, "storage_full": -32006, "unavailable": -32007, "forbidden": -32008,
        "corrupt": -32009, "too_many_watches": -32010, "ids_exhausted": -32011, "too_many_consumers": -32012,
        "too_many_peers": -32013, "invalid_transition": -32014,
    ]

    package static func parseError(_ detail: String) -> RPCError {
        RPCError(code: parseErrorCode, message: "parse error: \(detail)", reason: "parse_error")
    }

    package static func invalidRequest(_ detail: String, reason: String = "invalid_request") -> RPCError {
        RPCError(code: invalidRequestCode, message: "invalid request: \(detail)", reason: reason)
    }

    /// No method is named `method`; `methods` are the names there are.
    package static func methodNotFound(_ method: String, methods: [String]) -> RPCError {
        RPCError(
            code: methodNotFoundCode,
            message: "no method \"\(method)\"; the methods are \(methods.joined(separator: ", "))",
            reason: "method_not_found")
    }

    package static func invalidParams(_ detail: String) -> RPCError {
        RPCError(code: invalidParamsCode, message: "invalid params: \(detail)", reason: "invalid_params")
    }

    package static func application(_ reason: EventStoreError.Reason, _ message: String) -> RPCError {
        RPCError(
            code: applicationCodes[reason.rawValue] ?? internalErrorCode, message: message, reason: reason.rawValue)
    }

    package init(code: Int, message: String, reason: String?, index: Int? = nil) {
        self.code = code
        self.message = message
        self.reason = reason
        self.index = index
    }

    package init(_ error: EventStoreError) {
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
    package func json() -> [UInt8] {
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
