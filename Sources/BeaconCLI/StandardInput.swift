import BeaconProtocol
import Glibc

/// Standard input in bounded pieces: no input makes the tool hold more than a request can carry.
enum StandardInput {
    /// The longest line `pub` and `txn` read, and the most `set KEY -` reads: a request's limit.
    static let limit = WireLimits.maxRequestBytes

    /// All of standard input; `nil` when it is longer than `limit` bytes (reading stops there).
    static func all(limit: Int = limit) -> [UInt8]? {
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(STDIN_FILENO, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            if count <= 0 { return bytes }
            bytes.append(contentsOf: buffer[..<count])
            if bytes.count > limit { return nil }
        }
    }

    /// Reads standard input a line at a time, each at most `limit` bytes: a longer one is read
    /// to its end without being kept, and reported.
    struct Lines {
        /// One line of input.
        enum Line {
            case text(String)
            /// Longer than the limit: skipped.
            case tooLong
            /// Not UTF-8: keys and text values are UTF-8.
            case notUTF8
        }

        private var buffer = [UInt8](repeating: 0, count: 65536)
        private var start = 0
        private var end = 0
        private var finished = false

        /// The next line, without its newline; `nil` at the end of input, or when a signal
        /// interrupts the wait (SIGINT and SIGTERM end `pub`'s reading).
        mutating func next() -> Line? {
            var line: [UInt8] = []
            var tooLong = false
            while true {
                if start == end {
                    if finished { return line.isEmpty && !tooLong ? nil : finish(line, tooLong) }
                    let count = buffer.withUnsafeMutableBytes { read(STDIN_FILENO, $0.baseAddress, $0.count) }
                    guard count > 0 else {
                        finished = true
                        if count < 0 && errno == EINTR { return nil }
                        continue
                    }
                    start = 0
                    end = count
                }
                let newline = buffer[start..<end].firstIndex(of: UInt8(ascii: "\n"))
                let stop = newline ?? end
                if !tooLong {
                    if line.count + (stop - start) > StandardInput.limit {
                        tooLong = true
                        line = []
                    } else {
                        line.append(contentsOf: buffer[start..<stop])
                    }
                }
                start = newline.map { $0 + 1 } ?? end
                if newline != nil { return finish(line, tooLong) }
            }
        }

        private func finish(_ line: [UInt8], _ tooLong: Bool) -> Line {
            if tooLong { return .tooLong }
            guard let text = String(validating: line, as: UTF8.self) else { return .notUTF8 }
            return .text(text)
        }
    }
}

extension StandardInput.Lines.Line {
    var isTooLong: Bool { if case .tooLong = self { true } else { false } }
}
