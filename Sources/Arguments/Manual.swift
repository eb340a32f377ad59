/// A tool's manual page in scdoc's source format (scdoc(5)), rendered from the command tree
/// that drives parsing and `--help`: the page says what `--help` says, command by command,
/// plus the root's manual-only sections (ENVIRONMENT, FILES, SEE ALSO). scdoc turns it into
/// roff at package build time.
public enum Manual {
    /// The hidden argument that prints the page instead of running a command.
    public static let requestWord = "--generate-manual"

    public static func scdoc(_ root: any Command.Type) -> String {
        let configuration = root.configuration
        var page = Page()
        let footer = configuration.version.map { " \"\(configuration.name) \($0)\"" } ?? ""
        page.line("\(configuration.name)(\(configuration.manualSection))\(footer)")

        page.heading("# NAME")
        page.line(escapeLine("\(configuration.name) - \(sentence(configuration.abstract))"))

        page.heading("# SYNOPSIS")
        synopsis([root], into: &page)

        if !configuration.discussion.isEmpty {
            page.heading("# DESCRIPTION")
            prose(configuration.discussion, into: &page)
        }
        if !configuration.positionals.isEmpty {
            page.heading("# ARGUMENTS")
            terms(configuration.positionals.map(term), into: &page)
        }
        page.heading("# OPTIONS")
        var own = configuration.options.map(term)
        own.append(("*-h*, *--help*", "Show this help."))
        if configuration.version != nil { own.append(("*--version*", "Show the version.")) }
        terms(own, into: &page)

        if !configuration.subcommands.isEmpty {
            page.heading("# COMMANDS")
            for subcommand in configuration.subcommands {
                command([root, subcommand], into: &page)
            }
        }
        for section in configuration.sections + configuration.manualSections {
            page.heading("# " + section.title.uppercased())
            prose(section.body, into: &page)
        }
        return page.text
    }

    /// One command's part of COMMANDS: its usage, what it does, its arguments and options,
    /// then its own subcommands.
    static func command(_ path: [any Command.Type], into page: inout Page) {
        let configuration = path.last!.configuration
        page.heading("## " + path.map { $0.configuration.name }.joined(separator: " "))
        synopsis(path, into: &page)
        page.paragraph(escapeLine(configuration.abstract))
        if !configuration.discussion.isEmpty { prose(configuration.discussion, into: &page) }
        if !configuration.positionals.isEmpty {
            page.paragraph("Arguments:")
            terms(configuration.positionals.map(term), into: &page)
        }
        if !configuration.options.isEmpty {
            page.paragraph("Options:")
            terms(configuration.options.map(term), into: &page)
        }
        for section in configuration.sections {
            page.paragraph(escape(sentence(section.title.prefix(1).uppercased() + section.title.dropFirst())) + ":")
            prose(section.body, into: &page)
        }
        for subcommand in configuration.subcommands {
            command(path + [subcommand], into: &page)
        }
    }

    /// The usage forms, one a line, the command's words in bold.
    static func synopsis(_ path: [any Command.Type], into page: inout Page) {
        let configuration = path.last!.configuration
        let name = "*" + escape(path.map { $0.configuration.name }.joined(separator: " ")) + "*"
        let forms = configuration.usage.isEmpty ? [Help.derivedUsage(configuration)] : configuration.usage
        let lines = forms.map { form in form.isEmpty ? name : name + " " + escape(form) }
        page.paragraph(lines.joined(separator: "++\n"))
    }

    /// An argument as a term: `*--limit* _N_`, `*-f*, *--file* _PATH_`, `_ENTITY_`.
    static func term(_ argument: Argument) -> (String, String) {
        let label: String
        switch argument.kind {
        case .positional:
            label = "_" + escape(argument.name) + "_"
        case .flag:
            label = (argument.short.map { "*-\($0)*, " } ?? "") + "*--\(escape(argument.name))*"
        case .option(let valueName, _):
            label =
                (argument.short.map { "*-\($0)*, " } ?? "") + "*--\(escape(argument.name))* _\(escape(valueName))_"
        }
        return (label, escapeLine(Help.describe(argument)))
    }

    static func terms(_ rows: [(String, String)], into page: inout Page) {
        for (label, text) in rows {
            page.paragraph(label + "\n\t" + text)
        }
    }

    /// Help prose as scdoc: paragraphs of running text, and runs of indented lines (examples,
    /// tables) as literal blocks, as `--help` keeps them.
    static func prose(_ text: String, into page: inout Page) {
        var running: [String] = []
        var literal: [Substring] = []
        func flush() {
            if !running.isEmpty { page.paragraph(escapeLine(running.joined(separator: " "))) }
            running = []
            if !literal.isEmpty {
                let indent = literal.map { $0.prefix { $0 == " " }.count }.min() ?? 0
                let body = literal.map { String($0.dropFirst(indent)) }.joined(separator: "\n")
                page.paragraph("```\n" + body + "\n```")
            }
            literal = []
        }
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.allSatisfy({ $0 == " " }) {
                flush()
            } else if line.hasPrefix(" ") {
                if !running.isEmpty { flush() }
                literal.append(line)
            } else {
                if !literal.isEmpty { flush() }
                running.append(String(line))
            }
        }
        flush()
    }

    /// Text with scdoc's markup characters escaped, so it reads as written.
    static func escape(_ text: String) -> String {
        var out = ""
        for character in text {
            if character == "\\" || character == "*" || character == "_" { out.append("\\") }
            out.append(character)
        }
        return out
    }

    /// Text escaped to stand at the start of a line: it may not start as a heading or a list
    /// item would.
    static func escapeLine(_ text: String) -> String {
        let out = escape(text)
        if let first = out.first, first == "#" || first == "-" || first == "." { return "\\" + out }
        return out
    }

    /// The abstract as NAME's description: without its final full stop.
    static func sentence(_ text: String) -> String {
        text.hasSuffix(".") ? String(text.dropLast()) : text
    }

    struct Page {
        var text = ""

        mutating func line(_ line: String) {
            text += line + "\n"
        }

        mutating func heading(_ heading: String) {
            text += "\n" + heading + "\n"
        }

        mutating func paragraph(_ paragraph: String) {
            text += "\n" + paragraph + "\n"
        }
    }
}
