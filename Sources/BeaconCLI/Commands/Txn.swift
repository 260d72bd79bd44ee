import ArgumentParser
import BeaconProtocol
import BeaconWire
import BeaconZMQ
import Foundation

extension Beacon {
    struct Txn: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Apply writes read from standard input as one transaction, at one revision.",
            discussion: """
                Each line is an operation in `beacon pub`'s forms: KEY VALUE, {"key": …, "value": …} \
                or {"key": …, "op": "delete"}; a JSON line may add "if_version": N, a condition on \
                that key's version (0: absent). Either every condition holds and every operation \
                applies at one revision, or nothing does (exit 3 when a condition fails).
                """)
        @OptionGroup var connection: Connection
        func run() throws {
            var ops: [Beacon_V1_TxnOp] = []
            var number = 0
            var input = StandardInput.Lines()
            while let next = input.next() {
                number += 1
                let line: String
                switch next {
                case .text(let text): line = text
                case .tooLong: throw CommandFailure("beacon: line \(number): longer than \(StandardInput.limit) bytes; nothing applied", code: ExitCode32.invalidInput)
                case .notUTF8: throw CommandFailure("beacon: line \(number): not valid UTF-8; nothing applied", code: ExitCode32.invalidInput)
                }
                if line.trimmingCharacters(in: .whitespaces).isEmpty { continue }
                switch Pub.parse(line) {
                case .success(.put(let put)): ops.append(.with { $0.put = put })
                case .success(.delete(let delete)): ops.append(.with { $0.delete = delete })
                case .success: throw CommandFailure("beacon: line \(number): not a put or a delete", code: ExitCode32.invalidInput)
                case .failure(let problem): throw CommandFailure("beacon: line \(number): \(problem.message); nothing applied", code: ExitCode32.invalidInput)
                }
            }
            guard !ops.isEmpty else { throw CommandFailure("beacon: no operations on standard input", code: ExitCode32.usage) }
            guard ops.count <= WireLimits.maxTxnOps else {
                throw CommandFailure("beacon: \(ops.count) operations on standard input; a transaction holds at most \(WireLimits.maxTxnOps) (beacon pub applies lines one by one)",
                    code: ExitCode32.invalidInput)
            }
            let reply = try connection.write(.txn(.with { $0.ops = ops }))
            try connection.print(["operations": ops.count, "revision": reply.revision],
                             text: "applied \(ops.count) operation\(ops.count == 1 ? "" : "s") at revision \(reply.revision)")
        }
    }
}
