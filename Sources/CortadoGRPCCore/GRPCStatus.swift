/// The status a gRPC call ends with: a code and a human-readable message, sent to the
/// client in the `grpc-status` and `grpc-message` trailers.
public struct GRPCStatus: Error, Sendable, Equatable, CustomStringConvertible {
    /// The canonical gRPC status codes (the numbers travel on the wire).
    public enum Code: Int, Sendable, CaseIterable, CustomStringConvertible {
        case ok = 0
        case cancelled = 1
        case unknown = 2
        case invalidArgument = 3
        case deadlineExceeded = 4
        case notFound = 5
        case alreadyExists = 6
        case permissionDenied = 7
        case resourceExhausted = 8
        case failedPrecondition = 9
        case aborted = 10
        case outOfRange = 11
        case unimplemented = 12
        case `internal` = 13
        case unavailable = 14
        case dataLoss = 15
        case unauthenticated = 16

        /// The number as `grpc-status` carries it.
        public var number: Int32 { Int32(rawValue) }

        public var description: String {
            switch self {
            case .ok: return "OK"
            case .cancelled: return "CANCELLED"
            case .unknown: return "UNKNOWN"
            case .invalidArgument: return "INVALID_ARGUMENT"
            case .deadlineExceeded: return "DEADLINE_EXCEEDED"
            case .notFound: return "NOT_FOUND"
            case .alreadyExists: return "ALREADY_EXISTS"
            case .permissionDenied: return "PERMISSION_DENIED"
            case .resourceExhausted: return "RESOURCE_EXHAUSTED"
            case .failedPrecondition: return "FAILED_PRECONDITION"
            case .aborted: return "ABORTED"
            case .outOfRange: return "OUT_OF_RANGE"
            case .unimplemented: return "UNIMPLEMENTED"
            case .internal: return "INTERNAL"
            case .unavailable: return "UNAVAILABLE"
            case .dataLoss: return "DATA_LOSS"
            case .unauthenticated: return "UNAUTHENTICATED"
            }
        }
    }

    public var code: Code
    public var message: String

    /// The name of a `grpc-status` number as it travels (`UNAVAILABLE`), or `STATUS_<n>` for a
    /// number outside the canonical codes.
    public static func name(ofCode number: Int32) -> String {
        Code(rawValue: Int(number))?.description ?? "STATUS_\(number)"
    }

    /// The status a peer sent as `grpc-status` and `grpc-message` (already percent-decoded);
    /// a number outside the canonical codes is UNKNOWN, as gRPC's clients read it.
    public init(number: Int32, message: String) {
        if let code = Code(rawValue: Int(number)) {
            self.init(code, message)
        } else {
            self.init(.unknown, message.isEmpty ? "grpc-status \(number)" : "grpc-status \(number): \(message)")
        }
    }

    public init(_ code: Code, _ message: String = "") {
        self.code = code
        self.message = message
    }

    public static let ok = GRPCStatus(.ok)

    public var description: String { message.isEmpty ? code.description : "\(code): \(message)" }

    /// `grpc-message` is percent-encoded: bytes outside printable ASCII, and '%', become %XX.
    public static func percentEncode(_ message: String) -> String {
        var out = ""
        out.reserveCapacity(message.utf8.count)
        let hex: [Character] = Array("0123456789ABCDEF")
        for byte in message.utf8 {
            if byte >= 0x20 && byte <= 0x7E && byte != UInt8(ascii: "%") {
                out.append(Character(Unicode.Scalar(byte)))
            } else {
                out.append("%")
                out.append(hex[Int(byte >> 4)])
                out.append(hex[Int(byte & 0xF)])
            }
        }
        return out
    }

    /// Reverses `percentEncode`; malformed escapes are kept as they are.
    public static func percentDecode(_ text: String) -> String {
        var bytes: [UInt8] = []
        let input = Array(text.utf8)
        var i = 0
        func hexValue(_ c: UInt8) -> UInt8? {
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
            case UInt8(ascii: "A")...UInt8(ascii: "F"): return c - UInt8(ascii: "A") + 10
            case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
            default: return nil
            }
        }
        while i < input.count {
            if input[i] == UInt8(ascii: "%"), i + 2 < input.count, let hi = hexValue(input[i + 1]), let lo = hexValue(input[i + 2]) {
                bytes.append(hi << 4 | lo)
                i += 3
            } else {
                bytes.append(input[i])
                i += 1
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
