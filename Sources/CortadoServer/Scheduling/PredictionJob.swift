import CortadoCore
import CortadoGRPC
import Foundation

/// One prediction call split into the steps a batch runs separately: read its rows (decode
/// and check, on a worker), and answer from the rows' results. The dynamic batcher runs the
/// rows of several jobs as one model execution and hands each job its share of the results.
struct PredictionJob {
    let call: GRPCServerCall
    /// Decodes and checks the request: one feature provider per row.
    let rows: () throws -> [MLFeatureProvider]
    /// Encodes the response from the results of this job's rows, in row order.
    let encode: ([MLFeatureProvider]) throws -> [UInt8]
    /// Whether `encode` leaves `GRPCMessageWriter.prefixLength` bytes free in front of the
    /// message for the frame prefix (then the answer is framed in place).
    var prefixReserved = false
    /// Told once how the call ended and how long it took (metrics).
    let observe: (GRPCStatus.Code, UInt64) -> Void

    /// Answers the call with an error, counted for the model.
    func fail(_ status: GRPCStatus, statistics: ServedModelStatistics) {
        call.fail(status)
        let total = DispatchTime.now().uptimeNanoseconds - call.receivedAt
        statistics.recordFailure(total: total)
        observe(status.code, total)
    }

    /// The status a job gets without running: the client left, or the deadline passed while it
    /// waited; nil when it should run.
    func skipReason(queued: UInt64, now: UInt64 = DispatchTime.now().uptimeNanoseconds) -> GRPCStatus? {
        if call.isCancelled { return GRPCStatus(.cancelled, "the client cancelled the call") }
        if let deadline = call.deadline, now >= deadline {
            return GRPCStatus(.deadlineExceeded, "the deadline passed while the request waited \(queued / 1000) µs in the queue")
        }
        return nil
    }
}

/// What a job's `rows` step decoded, kept for its `encode` step (same call, one thread at a
/// time: the steps run in order on workers).
final class JobState<T>: @unchecked Sendable {
    var value: T?
    init() {}
}
