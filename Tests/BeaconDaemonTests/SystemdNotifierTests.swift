import BeaconDaemon
import BeaconTestSupport
import Foundation
import Testing

/// A datagram socket in systemd's place; returns every notification that arrives until none
/// has for `quiet`.
private final class DatagramSink {
    let path: String
    private let fd: Int32

    init(directory: String) throws {
        path = directory + "/notify.sock"
        fd = try #require(boundDatagramSocket(at: path), "cannot bind \(path)")
    }

    deinit { close(fd) }

    func drain(quiet milliseconds: Int) -> [String] {
        var timeout = timeval(tv_sec: 0, tv_usec: Int(milliseconds) * 1000)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var messages: [String] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = recv(fd, &buffer, buffer.count, 0)
            guard count > 0 else { return messages }
            messages.append(String(decoding: buffer[0..<count], as: UTF8.self))
        }
    }
}

private struct OpeningFailed: Error {}

@Suite(.timeLimit(.minutes(1)))
struct SystemdNotifierTests {
    @Test func aSlowStartUpStepKeepsExtendingTheStartTimeoutUntilItEnds() throws {
        let sink = try DatagramSink(directory: try temporaryDirectory())
        let notifier = try #require(SystemdNotifier(environment: ["NOTIFY_SOCKET": sink.path]))

        let result = notifier.extendingStartTimeout("checking and opening the journal", every: .milliseconds(40)) {
            usleep(300_000)
            return 42
        }
        #expect(result == 42)
        let messages = sink.drain(quiet: 150)
        // About one every 40 ms for 300 ms; a loaded machine may fit fewer in.
        #expect(messages.count >= 3, "\(messages)")
        #expect(messages.count <= 8, "\(messages)")
        for message in messages {
            #expect(message.hasPrefix("EXTEND_TIMEOUT_USEC=120000\nSTATUS=checking and opening the journal ("), "\(message)")
        }

        // A quick step sends nothing; an error passes through, and the extensions stop with it.
        #expect(notifier.extendingStartTimeout("loading", every: .milliseconds(200)) { "quick" } == "quick")
        #expect(throws: OpeningFailed.self) {
            try notifier.extendingStartTimeout("opening", every: .milliseconds(40)) { () throws(OpeningFailed) in
                usleep(100_000)
                throw OpeningFailed()
            }
        }
        let afterFailure = sink.drain(quiet: 200)
        #expect(afterFailure.count >= 1 && afterFailure.count <= 3, "\(afterFailure)")
        #expect(afterFailure.allSatisfy { $0.contains("STATUS=opening (") })
    }
}
