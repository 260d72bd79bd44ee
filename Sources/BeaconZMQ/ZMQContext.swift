internal import CBeaconZMQ
import Synchronization

/// A libzmq context: the owner of I/O threads and of every socket made from it.
///
/// A context is thread-safe. It ends with ``terminate()``, once its sockets are closed, or when
/// the last reference to it (sockets hold one) goes away. ``shutdown()`` makes blocking calls on
/// its sockets fail with `ETERM`, so that their owning threads can close them.
public final class ZMQContext: @unchecked Sendable {
    let handle: UnsafeMutableRawPointer
    private let isTerminated = Atomic<Bool>(false)

    /// Creates a context.
    /// - Parameter ioThreads: the number of libzmq I/O threads (1 is right below ~1 GB/s).
    /// - Throws: ``ZMQError`` when libzmq cannot create the context.
    public init(ioThreads: Int32 = 1) throws(ZMQError) {
        guard let handle = zmq_ctx_new() else {
            throw ZMQError(code: zmq_errno(), operation: "zmq_ctx_new")
        }
        self.handle = handle
        try zmqCall("zmq_ctx_set(IO_THREADS)") { zmq_ctx_set(handle, ZMQ_IO_THREADS, ioThreads) }
    }

    /// Makes every blocking call on this context's sockets return `ETERM`. Idempotent.
    public func shutdown() {
        _ = zmq_ctx_shutdown(handle)
    }

    /// Ends the context now: waits until what its closed sockets still hold is sent (each
    /// socket's linger period at most), and stops its I/O threads. Every socket made from it must
    /// be closed first, or this waits for ever. Idempotent; otherwise the context ends when the
    /// last reference to it goes.
    public func terminate() {
        guard !isTerminated.exchange(true, ordering: .acquiringAndReleasing) else { return }
        while zmq_ctx_term(handle) == -1 && zmq_errno() == EINTR {}
    }

    deinit {
        // All sockets hold a reference to the context, so none is open here; term cannot block.
        terminate()
    }

    /// The libzmq library version as `(major, minor, patch)`.
    public static var version: (major: Int32, minor: Int32, patch: Int32) {
        var major: Int32 = 0, minor: Int32 = 0, patch: Int32 = 0
        zmq_version(&major, &minor, &patch)
        return (major, minor, patch)
    }
}
