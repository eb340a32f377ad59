import Foundation
import JSONRPCClient
import Testing
import UnixSocket

/// The JSON-RPC client evctl, the bridge and these tests share, against a scripted server:
/// what it sends, how it matches replies, and how it reports what is not a reply.
@Suite struct JSONRPCClientTests {
    /// A server that accepts one connection, reads one line and answers with `lines`.
    final class ScriptedServer: @unchecked Sendable {
        let path: String
        let listener: UnixListener
        private(set) var received: [UInt8] = []
        private let done = DispatchSemaphore(value: 0)

        init(answer lines: [String]) throws {
            path = FileManager.default.temporaryDirectory.appendingPathComponent("rpc-\(UUID().uuidString.prefix(8)).sock").path
            listener = try UnixListener.bind(path: path)
            Thread.detachNewThread { [self] in
                defer { done.signal() }
                guard let connection = try? listener.accept(timeout: 10) else { return }
                var reader = LineReader(limit: 1 << 20)
                if case .line(let bytes)? = try? reader.next(reading: { buffer, count in
                    try connection.read(into: &buffer, count: count)
                }) {
                    received = bytes
                }
                for line in lines { try? connection.write(Array(line.utf8) + [0x0A]) }
                connection.close()
            }
        }

        /// The request line the server read, once it has closed.
        func request() -> String {
            done.wait()
            unlink(path)
            return String(decoding: received, as: UTF8.self)
        }
    }

    @Test("a request line carries the method quoted and the params as given; the reply to its id is found past notifications and others' replies")
    func exchangeSkipsWhatIsNotItsReply() throws {
        let server = try ScriptedServer(answer: [
            #"{"jsonrpc":"2.0","method":"event","params":{"seq":1}}"#,
            #"{"jsonrpc":"2.0","id":7,"result":{"other":true}}"#,
            #"{"jsonrpc":"2.0","id":1,"result":{"n":1,"s":"a\"b"}}"#,
        ])
        let link = try JSONRPCConnection(path: server.path)
        let reply = try link.exchange("st\"atus", params: Array(#"{"a":[1,2]}"#.utf8))
        #expect(reply.id == 1 && reply.error == nil)
        #expect(String(decoding: reply.resultBytes, as: UTF8.self) == #"{"n":1,"s":"a\"b"}"#)
        #expect((reply.result as? [String: Any])?["s"] as? String == "a\"b")
        #expect(server.request() == #"{"jsonrpc":"2.0","id":1,"method":"st\"atus","params":{"a":[1,2]}}"#)
    }

    @Test("an error reply gives code, message, reason and index; a reply with a null id (a parse error) is the reply")
    func errorReplies() throws {
        let server = try ScriptedServer(answer: [
            #"{"jsonrpc":"2.0","id":null,"error":{"code":-32004,"message":"no","data":{"reason":"invalid_event","index":3}}}"#
        ])
        let link = try JSONRPCConnection(path: server.path)
        let reply = try link.exchange("append", params: Array("{}".utf8))
        #expect(reply.error == RemoteError(code: -32004, message: "no", reason: "invalid_event", index: 3))
        _ = server.request()
    }

    @Test("a line that is not JSON-RPC, and a daemon that closes before answering, are told apart")
    func failures() throws {
        let garbage = try ScriptedServer(answer: ["hello there"])
        let first = try JSONRPCConnection(path: garbage.path)
        #expect {
            _ = try first.exchange("status", params: Array("{}".utf8))
        } throws: { error in
            guard case ClientError.notJSONRPC(let start) = error else { return false }
            return start == Array("hello there".utf8)
        }
        _ = garbage.request()

        let silent = try ScriptedServer(answer: [])
        let second = try JSONRPCConnection(path: silent.path)
        #expect {
            _ = try second.exchange("status", params: Array("{}".utf8))
        } throws: { error in
            guard case ClientError.closed = error else { return false }
            return true
        }
        _ = silent.request()

        let missing = FileManager.default.temporaryDirectory.appendingPathComponent("rpc-none.sock").path
        #expect {
            _ = try JSONRPCConnection(path: missing)
        } throws: { error in
            guard case ClientError.connecting(let socketError) = error else { return false }
            return socketError.isMissing
        }
    }
}
