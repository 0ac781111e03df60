@_exported import CortadoCore
@_exported import CortadoGRPCCore

/// Why a `CortadoClient` call failed: the gRPC status code and message the server (or the
/// transport: UNAVAILABLE, DEADLINE_EXCEEDED) ended it with, or INTERNAL for an answer the
/// client cannot read.
public struct CortadoClientError: Error, Sendable, Equatable, CustomStringConvertible {
    public var code: GRPCStatus.Code
    public var message: String

    public init(code: GRPCStatus.Code, message: String) {
        self.code = code
        self.message = message
    }

    init(_ status: GRPCStatus) {
        self.init(code: status.code, message: status.message)
    }

    public var description: String { message.isEmpty ? code.description : "\(code): \(message)" }
}
