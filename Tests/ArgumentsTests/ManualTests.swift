import Testing

@testable import Arguments

@Suite struct ManualTests {
    @Test func thePageFollowsTheCommandTree() {
        let page = Manual.scdoc(Tool.self)
        let lines = page.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        #expect(lines.first == "tool(1) \"tool 1.2.3\"")
        #expect(lines.contains("tool - A tool for tests"))
        for heading in [
            "# NAME", "# SYNOPSIS", "# OPTIONS", "# COMMANDS", "## tool get", "## tool append", "# EXIT STATUS",
        ] {
            #expect(lines.contains(heading), "\(heading)")
        }
        // Headings in the tree's order.
        let order = [
            "# NAME", "# SYNOPSIS", "# OPTIONS", "# COMMANDS", "## tool get", "## tool append", "## tool daemon",
        ]
        let positions = order.compactMap { lines.firstIndex(of: $0) }
        #expect(positions == positions.sorted() && positions.count == order.count)

        // Options as terms, with their help (and default) indented below.
        #expect(page.contains("\n*-n*, *--limit* _N_\n\tAt most N. (default: 100)\n"))
        #expect(page.contains("\n*--history*\n\tAlso list the status history.\n"))
        #expect(page.contains("\n_ENTITY_\n\tThe entity, TYPE/ID.\n"))
        #expect(page.contains("\n*--key* _K_\n\tAn idempotency key. Repeatable.\n"))
        // Usage forms, one a line.
        #expect(page.contains("\n*tool append* ENTITY OPERATION [ARGUMENT...]++\n*tool append* --file PATH\n"))
    }

    @Test func indentedLinesBecomeLiteralBlocks() {
        var page = Manual.Page()
        Manual.prose("Some text\nthat runs on.\n\n  evctl get job/42\n    nested\nAfter.", into: &page)
        #expect(page.text == "\nSome text that runs on.\n\n```\nevctl get job/42\n  nested\n```\n\nAfter.\n")
    }

    @Test func markupIsEscaped() {
        #expect(Manual.escape("sync_interval_s *3* a\\b") == "sync\\_interval\\_s \\*3\\* a\\\\b")
        #expect(Manual.escapeLine("- not a list") == "\\- not a list")
        #expect(Manual.escapeLine("# not a heading") == "\\# not a heading")
        #expect(Manual.escape("--file PATH") == "--file PATH", "inside a line, a dash is a dash")
    }
}
