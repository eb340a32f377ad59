import Projections

/// A blob's name: the SHA-256 of its bytes, written `sha256:<64 lowercase hex digits>`.
public struct BlobHash: Hashable, Sendable, CustomStringConvertible {
    public static let prefix = "sha256:"

    /// The 32-byte digest.
    public let digest: [UInt8]

    public init(digest: [UInt8]) {
        precondition(digest.count == SHA256.byteCount, "a SHA-256 digest is 32 bytes")
        self.digest = digest
    }

    /// Parses `sha256:<hex>`; nil for anything else (upper-case digits included, so one
    /// blob has one name).
    public init?(_ text: String) {
        let bytes = Array(text.utf8)
        let prefix = Array(BlobHash.prefix.utf8)
        guard bytes.count == prefix.count + 64, bytes.starts(with: prefix) else { return nil }
        var digest: [UInt8] = []
        digest.reserveCapacity(32)
        var index = prefix.count
        while index < bytes.count {
            guard let high = Self.nibble(bytes[index]), let low = Self.nibble(bytes[index + 1]) else { return nil }
            digest.append(high << 4 | low)
            index += 2
        }
        self.digest = digest
    }

    private static func nibble(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        default: nil
        }
    }

    /// The 64 hex digits.
    public var hex: String { SHA256.hexString(digest) }

    public var description: String { BlobHash.prefix + hex }

    /// The hash of `bytes`.
    public static func of(_ bytes: [UInt8]) -> BlobHash { BlobHash(digest: SHA256.digest(bytes)) }
}

/// A field value or set element that names a blob:
/// `{"$blob":"sha256:<hex>","size":N,"type":"image/jpeg"}` (`type` may be left out).
public struct BlobReference: Equatable, Sendable {
    public var hash: BlobHash
    public var size: UInt64
    public var type: String?

    public init(hash: BlobHash, size: UInt64, type: String? = nil) {
        self.hash = hash
        self.size = size
        self.type = type
    }

    /// The longest `type` (a media type such as `image/jpeg`).
    public static let maxTypeBytes = 255

    /// The canonical JSON of an object's first member when it is `$blob` (`$` sorts before
    /// every letter, so a reference's canonical form starts so).
    private static let marker = Array("{\"$blob\":".utf8)

    /// Whether `value` is meant as a reference (an object with a `$blob` member), by its
    /// canonical bytes alone: the check every edit's values and set elements pay.
    public static func isMarked(_ value: JSONBytes) -> Bool { value.bytes.starts(with: marker) }

    /// The reference `value` is; nil when it is no reference (it has no `$blob` member).
    /// A value with `$blob` that is not a reference as above is `invalid_event`, saying what
    /// is wrong, so a typo never passes for a plain value.
    public static func parse(_ value: JSONBytes) throws(EventStoreError) -> BlobReference? {
        guard isMarked(value) else { return nil }
        let object: [String: Any]
        do {
            guard let parsed = try JSONTree.parse(value.bytes) as? [String: Any] else { return nil }
            object = parsed
        } catch {
            throw .invalid("a blob reference is not JSON: \(error)")
        }
        let form = "{\"$blob\":\"sha256:<64 hex digits>\",\"size\":N,\"type\":\"...\"}"
        guard let text = object["$blob"] as? String, let hash = BlobHash(text) else {
            throw .invalid("\"$blob\" must be \"sha256:\" and 64 lowercase hex digits, as evctl blob put prints: \(form)")
        }
        guard let size = object["size"] as? Int, size >= 0 else {
            throw .invalid("a blob reference's \"size\" must be its size in bytes, an integer of 0 or more: \(form)")
        }
        var type: String?
        if let value = object["type"] {
            guard let text = value as? String, !text.isEmpty, text.utf8.count <= maxTypeBytes,
                !text.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F })
            else {
                throw .invalid(
                    "a blob reference's \"type\" must be a media type such as \"image/jpeg\", 1 to \(maxTypeBytes) bytes without control characters"
                )
            }
            type = text
        }
        if let other = object.keys.sorted().first(where: { !["$blob", "size", "type"].contains($0) }) {
            throw .invalid("a blob reference has \"$blob\", \"size\" and \"type\", not \"\(other.prefix(40))\": \(form)")
        }
        return BlobReference(hash: hash, size: UInt64(size), type: type)
    }

    /// The references among `values` (an edit's values, a set's elements), in order; values
    /// that are not references are skipped, and a malformed reference throws.
    public static func references(in values: some Sequence<JSONBytes>) throws(EventStoreError) -> [BlobReference] {
        var found: [BlobReference] = []
        for value in values where isMarked(value) {
            if let reference = try parse(value) { found.append(reference) }
        }
        return found
    }
}

extension BlobReference {
    /// The blob hashes named in JSON text (an entity's state: its fields, set elements and
    /// conflicting values), each once, in order of first appearance.
    public static func hashes(inJSON json: [UInt8]) -> [BlobHash] {
        let needle = Array("{\"$blob\":\"sha256:".utf8)
        var found: [BlobHash] = []
        var seen = Set<BlobHash>()
        var index = 0
        let end = json.count - needle.count - 64
        while index <= end {
            guard json[index] == UInt8(ascii: "{"), json[index + 1] == UInt8(ascii: "\""),
                json[index + 2] == UInt8(ascii: "$"), json[index..<(index + needle.count)].elementsEqual(needle)
            else {
                index += 1
                continue
            }
            let start = index + needle.count - 7
            let text = String(decoding: json[start..<(start + 71)], as: UTF8.self)
            if let hash = BlobHash(text), seen.insert(hash).inserted { found.append(hash) }
            index = start + 71
        }
        return found
    }
}

extension BlobReference {
    /// The well-formed references among `values`, in order: a value that is no reference,
    /// or a malformed one, names no blob.
    static func wellFormed(in values: some Sequence<JSONBytes>) -> [BlobReference] {
        var references: [BlobReference] = []
        for value in values where isMarked(value) {
            do throws(EventStoreError) {
                if let reference = try parse(value) { references.append(reference) }
            } catch {
                continue
            }
        }
        return references
    }
}

extension InputEvent {
    /// The blobs this event names in its values (checked as the event was decoded, so every
    /// one is well formed): what must be held before it may be appended. A removed element
    /// needs no blob.
    public var blobReferences: [BlobReference] {
        switch change {
        case .edit(let fields): BlobReference.wellFormed(in: fields.lazy.map(\.value))
        case .add(_, let element): BlobReference.wellFormed(in: CollectionOfOne(element))
        default: []
        }
    }
}
