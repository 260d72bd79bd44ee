import Foundation

/// Inserts changes into the change log, many rows per statement.
///
/// One `INSERT` of one row costs SQLite about 1,300 instructions besides the row itself
/// (binding, starting the program, halting and resetting it); an `INSERT` of
/// ``rowsPerStatement`` rows shares that among them. A binding equal to the one the statement
/// already holds (a change's part count, kind, expiry, empty write id and session are nearly
/// always the same) is not made again. Keys and values are copied into one buffer that SQLite
/// reads in place while the statement runs.
///
/// Used by one thread at a time, like the journal that owns it.
final class ChangeLogWriter {
    /// Rows per multi-row statement; a group of fewer rows goes through the one-row statement.
    static let rowsPerStatement = 32
    /// Parameters per row: position, parts, kind, key, value, version, create_revision,
    /// expires_at, timestamp, write_id, session.
    static let parametersPerRow: Int32 = 11

    private let manyRows: CachedStatement
    private let oneRow: CachedStatement
    /// The bytes the statement about to run reads: keys, values, write ids and sessions.
    private var buffer: UnsafeMutableRawPointer
    private var bufferCapacity: Int

    init(database: SQLiteDatabase) throws(SQLiteError) {
        manyRows = try CachedStatement(database.prepare(Self.insertSQL(rows: Self.rowsPerStatement)),
                                       parameters: Self.rowsPerStatement * Int(Self.parametersPerRow))
        oneRow = try CachedStatement(database.prepare(Self.insertSQL(rows: 1)), parameters: Int(Self.parametersPerRow))
        bufferCapacity = Self.initialBufferBytes
        buffer = UnsafeMutableRawPointer.allocate(byteCount: bufferCapacity, alignment: 16)
    }

    deinit { buffer.deallocate() }

    private static func insertSQL(rows: Int) -> String {
        let row = "(" + Array(repeating: "?", count: Int(parametersPerRow)).joined(separator: ", ") + ")"
        return "INSERT INTO change_log(position, parts, kind, key, value, version, create_revision, expires_at, timestamp, write_id, session) VALUES "
            + Array(repeating: row, count: rows).joined(separator: ", ")
    }

    /// Inserts every change of `chunks`, in order, inside the caller's transaction.
    func insert(contentsOf chunks: [[JournalChange]]) throws(SQLiteError) {
        var chunk = 0, index = 0
        while true {
            // The next group: up to rowsPerStatement rows from (chunk, index), and their bytes.
            var endChunk = chunk, endIndex = index, rows = 0, bytes = 0
            while rows < Self.rowsPerStatement && Self.skipToChange(chunks, &endChunk, &endIndex) {
                bytes += Self.byteCount(chunks, endChunk, endIndex)
                rows += 1
                endIndex += 1
            }
            guard rows > 0 else {
                // The statements' bindings may still point into a large buffer; nothing reads
                // them before the next append binds every parameter again.
                if bufferCapacity > Self.retainedBufferBytes { replaceBuffer(capacity: Self.initialBufferBytes) }
                return
            }
            reserve(bytes)
            // A whole group is bound into the multi-row statement and run once; a shorter one
            // goes through the one-row statement, row by row.
            let isWhole = rows == Self.rowsPerStatement
            var used = 0
            for slot in 0..<Int32(rows) {
                _ = Self.skipToChange(chunks, &chunk, &index)
                if isWhole {
                    bind(chunks, chunk, index, to: manyRows, firstParameter: slot * Self.parametersPerRow + 1, used: &used)
                } else {
                    used = 0
                    bind(chunks, chunk, index, to: oneRow, firstParameter: 1, used: &used)
                    try oneRow.statement.runKeepingBindings()
                }
                index += 1
            }
            if isWhole { try manyRows.statement.runKeepingBindings() }
        }
    }

    /// Moves (chunk, index) past empty chunks and ended ones to the next change.
    /// - Returns: whether there is one.
    @inline(__always)
    private static func skipToChange(_ chunks: [[JournalChange]], _ chunk: inout Int, _ index: inout Int) -> Bool {
        while chunk < chunks.count && index >= chunks[chunk].count {
            chunk += 1
            index = 0
        }
        return chunk < chunks.count
    }

    /// The bytes change `index` of `chunks[chunk]` puts in the buffer (read in place, as in
    /// ``bind(_:_:_:to:firstParameter:used:)``).
    @inline(__always)
    private static func byteCount(_ chunks: [[JournalChange]], _ chunk: Int, _ index: Int) -> Int {
        chunks[chunk][index].key.utf8.count + chunks[chunk][index].value.count
            + (chunks[chunk][index].writeID?.count ?? 0) + chunks[chunk][index].session.count
    }

    /// The buffer's usual size; one grown past `retainedBufferBytes` for large values is given
    /// back after the append that needed it.
    private static let initialBufferBytes = 4096
    private static let retainedBufferBytes = 1 << 20

    /// Makes room for `bytes` bytes; what the buffer held is not kept.
    private func reserve(_ bytes: Int) {
        guard bytes > bufferCapacity else { return }
        replaceBuffer(capacity: max(bytes, bufferCapacity * 2))
    }

    private func replaceBuffer(capacity: Int) {
        buffer.deallocate()
        bufferCapacity = capacity
        buffer = UnsafeMutableRawPointer.allocate(byteCount: bufferCapacity, alignment: 16)
    }

    /// Binds change `index` of `chunks[chunk]` from `first` on, reading its fields in place:
    /// passing the change itself would copy it (its key, value, write id and session retained).
    @inline(__always)
    private func bind(_ chunks: [[JournalChange]], _ chunk: Int, _ index: Int, to target: CachedStatement,
                      firstParameter first: Int32, used: inout Int) {
        target.bind(first, LogPosition(revision: chunks[chunk][index].revision, part: chunks[chunk][index].part).rowID)
        target.bind(first + 1, Int64(chunks[chunk][index].parts))
        target.bind(first + 2, chunks[chunk][index].kind.rawValue)
        let keyStart = buffer + used
        let keyCount = chunks[chunk][index].key.utf8.withContiguousStorageIfAvailable { utf8 in
            if let base = utf8.baseAddress { keyStart.copyMemory(from: base, byteCount: utf8.count) }
            return utf8.count
        } ?? {
            var count = 0
            for byte in chunks[chunk][index].key.utf8 { keyStart.storeBytes(of: byte, toByteOffset: count, as: UInt8.self); count += 1 }
            return count
        }()
        used += keyCount
        target.bindText(keyStart, count: keyCount, at: first + 3)
        target.bindBlob(copy(chunks[chunk][index].value, used: &used), count: chunks[chunk][index].value.count, at: first + 4)
        target.bind(first + 5, Int64(bitPattern: chunks[chunk][index].version))
        target.bind(first + 6, Int64(bitPattern: chunks[chunk][index].createRevision))
        target.bind(first + 7, Int64(bitPattern: chunks[chunk][index].expiresAtMilliseconds))
        target.bind(first + 8, Int64(bitPattern: chunks[chunk][index].timestampMilliseconds))
        if let count = chunks[chunk][index].writeID?.count {
            target.bindBlob(copy(chunks[chunk][index].writeID!, used: &used), count: count, at: first + 9)
        } else {
            target.bindNull(first + 9)
        }
        target.bindBlob(copy(chunks[chunk][index].session, used: &used), count: chunks[chunk][index].session.count, at: first + 10)
    }

    @inline(__always)
    private func copy(_ bytes: [UInt8], used: inout Int) -> UnsafeRawPointer {
        let start = buffer + used
        bytes.withUnsafeBytes { source in
            if let base = source.baseAddress { start.copyMemory(from: base, byteCount: source.count) }
        }
        used += bytes.count
        return UnsafeRawPointer(start)
    }
}

/// A statement and the integers (or NULL and empty-blob markers) bound to each of its
/// parameters, so that a binding equal to the one in place is skipped. SQLite keeps bindings
/// across runs; this relies on nothing else clearing them.
private final class CachedStatement {
    let statement: SQLiteStatement
    /// Per parameter (1-based): whether `bound` says what is bound there.
    private let known: UnsafeMutablePointer<Bool>
    /// Per parameter: the integer bound, or a marker for NULL or an empty blob.
    private let bound: UnsafeMutablePointer<Int64>
    private static let nullMarker: Int64 = 0
    private static let emptyBlobMarker: Int64 = 1

    init(_ statement: SQLiteStatement, parameters: Int) {
        self.statement = statement
        known = .allocate(capacity: parameters + 1)
        known.initialize(repeating: false, count: parameters + 1)
        bound = .allocate(capacity: parameters + 1)
        bound.initialize(repeating: 0, count: parameters + 1)
    }

    deinit {
        known.deallocate()
        bound.deallocate()
    }

    @inline(__always)
    func bind(_ index: Int32, _ value: Int64) {
        let slot = Int(index)
        if known[slot] && bound[slot] == value { return }
        statement.bind(index, value)
        known[slot] = true
        bound[slot] = value
    }

    @inline(__always)
    func bindText(_ bytes: UnsafeRawPointer, count: Int, at index: Int32) {
        // A zero-length text must still be text, not NULL: SQLite takes a non-null pointer as that.
        statement.bindStatic(text: count == 0 ? UnsafeRawPointer(bitPattern: 1)! : bytes, count: count, at: index)
        known[Int(index)] = false
    }

    @inline(__always)
    func bindBlob(_ bytes: UnsafeRawPointer, count: Int, at index: Int32) {
        let slot = Int(index)
        if count == 0 {
            if known[slot] && bound[slot] == Self.emptyBlobMarker { return }
            // A zero-length blob must still be a blob, not NULL.
            statement.bindStatic(blob: UnsafeRawPointer(bitPattern: 1)!, count: 0, at: index)
            known[slot] = true
            bound[slot] = Self.emptyBlobMarker
        } else {
            statement.bindStatic(blob: bytes, count: count, at: index)
            known[slot] = false
        }
    }

    @inline(__always)
    func bindNull(_ index: Int32) {
        let slot = Int(index)
        if known[slot] && bound[slot] == Self.nullMarker { return }
        statement.bindNull(index)
        known[slot] = true
        bound[slot] = Self.nullMarker
    }
}
