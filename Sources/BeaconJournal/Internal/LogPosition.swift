/// Where a change sits in the change log: the row id `revision << 11 | part`, so that the log is
/// a rowid table appended in (revision, part) order. Every conversion between positions and
/// revisions, in Swift and in the SQL the journal runs, goes through this type.
struct LogPosition: Comparable, Hashable {
    /// Bits of the row id that hold the part.
    static let partBits = 11
    /// Parts one revision can hold.
    static let partsPerRevision: UInt32 = 1 << partBits
    /// The highest revision whose position fits a 64-bit row id (revisions are clamped to it).
    static let maxRevision = UInt64(Int64.max) >> partBits - 1

    /// The row id.
    let rowID: Int64

    init(rowID: Int64) { self.rowID = rowID }

    /// The position of `part` of `revision`.
    init(revision: UInt64, part: UInt32 = 0) {
        precondition(part < Self.partsPerRevision, "a revision has at most \(Self.partsPerRevision) parts")
        rowID = Int64(min(revision, Self.maxRevision)) << Self.partBits | Int64(part)
    }

    /// The first position after every part of `revision`.
    static func after(_ revision: UInt64) -> LogPosition {
        LogPosition(rowID: Int64(min(revision, maxRevision) + 1) << partBits)
    }

    var revision: UInt64 { UInt64(rowID >> Self.partBits) }
    var part: UInt32 { UInt32(rowID & Int64(Self.partsPerRevision - 1)) }

    static func < (lhs: LogPosition, rhs: LogPosition) -> Bool { lhs.rowID < rhs.rowID }

    // MARK: In SQL

    /// SQL for the revision of the position in `column`.
    static func revisionSQL(_ column: String = "position") -> String { "(\(column) >> \(partBits))" }

    /// SQL for whether the position in `column` is a revision's first part.
    static func isFirstPartSQL(_ column: String = "position") -> String { "(\(column) & \(partsPerRevision - 1)) = 0" }

    /// SQL for the position of the revision and part in two columns.
    static func positionSQL(revision: String, part: String) -> String { "(\(revision) << \(partBits) | \(part))" }
}
