import Projections

/// The rules of the types file (`types_file`): per entity type, the JSON types of its
/// fields, whether other fields are allowed, and the legal status moves. They are checked
/// on local appends only: another node may run another version of the file, so a
/// replicated event is stored and folded whatever it does.
public struct TypeRules: Equatable, Sendable {
    /// A field's JSON type, as the file names it.
    public enum FieldType: String, CaseIterable, Sendable {
        case string, integer, number, boolean, object, array, any

        /// Whether a canonical JSON value (not null: null clears a field) is of this type.
        func admits(_ value: JSONBytes) -> Bool {
            guard let first = value.bytes.first else { return false }
            switch self {
            case .any: return true
            case .string: return first == UInt8(ascii: "\"")
            case .object: return first == UInt8(ascii: "{")
            case .array: return first == UInt8(ascii: "[")
            case .boolean: return first == UInt8(ascii: "t") || first == UInt8(ascii: "f")
            case .number: return first == UInt8(ascii: "-") || (0x30...0x39).contains(first)
            case .integer:
                guard first == UInt8(ascii: "-") || (0x30...0x39).contains(first) else { return false }
                return !value.bytes.contains {
                    $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "e") || $0 == UInt8(ascii: "E")
                }
            }
        }
    }

    /// The legal status moves of a type.
    public struct StatusRules: Equatable, Sendable {
        /// The statuses an entity's first status event may set (empty: any).
        public var initial: [String]
        /// From each status, the statuses it may move to; a status not listed moves nowhere.
        public var transitions: [String: [String]]
    }

    /// One type's rules.
    public struct Rules: Equatable, Sendable {
        public var fields: [String: FieldType]
        /// `extra_fields`: whether fields not in `fields` may be set (default true).
        public var extraFields: Bool
        public var status: StatusRules?
        /// `authority`: the node name that decides the type's status. Elsewhere a status
        /// event is a proposal; the node of that name appends the decision.
        public var authority: String?
        /// `offline`: "refuse" when appends of the type are made only at the authority.
        public var offline: String?
    }

    /// By type name.
    public var types: [String: Rules]
    /// Each type's rules as the file gives them (JSON, keys sorted), for `types`.
    public var sources: [String: [UInt8]]

    /// This node's name (`node_name`): the node that is the authority of the types naming it.
    public var localNode: String?

    public init(types: [String: Rules] = [:], localNode: String? = nil) {
        self.types = types
        self.sources = [:]
        self.localNode = localNode
    }

    /// Whether a status event of `entity` made on this node is a proposal: its type has an
    /// authority, and it is another node.
    public func proposes(_ entity: EntityKey) -> Bool {
        guard let authority = types[entity.type]?.authority else { return false }
        return authority != localNode
    }

    /// The authority an append of `entity` must be made at when it is not this node (the
    /// type's `offline` is "refuse"); nil when this node may append it.
    public func refusedOffline(_ entity: EntityKey) -> String? {
        guard let rules = types[entity.type], rules.offline == "refuse", let authority = rules.authority,
            authority != localNode
        else { return nil }
        return authority
    }

    /// Whether this node decides the status proposals of `entity`.
    public func decides(_ entity: EntityKey) -> Bool { decides(type: entity.type) }

    /// Whether this node decides the status proposals of entities of `type`.
    public func decides(type: String) -> Bool {
        guard let authority = types[type]?.authority else { return false }
        return authority == localNode
    }

    /// The largest types file read.
    public static let maxFileBytes = 1 << 20

    /// Parses a types file; an error names what is wrong and where.
    public init(parsing bytes: [UInt8]) throws(TypeRulesError) {
        guard bytes.count <= TypeRules.maxFileBytes else {
            throw TypeRulesError("the types file is \(bytes.count) bytes; at most \(TypeRules.maxFileBytes) are read")
        }
        let root: Any
        do { root = try JSONTree.parse(bytes) } catch { throw TypeRulesError("not JSON: \(error)") }
        guard let object = root as? [String: Any] else {
            throw TypeRulesError("the types file must be a JSON object of type names to rules")
        }
        var types: [String: Rules] = [:]
        var sources: [String: [UInt8]] = [:]
        for (name, value) in object {
            guard (try? Validation.entity(name + "/x"))?.type == name else {
                throw TypeRulesError("\"\(name.prefix(64))\" is not a type name ([a-z][a-z0-9_-]{0,63})")
            }
            types[name] = try Rules(name, value)
            sources[name] = JSONTree.encode(value) ?? Array("{}".utf8)
        }
        self.types = types
        self.sources = sources
    }

    /// Checks a local append of `change` to `entity`, whose current status is
    /// `currentStatus` (nil: it has none yet).
    /// `currentStatus` is read only when a status rule needs it: the append path asks for
    /// every event, and most have no rule.
    public func check(_ change: InputEvent.Change, of entity: EntityKey, currentStatus: @autoclosure () -> String?)
        throws(EventStoreError)
    {
        guard !types.isEmpty, let rules = types[entity.type] else { return }
        switch change {
        case .edit(let fields):
            for field in fields where !field.value.isNull {
                if let type = rules.fields[field.name] {
                    guard type.admits(field.value) else {
                        throw EventStoreError(
                            .invalidEvent,
                            "field \(field.name) of type \(entity.type) must be \(Self.article(type)) \(type.rawValue) (types file: \(entity.type).fields.\(field.name))"
                        )
                    }
                } else if !rules.extraFields {
                    let known = rules.fields.keys.sorted().joined(separator: ", ")
                    throw EventStoreError(
                        .invalidEvent,
                        "type \(entity.type) has no field \(field.name) (types file: \(entity.type).extra_fields is false; its fields are \(known.isEmpty ? "none" : known))"
                    )
                }
            }
        case .status(let status):
            guard let moves = rules.status else { return }
            if let currentStatus = currentStatus() {
                let allowed = moves.transitions[currentStatus] ?? []
                guard allowed.contains(status) else {
                    throw EventStoreError(
                        .invalidTransition,
                        "\(entity) cannot move from \(currentStatus) to \(status) (types file: \(entity.type).status.transitions.\(currentStatus) is \(allowed.isEmpty ? "empty" : allowed.joined(separator: ", ")))"
                    )
                }
            } else if !moves.initial.isEmpty, !moves.initial.contains(status) {
                throw EventStoreError(
                    .invalidTransition,
                    "\(entity) cannot begin at \(status) (types file: \(entity.type).status.initial is \(moves.initial.joined(separator: ", ")))"
                )
            }
        case .add, .remove, .delete, .restore, .incr:
            return
        }
    }

    private static func article(_ type: FieldType) -> String {
        switch type {
        case .integer, .object, .array, .any: "an"
        default: "a"
        }
    }
}

/// A types file that cannot be used, and why.
public struct TypeRulesError: Error, Equatable, Sendable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

extension TypeRules.Rules {
    fileprivate init(_ type: String, _ value: Any) throws(TypeRulesError) {
        guard let object = value as? [String: Any] else {
            throw TypeRulesError("\(type): the rules of a type are a JSON object")
        }
        let known: Set<String> = ["fields", "extra_fields", "status", "authority", "offline"]
        if let unknown = object.keys.sorted().first(where: { !known.contains($0) }) {
            throw TypeRulesError(
                "\(type).\(unknown.prefix(64)): not a rule (a type has fields, extra_fields, status, authority, offline)"
            )
        }
        fields = [:]
        if let raw = object["fields"] {
            guard let map = raw as? [String: Any] else {
                throw TypeRulesError("\(type).fields: an object of field names to JSON types")
            }
            for (name, kind) in map {
                guard (try? Validation.name(Array(name.utf8), what: "field name")) != nil else {
                    throw TypeRulesError("\(type).fields: \"\(name.prefix(64))\" is not a field name")
                }
                guard let text = kind as? String, let fieldType = TypeRules.FieldType(rawValue: text) else {
                    let types = TypeRules.FieldType.allCases.map(\.rawValue).joined(separator: ", ")
                    throw TypeRulesError("\(type).fields.\(name): a JSON type, one of \(types)")
                }
                fields[name] = fieldType
            }
        }
        extraFields = true
        if let raw = object["extra_fields"] {
            guard let flag = raw as? Bool else { throw TypeRulesError("\(type).extra_fields: true or false") }
            extraFields = flag
        }
        status = nil
        if let raw = object["status"] {
            guard let map = raw as? [String: Any] else {
                throw TypeRulesError("\(type).status: an object with initial and transitions")
            }
            if let unknown = map.keys.sorted().first(where: { $0 != "initial" && $0 != "transitions" }) {
                throw TypeRulesError(
                    "\(type).status.\(unknown.prefix(64)): not a rule (status has initial, transitions)")
            }
            func statuses(_ value: Any, _ path: String) throws(TypeRulesError) -> [String] {
                guard let list = value as? [Any], list.allSatisfy({ $0 is String }) else {
                    throw TypeRulesError("\(path): a list of statuses")
                }
                return list.map { $0 as! String }
            }
            let initial =
                try map["initial"].map { (value) throws(TypeRulesError) in
                    try statuses(value, "\(type).status.initial")
                } ?? []
            var transitions: [String: [String]] = [:]
            if let raw = map["transitions"] {
                guard let moves = raw as? [String: Any] else {
                    throw TypeRulesError(
                        "\(type).status.transitions: an object of statuses to the statuses they move to")
                }
                for (from, to) in moves { transitions[from] = try statuses(to, "\(type).status.transitions.\(from)") }
            }
            status = TypeRules.StatusRules(initial: initial, transitions: transitions)
        }
        authority = nil
        if let raw = object["authority"] {
            guard let name = raw as? String, !name.isEmpty else {
                throw TypeRulesError("\(type).authority: a node name")
            }
            authority = name
        }
        offline = nil
        if let raw = object["offline"] {
            guard let mode = raw as? String, mode == "refuse" || mode == "allow" else {
                throw TypeRulesError("\(type).offline: \"refuse\" or \"allow\"")
            }
            offline = mode
        }
        if offline == "refuse", authority == nil {
            throw TypeRulesError(
                "\(type).offline: \"refuse\" needs \"authority\", the node where the type's appends are made")
        }
    }
}
