import Foundation

/// Request counters and latency histograms per model, service and status, written in the
/// Prometheus text format. Gauges (queue depth, loaded models, connections) are read at
/// scrape time from the objects that own them.
public final class ServerMetrics: @unchecked Sendable {
    /// Histogram bucket upper bounds, in seconds.
    public static let buckets: [Double] = [0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]

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
    struct SeriesKey: Hashable { var model: String; var service: String }

    /// The counters and the latency histogram of one model and service. A caller that
    /// observes the same pair on every call keeps its series (`series(model:service:)`) and
    /// records into it without looking the strings up again.
    public final class Series: @unchecked Sendable {
        let model: String
        let service: String
        private let lock = NSLock()
        private var codes = [UInt64](repeating: 0, count: ServeStatus.Code.allCases.count)
        private var histogram = Histogram()

        init(model: String, service: String) {
            self.model = model
            self.service = service
        }

        public func observe(code: ServeStatus.Code, seconds: Double) {
            let bucket = ServerMetrics.buckets.firstIndex(where: { seconds <= $0 })
            lock.lock()
            codes[code.rawValue] += 1
            histogram.record(seconds, bucket: bucket)
            lock.unlock()
        }

        var snapshot: (codes: [UInt64], histogram: Histogram) { lock.withLock { (codes, histogram) } }
    }

    private let lock = NSLock()
    private var series: [SeriesKey: Series] = [:]
    /// Where every counted prediction call is also logged (`--log-calls`); nil: not logged.
    /// Set before the server starts.
    public var callLog: CallLog?
    /// Per-call traces (`--trace-file`); nil when off.
    public var tracer: CallTracer?

    public init() {}

    /// The series of a model and service, created on first use.
    public func series(model: String, service: String) -> Series {
        let key = SeriesKey(model: model, service: service)
        return lock.withLock {
            if let s = series[key] { return s }
            let s = Series(model: model, service: service)
            series[key] = s
            return s
        }
    }

    public func observe(model: String, service: String, code: ServeStatus.Code, seconds: Double) {
        series(model: model, service: service).observe(code: code, seconds: seconds)
    }

    /// Requests counted so far for a model and status (tests and summaries).
    public func count(model: String, code: ServeStatus.Code) -> UInt64 {
        let all = lock.withLock { Array(series.values) }
        return all.filter { $0.model == model }.reduce(0) { $0 + $1.snapshot.codes[code.rawValue] }
    }

    static func label(_ s: String) -> String {
        s.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"").replacingOccurrences(of: "\n", with: "\\n")
    }

    /// The exposition text, with gauges supplied by the caller as (name, help, labels, value).
    public func render(gauges: [(name: String, help: String, samples: [(labels: String, value: Double)])]) -> String {
        let all = lock.withLock { Array(series.values) }.sorted { ($0.model, $0.service) < ($1.model, $1.service) }
        let snapshots = all.map { ($0, $0.snapshot) }
        var out = "# HELP cortado_requests_total Calls answered, by model, service and gRPC status.\n# TYPE cortado_requests_total counter\n"
        for (s, snapshot) in snapshots {
            for code in ServeStatus.Code.allCases where snapshot.codes[code.rawValue] > 0 {
                out += "cortado_requests_total{model=\"\(Self.label(s.model))\",service=\"\(s.service)\",code=\"\(code)\"} \(snapshot.codes[code.rawValue])\n"
            }
        }
        out += "# HELP cortado_request_duration_seconds Time from a complete request to its answer, by model and service.\n# TYPE cortado_request_duration_seconds histogram\n"
        for (s, snapshot) in snapshots where snapshot.histogram.count > 0 {
            let h = snapshot.histogram
            let labels = "model=\"\(Self.label(s.model))\",service=\"\(s.service)\""
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
