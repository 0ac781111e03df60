import CortadoModels
import Foundation
#if canImport(Glibc)
import Glibc
#endif

// cortado-bench: times a model's dense batch path (`MLDenseBatchPredicting`) on a raw matrix,
// single-threaded, and prints one JSON object. Timings are for `bench/` scripts to compare
// side by side; nothing here asserts on them. Any kind with a dense batch path works (tree
// ensembles, GLMs, SVMs); the `trees` and `glm` commands are names for the same measurement
// that also check the model is of that family.

let usage = """
usage: cortado-bench dense|trees|glm MODEL.mlmodel DATA.f64 ROWS FEATURES [--repeat N] [--warmup N] [--out PRED.f64] [--single N]
       cortado-bench gemm N [--repeat R] [--threads T]   (below)
       cortado-bench columns MODEL.mlmodel ROWS [--repeat R] [--warmup N]   (below)

  dense      any model with a dense batch path (MLDenseBatchPredicting).
  trees      the same, and the model must be a tree ensemble (treeEnsemble*).
  glm        the same, and the model must be a GLM (glmRegressor, glmClassifier).

  DATA.f64   ROWS x FEATURES little-endian float64 values, row-major.
  --repeat   timed runs of the whole matrix (default 20); the median is reported.
  --warmup   untimed runs first (default 2).
  --out      write the predictions (ROWS x outputWidth float64, row-major) here.
  --single   also time N one-row predictions through MLModel.prediction(from:) (feature
             providers, input validation, output dictionaries): the per-request path.

Prints JSON: rows, features, outputWidth, repeat, median/min/max wall seconds per run,
median rows/s (wall), median thread-CPU seconds and rows per CPU second (steadier when
other work shares the cores), whether every output is finite, and a checksum.
"""

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("cortado-bench: \(message)\n".utf8))
    exit(2)
}

func clock(_ id: clockid_t) -> Double {
    var ts = timespec()
    clock_gettime(id, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) * 1e-9
}

/// Wall-clock seconds.
func now() -> Double { clock(CLOCK_MONOTONIC) }
/// CPU seconds of this thread: what a run costs even when other work shares the cores.
func cpuNow() -> Double { clock(CLOCK_THREAD_CPUTIME_ID) }

func median(_ values: [Double]) -> Double {
    let v = values.sorted()
    return v.count % 2 == 1 ? v[v.count / 2] : (v[v.count / 2 - 1] + v[v.count / 2]) / 2
}

struct Options {
    var model = ""
    var data = ""
    var rows = 0
    var features = 0
    var repeats = 20
    var warmup = 2
    var out: String?
    var single = 0

    init(_ args: [String]) {
        var positional: [String] = []
        var i = 0
        func value(_ flag: String) -> String {
            i += 1
            guard i < args.count else { fail("\(flag) needs a value\n\n\(usage)") }
            return args[i]
        }
        func count(_ flag: String, _ text: String, minimum: Int) -> Int {
            guard let n = Int(text), n >= minimum else { fail("\(flag) must be an integer ≥ \(minimum), got '\(text)'") }
            return n
        }
        while i < args.count {
            switch args[i] {
            case "--repeat": repeats = count("--repeat", value("--repeat"), minimum: 1)
            case "--warmup": warmup = count("--warmup", value("--warmup"), minimum: 0)
            case "--out": out = value("--out")
            case "--single": single = count("--single", value("--single"), minimum: 0)
            case "-h", "--help": print(usage); exit(0)
            default: positional.append(args[i])
            }
            i += 1
        }
        guard positional.count == 4 else { fail("expected MODEL DATA ROWS FEATURES\n\n\(usage)") }
        model = positional[0]
        data = positional[1]
        rows = count("ROWS", positional[2], minimum: 1)
        features = count("FEATURES", positional[3], minimum: 1)
    }
}

func jsonNumber(_ v: Double) -> String {
    v.isFinite ? String(v) : "null"
}

/// One feature provider per row, shaped like the model's inputs: one multi-array input, or
/// one int64/double input per column.
func providers(for model: MLModel, _ x: [Double], rows: Int, features: Int) -> [MLFeatureProvider] {
    let inputs = model.modelDescription.inputs
    return (0..<min(rows, 1024)).map { r in
        let row = Array(x[(r * features)..<((r + 1) * features)])
        if inputs.count == 1, inputs[0].type == .multiArray {
            let dataType = inputs[0].multiArrayConstraint?.dataType ?? .double
            let shape = inputs[0].multiArrayConstraint?.shape ?? [features]
            guard let array = try? MLMultiArray(row, shape: shape.isEmpty ? [features] : shape, dataType: dataType) else {
                fail("cannot build a \(shape) input from \(features) values")
            }
            return MLDictionaryFeatureProvider(dictionary: [inputs[0].name: MLFeatureValue(multiArray: array)])
        }
        guard inputs.count == features else { fail("the model has \(inputs.count) inputs, not \(features) columns") }
        var d: [String: MLFeatureValue] = [:]
        for (i, input) in inputs.enumerated() {
            d[input.name] = input.type == .int64 ? MLFeatureValue(int64: Int64(row[i])) : MLFeatureValue(double: row[i])
        }
        return MLDictionaryFeatureProvider(dictionary: d)
    }
}

/// Wall and CPU seconds for `count` one-row predictions, cycling through the rows.
func timeSingle(_ model: MLModel, _ x: [Double], rows: Int, features: Int, count: Int) -> (Double, Double) {
    let inputs = providers(for: model, x, rows: rows, features: features)
    do {
        for p in inputs.prefix(100) { _ = try model.prediction(from: p) }
        let (t0, c0) = (now(), cpuNow())
        for i in 0..<count { _ = try model.prediction(from: inputs[i % inputs.count]) }
        return (now() - t0, cpuNow() - c0)
    } catch {
        fail("prediction failed: \(error)")
    }
}

func runDense(_ o: Options, family: String? = nil, specTypePrefix: String? = nil) {
    CortadoModels.registerBuiltinKinds()
    let model: MLModel
    do {
        model = try MLModel(contentsOf: URL(fileURLWithPath: o.model))
    } catch {
        fail("cannot load \(o.model): \(error)")
    }
    if let prefix = specTypePrefix, let family, !model.specType.hasPrefix(prefix) {
        fail("\(o.model) is a \(model.specType) model, not a \(family) (\(prefix)*); use `cortado-bench dense` for any kind")
    }
    guard let dense = model.compiled as? MLDenseBatchPredicting else {
        fail("\(model.specType) models have no dense batch path (MLDenseBatchPredicting)")
    }
    guard dense.inputWidth == o.features else {
        fail("the model reads \(dense.inputWidth) values per row but FEATURES is \(o.features)")
    }
    let bytes: Data
    do { bytes = try Data(contentsOf: URL(fileURLWithPath: o.data), options: .mappedIfSafe) } catch {
        fail("cannot read \(o.data): \(error.localizedDescription)")
    }
    let n = o.rows * o.features
    guard bytes.count == n * 8 else {
        fail("\(o.data) holds \(bytes.count) bytes; \(o.rows) x \(o.features) float64 values need \(n * 8)")
    }
    var x = [Double](repeating: 0, count: n)
    x.withUnsafeMutableBytes { dst in bytes.withUnsafeBytes { src in dst.copyMemory(from: src) } }
    for i in 0..<n { x[i] = Double(bitPattern: UInt64(littleEndian: x[i].bitPattern)) }

    let width = dense.outputWidth
    var y = [Double](repeating: 0, count: o.rows * width)
    var times: [Double] = []
    var cpuTimes: [Double] = []
    x.withUnsafeBufferPointer { xs in
        y.withUnsafeMutableBufferPointer { ys in
            for _ in 0..<o.warmup { dense.predict(rows: xs.baseAddress!, count: o.rows, into: ys.baseAddress!) }
            for _ in 0..<o.repeats {
                let (t0, c0) = (now(), cpuNow())
                dense.predict(rows: xs.baseAddress!, count: o.rows, into: ys.baseAddress!)
                let (t1, c1) = (now(), cpuNow())
                times.append(t1 - t0)
                cpuTimes.append(c1 - c0)
            }
        }
    }
    times.sort()
    let wall = median(times)
    let cpu = median(cpuTimes)
    let finite = y.allSatisfy(\.isFinite)
    let checksum = y.reduce(0, +)

    if let path = o.out {
        var le = Data(capacity: y.count * 8)
        for v in y { withUnsafeBytes(of: v.bitPattern.littleEndian) { le.append(contentsOf: $0) } }
        do { try le.write(to: URL(fileURLWithPath: path)) } catch { fail("cannot write \(path): \(error.localizedDescription)") }
    }

    var singleFields: [(String, String)] = []
    if o.single > 0 {
        let (seconds, cpu) = timeSingle(model, x, rows: o.rows, features: o.features, count: o.single)
        singleFields = [("single_predictions", String(o.single)),
                        ("single_microseconds", jsonNumber(seconds / Double(o.single) * 1e6)),
                        ("single_cpu_microseconds", jsonNumber(cpu / Double(o.single) * 1e6))]
    }

    let fields: [(String, String)] = [
        ("model", "\"\(model.name)\""),
        ("specType", "\"\(model.specType)\""),
        ("rows", String(o.rows)),
        ("features", String(o.features)),
        ("outputWidth", String(width)),
        ("repeat", String(o.repeats)),
        ("median_seconds", jsonNumber(wall)),
        ("min_seconds", jsonNumber(times.first!)),
        ("max_seconds", jsonNumber(times.last!)),
        ("rows_per_second", jsonNumber(Double(o.rows) / wall)),
        ("median_cpu_seconds", jsonNumber(cpu)),
        ("rows_per_cpu_second", jsonNumber(Double(o.rows) / cpu)),
        ("all_finite", finite ? "true" : "false"),
        ("checksum", jsonNumber(checksum)),
    ] + singleFields
    print("{" + fields.map { "\"\($0.0)\": \($0.1)" }.joined(separator: ", ") + "}")
    if !finite { exit(1) }
}

var arguments = Array(CommandLine.arguments.dropFirst())
guard let command = arguments.first else { fail("no command\n\n\(usage)") }
arguments.removeFirst()
switch command {
case "dense": runDense(Options(arguments))
case "trees": runDense(Options(arguments), family: "tree ensemble", specTypePrefix: "treeEnsemble")
case "glm": runDense(Options(arguments), family: "GLM", specTypePrefix: "glm")
case "gemm": runGemm(arguments)
case "columns": runColumns(arguments)
case "-h", "--help", "help": print(usage + "\n\n" + gemmUsage + "\n\n" + columnsUsage)
default: fail("unknown command '\(command)'\n\n\(usage)")
}
