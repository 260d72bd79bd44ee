// The client library's example (docs/CLIENT.md): a process that derives a value from two remote signals and prints it
// from an effect whenever another process (`beacon set demo.width 4`) changes them.
import Beacon
import Foundation

let client = try BeaconClient()  // finds beacond like the `beacon` tool; updates on the main queue

let width = try client.signal("demo.width", as: Int.self, default: 0)
let height = try client.signal("demo.height", as: Int.self, default: 0)
let area = computed { width.value * height.value }

let printer = effect {
    emit("area = \(area.value)  (\(width.value) × \(height.value), \(client.connection.value))")
}

dispatchMain()

/// Writes one line to standard output at once (no buffering: another process reads it live).
func emit(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}
