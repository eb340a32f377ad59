import Foundation

/// A strict reader of the Prometheus text exposition format, version 0.0.4: enough to
/// hold evctl's output to the format. It refuses what Prometheus would refuse and a little
/// more: a sample of a metric without a `# TYPE`, a HELP or TYPE after the metric's
/// samples or given twice, a family whose samples are not together, a series given twice,
/// a label value with an escape other than `\\`, `\"`, `\n`.
struct PrometheusText {
    struct Sample: Equatable {
        var name: String
        var labels: [String: String]
        var value: Double
    }

    struct ParseError: Error, CustomStringConvertible {
        var line: Int
        var message: String
        var description: String { "line \(line): \(message)" }
    }

    var samples: [Sample] = []
    var types: [String: String] = [:]
    var helps: [String: String] = [:]

    init(_ text: String) throws {
        guard text.isEmpty || text.hasSuffix("\n") else { throw ParseError(line: 0, message: "no final line feed") }
        var finished: Set<String> = []
        var current: String?
        var series: Set<String> = []
        for (index, line) in text.split(separator: "\n", omittingEmptySubsequences: false).dropLast().enumerated() {
            let number = index + 1
            func fail(_ message: String) -> ParseError { ParseError(line: number, message: "\(message): \(line)") }
            if line.isEmpty { continue }
            if line.hasPrefix("#") {
                let words = line.split(separator: " ", maxSplits: 3, omittingEmptySubsequences: false)
                guard words.count >= 3, words[0] == "#", words[1] == "HELP" || words[1] == "TYPE" else {
                    continue  // a comment
                }
                let name = String(words[2])
                guard PrometheusText.isMetricName(name) else { throw fail("bad metric name") }
                guard !finished.contains(name), current != name || !samples.contains(where: { $0.name == name })
                else { throw fail("\(words[1]) after the samples of \(name)") }
                let rest = words.count > 3 ? String(words[3]) : ""
                if words[1] == "HELP" {
                    guard helps[name] == nil else { throw fail("second HELP") }
                    helps[name] = try PrometheusText.unescape(rest, quotes: false) { fail($0) }
                } else {
                    guard types[name] == nil else { throw fail("second TYPE") }
                    guard ["counter", "gauge", "histogram", "summary", "untyped"].contains(rest) else {
                        throw fail("bad type")
                    }
                    types[name] = rest
                }
                if let current, current != name { finished.insert(current) }
                current = name
                continue
            }
            var scanner = Substring(line)
            let name = String(scanner.prefix { $0.isLetter || $0.isNumber || $0 == "_" || $0 == ":" })
            guard PrometheusText.isMetricName(name) else { throw fail("bad metric name") }
            scanner = scanner.dropFirst(name.count)
            guard types[name] != nil else { throw fail("a sample of \(name), which has no TYPE") }
            guard !finished.contains(name) else { throw fail("the samples of \(name) are not together") }
            if let current, current != name { finished.insert(current) }
            current = name
            var labels: [String: String] = [:]
            if scanner.first == "{" {
                scanner = scanner.dropFirst()
                while scanner.first != "}" {
                    let label = String(scanner.prefix { $0.isLetter || $0.isNumber || $0 == "_" })
                    guard let first = label.first, first.isLetter || first == "_", !first.isNumber else {
                        throw fail("bad label name")
                    }
                    scanner = scanner.dropFirst(label.count)
                    guard scanner.hasPrefix("=\"") else { throw fail("no =\" after label \(label)") }
                    scanner = scanner.dropFirst(2)
                    var raw = ""
                    var escaped = false
                    while let character = scanner.first {
                        scanner = scanner.dropFirst()
                        if escaped {
                            raw.append("\\")
                            raw.append(character)
                            escaped = false
                        } else if character == "\\" {
                            escaped = true
                        } else if character == "\"" {
                            break
                        } else {
                            raw.append(character)
                        }
                        if scanner.isEmpty { throw fail("unterminated label value") }
                    }
                    guard labels[label] == nil else { throw fail("label \(label) twice") }
                    labels[label] = try PrometheusText.unescape(raw, quotes: true) { fail($0) }
                    if scanner.first == "," {
                        scanner = scanner.dropFirst()
                    } else if scanner.first != "}" {
                        throw fail("no , or } after label \(label)")
                    }
                }
                scanner = scanner.dropFirst()
            }
            guard scanner.first == " " else { throw fail("no space before the value") }
            let fields = scanner.dropFirst().split(separator: " ", omittingEmptySubsequences: false)
            guard fields.count == 1 || (fields.count == 2 && Int(fields[1]) != nil) else {
                throw fail("not a value and an optional timestamp")
            }
            guard let value = PrometheusText.float(String(fields[0])) else { throw fail("bad value") }
            let key =
                name + "{" + labels.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ",")
            guard series.insert(key).inserted else { throw fail("series given twice") }
            samples.append(Sample(name: name, labels: labels, value: value))
        }
    }

    /// The value of the one sample of `name` with these labels.
    func value(_ name: String, _ labels: [String: String] = [:]) -> Double? {
        samples.first { $0.name == name && $0.labels == labels }?.value
    }

    func samples(_ name: String) -> [Sample] { samples.filter { $0.name == name } }

    static func isMetricName(_ name: String) -> Bool {
        guard let first = name.first, first.isASCII, first.isLetter || first == "_" || first == ":" else {
            return false
        }
        return name.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_" || $0 == ":") }
    }

    /// A float as Go's ParseFloat reads it, and the format's NaN, +Inf, -Inf.
    static func float(_ text: String) -> Double? {
        switch text {
        case "NaN": return .nan
        case "+Inf": return .infinity
        case "-Inf": return -.infinity
        default:
            guard text.allSatisfy({ "0123456789.eE+-".contains($0) }) else { return nil }
            return Double(text)
        }
    }

    static func unescape(
        _ text: String, quotes: Bool, _ fail: (String) -> ParseError
    ) throws(ParseError) -> String {
        var out = ""
        var escaped = false
        for character in text {
            if escaped {
                switch character {
                case "\\": out.append("\\")
                case "n": out.append("\n")
                case "\"" where quotes: out.append("\"")
                default: throw fail("bad escape \\\(character)")
                }
                escaped = false
            } else if character == "\\" {
                escaped = true
            } else if quotes && character == "\"" {
                throw fail("unescaped quote in a label value")
            } else if character == "\n" {
                throw fail("a line feed")
            } else {
                out.append(character)
            }
        }
        if escaped { throw fail("a lone backslash at the end") }
        return out
    }
}
