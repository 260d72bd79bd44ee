import SwiftProtobuf

extension Beacon_V1_Value {
    /// Why a value from outside is unacceptable.
    public enum Problem: Error, Equatable, Sendable, CustomStringConvertible {
        case missing
        case tooDeep
        case tooLarge(bytes: Int)

        public var description: String {
            switch self {
            case .missing: "value has no type set (one of null, bool, int, double, string, bytes, list, map)"
            case .tooDeep: "value nests lists and maps deeper than \(WireLimits.maxValueDepth)"
            case .tooLarge(let bytes): "value is \(bytes) bytes encoded; the limit is \(WireLimits.maxValueBytes)"
            }
        }
    }

    /// Returns why this value may not be stored, or `nil` when it may.
    public func problem() -> Problem? {
        if let problem = structuralProblem() { return problem }
        let size = (try? serializedBytes() as [UInt8])?.count ?? Int.max
        return Self.sizeProblem(encodedBytes: size)
    }

    /// Returns why this value is malformed (no type, too deep), without checking its size.
    public func structuralProblem() -> Problem? {
        structuralProblem(depth: 0)
    }

    /// Returns `.tooLarge` when an encoded value of `encodedBytes` exceeds the limit.
    public static func sizeProblem(encodedBytes: Int) -> Problem? {
        encodedBytes > WireLimits.maxValueBytes ? .tooLarge(bytes: encodedBytes) : nil
    }

    private func structuralProblem(depth: Int) -> Problem? {
        guard let kind else { return .missing }
        switch kind {
        case .listValue(let list):
            if depth >= WireLimits.maxValueDepth { return .tooDeep }
            for item in list.items {
                if let problem = item.structuralProblem(depth: depth + 1) { return problem }
            }
        case .mapValue(let map):
            if depth >= WireLimits.maxValueDepth { return .tooDeep }
            for item in map.entries.values {
                if let problem = item.structuralProblem(depth: depth + 1) { return problem }
            }
        default:
            break
        }
        return nil
    }
}
