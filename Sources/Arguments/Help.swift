/// The help and usage text of a command, made from its configuration.
public enum Help {
    static let width = 80
    static let labelWidth = 26

    /// `usage: evctl get [--history] ENTITY`, one line per usage form.
    public static func usage(_ path: [any Command.Type]) -> String {
        let configuration = path.last!.configuration
        let prefix = path.map { $0.configuration.name }.joined(separator: " ")
        let forms = configuration.usage.isEmpty ? [derivedUsage(configuration)] : configuration.usage
        var lines: [String] = []
        for (index, form) in forms.enumerated() {
            let lead = (index == 0 ? "usage: " : "       ") + prefix
            // A long form continues on lines indented past the command's name.
            let indent = String(repeating: " ", count: lead.count + 1)
            var line = lead
            for word in form.split(separator: " ") {
                if line.count + 1 + word.count > width, line.count > lead.count {
                    lines.append(line)
                    line = indent + word
                } else {
                    line += " " + word
                }
            }
            lines.append(line)
        }
        return lines.joined(separator: "\n")
    }

    static func derivedUsage(_ configuration: CommandConfiguration) -> String {
        var words = configuration.options.map { "[\($0.synopsis)]" }
        words += configuration.positionals.map(\.synopsis)
        if !configuration.subcommands.isEmpty { words.append("COMMAND") }
        return words.joined(separator: " ")
    }

    /// The whole `--help` text.
    public static func text(_ path: [any Command.Type]) -> String {
        let configuration = path.last!.configuration
        var out = wrap(configuration.abstract, indent: 0) + "\n"
        if !configuration.discussion.isEmpty {
            out += "\n" + paragraphs(configuration.discussion, indent: 0) + "\n"
        }
        out += "\n" + usage(path) + "\n"

        let positionals = configuration.positionals
        if !positionals.isEmpty {
            out += "\narguments:\n" + table(positionals.map { ($0.helpLabel, describe($0)) })
        }
        var own = configuration.options.map { ($0.helpLabel, describe($0)) }
        own.append(("-h, --help", "Show this help."))
        if path.count == 1, configuration.version != nil {
            own.append(("--version", "Show the version."))
        }
        out += "\noptions:\n" + table(own)
        let inherited = path.dropLast().flatMap { $0.configuration.options }
        if !inherited.isEmpty {
            out += "\nglobal options:\n" + table(inherited.map { ($0.helpLabel, describe($0)) })
        }
        if !configuration.subcommands.isEmpty {
            let rows = configuration.subcommands.map { ($0.configuration.name, $0.configuration.abstract) }
            out += "\ncommands:\n" + table(rows)
            let name = path.map { $0.configuration.name }.joined(separator: " ")
            out += "\nSee '\(name) COMMAND --help' for a command's own options.\n"
        }
        for section in configuration.sections {
            out += "\n\(section.title):\n" + paragraphs(section.body, indent: 2) + "\n"
        }
        return out
    }

    static func describe(_ argument: Argument) -> String {
        var text = argument.help
        if case .option(_, true) = argument.kind { text += " Repeatable." }
        if let value = argument.defaultValue { text += " (default: \(value))" }
        return text
    }

    /// Two columns: labels, then their text wrapped beside them (below, when a label is long).
    static func table(_ rows: [(String, String)]) -> String {
        var out = ""
        for (label, text) in rows {
            let lead = "  " + label
            let body = wrap(text, indent: labelWidth)
            if lead.count < labelWidth - 1 {
                let padding = String(repeating: " ", count: labelWidth - lead.count)
                out += lead + padding + body.drop { $0 == " " } + "\n"
            } else {
                out += lead + "\n" + (text.isEmpty ? "" : body + "\n")
            }
        }
        return out
    }

    /// Wraps each paragraph (blank-line separated) on its own; a line that starts with
    /// spaces is kept as it is (examples, tables).
    static func paragraphs(_ text: String, indent: Int) -> String {
        let pad = String(repeating: " ", count: indent)
        var blocks: [String] = []
        var current: [String] = []
        func flush() {
            if !current.isEmpty { blocks.append(wrap(current.joined(separator: " "), indent: indent)) }
            current = []
        }
        var out: [String] = []
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.isEmpty {
                flush()
                out.append(contentsOf: blocks)
                blocks = []
                out.append("")
            } else if line.hasPrefix(" ") {
                flush()
                out.append(contentsOf: blocks)
                blocks = []
                out.append(pad + line)
            } else {
                current.append(String(line))
            }
        }
        flush()
        out.append(contentsOf: blocks)
        return out.joined(separator: "\n")
    }

    /// Fills words into lines of at most `width` columns, each indented by `indent`.
    static func wrap(_ text: String, indent: Int) -> String {
        let pad = String(repeating: " ", count: indent)
        var lines: [String] = []
        var line = ""
        for word in text.split(separator: " ") {
            if !line.isEmpty, indent + line.count + 1 + word.count > width {
                lines.append(pad + line)
                line = ""
            }
            line += line.isEmpty ? String(word) : " " + word
        }
        if !line.isEmpty || lines.isEmpty { lines.append(pad + line) }
        return lines.joined(separator: "\n")
    }
}
