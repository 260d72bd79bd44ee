#if Etcd  // etcd fronts are built with the Etcd trait (Package.swift)
import Foundation

/// Where one etcd member takes client requests: `http://HOST:PORT`, `https://HOST:PORT` or a
/// Unix socket, `unix://PATH` or, with TLS, `unixs://PATH` (an absolute path, or one relative to
/// the working directory as etcd's own `unix://NAME:PORT` listeners are).
package struct EtcdEndpoint: Sendable, Hashable, CustomStringConvertible {
    package enum Address: Sendable, Hashable {
        case tcp(host: String, port: Int)
        case unixSocket(path: String)
    }

    package let address: Address
    /// Whether the member expects TLS (`https://`, `unixs://`).
    package let isSecure: Bool
    /// The endpoint as it was written.
    package let description: String

    /// Parses one endpoint.
    /// - Throws: ``EtcdError`` (`.invalidConfiguration`) for anything else.
    package init(parsing text: String) throws(EtcdError) {
        description = text
        func invalid(_ why: String) -> EtcdError {
            EtcdError(.invalidConfiguration, "etcd endpoint '\(text)': \(why) (expected http://HOST:PORT, https://HOST:PORT, unix://PATH or unixs://PATH)")
        }
        for (scheme, secure) in [("unix://", false), ("unixs://", true)] where text.hasPrefix(scheme) {
            let path = String(text.dropFirst(scheme.count))
            guard !path.isEmpty else { throw invalid("no socket path") }
            address = .unixSocket(path: path)
            isSecure = secure
            return
        }
        let rest: Substring
        if text.hasPrefix("http://") {
            rest = text.dropFirst("http://".count)
            isSecure = false
        } else if text.hasPrefix("https://") {
            rest = text.dropFirst("https://".count)
            isSecure = true
        } else {
            throw invalid("unknown scheme")
        }
        let hostAndPort = rest.hasSuffix("/") ? rest.dropLast() : rest
        guard let colon = hostAndPort.lastIndex(of: ":") else { throw invalid("no port") }
        var host = hostAndPort[..<colon]
        if host.hasPrefix("[") && host.hasSuffix("]") { host = host.dropFirst().dropLast() }
        guard !host.isEmpty, !host.contains("/") else { throw invalid("no host") }
        guard let port = Int(hostAndPort[hostAndPort.index(after: colon)...]), (1...65535).contains(port) else {
            throw invalid("the port must be a number from 1 to 65535")
        }
        address = .tcp(host: String(host), port: port)
    }

    /// Parses a comma-separated list of endpoints (`--etcd-endpoints`).
    /// - Throws: ``EtcdError`` (`.invalidConfiguration`) when one is malformed or none is given.
    package static func list(parsing text: String) throws(EtcdError) -> [EtcdEndpoint] {
        var endpoints: [EtcdEndpoint] = []
        for part in text.split(separator: ",") {
            let trimmed = part.trimmingCharacters(in: .whitespaces)
            if !trimmed.isEmpty { endpoints.append(try EtcdEndpoint(parsing: trimmed)) }
        }
        guard !endpoints.isEmpty else { throw EtcdError(.invalidConfiguration, "no etcd endpoint given") }
        return endpoints
    }
}

/// The files of a client certificate for a cluster that requires one, and the authority that
/// signed its members' certificates (PEM). Used for `https://` and `unixs://` endpoints.
package struct EtcdTLSFiles: Sendable, Hashable {
    /// The client's certificate chain; nil for a cluster that does not ask for one.
    package var certificatePath: String?
    /// The client certificate's private key.
    package var keyPath: String?
    /// The authority that signed the members' certificates; nil: the system's trust store.
    package var authorityPath: String?

    package init(certificatePath: String? = nil, keyPath: String? = nil, authorityPath: String? = nil) {
        self.certificatePath = certificatePath
        self.keyPath = keyPath
        self.authorityPath = authorityPath
    }
}
#endif
