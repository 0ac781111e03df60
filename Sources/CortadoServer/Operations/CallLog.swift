import Foundation
import Logging

/// One log line per finished prediction call (`cortado serve --log-calls`), at info level:
/// `message` "call", with `request_id`, `model`, `version`, `service`, `status` (the gRPC
/// code's name, also for REST calls), `latency_ms` (from the complete request to its answer,
/// as the metrics' histograms count it) and, for failures, `error`. The request id is the
/// client's `x-request-id` (gRPC metadata or HTTP header) when it sent one, so a call can be
/// followed across services; otherwise one this process made up (unique in the process,
/// with a random prefix per process).
public final class CallLog: @unchecked Sendable {
    private let logger: Logger
    private let prefix = String(UInt32.random(in: 0 ... .max), radix: 16)
    private let lock = NSLock()
    private var issued: UInt64 = 0

    public init(logger: Logger) {
        self.logger = logger
    }

    func record(requestID: String?, model: String, version: String, service: String, status: ServeStatus.Code, error: String = "",
                nanoseconds: UInt64) {
        var fields: Logger.Metadata = [
            "request_id": .string(requestID ?? nextID()),
            "model": .string(model),
            "version": .string(version),
            "service": .string(service),
            "status": .string(status.description),
            "latency_ms": .stringConvertible((Double(nanoseconds) / 1e3).rounded() / 1e3),
        ]
        if status != .ok { fields["error"] = .string(error.isEmpty ? status.description : error) }
        logger.info("call", metadata: fields)
    }

    private func nextID() -> String {
        let n = lock.withLock { issued += 1; return issued }
        return "\(prefix)-\(n)"
    }
}
