import FoundationEssentials
import Projections

// The layered configuration loader of evstored and evstore-nats. Its rule: it reads a
// program's settings from their layers — a JSON config file, then the environment, then the
// command line, each over the one before (the defaults under them all are the program's) —
// and hands each value on as text with the place it came from; what a setting means and
// whether its value is good, each program decides.

/// A configuration that cannot be read, in a sentence naming the file or the setting.
public struct ConfigurationError: Error, CustomStringConvertible, Sendable {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

public enum ConfigurationLayers {
    /// A setting as the layers know it: its key in the file and on the command line
    /// (`max_peers`, `--max-peers`), and its environment variable (nil: none).
    public struct Key: Sendable {
        public var key: String
        public var variable: String?
        public init(_ key: String, variable: String?) {
            self.key = key
            self.variable = variable
        }
    }

    /// Where a value came from.
    public enum Layer: Equatable, Sendable {
        case environment
        case commandLine
    }

    /// A value of the environment or the command line, with its source for messages
    /// (`EVSTORE_MAX_PEERS`, `--max-peers`).
    public struct Value: Equatable, Sendable {
        public var key: String
        public var text: String
        public var source: String
        public var layer: Layer
        public init(key: String, text: String, source: String, layer: Layer) {
            self.key = key
            self.text = text
            self.source = source
            self.layer = layer
        }
    }

    /// The largest config file read.
    public static let maxFileBytes = 1 << 20

    /// The members of the JSON object in the file `path`, sorted by key, each with its
    /// source for messages (`"peers" in /etc/evstore/evstored.json`); a key not among
    /// `keys` is refused, naming the keys there are.
    public static func file(_ path: String, keys: [Key]) throws(ConfigurationError) -> [(
        key: String, value: Any, source: String
    )] {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ConfigurationError("cannot read the config file \(path): it does not exist or is not readable")
        }
        guard data.count <= maxFileBytes else {
            throw ConfigurationError("the config file \(path) is over \(maxFileBytes >> 20) MiB")
        }
        let object: Any
        do {
            object = try JSONTree.parse(Array(data))
        } catch {
            throw ConfigurationError("the config file \(path) is not valid JSON: \(error)")
        }
        guard let members = object as? [String: Any] else {
            throw ConfigurationError("the config file \(path) must hold a JSON object")
        }
        var out: [(key: String, value: Any, source: String)] = []
        for (key, value) in members.sorted(by: { $0.key < $1.key }) {
            let source = "\"\(key)\" in \(path)"
            guard keys.contains(where: { $0.key == key }) else {
                throw ConfigurationError("unknown key \(source); the keys are \(keys.map(\.key).joined(separator: ", "))")
            }
            out.append((key, value, source))
        }
        return out
    }

    /// The values of the environment, then of the command line (`commandLine` by key), in
    /// the order they apply over the file: a later one wins.
    public static func overrides(_ keys: [Key], environment: [String: String], commandLine: [String: String])
        -> [Value]
    {
        var out: [Value] = []
        for key in keys {
            if let variable = key.variable, let text = environment[variable] {
                out.append(Value(key: key.key, text: text, source: variable, layer: .environment))
            }
        }
        for (key, text) in commandLine.sorted(by: { $0.key < $1.key }) {
            out.append(Value(key: key, text: text, source: flag(key), layer: .commandLine))
        }
        return out
    }

    /// Loads every layer in order: each member of `file` (when given) through `member`, then
    /// each value of the environment and of the command line through `value`. A file that
    /// cannot be read is `refusal`'s error.
    public static func load<Failure: Error>(
        file: String?, keys: [Key], environment: [String: String], commandLine: [String: String],
        refusal: (ConfigurationError) -> Failure,
        member: (_ key: String, _ value: Any, _ source: String) throws(Failure) -> Void,
        value: (Value) throws(Failure) -> Void
    ) throws(Failure) {
        if let file {
            let members: [(key: String, value: Any, source: String)]
            do throws(ConfigurationError) {
                members = try self.file(file, keys: keys)
            } catch {
                throw refusal(error)
            }
            for item in members { try member(item.key, item.value, item.source) }
        }
        for item in overrides(keys, environment: environment, commandLine: commandLine) { try value(item) }
    }

    /// The command-line flag of a key: `max_peers` → `--max-peers`.
    public static func flag(_ key: String) -> String { "--" + key.replacing("_", with: "-") }
}
