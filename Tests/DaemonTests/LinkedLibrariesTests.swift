import Foundation
import TestSupport
import Testing

/// evstored, evctl and evstore-nats carry no Foundation and no ICU: Foundation's full library
/// and ICU's data made each statically linked binary 57 MiB stripped (15 MiB without), too heavy
/// for a gateway's flash disk and slow over a field link. The binaries use
/// FoundationEssentials at most; this reads the shared libraries each one asks the loader
/// for (the `DT_NEEDED` entries of its dynamic section, what `readelf -d` lists) and fails
/// when one of them is Foundation's full library or ICU.
@Suite("Linked libraries")
struct LinkedLibrariesTests {
    /// Libraries that are, or pull in, Foundation's ICU-backed half.
    static let forbidden = [
        "libFoundation.so", "libFoundationInternationalization", "lib_FoundationICU", "libicu",
        "libFoundationNetworking", "libFoundationXML",
    ]

    @Test("the binary needs no Foundation and no ICU", arguments: ["evstored", "evctl", "evstore-nats"])
    func noFoundation(binary: String) throws {
        let path = try builtBinary(binary).path
        let needed = try ELFDynamicSection.neededLibraries(Array(try Data(contentsOf: URL(fileURLWithPath: path))))
        #expect(
            needed.contains { $0.hasPrefix("libc.so") }, "\(binary) needs \(needed): the dynamic section was not read")
        let offending = needed.filter { library in LinkedLibrariesTests.forbidden.contains { library.hasPrefix($0) } }
        #expect(offending.isEmpty, "\(binary) needs \(offending)")
    }

    /// evctl goes further: it takes its clock, environment and file checks from libc, so it
    /// links not even FoundationEssentials, which made it 6 MiB larger (docs/packaging.md).
    @Test("evctl needs no FoundationEssentials either")
    func evctlWithoutFoundationEssentials() throws {
        let needed = try ELFDynamicSection.neededLibraries(
            Array(try Data(contentsOf: URL(fileURLWithPath: try builtBinary("evctl").path))))
        #expect(needed.contains { $0.hasPrefix("libc.so") }, "evctl needs \(needed): the dynamic section was not read")
        let offending = needed.filter { $0.hasPrefix("libFoundation") || $0.hasPrefix("lib_Foundation") }
        #expect(offending.isEmpty, "evctl needs \(offending)")
    }

    @Test("the reader finds Foundation in a binary that needs it")
    func readerSeesFoundation() throws {
        // This test process links Foundation (the test targets may): the reader must see it.
        let needed = try ELFDynamicSection.neededLibraries(
            Array(try Data(contentsOf: URL(fileURLWithPath: "/proc/self/exe"))))
        #expect(needed.contains { $0.hasPrefix("libFoundation.so") }, "\(needed)")
    }
}

/// The `DT_NEEDED` entries of a 64-bit little-endian ELF file (x86-64, aarch64).
enum ELFDynamicSection {
    struct Malformed: Error, CustomStringConvertible {
        var description: String
    }

    static func neededLibraries(_ file: [UInt8]) throws -> [String] {
        func integer(_ offset: Int, _ size: Int) throws -> UInt64 {
            guard offset >= 0, offset + size <= file.count else {
                throw Malformed(description: "truncated at \(offset)")
            }
            var value: UInt64 = 0
            for index in (0..<size).reversed() { value = value << 8 | UInt64(file[offset + index]) }
            return value
        }
        guard file.count > 64, file[0..<4].elementsEqual([0x7F, 0x45, 0x4C, 0x46]) else {
            throw Malformed(description: "not an ELF file")
        }
        guard file[4] == 2, file[5] == 1 else { throw Malformed(description: "not a 64-bit little-endian ELF file") }
        let programHeaders = Int(try integer(0x20, 8))
        let entrySize = Int(try integer(0x36, 2))
        let entries = Int(try integer(0x38, 2))
        // (file offset, virtual address, size in the file) of each PT_LOAD, and the PT_DYNAMIC.
        var loads: [(offset: UInt64, address: UInt64, size: UInt64)] = []
        var dynamic: (offset: Int, size: Int)?
        for index in 0..<entries {
            let header = programHeaders + index * entrySize
            let type = try integer(header, 4)
            let offset = try integer(header + 8, 8)
            let address = try integer(header + 16, 8)
            let size = try integer(header + 32, 8)
            if type == 1 { loads.append((offset, address, size)) }
            if type == 2 { dynamic = (Int(offset), Int(size)) }
        }
        guard let dynamic else { return [] }  // statically linked: needs nothing
        var needed: [UInt64] = []
        var stringTable: UInt64?
        for entry in stride(from: dynamic.offset, to: dynamic.offset + dynamic.size, by: 16) {
            let tag = try integer(entry, 8)
            let value = try integer(entry + 8, 8)
            if tag == 0 { break }  // DT_NULL
            if tag == 1 { needed.append(value) }  // DT_NEEDED: an offset into the string table
            if tag == 5 { stringTable = value }  // DT_STRTAB: its virtual address
        }
        guard let stringTable,
            let load = loads.first(where: { $0.address <= stringTable && stringTable < $0.address + $0.size })
        else { throw Malformed(description: "no string table for the dynamic section") }
        let tableOffset = Int(stringTable - load.address + load.offset)
        return try needed.map { name in
            let start = tableOffset + Int(name)
            guard start < file.count, let end = file[start...].firstIndex(of: 0) else {
                throw Malformed(description: "a library name runs past the file")
            }
            return String(decoding: file[start..<end], as: UTF8.self)
        }
    }
}
