import ArgumentParser
import CortadoGRPCClient
import CortadoLoad
import Foundation

struct CortadoLoadCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cortado-load",
        abstract: "Load-test a Cortado server (cortado.v1.Predictor) or any Open Inference Protocol gRPC server.",
        discussion: """
        Closed loop (--concurrency N[,N…]): N callers, each sending its next call when its last one returns.
        Open loop (--rate R[,R…]): calls arrive at R per second whatever the server does; latency counts from
        each call's intended send time, so a server that falls behind cannot hide its queue (no coordinated
        omission). A list runs a sweep, stopped early by --max-error-rate / --max-p99-ms; the knee is the level
        with the greatest throughput ÷ mean latency.

        Inputs: random, from the model's description (Describe for --api native, ModelMetadata for --api oip),
        with --seed; or --input rows.jsonl (one JSON object of inputs a line, as `cortado predict` reads).

        Transport: cortado-load's own HTTP/2 client on libuv + nghttp2, every connection on one thread.
        After a GOAWAY (a server draining on SIGTERM) new calls go to a new connection, and calls the server
        refused unprocessed (past the GOAWAY's last stream id, REFUSED_STREAM) are sent again once. A lost
        connection fails its calls in flight (UNAVAILABLE) and the next call reconnects. While connects fail,
        calls wait (to their deadline) and connects are retried after 50 ms, doubling to at most 1 s. The
        summary, --json and --csv count GOAWAYs, reconnects, failed connects and resent calls apart from
        call failures.
        """
    )

    @Option(name: .long, help: "Server address host:port.")
    var target = "127.0.0.1:8001"
    @Option(name: .long, help: "Model name.")
    var model: String
    @Option(name: .customLong("model-version"), help: "Model version (empty: the default one).")
    var modelVersion = ""
    @Option(name: .long, help: "native (cortado.v1.Predictor/Predict) or oip (inference.GRPCInferenceService/ModelInfer).")
    var api = "native"
    @Option(name: .long, help: "Closed loop: concurrent callers, a comma-separated list for a sweep (default 1 unless --rate).")
    var concurrency: String?
    @Option(name: .long, help: "Open loop: arrivals per second, a comma-separated list for a sweep.")
    var rate: String?
    @Option(name: .long, help: "Measured seconds per level (default 10 unless --requests).")
    var duration: Double?
    @Option(name: .long, help: "Measured calls per level.")
    var requests: Int?
    @Option(name: .long, help: "Warm-up seconds per level, not measured.")
    var warmup = 1.0
    @Option(name: .long, help: "HTTP/2 connections (closed loop: at most one per caller).")
    var connections = 4
    @Option(name: .long, help: "Per-call deadline in seconds (sent as grpc-timeout).")
    var timeout = 10.0
    @Option(name: .customLong("max-in-flight"), help: "Open loop: most calls outstanding at once; later arrivals wait, still timed from their intended send.")
    var maxInFlight = 10_000
    @Option(name: .long, help: "JSONL file of input rows (the CLI's JSON encoding); default: random inputs.")
    var input: String?
    @Option(name: .long, help: "Random inputs: how many distinct rows to send round-robin.")
    var rows = 64
    @Option(name: .long, help: "Random inputs: seed.")
    var seed: UInt64 = 42
    @Option(name: .customLong("max-error-rate"), help: "Stop a sweep after a level whose failed share exceeds this (e.g. 0.01).")
    var maxErrorRate: Double?
    @Option(name: .customLong("max-p99-ms"), help: "Stop a sweep after a level whose p99 exceeds this many ms.")
    var maxP99: Double?
    @Option(name: .long, help: "Write the results as JSON.")
    var json: String?
    @Option(name: .long, help: "Write one CSV row per level.")
    var csv: String?
    @Option(name: .long, help: "Draw latency percentiles against throughput as SVG.")
    var svg: String?
    @Option(name: .long, help: "Bearer token sent with every call (`authorization: Bearer TOKEN`), for a server started with --auth-tokens; the token needs the infer scope.")
    var token: String?
    @Option(name: .customLong("token-file"), help: "Read the bearer token from this file (its first line), so it stays out of the process list.")
    var tokenFile: String?
    @Flag(name: .long, help: "No progress line.")
    var quiet = false

    func validate() throws {
        if concurrency != nil && rate != nil { throw ValidationError("give --concurrency or --rate, not both") }
        guard LoadAPI(rawValue: api) != nil else { throw ValidationError("--api must be native or oip") }
        if let requests, requests <= 0 { throw ValidationError("--requests must be positive") }
        if let duration, duration <= 0 { throw ValidationError("--duration must be positive") }
        if timeout <= 0 { throw ValidationError("--timeout must be positive") }
        if connections < 1 { throw ValidationError("--connections must be at least 1") }
        if rows < 1 { throw ValidationError("--rows must be at least 1") }
        if token != nil && tokenFile != nil { throw ValidationError("give --token or --token-file, not both") }
    }

    static func list(_ s: String, _ flag: String) throws -> [Double] {
        let values = s.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
        let parsed = values.compactMap(Double.init)
        guard !parsed.isEmpty, parsed.count == values.count, parsed.allSatisfy({ $0 > 0 }) else {
            throw ValidationError("\(flag) wants positive numbers separated by commas, got \"\(s)\"")
        }
        return parsed
    }

    func run() throws {
        let modes: [LoadMode]
        if let rate {
            modes = try Self.list(rate, "--rate").map { .open(rate: $0) }
        } else {
            let levels = try Self.list(concurrency ?? "1", "--concurrency")
            guard levels.allSatisfy({ $0 == $0.rounded() }) else { throw ValidationError("--concurrency wants whole numbers") }
            modes = levels.map { .closed(concurrency: Int($0)) }
        }
        guard let colon = target.lastIndex(of: ":"), let port = Int(target[target.index(after: colon)...]) else {
            throw ValidationError("--target must be host:port")
        }
        var host = String(target[..<colon])
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        let duration = self.duration ?? (requests == nil ? 10 : nil)

        let loop = try HTTP2ClientLoop(host: host, port: port)
        LoadInterrupt.watch(loop)
        var bearer = token
        if let tokenFile {
            guard let text = try? String(contentsOfFile: tokenFile, encoding: .utf8),
                  let line = text.split(whereSeparator: \.isNewline).first?.trimmingCharacters(in: .whitespaces), !line.isEmpty else {
                throw ValidationError("--token-file \(tokenFile): no token in its first line")
            }
            bearer = line
        }
        if let bearer { loop.metadata = [("authorization", "Bearer \(bearer)")] }
        let apiKind = LoadAPI(rawValue: api)!
        let set: RequestSet
        do {
            set = try RequestSet.build(loop: loop, api: apiKind, model: model, version: modelVersion, jsonl: input,
                                       count: rows, seed: seed, timeout: timeout)
        } catch {
            FileHandle.standardError.write("cortado-load: \(error)\n".data(using: .utf8)!)
            throw ExitCode(2)
        }
        for note in set.notes { FileHandle.standardError.write("cortado-load: \(note)\n".data(using: .utf8)!) }
        let templates = set.templates(authority: loop.authority, timeout: timeout, metadata: loop.metadata)

        var base = PhaseOptions(mode: modes[0])
        base.duration = duration
        base.requests = requests
        base.warmup = warmup
        base.connections = connections
        base.timeout = timeout
        base.maxInFlight = maxInFlight
        base.progress = !quiet
        let thresholds = SweepThresholds(maxErrorRate: maxErrorRate, maxP99: maxP99)
        let (levels, stoppedEarly) = runSweep(loop: loop, templates: templates, modes: modes, base: base, thresholds: thresholds)
        loop.shutdown()

        var report = SweepReport(target: target, api: api, model: model, version: modelVersion, mode: modes[0].name,
                                 warmupSeconds: warmup, durationSeconds: duration, requestsPerLevel: requests,
                                 thresholds: thresholds, notes: set.notes, levels: levels, knee: nil, stoppedEarly: stoppedEarly)
        report.knee = SweepReport.knee(levels, thresholds: thresholds)
        print(ReportWriter.table(report), terminator: "")
        if let json { try ReportWriter.json(report).write(to: URL(fileURLWithPath: json)) }
        if let csv { try ReportWriter.csv(report).write(toFile: csv, atomically: true, encoding: .utf8) }
        if let svg { try ReportWriter.svg(report).write(toFile: svg, atomically: true, encoding: .utf8) }
    }
}

CortadoLoadCommand.main()
