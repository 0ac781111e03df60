import ArgumentParser
import CortadoModels
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// `cortado report`: how fast a model loads and predicts on this machine, and how much memory
/// it takes.
struct Report: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Time a model: load time, prediction latency, throughput and peak memory.",
        discussion: """
        Loads the model (timed), reads the input rows, runs --warmup untimed predictions, then \
        --iterations timed ones. Each prediction takes --batch rows, cycling through the input \
        file (one row: MLModel.prediction(from:); more: predictions(fromBatch:), which neural \
        networks run as one batch). Prints the load time, the median, p90, min and max \
        latency of one prediction, the throughput in rows per second (rows timed / time spent \
        in the timed predictions), and the process's peak resident memory after loading and at \
        the end (VmHWM of /proc/self/status).
        """
    )

    @Argument(help: "The model: .mlmodel file (or .mlpackage folder), compiled or encrypted model.")
    var model: String

    @OptionGroup var keyOptions: ModelKeyOptions

    @Option(name: .shortAndLong, help: "JSON-lines file of input rows (as for `cortado predict`); '-' reads stdin.")
    var input: String

    @Option(help: "Timed predictions.")
    var iterations: Int = 50

    @Option(help: "Untimed predictions before timing.")
    var warmup: Int = 5

    @Option(help: "Threads one prediction may use (MLModelConfiguration.threadCount); 0 means all cores.")
    var threads: Int = 0

    @Option(help: "Rows per prediction; above 1 the rows go through the batch API.")
    var batch: Int = 1

    @Flag(help: "Print one JSON object instead of text.")
    var json = false

    @Flag(help: "Then time each layer (neural networks): --iterations more predictions with a clock around every layer, listed by total time with each layer's mean per prediction and share.")
    var layers = false

    @OptionGroup var plugins: PluginOptions

    func validate() throws {
        guard iterations > 0 else { throw ValidationError("--iterations must be at least 1") }
        guard warmup >= 0 else { throw ValidationError("--warmup must not be negative") }
        guard threads >= 0 else { throw ValidationError("--threads must not be negative") }
        guard batch > 0 else { throw ValidationError("--batch must be at least 1") }
        guard !(layers && json) else { throw ValidationError("--layers prints a table; leave out --json") }
    }

    func run() throws {
        var configuration = keyOptions.configuration()
        configuration.threadCount = threads
        plugins.load()
        let loadStart = monotonicSeconds()
        let loaded: MLModel
        do { loaded = try loadModel(model, configuration: configuration) } catch { fail("\(error)") }
        let loadSeconds = monotonicSeconds() - loadStart
        let rssAfterLoad = peakRSSBytes()

        let rows = readRows(description: loaded.modelDescription)
        guard !rows.isEmpty else { fail("\(input) holds no input rows") }
        var next = 0
        func nextBatch() -> [MLFeatureProvider] {
            (0..<batch).map { _ in defer { next = (next + 1) % rows.count }; return rows[next] }
        }
        func predict(_ group: [MLFeatureProvider], options: MLPredictionOptions = MLPredictionOptions()) throws {
            if group.count == 1 {
                _ = try loaded.prediction(from: group[0], options: options)
            } else {
                _ = try loaded.predictions(fromBatch: MLArrayBatchProvider(array: group), options: options)
            }
        }

        do {
            for _ in 0..<warmup { try predict(nextBatch()) }
            var latencies: [Double] = []
            latencies.reserveCapacity(iterations)
            for _ in 0..<iterations {
                let group = nextBatch()
                let start = monotonicSeconds()
                try predict(group)
                latencies.append(monotonicSeconds() - start)
            }
            let sorted = latencies.sorted()
            let total = latencies.reduce(0, +)
            let stats = Stats(
                loadSeconds: loadSeconds,
                medianSeconds: percentile(sorted, 0.5),
                p90Seconds: percentile(sorted, 0.9),
                minSeconds: sorted.first!,
                maxSeconds: sorted.last!,
                rowsPerSecond: Double(iterations * batch) / total,
                peakRSSAfterLoad: rssAfterLoad,
                peakRSS: peakRSSBytes()
            )
            print(json ? stats.json(self) : stats.text(self))
            if layers {
                // A separate pass, so the clocks around layers do not touch the figures above.
                var options = MLPredictionOptions()
                let times = MLLayerTimes()
                options.layerTimes = times
                for _ in 0..<iterations { try predict(nextBatch(), options: options) }
                print(layerTable(times))
            }
        } catch {
            fail("prediction failed: \(error)")
        }
    }

    /// Layers by total time: mean per prediction, share of all layer time, type. An entry that
    /// runs others (an ML Program's neural-network segment) is followed by them, indented.
    private func layerTable(_ times: MLLayerTimes) -> String {
        guard !times.entries.isEmpty else { return "layers         this model runs no layers (--layers times neural networks)" }
        let total = Double(max(times.totalNanoseconds, 1))
        let width = max(5, times.entries.map { $0.name.count + ($0.parent == nil ? 0 : 2) }.max() ?? 0)
        var lines = ["layers         \(times.entries.count) timed over \(iterations) predictions, by total time"]
        lines.append("  " + "layer".padding(toLength: width, withPad: " ", startingAt: 0) + "   mean/pred    share  type")
        let byTime = times.entries.sorted(by: { $0.nanoseconds > $1.nanoseconds })
        func add(_ e: MLLayerTimes.Entry, indent: String) {
            let mean = Double(e.nanoseconds) / Double(iterations) / 1e3
            lines.append("  " + (indent + e.name).padding(toLength: width, withPad: " ", startingAt: 0)
                         + String(format: " %9.1f µs %7.1f%%  ", mean, 100 * Double(e.nanoseconds) / total) + e.type)
        }
        for e in byTime where e.parent == nil {
            add(e, indent: "")
            for inner in byTime where inner.parent == e.name { add(inner, indent: "  ") }
        }
        return lines.joined(separator: "\n")
    }

    private func readRows(description: MLModelDescription) -> [MLFeatureProvider] {
        let file = JSONRowsInput(path: input)
        var rows: [MLFeatureProvider] = []
        file.forEachRow(description) { line, row in
            switch row {
            case .success(let features): rows.append(features)
            case .failure(let error): fail("\(file.name) line \(line): \(error)")
            }
        }
        return rows
    }

    /// The timings of one report.
    struct Stats {
        let loadSeconds, medianSeconds, p90Seconds, minSeconds, maxSeconds, rowsPerSecond: Double
        let peakRSSAfterLoad, peakRSS: Int

        func text(_ r: Report) -> String {
            func ms(_ s: Double) -> String { String(format: "%.3f ms", s * 1e3) }
            func mb(_ b: Int) -> String { String(format: "%.1f MB", Double(b) / 1_048_576) }
            return """
            model          \(r.model)
            threads        \(r.threads == 0 ? "all (\(ProcessInfo.processInfo.activeProcessorCount))" : String(r.threads))
            batch          \(r.batch) row\(r.batch == 1 ? "" : "s") per prediction, \(r.iterations) timed after \(r.warmup) warm-up
            load           \(ms(loadSeconds))
            latency        median \(ms(medianSeconds)), p90 \(ms(p90Seconds)), min \(ms(minSeconds)), max \(ms(maxSeconds))
            throughput     \(String(format: "%.1f", rowsPerSecond)) rows/s
            peak RSS       \(mb(peakRSSAfterLoad)) after load, \(mb(peakRSS)) at the end
            kernels        \(KernelPath.summary)
            """
        }

        func json(_ r: Report) -> String {
            var modelName = ""
            MLFeatureJSON.encode(MLFeatureValue(string: r.model), into: &modelName)
            var cpu = ""
            MLFeatureJSON.encode(MLFeatureValue(string: KernelPath.cpuModel), into: &cpu)
            let fields: [(String, String)] = [
                ("model", modelName), ("threads", "\(r.threads)"), ("batch", "\(r.batch)"),
                ("iterations", "\(r.iterations)"), ("warmup", "\(r.warmup)"),
                ("loadSeconds", "\(loadSeconds)"), ("medianSeconds", "\(medianSeconds)"), ("p90Seconds", "\(p90Seconds)"),
                ("minSeconds", "\(minSeconds)"), ("maxSeconds", "\(maxSeconds)"), ("rowsPerSecond", "\(rowsPerSecond)"),
                ("peakRSSBytesAfterLoad", "\(peakRSSAfterLoad)"), ("peakRSSBytes", "\(peakRSS)"),
                ("kernelPath", "\"\(KernelPath.name)\""), ("cpu", cpu),
            ]
            return "{" + fields.map { "\"\($0.0)\":\($0.1)" }.joined(separator: ",") + "}"
        }
    }
}

func monotonicSeconds() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) * 1e-9
}

/// Peak resident set size of this process so far, in bytes: `VmHWM` from /proc/self/status
/// (getrusage's ru_maxrss survives exec, so it would count the parent that started us when it
/// was larger); ru_maxrss where /proc is missing.
private func peakRSSBytes() -> Int {
    if let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
       let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") }),
       let kb = Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "") {
        return kb * 1024
    }
    var usage = rusage()
    getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
    return Int(usage.ru_maxrss) * 1024
}

/// The `q` quantile of sorted values (nearest rank).
private func percentile(_ sorted: [Double], _ q: Double) -> Double {
    let rank = Int((q * Double(sorted.count)).rounded(.up)) - 1
    return sorted[Swift.min(Swift.max(rank, 0), sorted.count - 1)]
}
