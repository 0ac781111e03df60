import CortadoGRPC
import Foundation

/// Request counters and latency histograms per model, service and status, written in the
/// Prometheus text format. Gauges (queue depth, loaded models, connections) are read at
/// scrape time from the objects that own them.
public final class ServerMetrics: @unchecked Sendable {
    /// Histogram bucket upper bounds, in seconds.
    public static let buckets: [Double] = [0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]

    struct Key: Hashable { var model: String; var service: String; var code: GRPCStatus.Code }
    struct Histogram {
        var counts = [UInt64](repeating: 0, count: ServerMetrics.buckets.count)
        var sum = 0.0
        var count: UInt64 = 0
        mutating func record(_ seconds: Double, bucket: Int?) {
            if let bucket { counts[bucket] += 1 }
            sum += seconds
            count += 1
        }
    }
    struct HistogramKey: Hashable { var model: String; var service: String }

    private let lock = NSLock()
    private var requests: [Key: UInt64] = [:]
    private var latency: [HistogramKey: Histogram] = [:]

    public init() {}

    public func observe(model: String, service: String, code: GRPCStatus.Code, seconds: Double) {
        lock.lock()
        requests[Key(model: model, service: service, code: code), default: 0] += 1
        // In place: a copy out and back would reallocate the bucket array on every call.
        let bucket = Self.buckets.firstIndex(where: { seconds <= $0 })
        latency[HistogramKey(model: model, service: service), default: Histogram()].record(seconds, bucket: bucket)
        lock.unlock()
    }

    /// Requests counted so far for a model and status (tests and summaries).
    public func count(model: String, code: GRPCStatus.Code) -> UInt64 {
        lock.withLock { requests.filter { $0.key.model == model && $0.key.code == code }.values.reduce(0, +) }
    }

    static func label(_ s: String) -> String {
        s.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"").replacingOccurrences(of: "\n", with: "\\n")
    }

    /// The exposition text, with gauges supplied by the caller as (name, help, labels, value).
    public func render(gauges: [(name: String, help: String, samples: [(labels: String, value: Double)])]) -> String {
        let (requests, latency) = lock.withLock { (self.requests, self.latency) }
        var out = "# HELP cortado_requests_total Calls answered, by model, service and gRPC status.\n# TYPE cortado_requests_total counter\n"
        for (key, value) in requests.sorted(by: { ($0.key.model, $0.key.service, $0.key.code.rawValue) < ($1.key.model, $1.key.service, $1.key.code.rawValue) }) {
            out += "cortado_requests_total{model=\"\(Self.label(key.model))\",service=\"\(key.service)\",code=\"\(key.code)\"} \(value)\n"
        }
        out += "# HELP cortado_request_duration_seconds Time from a complete request to its answer, by model and service.\n# TYPE cortado_request_duration_seconds histogram\n"
        for (key, h) in latency.sorted(by: { ($0.key.model, $0.key.service) < ($1.key.model, $1.key.service) }) {
            let labels = "model=\"\(Self.label(key.model))\",service=\"\(key.service)\""
            var cumulative: UInt64 = 0
            for (i, bound) in Self.buckets.enumerated() {
                cumulative += h.counts[i]
                out += "cortado_request_duration_seconds_bucket{\(labels),le=\"\(bound)\"} \(cumulative)\n"
            }
            out += "cortado_request_duration_seconds_bucket{\(labels),le=\"+Inf\"} \(h.count)\n"
            out += "cortado_request_duration_seconds_sum{\(labels)} \(h.sum)\n"
            out += "cortado_request_duration_seconds_count{\(labels)} \(h.count)\n"
        }
        for gauge in gauges {
            out += "# HELP \(gauge.name) \(gauge.help)\n# TYPE \(gauge.name) gauge\n"
            for sample in gauge.samples {
                out += sample.labels.isEmpty ? "\(gauge.name) \(sample.value)\n" : "\(gauge.name){\(sample.labels)} \(sample.value)\n"
            }
        }
        return out
    }
}
