#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Monotonic milliseconds.
func nowMilliseconds() -> Double {
    var spec = timespec()
    clock_gettime(CLOCK_MONOTONIC, &spec)
    return Double(spec.tv_sec) * 1000 + Double(spec.tv_nsec) / 1_000_000
}

/// Times `body` once, in milliseconds.
func time(_ body: () -> Void) -> Double {
    let start = nowMilliseconds()
    body()
    return nowMilliseconds() - start
}

/// The fastest of `runs` timings of `body`.
func fastest(of runs: Int, _ body: () -> Void) -> Double {
    var best = Double.infinity
    for _ in 0..<runs {
        best = min(best, time(body))
    }
    return best
}

/// A failed check of a benchmark's expected result: the figures would mean nothing.
struct CheckFailure: Error, CustomStringConvertible {
    let description: String
}

/// Checks an expected result; benchmarks stop on the first wrong value.
func check(_ condition: @autoclosure () -> Bool, _ message: @autoclosure () -> String) {
    if !condition() {
        print("benchmark check failed: \(message())")
        exit(70)
    }
}

/// Keeps the optimiser from deleting work whose result is otherwise unused.
@inline(never)
func blackHole<T>(_ value: T) {
    withExtendedLifetime(value) {}
}

/// A counter shared by closures.
final class Counter {
    var count = 0
}

/// A small repeated computation standing in for "heavy" work (the JS suite's `busy()`).
@inline(never)
func busy() {
    var a = 0
    for i in 0..<100 {
        a = a &+ i
    }
    blackHole(a)
}

/// `value` with `decimals` digits after the point, right-aligned in `width` characters.
func formatted(_ value: Double, decimals: Int, width: Int) -> String {
    var scale = 1.0
    for _ in 0..<decimals { scale *= 10 }
    let scaled = (value * scale).rounded()
    let whole = Int(scaled / scale)
    let fraction = Int(abs(scaled).truncatingRemainder(dividingBy: scale))
    var digits = String(fraction)
    while digits.count < decimals { digits = "0" + digits }
    let text = decimals > 0 ? "\(whole).\(digits)" : "\(whole)"
    return String(repeating: " ", count: max(0, width - text.count)) + text
}

extension String {
    /// The string padded with spaces to at least `width` characters.
    func padding(_ width: Int) -> String {
        self + String(repeating: " ", count: max(0, width - count))
    }
}
