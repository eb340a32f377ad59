import Arguments
import Projections

/// `evctl new TYPE`: a fresh entity id, made here (no daemon needed).
struct New: Command {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "new",
            abstract: "Print a fresh entity id: TYPE/ULID.",
            discussion: """
                The id is a ULID made from this machine's clock and random bits, so ids made \
                on different devices do not collide and sort by creation time. Nothing is \
                stored: the entity exists once an event names it.
                """,
            arguments: [
                .positional(
                    "TYPE", completion: .dynamic("type"), help: "The entity type: [a-z][a-z0-9_-]{0,63}, e.g. job.")
            ])
    }

    var global: GlobalOptions
    var type: String

    init(_ arguments: ParsedArguments) {
        global = GlobalOptions(arguments)
        type = arguments["TYPE"] ?? ""
    }

    func validate() throws {
        if let problem = New.problem(withType: type) { throw UsageError(problem) }
    }

    /// Why `type` cannot be an entity type, or nil.
    static func problem(withType type: String) -> String? {
        let bytes = Array(type.utf8)
        func lowerOrDigit(_ byte: UInt8) -> Bool {
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
                || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
        }
        guard let first = bytes.first, (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(first) else {
            return "an entity type starts with a lower-case letter (a-z): '\(type)'"
        }
        guard bytes.count <= 64 else { return "an entity type has at most 64 characters, '\(type)' has \(bytes.count)" }
        guard bytes.allSatisfy({ lowerOrDigit($0) || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: "-") }) else {
            return "an entity type has only a-z, 0-9, _ and -: '\(type)'"
        }
        return nil
    }

    func run() throws {
        let milliseconds = UInt64(WallTime().timeIntervalSince1970 * 1000)
        let id = ULID(
            timestamp: milliseconds, random: (UInt16.random(in: 0...UInt16.max), UInt64.random(in: 0...UInt64.max)))
        let entity = "\(type)/\(id)"
        var output = StandardOutput()
        if global.json {
            var object = JSONObjectWriter()
            object.add("entity", entity)
            output.line(bytes: object.bytes)
        } else {
            output.line(entity)
        }
        output.flush()
    }
}
