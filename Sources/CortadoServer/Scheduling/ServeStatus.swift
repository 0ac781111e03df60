import CortadoCore
import Foundation

/// How a call ended, in the serving core's own terms: what the repository, the scheduler and
/// the dynamic batcher throw and what a `PredictionCall` is failed with. Each codec maps it
/// to its wire form (the gRPC services to `ServeStatus`, the REST port to an HTTP status and a
/// JSON error body), so nothing below the codecs names a protocol.
///
/// The codes are the canonical status set (google.rpc.Code), numbered as it numbers them, so
/// a codec's mapping is one lookup and metrics index them by number.
public struct ServeStatus: Error, Sendable, Equatable, CustomStringConvertible {
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

        /// The code's canonical name (metrics labels, the call log, trace events).
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

    public init(_ code: Code, _ message: String = "") {
        self.code = code
        self.message = message
    }

    public var description: String { message.isEmpty ? code.description : "\(code): \(message)" }

    /// The status a client should see for any error: a `ServeStatus` as it is, one a codec's
    /// own status type converts (`ServeStatusConvertible`), a model error by its kind
    /// (bad features and unparsable input: INVALID_ARGUMENT; unsupported: UNIMPLEMENTED),
    /// anything else INTERNAL.
    public init(for error: any Error) {
        if let status = error as? ServeStatus {
            self = status
        } else if let convertible = error as? any ServeStatusConvertible {
            self = convertible.serveStatus
        } else if let error = error as? MLModelError {
            switch error.code {
            case .featureType, .parse: self.init(.invalidArgument, error.description)
            case .unsupported: self.init(.unimplemented, error.description)
            default: self.init(.internal, error.description)
            }
        } else {
            self.init(.internal, "\(error)")
        }
    }
}

/// An error of a codec's own that says which `ServeStatus` it stands for (the gRPC services'
/// `ServeStatus`), so errors thrown while a job decodes or encodes keep their code and
/// message when the scheduler answers the call with them.
public protocol ServeStatusConvertible: Error {
    var serveStatus: ServeStatus { get }
}
