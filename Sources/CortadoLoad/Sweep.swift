import CortadoGRPCClient
import CortadoGRPCCore
import Foundation

/// Limits that end a sweep early.
public struct SweepThresholds: Sendable, Codable {
    /// Stop after a level whose failed/sent exceeds this (0.01 = 1 %).
    public var maxErrorRate: Double?
    /// Stop after a level whose p99 (ms) exceeds this.
    public var maxP99: Double?
    public init(maxErrorRate: Double? = nil, maxP99: Double? = nil) {
        self.maxErrorRate = maxErrorRate
        self.maxP99 = maxP99
    }

    func violation(_ r: LevelResult) -> String? {
        if let m = maxErrorRate, r.errorRate > m {
            return String(format: "error rate %.2f%% > %.2f%%", r.errorRate * 100, m * 100)
        }
        if let m = maxP99, r.p99 > m { return String(format: "p99 %.3f ms > %.3f ms", r.p99, m) }
        if r.succeeded == 0 { return "no call succeeded" }
        return nil
    }
}

/// A whole invocation: the levels it ran and what they showed.
public struct SweepReport: Codable, Sendable {
    public var target: String
    public var api: String
    public var model: String
    public var version: String
    public var mode: String
    public var transport = "libuv + nghttp2 (cortado-load's own HTTP/2 client, one loop thread)"
    public var warmupSeconds: Double
    public var durationSeconds: Double?
    public var requestsPerLevel: Int?
    public var thresholds: SweepThresholds
    public var notes: [String]
    public var levels: [LevelResult]
    /// Index into `levels` of the knee: the greatest power (throughput ÷ mean latency,
    /// Kleinrock) among levels within the thresholds.
    public var knee: Int?
    public var stoppedEarly: Bool

    public init(target: String, api: String, model: String, version: String, mode: String, warmupSeconds: Double,
                durationSeconds: Double?, requestsPerLevel: Int?, thresholds: SweepThresholds, notes: [String],
                levels: [LevelResult], knee: Int?, stoppedEarly: Bool) {
        self.target = target; self.api = api; self.model = model; self.version = version; self.mode = mode
        self.warmupSeconds = warmupSeconds; self.durationSeconds = durationSeconds; self.requestsPerLevel = requestsPerLevel
        self.thresholds = thresholds; self.notes = notes; self.levels = levels; self.knee = knee; self.stoppedEarly = stoppedEarly
    }

    public static func knee(_ levels: [LevelResult], thresholds: SweepThresholds) -> Int? {
        var best: (Int, Double)? = nil
        for (i, r) in levels.enumerated() where r.stopReason == nil && r.succeeded > 0 && r.mean > 0 {
            let power = r.throughput / r.mean
            if best == nil || power > best!.1 { best = (i, power) }
        }
        return best?.0
    }
}

/// Runs each level in turn on one loop, stopping early when a threshold passes.
public func runSweep(loop: HTTP2ClientLoop, templates: [HTTP2RequestTemplate], modes: [LoadMode], base: PhaseOptions,
                     thresholds: SweepThresholds, onLevel: (LevelResult) -> Void = { _ in }) -> (levels: [LevelResult], stoppedEarly: Bool) {
    var levels: [LevelResult] = []
    for (i, mode) in modes.enumerated() {
        var options = base
        options.mode = mode
        var r = LoadPhase(loop: loop, templates: templates, options: options).run()
        if let why = thresholds.violation(r) {
            r.stopReason = why
            levels.append(r)
            onLevel(r)
            return (levels, i + 1 < modes.count)
        }
        if LoadInterrupt.requested {
            r.stopReason = "interrupted"
            levels.append(r)
            onLevel(r)
            return (levels, i + 1 < modes.count)
        }
        levels.append(r)
        onLevel(r)
    }
    return (levels, false)
}
