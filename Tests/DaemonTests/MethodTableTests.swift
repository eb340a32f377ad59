@testable import Daemon
import Foundation
@testable import Server
import Testing
@testable import Writer

/// The method table is what a running daemon answers by: every method it lists is served,
/// checks its params against the table's members, and needs the table's level.
@Suite("The method table", .timeLimit(.minutes(30)))
struct MethodTableTests {
    @Test("names are unique, and only append and watch are the connection's")
    func shape() {
        #expect(Set(MethodTable.names).count == MethodTable.methods.count)
        let connection = MethodTable.methods.filter {
            if case .connection = $0.handler { true } else { false }
        }
        #expect(connection.map(\.name) == [MethodTable.append, MethodTable.watch])
        #expect(MethodTable.methods.allSatisfy { $0.verbatim.allSatisfy($0.params.contains) })
    }

    @Test("a real daemon serves every method of the table and refuses a member the table does not list")
    func everyMethodIsServed() throws {
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        let client = try daemon.client()
        for method in MethodTable.methods where method.name != MethodTable.append {
            let response = try client.request(method.name, #"{"no_such_member":1}"#)
            let error = try #require(response["error"] as? [String: Any], "\(method.name): \(response)")
            #expect(error["code"] as? Int == -32602, "\(method.name): \(error)")
            #expect((error["message"] as? String)?.contains("no_such_member") == true, "\(method.name): \(error)")
        }
        // An unknown method lists the table's names.
        let unknown = try client.request("no.such.method")
        let message = try #require((unknown["error"] as? [String: Any])?["message"] as? String)
        #expect(message.contains(MethodTable.names.joined(separator: ", ")))
        _ = try daemon.stop()
    }
}
