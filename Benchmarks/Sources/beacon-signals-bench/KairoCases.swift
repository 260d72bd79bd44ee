// The kairo cases of js-reactivity-benchmark, ported: the same graphs, writes and checks.

/// Write the head, observe through 50 independent two-computed branches with an effect each.
func broadPropagation<F: BenchFramework>(_ f: F) -> () -> Void {
    let head = f.signal(0)
    var last: F.Derived?
    let counter = Counter()
    for i in 0..<50 {
        let offset = Double(i)
        let current = f.computed { f.read(head) + offset }
        let current2 = f.computed { f.read(current) + 1 }
        f.effect {
            _ = f.read(current2)
            counter.count += 1
        }
        last = current2
    }
    let tail = last!
    return {
        f.batch { f.write(head, 1) }
        counter.count = 0
        for i in 0..<50 {
            f.batch { f.write(head, Double(i)) }
            check(f.read(tail) == Double(i + 50), "broadPropagation: last == \(i + 50)")
        }
        check(!f.exactRunCounts || counter.count == 50 * 50, "broadPropagation: \(counter.count) effect runs, expected 2500")
    }
}

/// A chain of 50 computeds under one effect.
func deepPropagation<F: BenchFramework>(_ f: F) -> () -> Void {
    let length = 50
    let head = f.signal(0)
    var current = f.computed { f.read(head) + 1 }
    for _ in 1..<length {
        let previous = current
        current = f.computed { f.read(previous) + 1 }
    }
    let tail = current
    let counter = Counter()
    f.effect {
        _ = f.read(tail)
        counter.count += 1
    }
    let iterations = 50
    return {
        f.batch { f.write(head, 1) }
        counter.count = 0
        for i in 0..<iterations {
            f.batch { f.write(head, Double(i)) }
            check(f.read(tail) == Double(length + i), "deepPropagation: tail == \(length + i)")
        }
        check(!f.exactRunCounts || counter.count == iterations, "deepPropagation: \(counter.count) effect runs, expected \(iterations)")
    }
}

/// Five computeds of the head joined by one sum.
func diamond<F: BenchFramework>(_ f: F) -> () -> Void {
    let width = 5
    let head = f.signal(0)
    var current: [F.Derived] = []
    for _ in 0..<width {
        current.append(f.computed { f.read(head) + 1 })
    }
    let branches = current
    let sum = f.computed { branches.reduce(0.0) { $0 + f.read($1) } }
    let counter = Counter()
    f.effect {
        _ = f.read(sum)
        counter.count += 1
    }
    return {
        f.batch { f.write(head, 1) }
        check(f.read(sum) == Double(2 * width), "diamond: sum == \(2 * width)")
        counter.count = 0
        for i in 0..<500 {
            f.batch { f.write(head, Double(i)) }
            check(f.read(sum) == Double((i + 1) * width), "diamond: sum == \((i + 1) * width)")
        }
        check(!f.exactRunCounts || counter.count == 500, "diamond: \(counter.count) effect runs, expected 500")
    }
}

/// A hundred heads folded into one array, split again into a hundred computeds.
func mux<F: BenchFramework>(_ f: F) -> () -> Void {
    let heads = (0..<100).map { _ in f.signal(0) }
    // Like the JS original, the joined object is new on every run: no equality cut-off.
    let joined = f.computedArray { heads.map { f.read($0) } }
    let split = (0..<100).map { index in f.computed { f.read(joined)[index] } }
    let plusOne = split.map { x in f.computed { f.read(x) + 1 } }
    for x in plusOne {
        f.effect { _ = f.read(x) }
    }
    return {
        for i in 0..<10 {
            f.batch { f.write(heads[i], Double(i)) }
            check(f.read(plusOne[i]) == Double(i + 1), "mux: split[\(i)] == \(i + 1)")
        }
        for i in 0..<10 {
            f.batch { f.write(heads[i], Double(i * 2)) }
            check(f.read(plusOne[i]) == Double(i * 2 + 1), "mux: split[\(i)] == \(i * 2 + 1)")
        }
    }
}

/// One computed reading the head thirty times.
func repeatedObservers<F: BenchFramework>(_ f: F) -> () -> Void {
    let size = 30
    let head = f.signal(0)
    let current = f.computed {
        var result = 0.0
        for _ in 0..<size {
            result += f.read(head)
        }
        return result
    }
    let counter = Counter()
    f.effect {
        _ = f.read(current)
        counter.count += 1
    }
    return {
        f.batch { f.write(head, 1) }
        check(f.read(current) == Double(size), "repeatedObservers: \(size)")
        counter.count = 0
        for i in 0..<100 {
            f.batch { f.write(head, Double(i)) }
            check(f.read(current) == Double(i * size), "repeatedObservers: \(i * size)")
        }
        check(!f.exactRunCounts || counter.count == 100, "repeatedObservers: \(counter.count) effect runs, expected 100")
    }
}

/// A chain of ten computeds all read by one sum.
func triangle<F: BenchFramework>(_ f: F) -> () -> Void {
    let width = 10
    let head = f.signal(0)
    var chain: [F.Derived] = []
    var current = f.computed { f.read(head) }
    for _ in 0..<width {
        chain.append(current)
        let previous = current
        current = f.computed { f.read(previous) + 1 }
    }
    let list = chain
    let sum = f.computed { list.reduce(0.0) { $0 + f.read($1) } }
    let counter = Counter()
    f.effect {
        _ = f.read(sum)
        counter.count += 1
    }
    let constant = Double((1...width).reduce(0, +))
    return {
        f.batch { f.write(head, 1) }
        check(f.read(sum) == constant, "triangle: sum == \(constant)")
        counter.count = 0
        for i in 0..<100 {
            f.batch { f.write(head, Double(i)) }
            check(f.read(sum) == constant + Double(i * width - width), "triangle: sum")
        }
        check(!f.exactRunCounts || counter.count == 100, "triangle: \(counter.count) effect runs, expected 100")
    }
}

/// A computed that switches between two dependencies on every write.
func unstable<F: BenchFramework>(_ f: F) -> () -> Void {
    let head = f.signal(0)
    let double = f.computed { f.read(head) * 2 }
    let inverse = f.computed { -f.read(head) }
    let current = f.computed {
        var result = 0.0
        for _ in 0..<20 {
            result += Int(f.read(head)) % 2 != 0 ? f.read(double) : f.read(inverse)
        }
        return result
    }
    let counter = Counter()
    f.effect {
        _ = f.read(current)
        counter.count += 1
    }
    return {
        f.batch { f.write(head, 1) }
        check(f.read(current) == 40, "unstable: 40")
        counter.count = 0
        for i in 0..<100 {
            f.batch { f.write(head, Double(i)) }
            check(f.read(current) == Double(i % 2 != 0 ? i * 2 * 20 : -i * 20), "unstable: value")
        }
        check(!f.exactRunCounts || counter.count == 100, "unstable: \(counter.count) effect runs, expected 100")
    }
}

/// An expensive computed whose result never changes: nothing downstream may run.
func avoidablePropagation<F: BenchFramework>(_ f: F) -> () -> Void {
    let head = f.signal(0)
    let computed1 = f.computed { f.read(head) }
    let computed2 = f.computed { _ = f.read(computed1); return 0.0 }
    let computed3 = f.computed { busy(); return f.read(computed2) + 1 }
    let computed4 = f.computed { f.read(computed3) + 2 }
    let computed5 = f.computed { f.read(computed4) + 3 }
    let counter = Counter()
    f.effect {
        _ = f.read(computed5)
        counter.count += 1
        busy()
    }
    return {
        f.batch { f.write(head, 1) }
        check(f.read(computed5) == 6, "avoidablePropagation: 6")
        counter.count = 0
        for i in 0..<1000 {
            f.batch { f.write(head, Double(i)) }
            check(f.read(computed5) == 6, "avoidablePropagation: 6")
        }
        check(!f.exactRunCounts || counter.count == 0, "avoidablePropagation: the effect ran \(counter.count) times, expected 0")
    }
}

/// The kairo cases by name, in the suite's order.
func kairoCases<F: BenchFramework>(_ f: F) -> [(String, () -> (() -> Void))] {
    [
        ("avoidablePropagation", { avoidablePropagation(f) }),
        ("broadPropagation", { broadPropagation(f) }),
        ("deepPropagation", { deepPropagation(f) }),
        ("diamond", { diamond(f) }),
        ("mux", { mux(f) }),
        ("repeatedObservers", { repeatedObservers(f) }),
        ("triangle", { triangle(f) }),
        ("unstable", { unstable(f) }),
    ]
}
