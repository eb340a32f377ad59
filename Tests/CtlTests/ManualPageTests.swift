import Foundation
import TestSupport
import Testing

/// The manual pages (man/*.scd) against the binaries: generated from the same definitions
/// as `--help`, they must match what the binaries print now, and name every command and
/// option that `--help` names.
@Suite struct ManualPageTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    static func source(_ name: String) throws -> String {
        try String(contentsOf: root.appendingPathComponent("man/\(name)"), encoding: .utf8)
    }

    /// The page's text with scdoc's escapes undone, to search for what --help says.
    static func plain(_ page: String) -> String {
        var out = ""
        var escaped = false
        for character in page {
            if !escaped, character == "\\" {
                escaped = true
                continue
            }
            escaped = false
            out.append(character)
        }
        return out
    }

    @Test(arguments: [("evctl", "evctl.1.scd"), ("evstored", "evstored.8.scd"), ("evstore-nats", "evstore-nats.8.scd")])
    func theCommittedSourceIsWhatTheBinaryPrints(binary: String, file: String) throws {
        let printed = try runProgram(try builtBinary(binary).path, ["--generate-manual"])
        #expect(printed.status == 0)
        #expect(
            printed.stdout == (try ManualPageTests.source(file)),
            "man/\(file) differs from `\(binary) --generate-manual`: run `make man-sources` and commit it")
    }

    @Test func everyCommandAndOptionOfEvctlHelpIsInThePage() throws {
        let page = ManualPageTests.plain(try ManualPageTests.source("evctl.1.scd"))
        var pending: [[String]] = [[]]
        var seen = 0
        while let path = pending.popLast() {
            let help = try runProgram(try builtBinary("evctl").path, path + ["--help"])
            #expect(help.status == 0)
            let sections = HelpText(help.stdout)
            if !path.isEmpty {
                #expect(page.contains("## evctl " + path.joined(separator: " ")), "\(path)")
            }
            // NAME gives the root's abstract without its full stop.
            let abstract = path.isEmpty ? String(sections.abstract.dropLast()) : sections.abstract
            #expect(page.contains(abstract), "the abstract of \(path)")
            for option in sections.longOptions(in: "options") where option != "--help" && option != "--version" {
                #expect(page.contains("*\(option)*"), "\(option) of evctl \(path.joined(separator: " "))")
            }
            pending += sections.names(in: "commands").map { path + [$0] }
            seen += 1
        }
        #expect(seen > 15, "walked every command (\(seen))")
    }

    @Test(arguments: [("evstored", 20), ("evstore-nats", 15)])
    func everyOptionOfTheDaemonsHelpIsInThePage(binary: String, least: Int) throws {
        let page = ManualPageTests.plain(try ManualPageTests.source("\(binary).8.scd"))
        let help = HelpText(try runProgram(try builtBinary(binary).path, ["--help"]).stdout)
        let options = help.longOptions(in: "options")
        #expect(options.count > least)
        for option in options {
            #expect(page.contains("*\(option)*"), "\(option)")
        }
        #expect(page.contains("\(binary) - " + help.abstract.dropLast()))
        #expect(page.hasPrefix("\(binary)(8) "))
    }

    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/scdoc"), "scdoc is not installed"))
    func scdocBuildsBothPages() throws {
        for (file, header) in [
            ("evctl.1.scd", ".TH \"evctl\" \"1\""), ("evstored.8.scd", ".TH \"evstored\" \"8\""),
            ("evstore-nats.8.scd", ".TH \"evstore-nats\" \"8\""),
        ] {
            let roff = try runProgram(
                "/bin/sh", ["-c", "scdoc < '\(ManualPageTests.root.path)/man/\(file)'"])
            #expect(roff.status == 0, "\(file): \(roff.stderr)")
            #expect(roff.stdout.contains(header), "\(file)")
        }
    }
}

/// The parts of a `--help` text: the abstract (first paragraph) and the rows of a section.
struct HelpText {
    let text: String

    init(_ text: String) { self.text = text }

    var abstract: String {
        let first = text.components(separatedBy: "\n\n").first ?? ""
        return first.split(separator: "\n").joined(separator: " ")
    }

    /// The rows' first words in `section:` (commands), up to the next blank line.
    func names(in section: String) -> [String] {
        rows(in: section).compactMap { row in
            guard row.hasPrefix("  "), !row.hasPrefix("   ") else { return nil }
            return row.split(separator: " ").first.map(String.init)
        }
    }

    /// The long option names (`--limit`) of the rows in `section:`.
    func longOptions(in section: String) -> [String] {
        rows(in: section).compactMap { row in
            guard row.hasPrefix("  -") else { return nil }
            return row.split(separator: " ").map { $0.trimmingCharacters(in: CharacterSet(charactersIn: ",")) }
                .first { $0.hasPrefix("--") }
        }
    }

    func rows(in section: String) -> [String] {
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        guard let start = lines.firstIndex(of: section + ":") else { return [] }
        return Array(lines[(start + 1)...].prefix { !$0.isEmpty })
    }
}
