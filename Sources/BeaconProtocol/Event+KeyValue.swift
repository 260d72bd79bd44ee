extension Beacon_V1_KeyValue {
    /// A key's state after `event`: its new value, or `nil` when the event deleted or expired it.
    public init?(after event: Beacon_V1_Event) {
        let change = event.change
        guard change.kind == .put else { return nil }
        self.init()
        key = change.key
        value = change.value
        version = change.version
        createRevision = change.createRevision
        modRevision = event.revision
        expiresAtMs = change.expiresAtMs
        modTimeMs = event.timestampMs
    }
}

extension Beacon_V1_Event {
    /// A key's current state as the put that wrote it (its revision is the key's `mod_revision`).
    public init(writing kv: Beacon_V1_KeyValue) {
        self.init()
        revision = kv.modRevision
        timestampMs = kv.modTimeMs
        change = .with {
            $0.key = kv.key
            $0.value = kv.value
            $0.version = kv.version
            $0.createRevision = kv.createRevision
            $0.expiresAtMs = kv.expiresAtMs
        }
    }
}
