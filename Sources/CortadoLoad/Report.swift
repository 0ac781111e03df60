import Foundation

public enum ReportWriter {
    // MARK: table

    public static func table(_ report: SweepReport) -> String {
        let open = report.mode == "open"
        var header = [open ? "rate/s" : "conc", "sent", "ok", "failed", "thru/s", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "max ms",
                      "MB out", "MB in", "cpu %"]
        if open { header.append("lag p99 ms") }
        var rows: [[String]] = [header]
        for (i, r) in report.levels.enumerated() {
            var row = [
                (report.knee == i ? "*" : "") + formatLevel(r.level),
                "\(r.sent)", "\(r.succeeded)", "\(r.failed)",
                String(format: "%.0f", r.throughput),
                ms(r.p50), ms(r.p90), ms(r.p99), ms(r.p999), ms(r.max),
                String(format: "%.2f", Double(r.bytesSent) / 1e6), String(format: "%.2f", Double(r.bytesReceived) / 1e6),
                String(format: "%.0f", r.cpuPercent),
            ]
            if open { row.append(r.sendLagP99.map(ms) ?? "-") }
            rows.append(row)
        }
        let widths = (0..<header.count).map { c in rows.map { $0[c].count }.max()! }
        var out = ""
        for (n, row) in rows.enumerated() {
            out += row.enumerated().map { String(repeating: " ", count: widths[$0.offset] - $0.element.count) + $0.element }.joined(separator: "  ") + "\n"
            if n == 0 { out += widths.map { String(repeating: "-", count: $0) }.joined(separator: "  ") + "\n" }
        }
        for r in report.levels where r.failed > 0 {
            let errors = r.errors.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
            out += "\(report.mode == "open" ? "rate" : "concurrency") \(formatLevel(r.level)): errors \(errors)"
            if let (name, message) = r.errorMessages.sorted(by: { $0.key < $1.key }).first, !message.isEmpty { out += " (\(name): \(message))" }
            out += "\n"
        }
        for r in report.levels where r.goaways + r.reconnects + r.connectFailures + r.retriedCalls > 0 {
            out += "\(report.mode == "open" ? "rate" : "concurrency") \(formatLevel(r.level)): connections: \(r.goaways) GOAWAY received, "
                + "\(r.reconnects) reconnected, \(r.connectFailures) failed connects"
                + (r.lastConnectError.map { " (last: \($0))" } ?? "")
                + ", \(r.retriedCalls) refused calls sent again\n"
        }
        if let k = report.knee {
            let r = report.levels[k]
            out += "knee (*): \(report.mode == "open" ? "rate" : "concurrency") \(formatLevel(r.level)), \(String(format: "%.0f", r.throughput)) calls/s at p50 \(ms(r.p50)) ms, p99 \(ms(r.p99)) ms (greatest throughput ÷ mean latency)\n"
        }
        if let last = report.levels.last, let why = last.stopReason, report.stoppedEarly {
            out += "sweep stopped after \(formatLevel(last.level)): \(why)\n"
        }
        if let busy = report.levels.first(where: { $0.cpuPercent > 85 }) {
            out += "note: the client used \(String(format: "%.0f", busy.cpuPercent))% of its core at \(formatLevel(busy.level)): it may be the bottleneck there"
            out += report.mode == "open" ? " (open loop spins between close arrivals, which counts here)\n" : "\n"
        }
        return out
    }

    static func ms(_ v: Double) -> String {
        v >= 100 ? String(format: "%.1f", v) : v >= 1 ? String(format: "%.2f", v) : String(format: "%.3f", v)
    }

    static func formatLevel(_ v: Double) -> String {
        v == v.rounded() ? String(Int(v)) : String(format: "%.1f", v)
    }

    // MARK: files

    public static func json(_ report: SweepReport) throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        return try encoder.encode(report)
    }

    public static func csv(_ report: SweepReport) -> String {
        let columns = ["mode", "level", "connections", "sent", "succeeded", "failed", "error_rate", "elapsed_s", "throughput_per_s",
                       "p50_ms", "p90_ms", "p99_ms", "p999_ms", "max_ms", "mean_ms", "send_lag_p99_ms", "bytes_sent", "bytes_received",
                       "cpu_user_s", "cpu_system_s", "cpu_percent", "errors", "knee", "stop_reason",
                       "goaways", "reconnects", "connect_failures", "retried_calls"]
        var out = columns.joined(separator: ",") + "\n"
        for (i, r) in report.levels.enumerated() {
            let errors = r.errors.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ";")
            let fields: [String] = [
                r.mode, formatLevel(r.level), "\(r.connections)", "\(r.sent)", "\(r.succeeded)", "\(r.failed)",
                String(format: "%.6f", r.errorRate), String(format: "%.6f", r.elapsedSeconds), String(format: "%.3f", r.throughput),
                String(format: "%.6f", r.p50), String(format: "%.6f", r.p90), String(format: "%.6f", r.p99), String(format: "%.6f", r.p999),
                String(format: "%.6f", r.max), String(format: "%.6f", r.mean), r.sendLagP99.map { String(format: "%.6f", $0) } ?? "",
                "\(r.bytesSent)", "\(r.bytesReceived)", String(format: "%.3f", r.cpuUserSeconds), String(format: "%.3f", r.cpuSystemSeconds),
                String(format: "%.1f", r.cpuPercent), errors, report.knee == i ? "1" : "0", r.stopReason ?? "",
                "\(r.goaways)", "\(r.reconnects)", "\(r.connectFailures)", "\(r.retriedCalls)",
            ]
            out += fields.map(csvField).joined(separator: ",") + "\n"
        }
        return out
    }

    static func csvField(_ s: String) -> String {
        s.contains(where: { $0 == "," || $0 == "\"" || $0 == "\n" }) ? "\"" + s.replacingOccurrences(of: "\"", with: "\"\"") + "\"" : s
    }

    // MARK: SVG

    /// Latency percentiles (log scale) against throughput, one line per percentile, one
    /// point per level, labelled with its concurrency or rate; the knee is circled.
    public static func svg(_ report: SweepReport) -> String {
        let width = 820.0, height = 520.0
        let left = 80.0, right = 150.0, top = 50.0, bottom = 60.0
        let plotW = width - left - right, plotH = height - top - bottom
        let levels = report.levels.filter { $0.succeeded > 0 }
        let series: [(String, String, (LevelResult) -> Double)] = [
            ("p50", "#1f77b4", { $0.p50 }), ("p90", "#2ca02c", { $0.p90 }), ("p99", "#ff7f0e", { $0.p99 }),
            ("p99.9", "#d62728", { $0.p999 }), ("max", "#7f7f7f", { $0.max }),
        ]
        var svg = """
        <svg xmlns="http://www.w3.org/2000/svg" width="\(Int(width))" height="\(Int(height))" viewBox="0 0 \(Int(width)) \(Int(height))" font-family="Helvetica, Arial, sans-serif" font-size="12">
        <rect width="100%" height="100%" fill="white"/>
        <text x="\(left)" y="24" font-size="15" font-weight="bold">\(escape("cortado-load: \(report.model) via \(report.api), \(report.mode) loop"))</text>
        <text x="\(left)" y="40" fill="#555">\(escape("latency percentiles against throughput; points labelled with \(report.mode == "open" ? "offered rate/s" : "concurrency")"))</text>

        """
        guard !levels.isEmpty else {
            svg += "<text x=\"\(left)\" y=\"\(top + plotH / 2)\">no successful calls to plot</text>\n</svg>\n"
            return svg
        }
        let maxX = niceCeiling(levels.map(\.throughput).max()! * 1.08)
        let values = levels.flatMap { r in series.map { $0.2(r) } }.filter { $0 > 0 }
        let lo = pow(10, floor(log10(values.min() ?? 0.01)))
        let hi = pow(10, ceil(log10(Swift.max(values.max() ?? 1, lo * 10))))
        func x(_ v: Double) -> Double { left + plotW * v / maxX }
        func y(_ v: Double) -> Double { top + plotH * (1 - (log10(Swift.max(v, lo)) - log10(lo)) / (log10(hi) - log10(lo))) }

        // Axes and grid.
        svg += "<rect x=\"\(left)\" y=\"\(top)\" width=\"\(plotW)\" height=\"\(plotH)\" fill=\"none\" stroke=\"#333\"/>\n"
        var decade = lo
        while decade <= hi * 1.0001 {
            let yy = y(decade)
            svg += "<line x1=\"\(left)\" y1=\"\(f(yy))\" x2=\"\(left + plotW)\" y2=\"\(f(yy))\" stroke=\"#ddd\"/>\n"
            svg += "<text x=\"\(left - 6)\" y=\"\(f(yy + 4))\" text-anchor=\"end\">\(escape(axisMs(decade)))</text>\n"
            for k in 2...9 where decade * Double(k) < hi {
                let ym = y(decade * Double(k))
                svg += "<line x1=\"\(left)\" y1=\"\(f(ym))\" x2=\"\(left + 5)\" y2=\"\(f(ym))\" stroke=\"#999\"/>\n"
            }
            decade *= 10
        }
        for k in 0...5 {
            let v = maxX * Double(k) / 5
            let xx = x(v)
            svg += "<line x1=\"\(f(xx))\" y1=\"\(top)\" x2=\"\(f(xx))\" y2=\"\(top + plotH)\" stroke=\"#eee\"/>\n"
            svg += "<text x=\"\(f(xx))\" y=\"\(f(top + plotH + 18))\" text-anchor=\"middle\">\(escape(axisCount(v)))</text>\n"
        }
        svg += "<text x=\"\(f(left + plotW / 2))\" y=\"\(f(height - 16))\" text-anchor=\"middle\">throughput (successful calls/s)</text>\n"
        svg += "<text transform=\"translate(20,\(f(top + plotH / 2))) rotate(-90)\" text-anchor=\"middle\">latency (ms, log scale)</text>\n"

        // One line per percentile.
        for (name, color, value) in series {
            let points = levels.map { "\(f(x($0.throughput))),\(f(y(value($0))))" }.joined(separator: " ")
            svg += "<polyline fill=\"none\" stroke=\"\(color)\" stroke-width=\"2\" points=\"\(points)\"><title>\(name)</title></polyline>\n"
            for r in levels {
                svg += "<circle cx=\"\(f(x(r.throughput)))\" cy=\"\(f(y(value(r))))\" r=\"3\" fill=\"\(color)\"><title>\(escape("\(name) \(ms(value(r))) ms at \(String(format: "%.0f", r.throughput))/s (\(formatLevel(r.level)))"))</title></circle>\n"
            }
        }
        // Level labels above the highest point of each level.
        for r in levels {
            let yy = y(series.map { $0.2(r) }.max()!) - 8
            svg += "<text x=\"\(f(x(r.throughput)))\" y=\"\(f(Swift.max(top + 10, yy)))\" text-anchor=\"middle\" fill=\"#333\" font-size=\"10\">\(escape(formatLevel(r.level)))</text>\n"
        }
        if let k = report.knee, report.levels[k].succeeded > 0 {
            let r = report.levels[k]
            svg += "<circle cx=\"\(f(x(r.throughput)))\" cy=\"\(f(y(r.p99)))\" r=\"9\" fill=\"none\" stroke=\"black\" stroke-width=\"1.5\"><title>knee</title></circle>\n"
            svg += "<text x=\"\(f(x(r.throughput) + 12))\" y=\"\(f(y(r.p99) + 16))\" font-size=\"11\">knee</text>\n"
        }
        // Legend.
        for (i, (name, color, _)) in series.enumerated() {
            let ly = top + 10 + Double(i) * 20
            svg += "<line x1=\"\(f(left + plotW + 20))\" y1=\"\(f(ly))\" x2=\"\(f(left + plotW + 45))\" y2=\"\(f(ly))\" stroke=\"\(color)\" stroke-width=\"2\"/>\n"
            svg += "<text x=\"\(f(left + plotW + 52))\" y=\"\(f(ly + 4))\">\(name)</text>\n"
        }
        svg += "</svg>\n"
        return svg
    }

    static func f(_ v: Double) -> String { String(format: "%.1f", v) }

    static func axisMs(_ v: Double) -> String {
        v >= 1 ? String(format: "%.0f", v) : String(format: "%g", v)
    }

    static func axisCount(_ v: Double) -> String {
        v >= 1_000_000 ? String(format: "%gM", v / 1e6) : v >= 1000 ? String(format: "%gk", v / 1e3) : String(format: "%g", v)
    }

    static func niceCeiling(_ v: Double) -> Double {
        guard v > 0 else { return 1 }
        let p = pow(10, floor(log10(v)))
        for m in [1.0, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10] where m * p >= v { return m * p }
        return 10 * p
    }

    static func escape(_ s: String) -> String {
        s.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;").replacingOccurrences(of: ">", with: "&gt;")
    }
}
