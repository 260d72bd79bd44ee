import ArgumentParser
import BeaconProtocol
import BeaconWire
import Foundation
import Synchronization

/// The signal that interrupted `pub` (SIGINT or SIGTERM), or 0.
let pubInterruption = Atomic<Int32>(0)

extension Beacon {
    struct Pub: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Publish writes read from standard input, as fast as the daemon accepts them.",
            discussion: """
                Each line is either KEY VALUE (the value JSON if it parses, else the rest of the line as \
                a string; text starting with {, [ or " must be valid JSON, and an integer must fit in \
                64 bits) or a JSON object {"key": …, "value": …}, or {"key": …, "op": "delete"} — the \
                form `beacon replay` prints. Lines are sent in order with up to --window in flight. \
                A line the daemon refuses (or that does not parse) is reported on stderr with its \
                number; the others still go (with --strict, reading stops there). At the end a summary \
                says what was committed, up to which line and revision. SIGINT or SIGTERM stops reading, \
                waits for the replies of the writes in flight and prints the summary, so that the input \
                can be resumed from the next line; the exit code is then 130 or 143. Every write \
                carries a write id: when the daemon stops or restarts, pub connects again (within \
                --timeout) and sends every unanswered line again, in order, each applied exactly \
                once. If no daemon answers within --timeout, or the journal was replaced, pub stops \
                (exit 69), sends nothing more, and the summary names the line to resume from. On a \
                terminal, progress is shown on stderr.
                """)
        @OptionGroup var connection: Connection
        @Option(name: .long, parsing: .unconditional, help: ArgumentHelp("Writes in flight at once.", valueName: "n")) var window = 1000
        @Flag(name: .long, help: "Stop reading at the first refused line (writes already in flight still complete).")
        var strict = false

        func validate() throws {
            if window < 1 { throw ValidationError("--window must be at least 1") }
        }

        func run() throws {
            // The same checks as every command first: a usage error, or no daemon at all, ends it here.
            _ = try connection.client()
            let writer: ResumableWriter
            do {
                writer = try ResumableWriter(window: window, patienceMilliseconds: connection.timeout, connect: connection.writerClient)
            } catch {
                throw CommandFailure("beacon: \(error)", code: Self.exitCode(error))
            }
            var committed = 0, refused = 0
            var firstRevision: UInt64 = 0, lastRevision: UInt64 = 0
            func record(_ outcomes: [ResumableWriter.Outcome]) {
                for outcome in outcomes {
                    switch outcome {
                    case .committed(_, let write):
                        committed += 1
                        if firstRevision == 0 { firstRevision = write.revision }
                        lastRevision = write.revision
                    case .refused(let line, let error):
                        refused += 1
                        warn("beacon: line \(line): \(error.message)")
                    }
                }
            }
            Self.catchInterruptions()
            var number = 0
            var progress = ProgressLine()
            var stopped: ResumableWriter.Stopped?
            var input = StandardInput.Lines()
            while pubInterruption.load(ordering: .relaxed) == 0, !(strict && refused > 0), let next = input.next() {
                number += 1
                progress.show("beacon pub: line \(number), \(committed) committed, \(refused) refused")
                let line: String
                switch next {
                case .text(let text): line = text
                case .tooLong, .notUTF8:
                    refused += 1
                    warn("beacon: line \(number): " + (next.isTooLong ? "longer than \(StandardInput.limit) bytes" : "not valid UTF-8"))
                    continue
                }
                if line.trimmingCharacters(in: .whitespaces).isEmpty { continue }
                switch Self.parse(line) {
                case .success(let op):
                    do {
                        record(try writer.submit(op, line: number))
                    } catch {
                        record(writer.takeAnswers())
                        stopped = error
                    }
                case .failure(let problem):
                    refused += 1
                    warn("beacon: line \(number): \(problem.message)")
                }
                if stopped != nil { break }
            }
            if stopped == nil {
                do {
                    record(try writer.finish())
                } catch {
                    record(writer.takeAnswers())
                    stopped = error
                }
            }
            progress.clear()
            let interruption = pubInterruption.load(ordering: .relaxed)
            var summary: [String: Any] = ["committed": committed, "refused": refused, "first_revision": firstRevision,
                                          "last_revision": lastRevision, "lines": number]
            var text = committed == 0 ? "committed nothing, refused \(refused)"
                : "committed \(committed) write\(committed == 1 ? "" : "s") (revisions \(firstRevision)–\(lastRevision)), refused \(refused)"
            if let stopped {
                // Every line before the first unanswered one is applied or reported; nothing
                // after it was sent once the writer stopped.
                let accounted = (writer.firstUnaccountedLine ?? number + 1) - 1
                summary["stopped"] = stopped.description
                summary["resume_from"] = accounted + 1
                text += "; stopped: \(stopped.description); every line through \(accounted) is applied or reported: resume from line \(accounted + 1)"
            } else if interruption != 0 {
                let name = interruption == SIGINT ? "SIGINT" : "SIGTERM"
                summary["interrupted"] = name
                text += "; stopped by \(name) after line \(number): resume from line \(number + 1)"
            } else if strict && refused > 0 {
                summary["stopped"] = true
                text += "; stopped at line \(number) (--strict): resume after fixing it"
            }
            if writer.resends > 0 { summary["resends"] = writer.resends }
            try connection.print(summary, text: text)
            if let stopped { throw ExitCode(Self.exitCode(stopped)) }
            if interruption != 0 { throw ExitCode(128 + interruption) }
            if refused > 0 { throw ExitCode(ExitCode32.invalidInput) }
        }

        /// The exit code of a stopped writer: the daemon's refusal of this peer, or unavailable.
        private static func exitCode(_ stopped: ResumableWriter.Stopped) -> Int32 {
            stopped.reason == .refused ? ExitCode32.permissionDenied : ExitCode32.unavailable
        }

        /// SIGINT and SIGTERM stop reading; no SA_RESTART, so that a read waiting for input returns.
        private static func catchInterruptions() {
            for signalNumber in [SIGINT, SIGTERM] {
                var action = sigaction()
                action.__sigaction_handler.sa_handler = { pubInterruption.store($0, ordering: .relaxed) }
                sigemptyset(&action.sa_mask)
                action.sa_flags = 0
                sigaction(signalNumber, &action, nil)
            }
            // A parent may have started this process with them blocked.
            var unblocked = sigset_t()
            sigemptyset(&unblocked)
            sigaddset(&unblocked, SIGINT)
            sigaddset(&unblocked, SIGTERM)
            pthread_sigmask(SIG_UNBLOCK, &unblocked, nil)
        }

        struct LineProblem: Error { let message: String }

        /// The write one input line asks for; a value over the protocol's 1 MiB is refused here,
        /// with its line, rather than sent.
        static func parse(_ line: String) -> Result<Beacon_V1_Request.OneOf_Op, LineProblem> {
            let parsed = parseUnchecked(line)
            // A value's encoding is no longer than its line (and a few bytes of framing).
            guard line.utf8.count > WireLimits.maxValueBytes - 64, case .success(.put(let put)) = parsed,
                  let encoded: [UInt8] = try? put.value.serializedBytes(), encoded.count > WireLimits.maxValueBytes else { return parsed }
            let size = encoded.count
            return .failure(LineProblem(message: "a value of \(size) bytes; the most is \(WireLimits.maxValueBytes)"))
        }

        private static func parseUnchecked(_ line: String) -> Result<Beacon_V1_Request.OneOf_Op, LineProblem> {
            if line.first == "{" {
                let record: Beacon_V1_Value
                do {
                    record = try ValueJSON.parse(line)
                } catch {
                    return .failure(LineProblem(message: "not a JSON object: \(error)"))
                }
                guard case .mapValue(let fields)? = record.kind else { return .failure(LineProblem(message: "not a JSON object")) }
                guard case .stringValue(let key)? = fields.entries["key"]?.kind else {
                    return .failure(LineProblem(message: "no \"key\" string"))
                }
                var op = "put"
                if let given = fields.entries["op"] {
                    guard case .stringValue(let name)? = given.kind else { return .failure(LineProblem(message: "\"op\" is not a string")) }
                    op = name
                }
                var ifVersion: UInt64?
                if let given = fields.entries["if_version"] {
                    guard case .intValue(let version)? = given.kind, version >= 0 else {
                        return .failure(LineProblem(message: "\"if_version\" is not a version number"))
                    }
                    ifVersion = UInt64(version)
                }
                switch op {
                case "put":
                    guard let value = fields.entries["value"] else { return .failure(LineProblem(message: "no \"value\" for \(key)")) }
                    return .success(.put(.with {
                        $0.key = key
                        $0.value = value
                        if let ifVersion { $0.ifVersion = ifVersion }
                    }))
                case "delete", "expire":
                    return .success(.delete(.with {
                        $0.key = key
                        if let ifVersion { $0.ifVersion = ifVersion }
                    }))
                case let other:
                    return .failure(LineProblem(message: "unknown op \"\(other)\" (put or delete)"))
                }
            }
            let parts = line.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
            guard parts.count == 2 else { return .failure(LineProblem(message: "expected KEY VALUE")) }
            let text = String(parts[1])
            do {
                let value = try ValueJSON.parseLenient(text)
                return .success(.put(.with { $0.key = String(parts[0]); $0.value = value }))
            } catch {
                return .failure(LineProblem(message: "not valid JSON: \(error)"))
            }
        }
    }
}
