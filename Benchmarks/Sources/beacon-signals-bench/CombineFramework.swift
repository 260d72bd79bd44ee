import OpenCombine

// The cases on OpenCombine (Combine's API on Linux), built the way Combine code is written:
// every source is a `CurrentValueSubject`, every derived value a subject fed by a subscription
// to the publishers it reads, with a `filter` against the node's value as the equality cut-off, and every effect
// a `sink`. Combine pushes each change through at once and has no batches, so a node reached
// by several paths (a diamond's join) runs once per path, seeing intermediate states, and
// dependencies are those a node reads when it is built (Combine pipelines are wired, not
// tracked). The cases therefore check values, not run counts, on it.

final class CombineFramework: BenchFramework {
    let name = "OpenCombine"
    let exactRunCounts = false
    let tracksDynamicDependencies = false

    func reasonToSkip(layers: Int, fanIn: Int) -> String? {
        // Each change is pushed along every path, in subscription order rather than
        // topological order, so a write runs a node of the last layer once per path to it.
        var paths = 1.0
        for _ in 1..<max(layers, 2) {
            paths *= Double(fanIn)
        }
        return paths > 10_000 ? "a write re-runs the last layer once per path to it (\(fanIn)^\(layers - 1))" : nil
    }

    /// A node's publisher and its current value.
    final class Node<Value> {
        let subject: CurrentValueSubject<Value, Never>
        var subscriptions: [AnyCancellable] = []

        init(_ value: Value) {
            subject = CurrentValueSubject(value)
        }
    }

    /// While a node is built: the nodes its first run reads, to subscribe to.
    private var recording: [ObjectIdentifier: AnyPublisher<Void, Never>]?
    private var effects: [AnyCancellable] = []

    private func noteRead<Value>(_ node: Node<Value>) {
        if recording != nil, recording![ObjectIdentifier(node)] == nil {
            recording![ObjectIdentifier(node)] = node.subject.map { _ in () }.eraseToAnyPublisher()
        }
    }

    /// Runs `body` once, recording what it reads; returns its result and those publishers.
    private func discover<T>(_ body: () -> T) -> (T, [AnyPublisher<Void, Never>]) {
        let saved = recording
        recording = [:]
        let result = body()
        let inputs = Array((recording ?? [:]).values)
        recording = saved
        return (result, inputs)
    }

    private func derived<Value>(_ body: @escaping () -> Value, removingDuplicates: Bool) -> Node<Value>
    where Value: Equatable {
        let (initial, inputs) = discover(body)
        let node = Node(initial)
        let subject = node.subject
        // One subscription per input (what `CombineLatest` does inside), each skipping the
        // current value it is sent on subscribing.
        for input in inputs {
            if removingDuplicates {
                // `removeDuplicates`, against the node's value rather than one input's last.
                input.dropFirst().map { _ in body() }.filter { $0 != subject.value }
                    .sink { subject.send($0) }.store(in: &node.subscriptions)
            } else {
                input.dropFirst().sink { _ in subject.send(body()) }.store(in: &node.subscriptions)
            }
        }
        return node
    }

    func signal(_ value: Double) -> Node<Double> { Node(value) }
    func computed(_ body: @escaping () -> Double) -> Node<Double> { derived(body, removingDuplicates: true) }
    func computedArray(_ body: @escaping () -> [Double]) -> Node<[Double]> { derived(body, removingDuplicates: false) }

    func read(_ node: Node<Double>) -> Double {
        noteRead(node)
        return node.subject.value
    }

    func read(_ node: Node<[Double]>) -> [Double] {
        noteRead(node)
        return node.subject.value
    }

    func write(_ source: Node<Double>, _ value: Double) {
        source.subject.send(value)
    }

    func effect(_ body: @escaping () -> Void) {
        let ((), inputs) = discover(body)
        for input in inputs {
            effects.append(input.dropFirst().sink { _ in body() })
        }
    }

    func batch(_ body: () -> Void) {
        body()
    }

    func cleanup() {
        effects.removeAll()
    }
}
