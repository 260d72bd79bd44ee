/// The field numbers of proto/beacon.proto that ``WireEncoder`` writes by hand, named as in the
/// schema. Kept in this one table; `WireFieldTableTests` checks each against the code
/// SwiftProtobuf generated from the schema.
public enum WireField {
    public enum Diff {
        public static let epoch: UInt64 = 1
        public static let event: UInt64 = 2
        public static let marks: UInt64 = 3
    }

    public enum Bundle {
        public static let diffs: UInt64 = 1
    }

    public enum Event {
        public static let revision: UInt64 = 1
        public static let part: UInt64 = 2
        public static let parts: UInt64 = 3
        public static let change: UInt64 = 4
        public static let timestampMs: UInt64 = 5
    }

    public enum Change {
        public static let kind: UInt64 = 1
        public static let key: UInt64 = 2
        public static let value: UInt64 = 3
        public static let version: UInt64 = 4
        public static let createRevision: UInt64 = 5
        public static let expiresAtMs: UInt64 = 6
    }

    public enum PrefixMark {
        public static let prefix: UInt64 = 1
        public static let previousRevision: UInt64 = 2
        public static let parts: UInt64 = 3
    }

    public enum Request {
        public static let id: UInt64 = 1
        public static let put: UInt64 = 13
        public static let batch: UInt64 = 22
    }

    public enum Put {
        public static let key: UInt64 = 1
        public static let value: UInt64 = 2
    }

    public enum Batch {
        public static let requests: UInt64 = 1
    }

    public enum Reply {
        public static let id: UInt64 = 1
        public static let write: UInt64 = 14
        public static let events: UInt64 = 17
        public static let batch: UInt64 = 22
    }

    public enum BatchReply {
        public static let replies: UInt64 = 1
    }

    public enum WriteReply {
        public static let revision: UInt64 = 1
        public static let versions: UInt64 = 2
        public static let replayed: UInt64 = 3
    }

    public enum EventsReply {
        public static let events: UInt64 = 1
        public static let revision: UInt64 = 2
        public static let epoch: UInt64 = 3
        public static let prefixRevision: UInt64 = 4
        public static let compactedRevision: UInt64 = 5
        public static let more: UInt64 = 6
    }
}
