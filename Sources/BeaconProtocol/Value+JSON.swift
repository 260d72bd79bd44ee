extension Beacon_V1_Value {
    /// A value from JSON text, read by `ValueJSON`'s rules (integers stay ints, bytes are
    /// `{"$bytes": …}`).
    /// - Returns: `nil` when `json` is not such a value.
    public init?(json: String) {
        guard let value = try? ValueJSON.parse(json) else { return nil }
        self = value
    }

    /// The value as compact JSON text with sorted map keys, by `ValueJSON`'s rules: it parses
    /// back as the same value.
    public var jsonText: String {
        ValueJSON.text(self)
    }
}
