import Testing
@testable import BeaconSignals

@Suite("Core: the contract example", .timeLimit(.minutes(3)))
struct ContractTests {
    @Test("The issue's example prints c=9, c=7, c=5")
    func contractExample() {
        var printed: [String] = []
        let a = MutableSignal(3)
        let b = MutableSignal(6)
        let c = computed { a.value + b.value }
        let e = effect { printed.append("c=\(c.value)") }
        a.value = 1
        batch { a.value = 2; b.value = 3 }
        let seen = untracked { a.value }
        #expect(printed == ["c=9", "c=7", "c=5"])
        #expect(seen == 2)
        #expect(a.peek() == 2)
        e.dispose()
        a.value = 10
        #expect(printed.count == 3)
    }
}
