import BeaconProtocol
import BeaconTestSupport
import BeaconWire
import Foundation
import Testing

@Suite(.timeLimit(.minutes(4)), .offThePool)
struct SubscriptionAccountingTests {
    /// A subscription to every key is granted as one topic per first byte; libzmq reports those
    /// topics when the connection closes.
    @Test func subscribingToEverythingAgainAndAgainNeverReachesThePeersLimit() throws {
        let dir = try temporaryDirectory()
        let config = dir + "/beacond.conf"
        try "subscriptions_per_peer = 4\n".write(toFile: config, atomically: true, encoding: .utf8)
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state",
                                       extraArguments: ["--config", config])
        defer { daemon.stop() }
        let writer = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
        for round in 0..<6 {
            let reader = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
            try reader.subscribe("")
            var received = false
            let deadline = Date().addingTimeInterval(20)
            while !received && Date() < deadline {
                _ = try writer.put("acct.k", .with { $0.intValue = Int64(round) })
                while let publication = try reader.receivePublication(timeoutMilliseconds: 50) {
                    if case .diff(let diff) = publication, diff.event.change.key == "acct.k" { received = true; break }
                }
            }
            #expect(received, "round \(round): the subscriber to every key received nothing: \(daemon.stderr.suffix(600))")
        }
    }
}
