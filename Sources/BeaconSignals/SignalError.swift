/// An error reported by the reactive core.
public struct SignalError: Error, CustomStringConvertible, Sendable {
    /// What went wrong.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        let name: String

        /// A computed read itself, directly or through other computeds.
        public static let cycle = Code(name: "cycle")
        /// An effect kept re-triggering itself within one flush and was stopped.
        public static let effectLoop = Code(name: "effect loop")

        public var description: String { name }
    }

    /// What went wrong.
    public var code: Code
    /// A sentence for people.
    public var message: String

    /// Creates an error.
    ///
    /// - Parameters:
    ///   - code: what went wrong.
    ///   - message: a sentence for people.
    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code): \(message)" }
}
