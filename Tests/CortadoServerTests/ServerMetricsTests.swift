import CortadoGRPC
@testable import CortadoServer
import Foundation
import XCTest

/// The Prometheus text: counters per model, service and code; cumulative histogram buckets
/// whose +Inf bucket equals the count; gauges.
final class ServerMetricsTests: XCTestCase {
    /// `name{labels} value` lines of a metric, keyed by their label text.
    private func samples(_ text: String, _ name: String) -> [(labels: String, value: Double)] {
        text.split(separator: "\n").compactMap { line -> (String, Double)? in
            guard line.hasPrefix(name + "{") || line.hasPrefix(name + " ") else { return nil }
            let parts = line.split(separator: " ")
            guard let value = Double(parts.last!) else { return nil }
            let head = parts.dropLast().joined(separator: " ")
            let labels = head.firstIndex(of: "{").map { String(head[head.index(after: $0)..<head.index(before: head.endIndex)]) } ?? ""
            return (labels, value)
        }
    }

    func testCounters() {
        let metrics = ServerMetrics()
        metrics.observe(model: "m", service: "infer", code: .ok, seconds: 0.001)
        metrics.observe(model: "m", service: "infer", code: .ok, seconds: 0.002)
        metrics.observe(model: "m", service: "infer", code: .resourceExhausted, seconds: 0)
        metrics.observe(model: "a", service: "predict", code: .notFound, seconds: 0)
        XCTAssertEqual(metrics.count(model: "m", code: .ok), 2)
        XCTAssertEqual(metrics.count(model: "m", code: .resourceExhausted), 1)
        XCTAssertEqual(metrics.count(model: "a", code: .ok), 0)
        let text = metrics.render(gauges: [])
        XCTAssertTrue(text.contains("# TYPE cortado_requests_total counter\n"))
        let counters = samples(text, "cortado_requests_total")
        XCTAssertEqual(counters.map(\.labels), [
            "model=\"a\",service=\"predict\",code=\"NOT_FOUND\"",
            "model=\"m\",service=\"infer\",code=\"OK\"",
            "model=\"m\",service=\"infer\",code=\"RESOURCE_EXHAUSTED\"",
        ])
        XCTAssertEqual(counters.map(\.value), [1, 2, 1])
    }

    func testHistogramBucketsAreCumulative() {
        let metrics = ServerMetrics()
        // One per region: the first bucket, exactly on a bound (le is ≤), the middle, above the last bound.
        let observations = [0.00001, 0.0005, 0.0007, 0.3, 42.0]
        for s in observations { metrics.observe(model: "m", service: "infer", code: .ok, seconds: s) }
        let text = metrics.render(gauges: [])
        XCTAssertTrue(text.contains("# TYPE cortado_request_duration_seconds histogram\n"))
        let buckets = samples(text, "cortado_request_duration_seconds_bucket")
        XCTAssertEqual(buckets.count, ServerMetrics.buckets.count + 1)
        var previous = 0.0
        for (i, bucket) in buckets.enumerated() {
            XCTAssertGreaterThanOrEqual(bucket.value, previous, bucket.labels)
            previous = bucket.value
            let le = bucket.labels.components(separatedBy: "le=\"").last!.dropLast()
            if i < ServerMetrics.buckets.count {
                let bound = Double(le)!
                XCTAssertEqual(bound, ServerMetrics.buckets[i])
                XCTAssertEqual(bucket.value, Double(observations.filter { $0 <= bound }.count), "le=\(le)")
            } else {
                XCTAssertEqual(le, "+Inf")
            }
        }
        let count = samples(text, "cortado_request_duration_seconds_count")
        let sum = samples(text, "cortado_request_duration_seconds_sum")
        XCTAssertEqual(count.map(\.value), [5])
        XCTAssertEqual(buckets.last?.value, count.first?.value, "+Inf equals the count")
        XCTAssertEqual(buckets[ServerMetrics.buckets.count - 1].value, 4, "42 s is only in +Inf")
        XCTAssertEqual(sum.first?.value ?? 0, observations.reduce(0, +), accuracy: 1e-9)
        XCTAssertEqual(count.first?.labels, "model=\"m\",service=\"infer\"")
    }

    /// Every code of a model and service lands in one histogram.
    func testOneHistogramPerModelAndService() {
        let metrics = ServerMetrics()
        metrics.observe(model: "m", service: "infer", code: .ok, seconds: 0.1)
        metrics.observe(model: "m", service: "infer", code: .internal, seconds: 0.1)
        metrics.observe(model: "m", service: "predict", code: .ok, seconds: 0.1)
        let counts = samples(metrics.render(gauges: []), "cortado_request_duration_seconds_count")
        XCTAssertEqual(counts.map(\.labels), ["model=\"m\",service=\"infer\"", "model=\"m\",service=\"predict\""])
        XCTAssertEqual(counts.map(\.value), [2, 1])
    }

    func testBucketBoundsAreIncreasing() {
        XCTAssertEqual(ServerMetrics.buckets, ServerMetrics.buckets.sorted())
        XCTAssertEqual(Set(ServerMetrics.buckets).count, ServerMetrics.buckets.count)
    }

    func testModelLabelsAreEscaped() {
        let metrics = ServerMetrics()
        metrics.observe(model: "a\"b\\c\nd", service: "infer", code: .ok, seconds: 0)
        let text = metrics.render(gauges: [])
        XCTAssertTrue(text.contains("cortado_requests_total{model=\"a\\\"b\\\\c\\nd\",service=\"infer\",code=\"OK\"} 1\n"), text)
        XCTAssertFalse(text.split(separator: "\n").contains { $0 == "d\",service=\"infer\",code=\"OK\"} 1" })
    }

    func testGauges() {
        let text = ServerMetrics().render(gauges: [
            (name: "cortado_models_loaded", help: "Models loaded.", samples: [(labels: "", value: 2)]),
            (name: "cortado_queue_depth", help: "Requests waiting.", samples: [(labels: "model=\"m\"", value: 3), (labels: "model=\"n\"", value: 0)]),
        ])
        XCTAssertTrue(text.contains("# HELP cortado_models_loaded Models loaded.\n# TYPE cortado_models_loaded gauge\ncortado_models_loaded 2.0\n"), text)
        XCTAssertEqual(samples(text, "cortado_queue_depth").map(\.value), [3, 0])
        XCTAssertEqual(samples(text, "cortado_queue_depth").map(\.labels), ["model=\"m\"", "model=\"n\""])
    }

    func testEmptyMetricsStillDeclareTheirTypes() {
        let text = ServerMetrics().render(gauges: [])
        XCTAssertTrue(text.contains("# HELP cortado_requests_total"))
        XCTAssertTrue(text.contains("# HELP cortado_request_duration_seconds"))
        XCTAssertTrue(samples(text, "cortado_requests_total").isEmpty)
    }

    func testConcurrentObservations() {
        let metrics = ServerMetrics()
        DispatchQueue.concurrentPerform(iterations: 1000) { i in
            metrics.observe(model: "m", service: "infer", code: i % 10 == 0 ? .internal : .ok, seconds: 0.001)
        }
        XCTAssertEqual(metrics.count(model: "m", code: .ok), 900)
        XCTAssertEqual(metrics.count(model: "m", code: .internal), 100)
        XCTAssertEqual(samples(metrics.render(gauges: []), "cortado_request_duration_seconds_count").first?.value, 1000)
    }
}
