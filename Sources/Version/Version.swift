/// The version of every evstore program and package, in this one place: evstored, evctl
/// and evstore-nats print it (`--version`) and `status` reports it; the Debian packages
/// take it from the binaries, and `make version VERSION=x.y.z` writes it here and into the
/// Python client, whose copies a test holds to this one.
public enum EvstoreVersion {
    public static let current = "0.5.0"
}
