import Arguments

/// Reading a paged method (`list`, `log`, `conflicts`, `dead_letters`): each reply holds
/// one page and `next`, the cursor for `after` that continues it (null at the end).
struct Pages {
    let connection: Connection
    let method: String
    /// The member of the result that holds the page's items.
    let itemsMember: String
    /// Follow `next` to the end, rather than stop after one page.
    let all: Bool

    /// Calls the method with `params(after)` page after page, handing each reply to `page`;
    /// returns the cursor after the last page read (nil when there is no more).
    func read(
        after: String?, params: (String?) -> JSONObjectWriter, page: (Reply) throws -> Void
    ) throws -> String? {
        var cursor = after
        while true {
            let reply = try connection.call(method, params(cursor))
            try page(reply)
            let next = (reply.result as? [String: Any])?["next"] as? String
            guard all, let next, next != cursor else { return next }
            cursor = next
        }
    }

    /// What a listing command prints: with --json the daemon's result (every page merged
    /// into one with --all), otherwise one text row per item.
    struct Collected {
        var json: [UInt8] = []
        var rows: [[String]] = []
        var next: String?
    }

    /// Reads the pages and collects what the command prints; `row` makes an item's text row.
    func collect(
        after: String?, json: Bool, params: (String?) -> JSONObjectWriter, row: ([String: Any]) -> [String]
    ) throws -> Collected {
        var collected = Collected()
        var raw: [[UInt8]] = []
        collected.next = try read(after: after, params: params) { reply in
            if json {
                if all { raw += rawItems(reply) } else { raw = [reply.resultBytes] }
            } else {
                collected.rows += items(reply).map(row)
            }
        }
        if json { collected.json = all ? merged(raw, next: collected.next) : raw.first ?? [] }
        return collected
    }

    /// The items of a reply, each parsed.
    func items(_ reply: Reply) -> [[String: Any]] {
        (reply.result as? [String: Any])?[itemsMember] as? [[String: Any]] ?? []
    }

    /// The items of a reply, each as the daemon wrote it.
    func rawItems(_ reply: Reply) -> [[UInt8]] {
        RawJSON.member(itemsMember, of: reply.resultBytes).flatMap(RawJSON.elements(of:)) ?? []
    }

    /// `{"<items>":[...],"next":...}` from raw items: the pages read with --all, as one result.
    func merged(_ items: [[UInt8]], next: String?) -> [UInt8] {
        var object = JSONObjectWriter()
        object.add(itemsMember, json: RawJSON.array(items))
        if let next { object.add("next", next) } else { object.add("next", json: Array("null".utf8)) }
        return object.bytes
    }

    /// Says on standard error how to read on, when there is more.
    static func hintMore(_ next: String?) {
        if let next { Terminal.note("there is more: add --after \(next) for the next page, or --all for every page.") }
    }
}
