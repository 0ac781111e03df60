import CCortadoGemm
import CortadoCore
import Foundation

/// The columnar path of a network: an `.arrays` column of shape [rows] + row shape already is
/// the rows stacked along the Batch axis, so it is read where it lies (float32 rows whose
/// readers take rows in place, `NNInputRows`) or copied into the workspace once, never split
/// into rows and stacked again; each output is written once into one [rows] + shape array (the
/// caller's backing when given). Batches run 256 rows at a time and may be split over the
/// threads, as the row path does. What cannot stack goes row by row: rank-N tensor networks
/// (their rows run one at a time anyway), image inputs, inputs held as values or left out,
/// rows with a sequence axis, and networks whose outputs do not keep the batch apart.
extension NNCompiledNetwork: MLColumnarPredicting {
    /// Rows run as one workspace at most (as `predictions(from:)`).
    static let columnChunk = 256

    func predictions(columns: MLFeatureColumns, options: MLPredictionOptions) throws -> MLFeatureColumns {
        let n = columns.count
        guard n > 0, !tensorArrays, let stacked = try stackedInputs(columns) else {
            return try rowPredictions(columns: columns, options: options)
        }
        let (arrays, first) = stacked
        // The first chunk's plan says whether the outputs keep the batch apart, and their shapes.
        let chunk = Swift.min(n, Self.columnChunk)
        let probe = try plan(for: batched(first, rows: chunk))
        if chunk > 1 {
            for blob in kept where (probe.blobs[blob]?.shape.b ?? 0) % chunk != 0 {
                return try rowPredictions(columns: columns, options: options)
            }
        }
        let sink = try OutputColumns(network: self, slices: outputSlices(plan: probe, rows: chunk, options: options, blocks: false),
                                     rows: n, options: options)
        var start = 0
        while start < n {
            let end = Swift.min(n, start + Self.columnChunk)
            try runChunk(arrays, start..<end, first: first, sink: sink, options: options)
            start = end
        }
        return try sink.columns(network: self)
    }

    /// Each array input's column and one row's blob shape, when every input is an `.arrays`
    /// column of rows without a sequence axis; else nil (the rows go one by one).
    func stackedInputs(_ columns: MLFeatureColumns) throws -> ([MLMultiArray], [String: NNShape])? {
        var arrays: [MLMultiArray] = []
        var first: [String: NNShape] = [:]
        for input in inputs {
            guard case .array = input.kind, case .arrays(let array)? = columns.column(input.name),
                  array.shape.first == columns.count,
                  let shape = try? Self.blobShape(MLFeatureColumns.rowShape(array), feature: input.name, tensor: false),
                  shape.s == 1 else { return nil }
            arrays.append(array)
            first[input.name] = shape
        }
        return (arrays, first)
    }

    private func batched(_ first: [String: NNShape], rows: Int) -> [String: NNShape] {
        var shapes = first
        for (k, v) in first { shapes[k]!.b = v.b * rows }
        return shapes
    }

    /// Runs rows `range`: split over the threads when `shares` says so, else as one batch.
    private func runChunk(_ arrays: [MLMultiArray], _ range: Range<Int>, first: [String: NNShape], sink: OutputColumns,
                          options: MLPredictionOptions) throws {
        let n = range.count
        let workers = shares(rows: n, options: options)
        guard workers > 1 else {
            try runRows(arrays, range, first: first, threads: threads, sink: sink, options: options)
            return
        }
        let start = DispatchTime.now().uptimeNanoseconds
        let per = (n + workers - 1) / workers
        var failures = [Error?](repeating: nil, count: workers)
        failures.withUnsafeMutableBufferPointer { failures in
            NNThreads.run(workers: workers) { w in
                let share = Swift.min(range.upperBound, range.lowerBound + w * per)..<Swift.min(range.upperBound, range.lowerBound + (w + 1) * per)
                guard !share.isEmpty else { return }
                do {
                    try runRows(arrays, share, first: first, threads: 1, sink: sink, options: options)
                } catch {
                    failures[w] = error
                }
            }
        }
        if let failure = failures.lazy.compactMap({ $0 }).first { throw failure }
        noteRowTime(DispatchTime.now().uptimeNanoseconds - start, rows: n)
    }

    /// Rows `range` of `array` (rows along its first axis) as an array over the same memory.
    private static func rows(_ array: MLMultiArray, _ range: Range<Int>) -> MLMultiArray {
        // The view's strides are its parent's: it cannot fail.
        try! MLMultiArray(dataPointer: array.dataPointer + range.lowerBound * (array.strides.first ?? 1) * array.dataType.size,
                         shape: [range.count] + array.shape.dropFirst(), dataType: array.dataType, strides: array.strides, owner: array)
    }

    /// Runs rows `range` of the columns as one batch on `threads` threads, writing their outputs
    /// into `sink`.
    private func runRows(_ arrays: [MLMultiArray], _ range: Range<Int>, first: [String: NNShape], threads: Int, sink: OutputColumns,
                         options: MLPredictionOptions) throws {
        let start = DispatchTime.now().uptimeNanoseconds
        let n = range.count
        let plan = try plan(for: batched(first, rows: n))
        if n > 1 {
            for blob in kept where (plan.blobs[blob]?.shape.b ?? 0) % n != 0 {
                throw MLModelError(.generic, "output blob '\(blob)' does not keep a batch of \(n) rows apart")
            }
        }
        let base = plan.checkOut()
        defer { plan.checkIn(base) }
        var rowInputs: [NNInputRows?] = []
        var rowBuffers: [UnsafeMutablePointer<UnsafePointer<Float>>] = []
        defer { for buffer in rowBuffers { buffer.deallocate() } }
        for (index, input) in inputs.enumerated() {
            let t = plan.blobs[input.name]!
            let per = t.count / n
            let column = arrays[index]
            // Float32 rows whose only readers read rows in place stay where they are (unless
            // they are few floats, which copy faster than the pointers are set up).
            if n * per >= Self.rowsInPlaceFloats, column.dataType == .float32, column.isContiguous,
               let slot = plan.rowInputs.firstIndex(of: input.name) {
                if rowInputs.isEmpty { rowInputs = Array(repeating: nil, count: plan.rowInputs.count) }
                let pointers = UnsafeMutablePointer<UnsafePointer<Float>>.allocate(capacity: n)
                let floats = column.dataPointer.assumingMemoryBound(to: Float.self) + range.lowerBound * per
                for r in 0..<n { pointers[r] = UnsafePointer(floats + r * per) }
                rowBuffers.append(pointers)
                rowInputs[slot] = NNInputRows(pointers: UnsafePointer(pointers), floats: per)
                continue
            }
            // Else one copy (converted to float32) into the batched blob; large ones by the
            // network's threads, a share of the rows each.
            let workers = n * per >= Self.parallelCopyFloats ? Swift.max(1, Swift.min(threads, NNThreads.cores, n)) : 1
            let share = (n + workers - 1) / workers
            NNThreads.run(workers: workers) { worker in
                let r0 = Swift.min(n, worker * share), r1 = Swift.min(n, (worker + 1) * share)
                guard r0 < r1 else { return }
                Self.rows(column, (range.lowerBound + r0)..<(range.lowerBound + r1)).copyFloats(into: base + t.offset + r0 * per)
            }
        }
        _ = MLCustomFailure.take()
        let finished = try plan.run(on: base, threads: threads, times: options.layerTimes, rows: rowInputs)
        defer { finished.release() }
        // A custom layer's plugin failed (its outputs hold NaN): fail the prediction with its message.
        if let failure = MLCustomFailure.take() { throw failure }
        let slices = try outputSlices(plan: finished.plan, rows: n, options: options, blocks: false)
        try sink.write(slices, base: finished.base, rows: range, network: self)
        if threads == self.threads { noteRowTime(DispatchTime.now().uptimeNanoseconds - start, rows: n) }
    }
}

/// Where a columnar batch's outputs go: one [rows] + shape array per array output (the caller's
/// backing when given), one Double per row for double outputs, one image value per row for
/// image outputs, and the classifier's scores; chunks and thread shares each write their rows.
final class OutputColumns: @unchecked Sendable {
    let rows: Int
    /// By output (in `outputs` order): the array output's column, or nil.
    var arrays: [MLMultiArray?]
    /// By output: a double output's values (`rows` of them), or nil.
    var doubles: [UnsafeMutablePointer<Double>?]
    /// By output: an image output's values, or empty.
    var images: [[MLFeatureValue?]]
    /// The classifier's scores, `labels.count` a row.
    var scores: UnsafeMutablePointer<Double>?
    private let lock = NSLock()

    init(network: NNCompiledNetwork, slices: [NNCompiledNetwork.OutputSlice], rows: Int, options: MLPredictionOptions) throws {
        self.rows = rows
        arrays = []
        doubles = []
        images = []
        for (index, output) in network.outputs.enumerated() {
            var array: MLMultiArray?, values: UnsafeMutablePointer<Double>?, pictures: [MLFeatureValue?] = []
            switch output.kind {
            case .array:
                let slice = slices[index]
                array = try options.outputColumn(named: output.name, rows: rows, shape: slice.dims, dataType: slice.dataType)
            case .double:
                values = .allocate(capacity: rows)
            case .image:
                pictures = Array(repeating: nil, count: rows)
            }
            arrays.append(array)
            doubles.append(values)
            images.append(pictures)
        }
        if let classifier = network.classifier {
            scores = .allocate(capacity: Swift.max(1, rows * classifier.labels.count))
        }
    }

    deinit {
        for case let values? in doubles { values.deallocate() }
        scores?.deallocate()
    }

    /// Writes the outputs of rows `range`, which ran as one batch with these slices in `base`.
    func write(_ slices: [NNCompiledNetwork.OutputSlice], base: UnsafeMutablePointer<Float>, rows range: Range<Int>,
               network: NNCompiledNetwork) throws {
        let n = range.count
        // Row r's part of a slice: in place when the batch has no sequence axis, else gathered
        // step by step (the batch axis is inside the sequence axis).
        func withRow(_ s: NNCompiledNetwork.OutputSlice, _ r: Int, _ body: (UnsafeMutablePointer<Float>) throws -> Void) rethrows {
            let shape = s.shape
            if n == 1 || shape.s == 1 { return try body(base + s.tensor.offset + r * shape.count) }
            let tmp = UnsafeMutablePointer<Float>.allocate(capacity: shape.count)
            defer { tmp.deallocate() }
            let block = shape.b * shape.chw
            for step in 0..<shape.s {
                (tmp + step * block).update(from: base + s.tensor.offset + (step * n + r) * block, count: block)
            }
            try body(tmp)
        }
        for (index, output) in network.outputs.enumerated() {
            let s = slices[index]
            switch output.kind {
            case .array:
                let column = arrays[index]!
                let per = s.shape.count
                guard column.count == rows * per else {
                    throw MLModelError.featureType(output.name, "output rows of \(per) values do not fill shape \(column.shape)")
                }
                let target = try MLMultiArray(dataPointer: column.dataPointer + range.lowerBound * (column.strides.first ?? per) * column.dataType.size,
                                              shape: [n] + column.shape.dropFirst(), dataType: column.dataType, strides: column.strides, owner: column)
                if n == 1 || s.shape.s == 1 {
                    target.write(contiguous: UnsafeBufferPointer(start: base + s.tensor.offset, count: n * per))
                } else {
                    let gathered = UnsafeMutablePointer<Float>.allocate(capacity: n * per)
                    defer { gathered.deallocate() }
                    for r in 0..<n { withRow(s, r) { (gathered + r * per).update(from: $0, count: per) } }
                    target.write(contiguous: UnsafeBufferPointer(start: gathered, count: n * per))
                }
            case .double:
                let values = doubles[index]!
                for r in 0..<n { withRow(s, r) { values[range.lowerBound + r] = Double($0[0]) } }
            case .image(let space):
                var made: [MLFeatureValue] = []
                for r in 0..<n {
                    try withRow(s, r) { made.append(MLFeatureValue(image: try NNImageOutput.image($0, shape: s.shape, colorSpace: space, feature: s.name))) }
                }
                lock.lock()
                for (r, value) in made.enumerated() { images[index][range.lowerBound + r] = value }
                lock.unlock()
            }
        }
        if let classifier = network.classifier, let scores {
            let s = slices[network.outputs.count]
            let k = classifier.labels.count
            guard s.shape.count == k else {
                throw MLModelError(.invalidModel, "blob '\(classifier.blob)' holds \(s.shape.count) class scores for \(k) class labels")
            }
            for r in 0..<n {
                withRow(s, r) { p in
                    let out = scores + (range.lowerBound + r) * k
                    for c in 0..<k { out[c] = Double(p[c]) }
                }
            }
        }
    }

    /// The finished columns.
    func columns(network: NNCompiledNetwork) throws -> MLFeatureColumns {
        let out = MLFeatureColumns(count: rows, capacity: network.outputs.count + (network.classifier == nil ? 0 : 2))
        for (index, output) in network.outputs.enumerated() {
            switch output.kind {
            case .array: out.set(output.name, .arrays(arrays[index]!))
            case .double: out.set(output.name, .doubles(Array(UnsafeBufferPointer(start: doubles[index]!, count: rows))))
            case .image: out.set(output.name, .values(images[index].map { $0! }))
            }
        }
        if let classifier = network.classifier, let scores {
            classifier.names.setColumns(labels: classifier.labels, scores: scores, count: rows, in: out)
        }
        return out
    }
}
