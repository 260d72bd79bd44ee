/// What a change did to its key.
public enum ChangeKind: Int64, Sendable, Equatable {
    /// The key was created or overwritten.
    case put = 0
    /// The key was deleted by a client.
    case delete = 1
    /// The key was deleted because its time to live ran out.
    case expire = 2
}

/// One journaled change: a row of the append-only change log.
public struct JournalChange: Sendable, Equatable {
    /// The revision that committed the change.
    public var revision: UInt64
    /// The change's index within its revision, from 0.
    public var part: UInt32
    /// How many changes the revision committed.
    public var parts: UInt32
    /// What the change did.
    public var kind: ChangeKind
    /// The key changed.
    public var key: String
    /// The encoded value for a put; empty otherwise. The journal does not interpret it.
    public var value: [UInt8]
    /// The key's version after the change (0 after a delete).
    public var version: UInt64
    /// The revision that created the key (0 after a delete).
    public var createRevision: UInt64
    /// Unix time in milliseconds when the key expires; 0 for never.
    public var expiresAtMilliseconds: UInt64
    /// Commit time, Unix milliseconds.
    public var timestampMilliseconds: UInt64
    /// The client's idempotency token, stored with part 0 of a revision.
    public var writeID: [UInt8]?
    /// For a put: the writer's session the key is bound to (empty: none).
    public var session: [UInt8]

    /// Creates a change record.
    public init(revision: UInt64, part: UInt32 = 0, parts: UInt32 = 1, kind: ChangeKind, key: String,
                value: [UInt8] = [], version: UInt64, createRevision: UInt64, expiresAtMilliseconds: UInt64 = 0,
                timestampMilliseconds: UInt64, writeID: [UInt8]? = nil, session: [UInt8] = []) {
        self.revision = revision
        self.part = part
        self.parts = parts
        self.kind = kind
        self.key = key
        self.value = value
        self.version = version
        self.createRevision = createRevision
        self.expiresAtMilliseconds = expiresAtMilliseconds
        self.timestampMilliseconds = timestampMilliseconds
        self.writeID = writeID
        self.session = session
    }
}

/// The current state of one key as the journal keeps it; a deleted key is a tombstone until
/// compaction passes its revision.
public struct JournalEntry: Sendable, Equatable {
    public var key: String
    public var value: [UInt8]
    public var version: UInt64
    public var createRevision: UInt64
    public var modRevision: UInt64
    public var expiresAtMilliseconds: UInt64
    public var isDeleted: Bool
    /// The writer's session the key is bound to (empty: none).
    public var session: [UInt8]
    /// Commit time (Unix ms) of `modRevision`; 0 when not known.
    public var modTimeMilliseconds: UInt64

    /// Creates an entry.
    public init(key: String, value: [UInt8], version: UInt64, createRevision: UInt64, modRevision: UInt64,
                expiresAtMilliseconds: UInt64, isDeleted: Bool, session: [UInt8] = [], modTimeMilliseconds: UInt64 = 0) {
        self.key = key
        self.value = value
        self.version = version
        self.createRevision = createRevision
        self.modRevision = modRevision
        self.expiresAtMilliseconds = expiresAtMilliseconds
        self.isDeleted = isDeleted
        self.session = session
        self.modTimeMilliseconds = modTimeMilliseconds
    }
}

/// How hard a commit works to survive failures.
public enum Durability: String, Sendable, CaseIterable {
    /// `synchronous=NORMAL` in WAL mode: a committed write survives the daemon being killed
    /// (kill -9, crash); the last commits before a power loss or kernel panic may be lost.
    case normal
    /// `synchronous=FULL`: every commit is fsynced before it is acknowledged; survives power loss.
    case full
}

/// How much history the journal keeps. Current state is always kept.
public struct RetentionPolicy: Sendable, Equatable {
    /// Keep at least the last this many revisions of history; `nil` for no count limit.
    public var revisions: UInt64?
    /// Drop history older than this many milliseconds; `nil` for no age limit.
    public var maxAgeMilliseconds: UInt64?

    /// Creates a policy.
    public init(revisions: UInt64? = 1_000_000, maxAgeMilliseconds: UInt64? = nil) {
        self.revisions = revisions
        self.maxAgeMilliseconds = maxAgeMilliseconds
    }
}
