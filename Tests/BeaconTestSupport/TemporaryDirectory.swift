import Foundation

/// The directory that holds every temporary directory of this test process
/// (`/tmp/beacon-tests-PID`); it is removed when the process exits, so that a run of the suite
/// leaves nothing behind (a daemon's journal, sockets and logs included).
private let testRoot: String = {
    let root = "/tmp/beacon-tests-\(getpid())"
    mkdir(root, 0o755)
    atexit { removeTestRoot() }
    return root
}()

private func removeTestRoot() {
    try? FileManager.default.removeItem(atPath: "/tmp/beacon-tests-\(getpid())")
}

/// A new, empty directory for one test's files (`prefix` names it, for whoever reads a path in a
/// failure), under this process's root: gone when the process exits. The path stays short, for
/// the ipc socket paths made in it.
/// - Throws: when the directory cannot be made.
public func makeTestDirectory(_ prefix: String) throws -> String {
    var template = Array("\(testRoot)/\(prefix)-XXXXXX".utf8CString)
    guard let path = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
        throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)
    }
    return String(cString: path)
}
