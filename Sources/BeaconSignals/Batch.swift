#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Runs `body` with effects held back until the outermost batch ends; each effect then runs
/// at most once, seeing every write made inside. Reads inside the batch see the new values.
///
/// - Parameter body: writes signals.
/// - Returns: what `body` returns.
/// - Throws: what `body` throws (effects still run for the writes made before it threw).
@inlinable
@discardableResult
public func batch<T>(_ body: () throws -> T) rethrows -> T {
    let context = ReactiveContext.current
    if context.batchDepth == 0 {
        context.noteSettle()
    }
    context.batchDepth += 1
    defer { context.endBatch() }
    return try body()
}

/// Runs `body` without tracking: signals read inside do not become dependencies of the
/// running computed or effect.
///
/// - Parameter body: reads signals.
/// - Returns: what `body` returns.
/// - Throws: what `body` throws.
@inlinable
public func untracked<T>(_ body: () throws -> T) rethrows -> T {
    let context = ReactiveContext.current
    let previous = context.activeSub
    context.activeSub = nil
    defer { context.activeSub = previous }
    return try body()
}

func writeStandardError(_ text: String) {
    var text = text
    text.withUTF8 { bytes in
        _ = write(2, bytes.baseAddress, bytes.count)
    }
}
