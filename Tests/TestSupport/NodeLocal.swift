import Foundation

/// A `get` answer (or any JSON text) without its `"rev":N` member: the rev is this node's
/// commit sequence, so states that converged on two nodes differ only there.
public func withoutRev(_ json: String) -> String {
    json.replacingOccurrences(of: #","rev":[0-9]+"#, with: "", options: .regularExpression)
        .replacingOccurrences(of: #""rev":[0-9]+,"#, with: "", options: .regularExpression)
}
