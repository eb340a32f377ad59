import CNats

#if canImport(Glibc)
    import Glibc
#endif

/// A failed libnats call before it is given a sentence: what libnats and the server said,
/// and the call. `NATSError.init(_:in:)` turns it into an error a person can act on.
struct NATSFailure: Error {
    let status: natsStatus
    let jetStreamCode: Int
    /// libnats' text for the failure (`nats_GetLastError`, or the server's description).
    let detail: String
    let operation: String

    /// Whether a publish timed out waiting for a place among the publishes in flight (the
    /// one timeout `js_PublishMsgAsync` returns itself).
    var isStall: Bool { status == NATS_TIMEOUT }
}

/// A connection's two libnats handles. libnats' connection and JetStream context lock
/// themselves, so they may be used from any thread; `JetStreamConnection` destroys them
/// only in its `deinit`, when no other thread can hold it.
struct Handles: @unchecked Sendable {
    let connection: OpaquePointer
    let jetStream: OpaquePointer
}

/// What a publish attempt came to.
enum PublishAttempt {
    /// libnats took the message (and now owns it); its outcome comes to the ack handler.
    case accepted
    /// libnats refused it; the caller still owns the message and must destroy it.
    case refused(NATSFailure)
}

/// Every call into libnats goes through here.
///
/// Each wrapper turns a `natsStatus` into a thrown `NATSFailure` and copies what it reads
/// out of libnats' objects, which it destroys on every path, so nothing above this file
/// touches a `natsMsg`, a `jsStreamInfo` or a C string. Messages being published are the one
/// exception: they cross into libnats and come back in the ack handler, so they travel as
/// `OpaquePointer`s and their owner is stated at each step.
enum NATS {
    /// Throws when `status` is not `NATS_OK`.
    @inline(__always)
    static func check(_ status: natsStatus, _ operation: String, _ code: jsErrCode = jsErrCode(0)) throws(NATSFailure) {
        guard status == NATS_OK else { throw failure(status, operation, code) }
    }

    static func failure(_ status: natsStatus, _ operation: String, _ code: jsErrCode = jsErrCode(0)) -> NATSFailure {
        NATSFailure(
            status: status, jetStreamCode: Int(code.rawValue), detail: lastError(for: status), operation: operation)
    }

    /// The text libnats kept for this thread's last failure, when that failure had `status`:
    /// libnats returns some statuses (`NATS_NOT_FOUND`) without recording a text, and the
    /// thread's text is then an earlier call's. Without the source location libnats puts
    /// first ("(jsm.c:1033): "), and with the userinfo of any URL it quotes hidden
    /// (`Redactor.redactURLs(in:)`). The C function is `nats_GetLastError`.
    static func lastError(for status: natsStatus) -> String {
        var recorded = NATS_OK
        guard let text = nats_GetLastError(&recorded), recorded == status else { return "" }
        let message = String(cString: text)
        guard message.hasPrefix("("), let end = message.firstIndex(of: ")"),
            message[message.index(after: end)...].hasPrefix(": ")
        else { return Redactor.redactURLs(in: message) }
        return Redactor.redactURLs(in: String(message[message.index(end, offsetBy: 3)...]))
    }

    /// `NATS_CONNECTION_CLOSED`, for errors this module makes when it finds the connection closed.
    static let connectionClosedStatus = Int32(bitPattern: NATS_CONNECTION_CLOSED.rawValue)

    /// libnats' name for a status, such as "No Server". The C function is `natsStatus_GetText`.
    static func statusText(_ status: natsStatus) -> String {
        String(cString: natsStatus_GetText(status))
    }

    /// Sleeps; for the short waits between checks of a condition libnats cannot signal.
    static func sleep(milliseconds: Int64) {
        nats_Sleep(milliseconds)
    }

    // MARK: Options and connection

    /// Builds libnats options: servers, identity, TLS, timeouts, reconnection off, and the
    /// closed handler. The caller destroys them with `destroyOptions` once connected.
    static func makeOptions(
        _ options: NATSOptions, nkeyPublicKey: String?, closedHandler: natsConnectionHandler,
        closure: UnsafeMutableRawPointer?
    ) throws(NATSFailure) -> OpaquePointer {
        var created: OpaquePointer?
        try check(natsOptions_Create(&created), "natsOptions_Create")
        let opts = created!
        do {
            try check(
                withCStringArray(options.urls) { natsOptions_SetServers(opts, $0, Int32(options.urls.count)) },
                "natsOptions_SetServers")
            if let name = options.name { try check(natsOptions_SetName(opts, name), "natsOptions_SetName") }
            if let file = options.credentialsFile {
                try check(
                    natsOptions_SetUserCredentialsFromFiles(opts, file, nil), "natsOptions_SetUserCredentialsFromFiles")
            }
            if let file = options.nkeySeedFile, let nkeyPublicKey {
                try check(natsOptions_SetNKeyFromSeed(opts, nkeyPublicKey, file), "natsOptions_SetNKeyFromSeed")
            }
            if options.user != nil || options.password != nil {
                try check(natsOptions_SetUserInfo(opts, options.user, options.password), "natsOptions_SetUserInfo")
            }
            if let token = options.token { try check(natsOptions_SetToken(opts, token), "natsOptions_SetToken") }
            if let file = options.tlsCAFile {
                try check(natsOptions_SetSecure(opts, true), "natsOptions_SetSecure")
                try check(natsOptions_LoadCATrustedCertificates(opts, file), "natsOptions_LoadCATrustedCertificates")
            }
            if options.tlsCertificateFile != nil || options.tlsKeyFile != nil {
                try check(natsOptions_SetSecure(opts, true), "natsOptions_SetSecure")
                try check(
                    natsOptions_LoadCertificatesChain(opts, options.tlsCertificateFile, options.tlsKeyFile),
                    "natsOptions_LoadCertificatesChain")
            }
            try check(natsOptions_SetTimeout(opts, options.connectTimeout.milliseconds), "natsOptions_SetTimeout")
            if let interval = options.pingInterval {
                try check(natsOptions_SetPingInterval(opts, interval.milliseconds), "natsOptions_SetPingInterval")
            }
            // The caller reconnects itself: libnats' reconnection would keep publishes in
            // flight across the break and resend its buffer, so their outcomes would come
            // late and out of order. Without it a broken connection closes, and the closed
            // handler settles everything in flight.
            try check(natsOptions_SetAllowReconnect(opts, false), "natsOptions_SetAllowReconnect")
            try check(natsOptions_SetClosedCB(opts, closedHandler, closure), "natsOptions_SetClosedCB")
        } catch {
            natsOptions_Destroy(opts)
            throw error
        }
        return opts
    }

    static func destroyOptions(_ options: OpaquePointer) {
        natsOptions_Destroy(options)
    }

    /// Connects with `options` (libnats copies them). The C function is `natsConnection_Connect`.
    static func connect(_ options: OpaquePointer) throws(NATSFailure) -> OpaquePointer {
        var connection: OpaquePointer?
        try check(natsConnection_Connect(&connection, options), "natsConnection_Connect")
        return connection!
    }

    /// Closes the socket and ends libnats' threads for the connection; the handle stays valid
    /// until `destroyConnection`. Safe to call more than once and from any thread.
    static func close(_ connection: OpaquePointer) {
        natsConnection_Close(connection)
    }

    static func destroyConnection(_ connection: OpaquePointer) {
        natsConnection_Destroy(connection)
    }

    static func isClosed(_ connection: OpaquePointer) -> Bool {
        natsConnection_IsClosed(connection)
    }

    /// The largest message (headers and body) the server accepts.
    static func maxPayload(_ connection: OpaquePointer) -> Int {
        Int(natsConnection_GetMaxPayload(connection))
    }

    /// The URL of the server connected to, nil once closed. It is the URL as given, userinfo
    /// (a password or token) included: redact it before it is shown.
    static func connectedURL(_ connection: OpaquePointer) -> String? {
        var buffer = [CChar](repeating: 0, count: 1024)
        guard natsConnection_GetConnectedUrl(connection, &buffer, buffer.count) == NATS_OK, buffer[0] != 0 else {
            return nil
        }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Why the connection failed last, as libnats recorded it ("" when it did not), with the
    /// userinfo of any URL it quotes hidden.
    static func connectionError(_ connection: OpaquePointer) -> String {
        var text: UnsafePointer<CChar>?
        let status = natsConnection_GetLastError(connection, &text)
        guard status != NATS_OK else { return "" }
        if let text, text.pointee != 0 { return Redactor.redactURLs(in: String(cString: text)) }
        return statusText(status)
    }

    // MARK: JetStream context

    /// A JetStream context on `connection` whose asynchronous publishes report to
    /// `ackHandler` with `closure`. The C function is `natsConnection_JetStream`.
    static func jetStream(
        _ connection: OpaquePointer, wait: Duration, maxPending: Int, stallWait: Duration,
        ackHandler: jsPubAckHandler, closure: UnsafeMutableRawPointer?
    ) throws(NATSFailure) -> OpaquePointer {
        var options = jsOptions()
        try check(jsOptions_Init(&options), "jsOptions_Init")
        options.Wait = wait.milliseconds
        options.PublishAsync.MaxPending = Int64(maxPending)
        options.PublishAsync.StallWait = stallWait.milliseconds
        options.PublishAsync.AckHandler = ackHandler
        options.PublishAsync.AckHandlerClosure = closure
        var context: OpaquePointer?
        try check(natsConnection_JetStream(&context, connection, &options), "natsConnection_JetStream")
        return context!
    }

    /// Frees the context and the messages still in flight in it (their outcomes were
    /// reported as failures when the connection closed).
    static func destroyJetStream(_ context: OpaquePointer) {
        jsCtx_Destroy(context)
    }

    /// Asks the JetStream API for the account's figures, to learn whether JetStream answers.
    /// The C function is `js_GetAccountInfo`.
    static func checkJetStream(_ context: OpaquePointer) throws(NATSFailure) {
        var info: UnsafeMutablePointer<jsAccountInfo>?
        var code = jsErrCode(0)
        let status = js_GetAccountInfo(&info, context, nil, &code)
        jsAccountInfo_Destroy(info)
        try check(status, "js_GetAccountInfo", code)
    }

    // MARK: Streams

    /// The stream's info, nil when the server has no stream of that name.
    static func streamInfo(_ context: OpaquePointer, name: String) throws(NATSFailure) -> StreamInfo? {
        var info: UnsafeMutablePointer<jsStreamInfo>?
        var code = jsErrCode(0)
        let status = js_GetStreamInfo(&info, context, name, nil, &code)
        defer { jsStreamInfo_Destroy(info) }
        if status == NATS_NOT_FOUND { return nil }
        try check(status, "js_GetStreamInfo", code)
        return streamInfo(info!)
    }

    /// The names of the streams that take subjects of `subject` (which may hold wildcards),
    /// sorted; none when no stream does. The C function is `js_StreamNames`.
    static func streamNames(_ context: OpaquePointer, subject: String) throws(NATSFailure) -> [String] {
        var options = jsOptions()
        try check(jsOptions_Init(&options), "jsOptions_Init")
        var list: UnsafeMutablePointer<jsStreamNamesList>?
        var code = jsErrCode(0)
        let status = subject.withCString { filter in
            options.Stream.Info.SubjectsFilter = filter
            return js_StreamNames(&list, context, &options, &code)
        }
        defer { jsStreamNamesList_Destroy(list) }
        if status == NATS_NOT_FOUND { return [] }
        try check(status, "js_StreamNames", code)
        guard let names = list?.pointee, let entries = names.List else { return [] }
        return (0..<Int(names.Count)).compactMap { entries[$0].map { String(cString: $0) } }.sorted()
    }

    /// Creates the stream (or, with `update`, changes it) and returns its info.
    static func putStream(_ context: OpaquePointer, _ config: StreamConfig, update: Bool) throws(NATSFailure)
        -> StreamInfo
    {
        var cfg = jsStreamConfig()
        try check(jsStreamConfig_Init(&cfg), "jsStreamConfig_Init")
        cfg.Storage = config.storage == .memory ? js_MemoryStorage : js_FileStorage
        cfg.Duplicates = config.duplicateWindow.nanoseconds
        cfg.MaxAge = config.maxAge?.nanoseconds ?? 0
        cfg.Replicas = Int64(config.replicas)
        var info: UnsafeMutablePointer<jsStreamInfo>?
        var code = jsErrCode(0)
        let status = config.name.withCString { name in
            withCStringArray(config.subjects) { subjects in
                cfg.Name = name
                cfg.Subjects = subjects
                cfg.SubjectsLen = Int32(config.subjects.count)
                return update
                    ? js_UpdateStream(&info, context, &cfg, nil, &code) : js_AddStream(&info, context, &cfg, nil, &code)
            }
        }
        defer { jsStreamInfo_Destroy(info) }
        try check(status, update ? "js_UpdateStream" : "js_AddStream", code)
        return streamInfo(info!)
    }

    private static func streamInfo(_ info: UnsafeMutablePointer<jsStreamInfo>) -> StreamInfo {
        let cfg = info.pointee.Config.pointee
        let subjects = (0..<Int(cfg.SubjectsLen)).compactMap { cfg.Subjects[$0].map { String(cString: $0) } }
        let state = info.pointee.State
        return StreamInfo(
            config: StreamConfig(
                name: cfg.Name.map { String(cString: $0) } ?? "", subjects: subjects,
                storage: cfg.Storage == js_MemoryStorage ? .memory : .file,
                duplicateWindow: .nanoseconds(cfg.Duplicates),
                maxAge: cfg.MaxAge > 0 ? .nanoseconds(cfg.MaxAge) : nil, replicas: Int(cfg.Replicas)),
            state: StreamState(
                messages: state.Msgs, bytes: state.Bytes, firstSequence: state.FirstSeq, lastSequence: state.LastSeq,
                consumers: Int(state.Consumers)),
            created: info.pointee.Created)
    }

    /// The message at `sequence`, nil when the stream holds none there (never stored, or
    /// deleted). The C function is `js_GetMsg`.
    static func message(_ context: OpaquePointer, stream: String, sequence: UInt64) throws(NATSFailure)
        -> StoredMessage?
    {
        var message: OpaquePointer?
        var code = jsErrCode(0)
        let status = js_GetMsg(&message, context, stream, sequence, nil, &code)
        defer { natsMsg_Destroy(message) }
        // Only "no message" becomes nil; a missing stream is NATS_ERR with its own code.
        if status == NATS_NOT_FOUND { return nil }
        try check(status, "js_GetMsg", code)
        let msg = message!
        let length = Int(natsMsg_GetDataLength(msg))
        var data = [UInt8](repeating: 0, count: length)
        if length > 0, let bytes = natsMsg_GetData(msg) {
            data.withUnsafeMutableBytes { $0.copyMemory(from: UnsafeRawBufferPointer(start: bytes, count: length)) }
        }
        return StoredMessage(
            subject: subject(msg), sequence: natsMsg_GetSequence(msg), headers: headers(msg), data: data,
            time: natsMsg_GetTime(msg))
    }

    // MARK: Messages

    /// A message to publish; the caller owns it until `publishAsync` accepts it.
    static func makeMessage(subject: String, headers: [(String, String)], body: [UInt8]) throws(NATSFailure)
        -> OpaquePointer
    {
        guard body.count <= Int(Int32.max) else {
            throw NATSFailure(
                status: NATS_INVALID_ARG, jetStreamCode: 0, detail: "a body of \(body.count) bytes",
                operation: "natsMsg_Create")
        }
        // `withCString` rather than a `String` passed as a pointer, which copies it into an
        // array of its own for the call: a short string is copied onto the stack, a long one
        // is passed as it is stored.
        var created: OpaquePointer?
        let status = body.withUnsafeBytes { bytes in
            subject.withCString { subject in
                natsMsg_Create(
                    &created, subject, nil, bytes.baseAddress?.assumingMemoryBound(to: CChar.self), Int32(bytes.count))
            }
        }
        try check(status, "natsMsg_Create")
        let message = created!
        for (name, value) in headers {
            let added = name.withCString { name in
                value.withCString { value in natsMsgHeader_Add(message, name, value) }
            }
            guard added == NATS_OK else {
                let failed = failure(added, "natsMsgHeader_Add")
                natsMsg_Destroy(message)
                throw failed
            }
        }
        return message
    }

    static func destroyMessage(_ message: OpaquePointer) {
        natsMsg_Destroy(message)
    }

    static func subject(_ message: OpaquePointer) -> String {
        natsMsg_GetSubject(message).map { String(cString: $0) } ?? ""
    }

    /// A message's headers, sorted by name (libnats keeps them in a hash table).
    static func headers(_ message: OpaquePointer) -> [(name: String, value: String)] {
        var keys: UnsafeMutablePointer<UnsafePointer<CChar>?>?
        var count: Int32 = 0
        guard natsMsgHeader_Keys(message, &keys, &count) == NATS_OK, let keys else { return [] }
        defer { free(keys) }
        var headers: [(name: String, value: String)] = []
        for index in 0..<Int(count) {
            guard let key = keys[index] else { continue }
            let name = String(cString: key)
            var values: UnsafeMutablePointer<UnsafePointer<CChar>?>?
            var valueCount: Int32 = 0
            guard natsMsgHeader_Values(message, key, &values, &valueCount) == NATS_OK, let values else { continue }
            defer { free(values) }
            for position in 0..<Int(valueCount) {
                headers.append((name, values[position].map { String(cString: $0) } ?? ""))
            }
        }
        // A stable sort keeps the values of one name in their order.
        return headers.enumerated().sorted { ($0.element.name, $0.offset) < ($1.element.name, $1.offset) }.map(
            \.element)
    }

    // MARK: Publishing

    /// Hands `message` to libnats for an asynchronous publish with the `Nats-Msg-Id` header
    /// set to `messageID` and the `Nats-Expected-Stream` header set to `stream` (a stream of
    /// another name that takes the subject then refuses it). Blocks up to the context's stall
    /// wait while `MaxPending` publishes are in flight. No `MaxWait`: the acknowledgement
    /// timeout is the tracker's (`PublishTracker`). The C function is `js_PublishMsgAsync`.
    static func publishAsync(
        _ context: OpaquePointer, _ message: OpaquePointer, messageID: String?, stream: String?
    ) -> PublishAttempt {
        var options = jsPubOptions()
        _ = jsPubOptions_Init(&options)
        var pending: OpaquePointer? = message
        // libnats clears `pending` when it takes the message (also when the send failed but
        // the acknowledgement already came: the outcome was then reported). It copies the
        // strings into headers before it returns.
        let status = withOptionalCString(messageID) { id in
            withOptionalCString(stream) { expected in
                options.MsgId = id
                options.ExpectStream = expected
                return js_PublishMsgAsync(context, &pending, &options)
            }
        }
        return pending == nil ? .accepted : .refused(failure(status, "js_PublishMsgAsync"))
    }

    /// Waits up to `timeout` for the context's publishes in flight to be acknowledged;
    /// whether they all were. The C function is `js_PublishAsyncComplete`.
    static func waitForAcknowledgements(_ context: OpaquePointer, timeout: Duration) -> Bool {
        var options = jsPubOptions()
        _ = jsPubOptions_Init(&options)
        options.MaxWait = max(1, timeout.milliseconds)
        return js_PublishAsyncComplete(context, &options) == NATS_OK
    }

    /// Copies a positive acknowledgement out of the ack handler's arguments.
    static func acknowledgement(_ ack: UnsafeMutablePointer<jsPubAck>) -> PublishAck {
        PublishAck(
            stream: ack.pointee.Stream.map { String(cString: $0) } ?? "", sequence: ack.pointee.Sequence,
            duplicate: ack.pointee.Duplicate)
    }

    /// Copies a negative acknowledgement (or a timeout) out of the ack handler's arguments.
    static func failure(_ failure: UnsafeMutablePointer<jsPubAckErr>) -> NATSFailure {
        NATSFailure(
            status: failure.pointee.Err, jetStreamCode: Int(failure.pointee.ErrCode.rawValue),
            detail: failure.pointee.ErrText.map { Redactor.redactURLs(in: String(cString: $0)) } ?? "",
            operation: "js_PublishMsgAsync")
    }

    // MARK: C strings

    /// Calls `body` with a C string for `string`, or nil, valid only during the call.
    private static func withOptionalCString<R>(_ string: String?, _ body: (UnsafePointer<CChar>?) -> R) -> R {
        guard let string else { return body(nil) }
        return string.withCString { body($0) }
    }

    /// Calls `body` with a C array of C strings for `strings`, valid only during the call.
    private static func withCStringArray<R>(
        _ strings: [String], _ body: (UnsafeMutablePointer<UnsafePointer<CChar>?>) -> R
    ) -> R {
        let copies = strings.map { strdup($0) }
        defer { for copy in copies { free(copy) } }
        var pointers = copies.map { UnsafePointer<CChar>($0) }
        pointers.append(nil)
        return pointers.withUnsafeMutableBufferPointer { body($0.baseAddress!) }
    }
}

extension Duration {
    /// Whole milliseconds, as libnats takes timeouts.
    var milliseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1000 + attoseconds / 1_000_000_000_000_000
    }

    /// Whole nanoseconds, as the JetStream API takes durations.
    var nanoseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }
}
