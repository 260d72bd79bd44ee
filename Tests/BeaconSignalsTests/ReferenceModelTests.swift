#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Testing
@testable import BeaconSignals

// A property-based check of the reactive core against a deliberately naive reference: random
// graphs of signals, computeds (plain, with custom equality, throwing, catching; with dynamic
// dependencies and switchable cycles among throwing ones), effects and scopes, driven by random
// writes, nested batches, reads and disposals. After every step, each value read (by the test or
// by an effect) must equal a from-scratch evaluation of the same graph, which caches nothing and
// finds cycles with an explicit stack; each effect must have run at most once, must have run if
// something it read changed, and must not have run if nothing upstream of it was written; and no
// computed may have run unless something read it or something upstream of a reader.
//
// Reproducible: a failure names its seed; `BEACON_MODEL_SEED=N` runs that graph alone.
// `BEACON_MODEL_GRAPHS=N` runs more graphs (`make soak-core`).

/// SplitMix64: small, fast, and the same sequence on every platform.
private struct SeededGenerator: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// The error a throwing computed raises itself, naming it.
private struct ModelError: Error, Equatable {
    let node: Int
}

/// What reading a node gave.
private enum Outcome: Equatable, CustomStringConvertible {
    case value(Int)
    case error(Int)
    case cycle

    var description: String {
        switch self {
        case .value(let value): "\(value)"
        case .error(let node): "error(\(node))"
        case .cycle: "cycle"
        }
    }
}

/// How a node computes and how its changes are judged.
private enum Kind: CustomStringConvertible {
    case source
    /// `==` on an `Int`.
    case plain
    /// Custom equality: values in the same bucket of three are equal; readers read the bucket.
    case bucketed
    /// A throwing computed; may read itself through a switchable read of a later throwing one.
    case fallible
    /// A plain computed that reads one throwing computed and catches its error. Only effects
    /// read it, so it is never part of a cycle.
    case catching

    var description: String {
        switch self {
        case .source: "source"
        case .plain: "plain"
        case .bucketed: "bucketed"
        case .fallible: "fallible"
        case .catching: "catching"
        }
    }
}

/// One computed's definition: what it reads, under which switch.
private struct Definition {
    var kind: Kind
    /// Read first; when odd, `alternative` is read instead of `reads`.
    var condition: Int?
    var reads: [Int]
    var alternative: [Int]
    /// For a throwing computed: when the source `switch` is odd, read the later throwing
    /// computed `target` first (how cycles come and go).
    var backRead: (switch: Int, target: Int)?
    /// For a throwing computed: throw its own error when the result equals this.
    var throwsOn: Int?
}

/// How the body of a computed reads its dependencies: from the live graph or from the model.
private protocol Reader {
    func int(_ node: Int) -> Int
    func attempt(_ node: Int) throws -> Int
}

/// A random graph and the operations on it.
private struct Blueprint: CustomStringConvertible {
    var kinds: [Kind]
    var definitions: [Int: Definition]
    var sourceCount: Int

    /// The body every computed runs, whichever reader supplies the values.
    func compute(_ node: Int, _ reader: some Reader) throws -> Int {
        let definition = definitions[node]!
        var sum = node
        if let back = definition.backRead, reader.int(back.switch) % 2 == 1 {
            sum += try reader.attempt(back.target)
        }
        var list = definition.reads
        if let condition = definition.condition, contribution(condition, reader) % 2 == 1 {
            list = definition.alternative
        }
        for dependency in list {
            switch kinds[dependency] {
            case .fallible where definition.kind == .catching:
                sum += (try? reader.attempt(dependency)) ?? -1
            case .fallible:
                sum += try reader.attempt(dependency)
            default:
                sum += contribution(dependency, reader)
            }
        }
        let result = ((sum % 7) + 7) % 7
        if definition.kind == .fallible, definition.throwsOn == result {
            throw ModelError(node: node)
        }
        return result
    }

    /// What a plain read of `node` contributes: a bucketed computed gives its bucket.
    func contribution(_ node: Int, _ reader: some Reader) -> Int {
        kinds[node] == .bucketed ? reader.int(node) / 3 : reader.int(node)
    }

    /// Whether two outcomes of `node` count as the same value.
    func same(_ node: Int, _ a: Outcome, _ b: Outcome) -> Bool {
        if kinds[node] == .bucketed, case .value(let x) = a, case .value(let y) = b {
            return x / 3 == y / 3
        }
        return a == b
    }

    var description: String {
        var lines: [String] = []
        for node in kinds.indices {
            guard let definition = definitions[node] else {
                lines.append("  \(node): source")
                continue
            }
            var text = "  \(node): \(definition.kind) reads \(definition.reads)"
            if let condition = definition.condition {
                text += ", or \(definition.alternative) when \(condition) is odd"
            }
            if let back = definition.backRead {
                text += ", first \(back.target) when \(back.switch) is odd"
            }
            if let throwsOn = definition.throwsOn {
                text += ", throws on \(throwsOn)"
            }
            lines.append(text)
        }
        return lines.joined(separator: "\n")
    }

    /// A random graph: sources first, then computeds that read earlier nodes; throwing
    /// computeds may also read later throwing ones behind a switch.
    static func random(_ random: inout SeededGenerator) -> Blueprint {
        let sourceCount = Int.random(in: 2...5, using: &random)
        let computedCount = Int.random(in: 4...14, using: &random)
        var kinds = Array(repeating: Kind.source, count: sourceCount)
        for _ in 0..<computedCount {
            let roll = Int.random(in: 0..<10, using: &random)
            kinds.append(roll < 3 ? .plain : roll < 5 ? .bucketed : .fallible)
        }
        for _ in 0..<Int.random(in: 0...2, using: &random) {
            kinds.append(.catching)
        }
        var definitions: [Int: Definition] = [:]
        for node in sourceCount..<kinds.count {
            let kind = kinds[node]
            // Plain and bucketed computeds read only sources and plain ones; throwing ones read
            // anything earlier but catching ones; catching ones one throwing and plain ones.
            let plainCandidates = (0..<node).filter { [.source, .plain, .bucketed].contains(kinds[$0]) }
            let candidates = kind == .fallible ? (0..<node).filter { kinds[$0] != .catching } : plainCandidates
            func pick(_ count: Int) -> [Int] {
                (0..<count).compactMap { _ in candidates.randomElement(using: &random) }
            }
            var definition = Definition(
                kind: kind,
                condition: nil,
                reads: pick(Int.random(in: 1...3, using: &random)),
                alternative: [],
                backRead: nil,
                throwsOn: nil
            )
            if Int.random(in: 0..<3, using: &random) == 0 {
                definition.condition = plainCandidates.randomElement(using: &random)
                definition.alternative = pick(Int.random(in: 0...3, using: &random))
            }
            if kind == .fallible {
                if Int.random(in: 0..<3, using: &random) == 0 {
                    definition.throwsOn = Int.random(in: 0..<7, using: &random)
                }
                let later = (node..<kinds.count).filter { kinds[$0] == .fallible }
                if Int.random(in: 0..<3, using: &random) == 0, let target = later.randomElement(using: &random) {
                    definition.backRead = (Int.random(in: 0..<sourceCount, using: &random), target)
                }
            }
            if kind == .catching {
                let throwing = (0..<node).filter { kinds[$0] == .fallible }
                if let one = throwing.randomElement(using: &random) {
                    definition.reads.append(one)
                }
            }
            definitions[node] = definition
        }
        return Blueprint(kinds: kinds, definitions: definitions, sourceCount: sourceCount)
    }
}

/// The reference: evaluates from scratch on every read, with a stack for cycles, and records
/// every node it visited.
private final class NaiveModel: Reader {
    let blueprint: Blueprint
    var sources: [Int]
    private var computing: Set<Int> = []
    var visited: Set<Int> = []

    init(blueprint: Blueprint, sources: [Int]) {
        self.blueprint = blueprint
        self.sources = sources
    }

    func outcome(_ node: Int) -> Outcome {
        visited.insert(node)
        if blueprint.kinds[node] == .source {
            return .value(sources[node])
        }
        if computing.contains(node) {
            precondition(blueprint.kinds[node] == .fallible, "the generator made a cycle through a plain computed")
            return .cycle
        }
        computing.insert(node)
        defer { computing.remove(node) }
        do {
            return .value(try blueprint.compute(node, self))
        } catch let error as ModelError {
            return .error(error.node)
        } catch let error as SignalError {
            precondition(error.code == .cycle)
            return .cycle
        } catch {
            fatalError("unexpected \(error)")
        }
    }

    func int(_ node: Int) -> Int {
        guard case .value(let value) = outcome(node) else {
            fatalError("a plain read of \(node) failed")
        }
        return value
    }

    func attempt(_ node: Int) throws -> Int {
        switch outcome(node) {
        case .value(let value): return value
        case .error(let origin): throw ModelError(node: origin)
        case .cycle: throw SignalError(.cycle, "model")
        }
    }

    /// Evaluates the reads of an effect; returns them and every node visited on the way.
    func effectReads(_ nodes: [Int]) -> (reads: [Outcome], visited: Set<Int>) {
        visited = []
        let reads = nodes.map { outcome($0) }
        return (reads, visited)
    }
}

/// The graph built on BeaconSignals from a blueprint.
private final class LiveGraph: Reader {
    let blueprint: Blueprint
    var sources: [MutableSignal<Int>] = []
    var plain: [Int: Computed<Int>] = [:]
    var throwing: [Int: Computed<Result<Int, any Error>>] = [:]
    /// How often each computed's body ran.
    var runs: [Int: Int] = [:]

    init(blueprint: Blueprint, initial: [Int]) {
        self.blueprint = blueprint
        sources = initial.map { MutableSignal($0) }
        for node in blueprint.sourceCount..<blueprint.kinds.count {
            switch blueprint.kinds[node] {
            case .plain, .catching:
                plain[node] = computed { [unowned self] in
                    self.runs[node, default: 0] += 1
                    return try! self.blueprint.compute(node, self)
                }
            case .bucketed:
                plain[node] = computed(equals: { $0 / 3 == $1 / 3 }) { [unowned self] in
                    self.runs[node, default: 0] += 1
                    return try! self.blueprint.compute(node, self)
                }
            case .fallible:
                throwing[node] = computed { [unowned self] () throws -> Int in
                    self.runs[node, default: 0] += 1
                    return try self.blueprint.compute(node, self)
                }
            case .source:
                break
            }
        }
    }

    func int(_ node: Int) -> Int {
        node < sources.count ? sources[node].value : plain[node]!.value
    }

    func attempt(_ node: Int) throws -> Int {
        try throwing[node]!.get()
    }

    /// Reads a node as a user would.
    func read(_ node: Int) -> Outcome {
        if blueprint.kinds[node] != .fallible {
            return .value(int(node))
        }
        do {
            return .value(try attempt(node))
        } catch let error as ModelError {
            return .error(error.node)
        } catch let error as SignalError where error.code == .cycle {
            return .cycle
        } catch {
            return .error(-1)
        }
    }
}

/// One effect of the run: what it reads, and what it saw.
private final class Watcher {
    let reads: [Int]
    let alternative: [Int]
    let condition: Int
    var effect: Effect?
    let scoped: Bool
    var runs = 0
    var seen: [Outcome] = []
    var seenNodes: [Int] = []
    /// Nodes visited by the reference for what the watcher saw last.
    var upstream: Set<Int> = []

    init(reads: [Int], alternative: [Int], condition: Int, scoped: Bool) {
        self.reads = reads
        self.alternative = alternative
        self.condition = condition
        self.scoped = scoped
    }

    /// What it reads now, as the reference decides.
    func nodes(sources: [Int]) -> [Int] {
        sources[condition] % 2 == 1 ? alternative : reads
    }
}

/// Runs one seeded graph for `steps` steps; returns the failures found (empty when it holds).
private func runModel(seed: UInt64, steps: Int) -> [String] {
    var random = SeededGenerator(state: seed)
    let blueprint = Blueprint.random(&random)
    var values = (0..<blueprint.sourceCount).map { _ in Int.random(in: 0..<6, using: &random) }
    let live = LiveGraph(blueprint: blueprint, initial: values)
    let model = NaiveModel(blueprint: blueprint, sources: values)
    var failures: [String] = []
    var log: [String] = []
    var step = 0
    func fail(_ text: String) {
        if failures.count < 5 {
            failures.append("""
                seed \(seed), step \(step): \(text)
                graph:
                \(blueprint)
                the last operations:
                \(log.suffix(16).joined(separator: "\n"))
                """)
        }
    }

    let scope = EffectScope()
    var scopeDisposed = false
    var watchers: [Watcher] = []
    let allNodes = Array(blueprint.kinds.indices)
    func addWatcher() {
        let count = Int.random(in: 1...3, using: &random)
        let watcher = Watcher(
            reads: (0..<count).map { _ in allNodes.randomElement(using: &random)! },
            alternative: (0..<count).map { _ in allNodes.randomElement(using: &random)! },
            condition: Int.random(in: 0..<blueprint.sourceCount, using: &random),
            scoped: !scopeDisposed && Bool.random(using: &random)
        )
        let body = { [unowned live, unowned watcher] in
            watcher.runs += 1
            let nodes = live.sources[watcher.condition].value % 2 == 1 ? watcher.alternative : watcher.reads
            watcher.seenNodes = nodes
            watcher.seen = nodes.map { live.read($0) }
        }
        if watcher.scoped {
            watcher.effect = scope.run { effect(body) }
        } else {
            watcher.effect = effect(body)
        }
        watchers.append(watcher)
    }
    for _ in 0..<Int.random(in: 1...4, using: &random) {
        addWatcher()
    }
    for watcher in watchers {
        watcher.upstream = model.effectReads(watcher.nodes(sources: values)).visited.union([watcher.condition])
    }

    for _ in 0..<steps {
        step += 1
        log.append("step \(step):")
        let runsBefore = watchers.map(\.runs)
        let computedRunsBefore = live.runs
        var written: Set<Int> = []
        var demanded: Set<Int> = watchers.reduce(into: []) { $0.formUnion($1.upstream) }

        func write(_ source: Int, _ value: Int) {
            log.append("  write \(source) = \(value)")
            if values[source] != value {
                written.insert(source)
            }
            values[source] = value
            model.sources = values
            live.sources[source].value = value
        }
        func read(_ node: Int) {
            log.append("  read \(node)")
            let got = live.read(node)
            model.visited = []
            let expected = model.outcome(node)
            demanded.formUnion(model.visited)
            if !blueprint.same(node, got, expected) {
                fail("read of \(node) gave \(got), the reference \(expected)")
            }
        }
        func randomWrite() {
            write(Int.random(in: 0..<blueprint.sourceCount, using: &random), Int.random(in: 0..<6, using: &random))
        }

        switch Int.random(in: 0..<100, using: &random) {
        case 0..<40:
            randomWrite()
        case 40..<60:
            log.append("  batch {")
            batch {
                for _ in 0..<Int.random(in: 1...4, using: &random) {
                    switch Int.random(in: 0..<4, using: &random) {
                    case 0: read(allNodes.randomElement(using: &random)!)
                    case 1:
                        log.append("  batch {")
                        batch { randomWrite(); randomWrite() }
                        log.append("  }")
                    default: randomWrite()
                    }
                }
            }
            log.append("  }")
        case 60..<85:
            read(allNodes.randomElement(using: &random)!)
        case 85..<92:
            if let index = watchers.indices.randomElement(using: &random) {
                log.append("  dispose effect \(index)")
                watchers[index].effect?.dispose()
            }
        case 92..<94:
            log.append("  dispose the scope")
            scope.dispose()
            scopeDisposed = true
        default:
            log.append("  add effect \(watchers.count)")
            addWatcher()
        }

        // Effects: each ran at most once; saw what the reference sees; ran if what it saw
        // changed; did not run if nothing upstream of it was written.
        for (index, watcher) in watchers.enumerated() {
            let isNew = index >= runsBefore.count
            let ran = watcher.runs - (isNew ? 0 : runsBefore[index])
            if watcher.effect?.isDisposed == true {
                if ran != 0 {
                    fail("effect \(index) ran though it was disposed")
                }
                continue
            }
            if ran > 1 {
                fail("effect \(index) ran \(ran) times in one step")
            }
            let now = model.effectReads(watcher.nodes(sources: values))
            let nodes = watcher.nodes(sources: values)
            let unchanged = watcher.seenNodes == nodes
                && zip(nodes.indices, nodes).allSatisfy { blueprint.same($1, watcher.seen[$0], now.reads[$0]) }
            if ran == 1 {
                if !unchanged {
                    fail("effect \(index) saw \(watcher.seenNodes)=\(watcher.seen), the reference \(nodes)=\(now.reads)")
                }
                if !isNew && watcher.upstream.isDisjoint(with: written) {
                    fail("effect \(index) ran though nothing upstream of it was written")
                }
            } else {
                if !unchanged {
                    fail("effect \(index) did not run: it saw \(watcher.seenNodes)=\(watcher.seen), the reference now \(nodes)=\(now.reads)")
                }
            }
            demanded.formUnion(now.visited)
            watcher.upstream = now.visited.union([watcher.condition])
        }

        // Laziness: a computed ran only if a read reached it.
        for (node, count) in live.runs where count != computedRunsBefore[node, default: 0] {
            if !demanded.contains(node) {
                fail("computed \(node) ran though nothing read it or anything downstream of it")
            }
        }
        if !failures.isEmpty {
            break
        }
    }
    scope.dispose()
    for watcher in watchers {
        watcher.effect?.dispose()
    }
    return failures
}

@Suite("Core: a reference model", .timeLimit(.minutes(3)))
struct ReferenceModelTests {
    @Test("Random graphs, writes, batches, reads and disposals agree with a naive evaluator step by step")
    func agreesWithTheReference() {
        let environment = ProcessInfoLite.environment
        let steps = 60
        if let text = environment["BEACON_MODEL_SEED"], let seed = UInt64(text) {
            let failures = runModel(seed: seed, steps: steps)
            for failure in failures {
                Issue.record(Comment(rawValue: failure))
            }
            return
        }
        let graphs = environment["BEACON_MODEL_GRAPHS"].flatMap { Int($0) } ?? 1000
        let base = environment["BEACON_MODEL_BASE"].flatMap { UInt64($0) } ?? 0x5EED_0000
        // Seeds that once failed (a computed that became watched in the middle of a cycle
        // subscribed to dependencies it had not validated), then a fresh range.
        let regressions: [UInt64] = [1_000_812, 1_004_754, 1_005_560]
        var failed = 0
        for seed in regressions + (0..<UInt64(graphs)).map({ base &+ $0 }) {
            let failures = runModel(seed: seed, steps: steps)
            for failure in failures {
                Issue.record(Comment(rawValue: failure))
            }
            if !failures.isEmpty {
                failed += 1
                if failed == 3 { break }
            }
        }
    }
}

/// The process environment without Foundation.
private enum ProcessInfoLite {
    static var environment: [String: String] {
        var result: [String: String] = [:]
        var pointer = environ
        while let entry = pointer.pointee {
            let text = String(cString: entry)
            if let equals = text.firstIndex(of: "=") {
                result[String(text[..<equals])] = String(text[text.index(after: equals)...])
            }
            pointer += 1
        }
        return result
    }
}
