/// The request a prediction job answers, whatever carried it: a gRPC call, or an HTTP/1.1
/// request of the REST port. Scheduling needs only this: when it arrived, whether its client
/// still waits, and how to answer (from any thread, once). Each protocol's side conforms its
/// own call type (`GRPCServerCall+PredictionCall.swift`, `RESTService.swift`) and maps
/// `ServeStatus` to its wire form there.
protocol PredictionCall: AnyObject, Sendable {
    /// When the request was complete, in `DispatchTime` nanoseconds.
    var receivedAt: UInt64 { get }
    /// When the client stops waiting, in `DispatchTime` nanoseconds; nil: no deadline.
    var deadline: UInt64? { get }
    var isCancelled: Bool { get }
    /// The client's `x-request-id` (gRPC metadata or HTTP header), for the call log.
    var requestID: String? { get }
    /// The client's W3C `traceparent` (gRPC metadata or HTTP header), for `CallTracer`.
    var traceParent: String? { get }
    func fail(_ status: ServeStatus)
    /// Answers with an encoded message (as the job's `encode` made it).
    func respond(_ message: [UInt8])
}
