import CortadoModels
import Foundation
#if canImport(Glibc)
import Glibc
#endif

// `cortado-bench columns MODEL ROWS`: one batch of ROWS random rows predicted two ways, timed
// alternately in one process: as feature providers, one per row with its own arrays
// (`predictions(fromBatch:)`, the row path), and as columns, one array or list per input
// (`predictions(fromColumns:)`). The inputs are made before timing, so neither side pays for
// decoding; what differs is how the batch reaches the model and how its outputs come back.

let columnsUsage = """
usage: cortado-bench columns MODEL.mlmodel ROWS [--repeat R] [--warmup N]

  MODEL      a model whose inputs are multi-arrays of a fixed shape (float32 rows), doubles or
             int64s (random values in [-1, 1), int64s in [-3, 3]).
  ROWS       rows in the batch.
  --repeat   timed runs of each way (default 20, alternating); medians are reported.
  --warmup   untimed runs of each first (default 3).

Prints JSON: rows, median wall seconds and process CPU seconds of each way, rows/s, the ratios
rows/columns (above 1: columns are faster), and the largest difference between the two ways'
numeric outputs (relative to max(1, |value|)).
"""

func runColumns(_ args: [String]) {
    var positional: [String] = []
    var repeats = 20, warmup = 3
    var i = 0
    while i < args.count {
        switch args[i] {
        case "--repeat", "--warmup":
            guard i + 1 < args.count, let v = Int(args[i + 1]), v >= (args[i] == "--repeat" ? 1 : 0) else {
                fail("\(args[i]) needs a non-negative integer\n\n\(columnsUsage)")
            }
            if args[i] == "--repeat" { repeats = v } else { warmup = v }
            i += 1
        case "-h", "--help": print(columnsUsage); exit(0)
        default: positional.append(args[i])
        }
        i += 1
    }
    guard positional.count == 2, let rows = Int(positional[1]), rows >= 1 else { fail("expected MODEL and ROWS\n\n\(columnsUsage)") }
    CortadoModels.registerBuiltinKinds()
    let model: MLModel
    do { model = try MLModel(contentsOf: URL(fileURLWithPath: positional[0])) } catch { fail("cannot load \(positional[0]): \(error)") }

    var state: UInt64 = 11
    func value() -> Double {
        state = state &* 6364136223846793005 &+ 1442695040888963407
        return Double(Int64(bitPattern: state >> 11) % 2_000_000) / 1_000_000 - 1
    }
    let columns = MLFeatureColumns(count: rows)
    var perRow = [[String: MLFeatureValue]](repeating: [:], count: rows)
    do {
        for input in model.modelDescription.inputs {
            switch input.type {
            case .multiArray:
                guard let shape = input.multiArrayConstraint?.shape, !shape.isEmpty else { fail("input '\(input.name)' has no fixed shape") }
                let column = try MLMultiArray(shape: [rows] + shape, dataType: .float32)
                let width = shape.reduce(1, *)
                for r in 0..<rows {
                    let row = try MLMultiArray(shape: shape, dataType: .float32)
                    for k in 0..<width {
                        let v = value()
                        row.setDouble(v, at: k)
                        column.setDouble(v, at: r * width + k)
                    }
                    perRow[r][input.name] = MLFeatureValue(multiArray: row)
                }
                columns.set(input.name, .arrays(column))
            case .double:
                let values = (0..<rows).map { _ in value() }
                for r in 0..<rows { perRow[r][input.name] = MLFeatureValue(double: values[r]) }
                columns.set(input.name, .doubles(values))
            case .int64:
                let values = (0..<rows).map { _ in Int64((value() * 3.5).rounded(.towardZero)) }
                for r in 0..<rows { perRow[r][input.name] = MLFeatureValue(int64: values[r]) }
                columns.set(input.name, .int64s(values))
            default:
                fail("input '\(input.name)' is \(input.type): only multi-arrays, doubles and int64s are generated")
            }
        }
    } catch { fail("cannot make inputs: \(error)") }
    let batch = MLArrayBatchProvider(array: perRow.map { MLDictionaryFeatureProvider(dictionary: $0) })

    var rowOut: MLBatchProvider?, columnOut: MLFeatureColumns?
    func timed(_ body: () throws -> Void) -> (Double, Double) {
        let (t0, c0) = (now(), clock(CLOCK_PROCESS_CPUTIME_ID))
        do { try body() } catch { fail("prediction failed: \(error)") }
        return (now() - t0, clock(CLOCK_PROCESS_CPUTIME_ID) - c0)
    }
    let runRows = { rowOut = try model.predictions(fromBatch: batch) }
    let runColumns = { columnOut = try model.predictions(fromColumns: columns) }
    for _ in 0..<warmup {
        _ = timed(runRows)
        _ = timed(runColumns)
    }
    var rowTimes: [(Double, Double)] = [], columnTimes: [(Double, Double)] = []
    for _ in 0..<repeats {
        rowTimes.append(timed(runRows))
        columnTimes.append(timed(runColumns))
    }

    // The two ways' outputs, compared.
    var largest = 0.0
    if let rowOut, let columnOut {
        for r in 0..<rows {
            for name in columnOut.names {
                guard let a = rowOut.features(at: r).featureValue(for: name), let b = columnOut.value(name, row: r) else { continue }
                var pairs: [(Double, Double)] = []
                if let x = a.multiArrayValue, let y = b.multiArrayValue {
                    pairs = Array(zip(x.doubleValues(), y.doubleValues()))
                } else if a.type == .double || a.type == .int64 {
                    pairs = [(a.doubleValue, b.doubleValue)]
                } else if let scores = a.classScores, let other = b.classScores {
                    pairs = Array(zip(scores.scores, other.scores))
                }
                for (x, y) in pairs { largest = max(largest, abs(x - y) / max(1, abs(x))) }
            }
        }
    }
    let rowWall = median(rowTimes.map(\.0)), rowCPU = median(rowTimes.map(\.1))
    let columnWall = median(columnTimes.map(\.0)), columnCPU = median(columnTimes.map(\.1))
    let fields: [(String, String)] = [
        ("model", "\"\(model.name)\""),
        ("specType", "\"\(model.specType)\""),
        ("rows", String(rows)),
        ("repeat", String(repeats)),
        ("rows_median_seconds", jsonNumber(rowWall)),
        ("columns_median_seconds", jsonNumber(columnWall)),
        ("rows_median_cpu_seconds", jsonNumber(rowCPU)),
        ("columns_median_cpu_seconds", jsonNumber(columnCPU)),
        ("rows_per_second_rows", jsonNumber(Double(rows) / rowWall)),
        ("rows_per_second_columns", jsonNumber(Double(rows) / columnWall)),
        ("wall_ratio_rows_over_columns", jsonNumber(rowWall / columnWall)),
        ("cpu_ratio_rows_over_columns", jsonNumber(rowCPU / columnCPU)),
        ("largest_relative_difference", jsonNumber(largest)),
    ]
    print("{" + fields.map { "\"\($0.0)\": \($0.1)" }.joined(separator: ", ") + "}")
}
