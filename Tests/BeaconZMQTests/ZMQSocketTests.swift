import BeaconZMQ
import Foundation
import Testing
import BeaconTestSupport

private func temporaryDirectory() throws -> String {
    try makeTestDirectory("bzmq")
}

@Suite(.timeLimit(.minutes(3)), .offThePool)
struct ZMQSocketTests {
    @Test func pubSubDeliversTwoFrameMessagesByTopicPrefix() throws {
        let dir = try temporaryDirectory()
        let context = try ZMQContext()
        let pub = try ZMQSocket(context, type: .pub)
        try pub.bind("ipc://\(dir)/pub")
        let sub = try ZMQSocket(context, type: .sub)
        try sub.connect("ipc://\(dir)/pub")
        try sub.subscribe(Array("net.".utf8))
        // Subscriptions travel asynchronously: publish until the first one arrives.
        var first: [ZMQMessage]?
        for _ in 0..<200 where first == nil {
            try pub.send(frames: [ZMQMessage(string: "audio.volume"), ZMQMessage(string: "ignored")])
            try pub.send(frames: [ZMQMessage(string: "net.link"), ZMQMessage(bytes: [1, 2, 3])])
            first = try sub.receiveMessage(flags: .dontWait)
            if first == nil { usleep(5000) }
        }
        let frames = try #require(first)
        #expect(frames.count == 2)
        #expect(frames[0].string == "net.link")
        #expect(frames[1].bytes == [1, 2, 3])
        #expect(frames[0].hasMore && !frames[1].hasMore)
    }

    /// The daemon ends its context when it stops, so that the replies its closed sockets still
    /// hold are sent before the process exits.
    @Test func terminatingAContextSendsWhatItsClosedSocketsStillHold() throws {
        let dir = try temporaryDirectory()
        let receiving = try ZMQContext()
        let pull = try ZMQSocket(receiving, type: .pull)
        try pull.bind("ipc://\(dir)/pull")
        let sending = try ZMQContext()
        let push = try ZMQSocket(sending, type: .push, linger: 60_000)
        try push.connect("ipc://\(dir)/pull")
        for n in 0..<100 { try push.send(Array("m\(n)".utf8)) }
        push.close()
        sending.terminate()
        sending.terminate()  // idempotent, as is the end its deinit makes
        // Sent, not necessarily read by the receiving side yet: waited for, up to 30 s.
        try pull.setReceiveTimeout(milliseconds: 30_000)
        var received: [String] = []
        while received.count < 100, let frames = try? pull.receiveMessage() {
            received.append(frames[0].string)
        }
        #expect(received == (0..<100).map { "m\($0)" }, "terminate returned before its sockets' messages were sent")
    }

    @Test func routerRepliesThroughTheEnvelopeADealerSent() throws {
        let context = try ZMQContext()
        let router = try ZMQSocket(context, type: .router)
        try router.bind("tcp://127.0.0.1:*")
        let endpoint = try router.lastEndpoint
        #expect(endpoint.hasPrefix("tcp://127.0.0.1:"))
        let dealer = try ZMQSocket(context, type: .dealer)
        try dealer.connect(endpoint)
        try dealer.send(Array("ping".utf8))
        let request = try #require(try router.receiveMessage())
        #expect(request.count == 2)
        #expect(request[1].string == "ping")
        try router.send(frames: [request[0], ZMQMessage(string: "pong")])
        let reply = try #require(try dealer.receiveMessage())
        #expect(reply.map(\.string) == ["pong"])
    }

    @Test func pollerTimesOutThenReportsReadableSocketAndDescriptor() throws {
        let context = try ZMQContext()
        let pull = try ZMQSocket(context, type: .pull)
        try pull.bind("inproc://poll-test")
        let push = try ZMQSocket(context, type: .push)
        try push.connect("inproc://poll-test")
        var ends: [Int32] = [0, 0]
        #expect(pipe(&ends) == 0)
        defer { close(ends[0]); close(ends[1]) }
        let poller = ZMQPoller()
        let socketIndex = poller.add(pull)
        let pipeIndex = poller.add(fileDescriptor: ends[0])
        #expect(try poller.poll(timeoutMilliseconds: 10) == 0)
        try push.send([42])
        var byte: UInt8 = 7
        #expect(write(ends[1], &byte, 1) == 1)
        #expect(try poller.poll(timeoutMilliseconds: 1000) == 2)
        #expect(poller.readyEvents(socketIndex).contains(.readable))
        #expect(poller.readyEvents(pipeIndex).contains(.readable))
        #expect(try pull.receiveMessage()?.first?.bytes == [42])
    }

    @Test func dontWaitReportsAnEmptyQueueInsteadOfThrowing() throws {
        let context = try ZMQContext()
        let pull = try ZMQSocket(context, type: .pull)
        try pull.bind("inproc://empty")
        #expect(try pull.receiveMessage(flags: .dontWait) == nil)
    }

    @Test func errorsCarryTheOperationAndErrno() throws {
        let context = try ZMQContext()
        let socket = try ZMQSocket(context, type: .dealer)
        let error = try #require(throws: ZMQError.self) { try socket.connect("bogus://nowhere") }
        #expect(error.operation == "zmq_connect(bogus://nowhere)")
        #expect(error.code == EPROTONOSUPPORT)
        socket.close()
        socket.close()  // idempotent
        #expect(throws: ZMQError.self) { try socket.send([1]) }
    }

    @Test func monitorReportsListeningAndAcceptedConnections() throws {
        let dir = try temporaryDirectory()
        let context = try ZMQContext()
        let router = try ZMQSocket(context, type: .router)
        let events = try router.monitor(events: [.listening, .accepted], name: "monitor-\(UUID().uuidString)")
        try router.bind("ipc://\(dir)/mon")
        let listening = try #require(try events.receiveEvent())
        #expect(listening.kind == .listening)
        #expect(listening.endpoint == "ipc://\(dir)/mon")
        let dealer = try ZMQSocket(context, type: .dealer)
        try dealer.connect("ipc://\(dir)/mon")
        let accepted = try #require(try events.receiveEvent())
        #expect(accepted.kind == .accepted)
    }

    @Test func largeZeroCopyFramesArriveIntact() throws {
        let context = try ZMQContext()
        let pull = try ZMQSocket(context, type: .pull)
        try pull.bind("inproc://large")
        let push = try ZMQSocket(context, type: .push)
        try push.connect("inproc://large")
        let payload = (0..<1_000_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        try push.send(ZMQMessage(bytes: payload))
        let received = try #require(try pull.receiveMessage()?.first)
        #expect(received.count == payload.count)
        #expect(received.bytes == payload)
    }

    @Test func framesFilledInPlaceArriveAsWrittenAndDontWaitReportsAFullQueue() throws {
        let context = try ZMQContext()
        let pull = try ZMQSocket(context, type: .pull)
        try pull.bind("inproc://filled")
        let push = try ZMQSocket(context, type: .push)
        try push.connect("inproc://filled")
        // Sizes on both sides of libzmq's inline limit (33 bytes), an empty frame, then a second
        // frame of the same message.
        for count in [0, 1, 33, 34, 4096] {
            #expect(try push.send(count: count, flags: .sendMore) { buffer in
                for index in buffer.indices { buffer[index] = UInt8(truncatingIfNeeded: index &* 7 &+ count) }
            })
            #expect(try push.send(count: 3) { $0.copyBytes(from: [9, 8, 7]) })
            let frames = try #require(try pull.receiveMessage())
            #expect(frames.count == 2)
            #expect(frames[0].bytes == (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ count) })
            #expect(frames[1].bytes == [9, 8, 7])
        }

        // With no peer a PUSH socket cannot queue: `.dontWait` says so instead of blocking or
        // throwing, and the frame is released (nothing leaks, nothing is sent later).
        let lonely = try ZMQSocket(context, type: .push)
        try lonely.bind("inproc://nobody")
        #expect(try lonely.send(count: 100, flags: .dontWait) { $0.initializeMemory(as: UInt8.self, repeating: 1) } == false)
    }
}
