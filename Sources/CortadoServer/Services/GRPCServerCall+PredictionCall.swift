import CortadoGRPC

/// A gRPC call as the call a prediction job answers: the serving core's statuses become gRPC
/// statuses here, with the same code and message.
extension GRPCServerCall: PredictionCall {
    var requestID: String? { metadata("x-request-id") }
    var traceParent: String? { metadata("traceparent") }

    func fail(_ status: ServeStatus) { fail(GRPCStatus(status)) }
}

extension GRPCStatus: ServeStatusConvertible {
    /// The serving core's status of the same code and message.
    public var serveStatus: ServeStatus { ServeStatus(ServeStatus.Code(rawValue: code.rawValue) ?? .unknown, message) }

    /// The gRPC status of the same code and message as `status`.
    init(_ status: ServeStatus) {
        self.init(GRPCStatus.Code(rawValue: status.code.rawValue) ?? .unknown, status.message)
    }
}
