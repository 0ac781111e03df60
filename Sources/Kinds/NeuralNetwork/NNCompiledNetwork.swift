import CCortadoGemm
import CortadoCore
import CortadoSpec
import Foundation
import Synchronization

/// A compiled `NeuralNetwork`, `NeuralNetworkClassifier` or `NeuralNetworkRegressor`.
///
/// Loading builds every layer (weights decoded and laid out once), checks the graph and plans
/// it for the declared input shapes, so shape errors surface at load. A request with another
/// allowed shape (enumerated or ranged inputs, flexible image sizes, a batch) gets its own
/// plan, cached. Predictions fill a pooled workspace, run the steps and copy the outputs out.
/// Arrays map onto blobs by `NNShape(_:)` under `RANK5_ARRAY_MAPPING` (the classic layout);
/// under `EXACT_ARRAY_MAPPING` a blob is a tensor of the array's own rank, and images are
/// `[1, C, H, W]` under `RANK4_IMAGE_MAPPING`. Rows of rank-N networks run one at a time.
final class NNCompiledNetwork: MLCompiledModel, @unchecked Sendable {
    enum InputKind {
        case array
        case image(NNImageInput)
    }
    struct Input {
        let name: String
        let kind: InputKind
        let isOptional: Bool
        /// The declared blob shape (an image's default size), planned at load; an optional
        /// array input left out is this many zeros.
        let declared: NNShape?
    }
    enum OutputKind {
        case array(declaredShape: [Int], dataType: MLMultiArrayDataType)
        case double
        case image(MLImageColorSpace)
    }
    struct Output {
        let name: String
        let blob: String
        let kind: OutputKind
    }
    struct Classifier {
        let labels: MLClassLabels
        let names: MLClassifierOutputNames
        let blob: String
    }

    let graph: NNGraph
    let inputs: [Input]
    let outputs: [Output]
    let classifier: Classifier?
    let threads: Int
    /// `EXACT_ARRAY_MAPPING`: array inputs are tensors of their own rank, outputs keep the
    /// rank of their blob.
    let tensorArrays: Bool
    /// `RANK4_IMAGE_MAPPING`: image inputs are `[1, C, H, W]` tensors.
    let rank4Images: Bool
    /// Batches may be split over the threads (`shares`): no custom layers (a plugin is called
    /// from one thread at a time within a prediction) and no control flow (a branch decided
    /// by a share's rows could go another way for the whole batch).
    let splittable: Bool
    /// One line per layer whose weights hold NaN or infinities (kept and run, as Core ML does).
    let weightWarnings: [String]
    /// Blobs the plans keep until the end.
    let kept: Set<String>
    private let lock = NSLock()
    private var plans: [[NNShape]: NNPlan] = [:]
    private var planOrder: [[NNShape]] = []
    private static let maxPlans = 16
    /// The plan for the declared shapes, when every input declares one.
    private(set) var defaultPlan: NNPlan?
    /// The network this one is a variant of (`init(variantOf:graph:)`): its plans lend theirs
    /// their workspaces.
    private let variantBase: NNCompiledNetwork?

    var classLabels: MLClassLabels? { classifier?.labels }

    init(spec: CoreML_Specification_Model, context: MLCompileContext) throws {
        let description = context.description
        let layers: [CoreML_Specification_NeuralNetworkLayer]
        let preprocessing: [CoreML_Specification_NeuralNetworkPreprocessing]
        var labels: MLClassLabels?
        var probabilityBlob = ""
        var mapping: (CoreML_Specification_NeuralNetworkMultiArrayShapeMapping, CoreML_Specification_NeuralNetworkImageShapeMapping)
        switch spec.type {
        case .neuralNetwork(let nn)?:
            (layers, preprocessing) = (nn.layers, nn.preprocessing)
            mapping = (nn.arrayInputShapeMapping, nn.imageInputShapeMapping)
        case .neuralNetworkRegressor(let nn)?:
            (layers, preprocessing) = (nn.layers, nn.preprocessing)
            mapping = (nn.arrayInputShapeMapping, nn.imageInputShapeMapping)
        case .neuralNetworkClassifier(let nn)?:
            (layers, preprocessing) = (nn.layers, nn.preprocessing)
            mapping = (nn.arrayInputShapeMapping, nn.imageInputShapeMapping)
            switch nn.classLabels {
            case .stringClassLabels(let l)?: labels = MLClassLabels(strings: l)
            case .int64ClassLabels(let l)?: labels = MLClassLabels(int64s: l)
            case nil: throw MLModelError(.invalidModel, "neural network classifier has no class labels")
            }
            probabilityBlob = nn.labelProbabilityLayerName
        default:
            throw MLModelError(.invalidModel, "not a neural network")
        }
        tensorArrays = mapping.0 == .exactArrayMapping
        rank4Images = mapping.1 == .rank4ImageMapping
        threads = context.configuration.threadCount > 0 ? context.configuration.threadCount : NNThreads.cores
        _ = NNThreads.blas // OpenBLAS's thread count, set before any layer calls it
        let audit = NNWeightAudit()
        graph = try NNWeightAudit.$current.withValue(audit) { try NNGraph(layers: layers, inputs: description.inputs.map(\.name)) }
        weightWarnings = audit.warnings
        splittable = !graph.nodes.contains { $0.layer is CustomLayer || $0.layer is any NNControlLayer }

        var inputs: [Input] = []
        for feature in description.inputs {
            switch feature.type {
            case .multiArray:
                let dims = feature.multiArrayConstraint?.shape ?? []
                let declared = dims.isEmpty ? nil : try Self.blobShape(dims, feature: feature.name, tensor: tensorArrays)
                inputs.append(Input(name: feature.name, kind: .array, isOptional: feature.isOptional, declared: declared))
            case .image:
                let pre = preprocessing.first { $0.featureName == feature.name || ($0.featureName.isEmpty && description.inputs.count == 1) }
                let image = try NNImageInput(feature: feature, preprocessing: pre)
                inputs.append(Input(name: feature.name, kind: .image(image), isOptional: feature.isOptional, declared: Self.imageBlob(image.defaultShape, rank4: rank4Images)))
            default:
                throw MLModelError(.invalidModel, feature: feature.name, "neural network inputs must be multi-arrays or images, not \(feature.type)")
            }
        }
        self.inputs = inputs

        var outputs: [Output] = []
        var classifier: Classifier?
        if let labels {
            let names = try MLClassifierOutputNames(description, labels: labels)
            let produced = Set(graph.nodes.flatMap(\.outputs))
            if probabilityBlob.isEmpty {
                if let p = names.probabilitiesName, produced.contains(p) {
                    probabilityBlob = p
                } else if let last = graph.nodes.last?.outputs.first {
                    probabilityBlob = last
                }
            }
            probabilityBlob = graph.finalNames[probabilityBlob] ?? probabilityBlob
            guard produced.contains(probabilityBlob) else {
                throw MLModelError(.invalidModel, "the class probabilities come from blob '\(probabilityBlob)', which no layer writes")
            }
            classifier = Classifier(labels: labels, names: names, blob: probabilityBlob)
        }
        for feature in description.outputs {
            if let classifier, feature.name == classifier.names.labelName || feature.name == classifier.names.probabilitiesName { continue }
            // The blob with the output's last value (a loop may have written it again).
            let blob = graph.finalNames[feature.name] ?? feature.name
            switch feature.type {
            case .multiArray:
                let c = feature.multiArrayConstraint
                outputs.append(Output(name: feature.name, blob: blob, kind: .array(declaredShape: c?.shape ?? [], dataType: c?.dataType ?? .float32)))
            case .double:
                outputs.append(Output(name: feature.name, blob: blob, kind: .double))
            case .image:
                outputs.append(Output(name: feature.name, blob: blob, kind: .image(feature.imageConstraint!.colorSpace)))
            default:
                throw MLModelError(.invalidModel, feature: feature.name, "neural network outputs must be multi-arrays, doubles or images, not \(feature.type)")
            }
        }
        self.outputs = outputs
        self.classifier = classifier
        kept = Set(outputs.map(\.blob) + [classifier?.blob].compactMap { $0 })
        variantBase = nil

        graph.fuseEpilogues(keeping: kept)

        // Plan the declared shapes now, so that shape errors are load errors.
        let declared = inputs.compactMap { input in input.declared.map { (input.name, $0) } }
        if declared.count == inputs.count {
            defaultPlan = try plan(for: Dictionary(uniqueKeysWithValues: declared))
        }
    }

    /// A variant of `base` over `graph` (`base.graph` with some layers rebuilt: see
    /// `NNGraph.replacing`): the same inputs, outputs and labels, plans of its own.
    init(variantOf base: NNCompiledNetwork, graph: NNGraph) throws {
        self.graph = graph
        inputs = base.inputs
        outputs = base.outputs
        classifier = base.classifier
        threads = base.threads
        tensorArrays = base.tensorArrays
        rank4Images = base.rank4Images
        splittable = base.splittable
        weightWarnings = base.weightWarnings
        kept = base.kept
        variantBase = base
        let declared = inputs.compactMap { input in input.declared.map { (input.name, $0) } }
        if declared.count == inputs.count {
            defaultPlan = try plan(for: Dictionary(uniqueKeysWithValues: declared))
        }
    }

    static func blobShape(_ dims: [Int], feature: String, tensor: Bool) throws -> NNShape {
        if tensor {
            guard dims.allSatisfy({ $0 > 0 }) else { throw MLModelError(.featureType, feature: feature, "shape \(dims) has a dimension below 1") }
            return NNShape(tensor: dims)
        }
        do {
            return try NNShape(dims)
        } catch let e as MLModelError {
            throw MLModelError(e.code, feature: feature, e.message)
        }
    }

    /// An image's `[1, 1, C, H, W]` blob, or `[1, C, H, W]` under `RANK4_IMAGE_MAPPING`.
    static func imageBlob(_ shape: NNShape, rank4: Bool) -> NNShape {
        rank4 ? NNShape(tensor: [shape.b, shape.c, shape.h, shape.w]) : shape
    }

    // MARK: Plans

    func plan(for shapes: [String: NNShape]) throws -> NNPlan {
        let key = inputs.map { shapes[$0.name] ?? NNShape(s: 0, b: 0, c: 0, h: 0, w: 0) }
        lock.lock()
        if let p = plans[key] { lock.unlock(); return p }
        lock.unlock()
        let plan = try NNPlan(graph: graph, inputShapes: shapes, keep: kept)
        if let variantBase, let basePlan = try? variantBase.plan(for: shapes) { plan.shareWorkspaces(with: basePlan) }
        lock.lock(); defer { lock.unlock() }
        if let p = plans[key] { return p }
        if planOrder.count >= Self.maxPlans, let evict = planOrder.first(where: { plans[$0] !== defaultPlan }) {
            plans[evict] = nil
            planOrder.removeAll { $0 == evict }
        }
        plans[key] = plan
        planOrder.append(key)
        return plan
    }

    // MARK: Predicting

    func prediction(from input: MLFeatureProvider, options: MLPredictionOptions) throws -> MLFeatureProvider {
        try run([input], options: options)[0]
    }

    /// Rows of one shape run as one pass along the Batch axis (classic layouts; rows of rank-N
    /// networks run one at a time, so batching them gains nothing).
    var runsBatchesAsOne: Bool { !tensorArrays }

    func predictions(from batch: MLBatchProvider, options: MLPredictionOptions) throws -> [MLFeatureProvider] {
        let rows = (0..<batch.count).map { batch.features(at: $0) }
        if rows.count <= 1 { return try rows.map { try run([$0], options: options)[0] } }
        // Rows of one shape run as one batch along the Batch axis (up to 256 rows at a time).
        if rows.count <= 256 { return try run(rows, options: options) }
        var out: [MLFeatureProvider] = []
        out.reserveCapacity(rows.count)
        var start = 0
        while start < rows.count {
            let end = min(start + 256, rows.count)
            out += try run(Array(rows[start..<end]), options: options)
            start = end
        }
        return out
    }

    /// Floats of a batch's array input from which its rows are read in place when they can be;
    /// fewer are copied (one request of 784 floats copies in ~0.1 µs, less than setting up
    /// the row pointers takes).
    static let rowsInPlaceFloats = 4096

    /// Floats of a batch's array input from which the rows are copied in on several threads.
    static let parallelCopyFloats = 1 << 16

    /// Shapes of one row's inputs.
    private func rowShapes(_ row: MLFeatureProvider) throws -> [String: NNShape] {
        var shapes: [String: NNShape] = [:]
        for input in inputs { shapes[input.name] = try inputShape(input, in: row) }
        return shapes
    }

    /// The blob shape of one input of a row.
    private func inputShape(_ input: Input, in row: MLFeatureProvider) throws -> NNShape {
        guard let value = row.featureValue(for: input.name), !value.isUndefined else {
            // An optional array input left out (e.g. an RNN's initial state) is zeros.
            if input.isOptional, case .array = input.kind, let declared = input.declared {
                return declared
            }
            throw MLModelError.featureType(input.name, "neural network inputs cannot be left out")
        }
        switch input.kind {
        case .array:
            guard let a = value.multiArrayValue else { throw MLModelError.featureType(input.name, "expected a multi-array") }
            return try Self.blobShape(a.shape, feature: input.name, tensor: tensorArrays)
        case .image(let binding):
            guard let image = value.imageValue else { throw MLModelError.featureType(input.name, "expected an image") }
            return Self.imageBlob(binding.shape(for: image), rank4: rank4Images)
        }
    }

    /// Runs rows together when they share shapes and have no sequence axis; else one by one.
    private func run(_ rows: [MLFeatureProvider], options: MLPredictionOptions) throws -> [MLFeatureProvider] {
        let first = try rowShapes(rows[0])
        var stackable = rows.count > 1 && !tensorArrays && first.values.allSatisfy { $0.s == 1 }
        // Each array input's multi-array in every row (by input, in `inputs` order; empty for
        // an image input), looked up once per batch.
        var arrays: [[MLMultiArray?]] = []
        if stackable {
            arrays = inputs.map { input in
                guard case .array = input.kind else { return [] }
                return rows.map { Self.array(input.name, in: $0) }
            }
            // Compared input by input: an array with row 0's dimensions has its blob shape.
            let firstShapes = inputs.map { first[$0.name]! }
            check: for (i, input) in inputs.enumerated() {
                let dims = arrays[i].first??.shape
                for r in 1..<rows.count {
                    if let dims, arrays[i][r]?.shape == dims { continue }
                    if try inputShape(input, in: rows[r]) != firstShapes[i] {
                        stackable = false
                        break check
                    }
                }
            }
        }
        if rows.count > 1 && !stackable {
            return try rows.map { try run([$0], options: options)[0] }
        }
        let n = rows.count
        let workers = shares(rows: n, options: options)
        guard workers > 1 else { return try runStacked(rows, 0..<n, arrays: arrays, first: first, threads: threads, options: options) }
        // One share of the rows per thread, each run on one thread with its own workspace.
        let start = DispatchTime.now().uptimeNanoseconds
        let per = (n + workers - 1) / workers
        var results = [[MLFeatureProvider]](repeating: [], count: workers)
        var failures = [Error?](repeating: nil, count: workers)
        results.withUnsafeMutableBufferPointer { results in
            failures.withUnsafeMutableBufferPointer { failures in
                NNThreads.run(workers: workers) { w in
                    let share = Swift.min(n, w * per)..<Swift.min(n, (w + 1) * per)
                    guard !share.isEmpty else { return }
                    do {
                        results[w] = try runStacked(rows, share, arrays: arrays, first: first, threads: 1, options: options)
                    } catch {
                        failures[w] = error
                    }
                }
            }
        }
        if let failure = failures.lazy.compactMap({ $0 }).first { throw failure }
        noteRowTime(DispatchTime.now().uptimeNanoseconds - start, rows: n)
        var out: [MLFeatureProvider] = []
        out.reserveCapacity(n)
        for share in results { out += share }
        return out
    }

    /// An array input's value in a row (nil: left out).
    private static func array(_ name: String, in row: MLFeatureProvider) -> MLMultiArray? {
        guard let value = row.featureValue(for: name), !value.isUndefined else { return nil }
        return value.multiArrayValue
    }

    // MARK: Splitting a batch over the threads

    /// `CORTADO_BATCH_SPLIT`: nil (the rule in `shares`), or forced on (true) or off (false).
    static let batchSplit: Bool? = {
        switch ProcessInfo.processInfo.environment["CORTADO_BATCH_SPLIT"]?.lowercased() {
        case "1", "on", "always": return true
        case "0", "off", "never": return false
        default: return nil
        }
    }()

    /// Batches expected to take at least this long (from the last batch's time per row) are
    /// split, one share of the rows per thread; a helper thread that has to be woken then
    /// costs a small part of the batch.
    static let splitNanos = 200_000

    /// Wall time per row of the last stacked batch (nanoseconds; 0 until one has run).
    private let rowNanos = Atomic<Int>(0)

    func noteRowTime(_ nanos: UInt64, rows: Int) {
        rowNanos.store(Int(nanos) / Swift.max(1, rows), ordering: .relaxed)
    }

    /// The shares a batch of `rows` stacked rows is split into: one per thread (up to the
    /// cores) when each thread gets at least one row, the batch keeps the threads busy long
    /// enough and the network runs rows independently; else 1 (the layers split their own
    /// work over the threads). With whole shares on each thread the layers need no
    /// hand-over between them, and the input and output copies run on every thread too.
    func shares(rows: Int, options: MLPredictionOptions) -> Int {
        let workers = Swift.min(threads, NNThreads.cores, rows)
        guard workers > 1, options.layerTimes == nil, splittable, Self.batchSplit != false else { return 1 }
        if Self.batchSplit == true { return workers }
        // Uneven shares (3 rows on 2 threads) leave a thread idle for a row's time.
        guard rows % workers == 0 || rows >= 8 * workers else { return 1 }
        return rowNanos.load(ordering: .relaxed) * rows >= Self.splitNanos ? workers : 1
    }

    /// Runs stacked rows `range` (one shape, no sequence axis) as one batch on `threads`
    /// threads; `arrays` holds the rows' array inputs as `run` looked them up (empty: not
    /// looked up).
    private func runStacked(_ all: [MLFeatureProvider], _ range: Range<Int>, arrays: [[MLMultiArray?]], first: [String: NNShape],
                            threads: Int, options: MLPredictionOptions) throws -> [MLFeatureProvider] {
        let start = DispatchTime.now().uptimeNanoseconds
        let n = range.count
        var shapes = first
        for (k, v) in first { shapes[k]!.b = v.b * n }
        let plan = try plan(for: shapes)
        // Every output must keep the batch apart, or the rows run one by one.
        if n > 1 {
            for blob in kept where (plan.blobs[blob]?.shape.b ?? 0) % n != 0 {
                return try all[range].map { try run([$0], options: options)[0] }
            }
        }
        let base = plan.checkOut()
        defer { plan.checkIn(base) }
        // Array inputs left in the requests: their rows' pointers, and the arrays they point into.
        var rowInputs: [NNInputRows?] = []
        var rowBuffers: [UnsafeMutablePointer<UnsafePointer<Float>>] = []
        var held: [[MLMultiArray?]] = []
        defer {
            withExtendedLifetime(held) {}
            for buffer in rowBuffers { buffer.deallocate() }
        }
        for (index, input) in inputs.enumerated() {
            // Each row's values go straight into its slice of the batched blob.
            let t = plan.blobs[input.name]!
            let per = t.count / n
            switch input.kind {
            case .array:
                let column = arrays.isEmpty ? all[range].map { Self.array(input.name, in: $0) } : Array(arrays[index][range])
                // Float32 rows whose only readers read rows in place are not copied (unless they
                // are few floats, which copy faster than the pointers are set up).
                if n * per >= Self.rowsInPlaceFloats, let slot = plan.rowInputs.firstIndex(of: input.name),
                   let pointers = Self.floatRows(column, floats: per) {
                    if rowInputs.isEmpty { rowInputs = Array(repeating: nil, count: plan.rowInputs.count) }
                    rowInputs[slot] = NNInputRows(pointers: UnsafePointer(pointers), floats: per)
                    rowBuffers.append(pointers)
                    held.append(column)
                    continue
                }
                // Large batches of arrays are copied (and converted) by the network's threads,
                // each a share of the rows.
                let workers = n * per >= Self.parallelCopyFloats ? Swift.max(1, Swift.min(threads, NNThreads.cores, n)) : 1
                let share = (n + workers - 1) / workers
                NNThreads.run(workers: workers) { worker in
                    let r1 = Swift.min(n, (worker + 1) * share)
                    for r in (worker * share)..<r1 {
                        // The next row (a separate allocation) is fetched while this one converts.
                        if r + 1 < r1, let next = column[r + 1], next.isContiguous { cg_prefetch(next.dataPointer, next.count * next.dataType.size) }
                        let dst = base + t.offset + r * per
                        if let array = column[r] {
                            array.copyFloats(into: dst)
                        } else {
                            dst.update(repeating: 0, count: per)
                        }
                    }
                }
            case .image(let binding):
                for (r, row) in all[range].enumerated() {
                    let dst = base + t.offset + r * per
                    if let value = row.featureValue(for: input.name), !value.isUndefined {
                        try binding.write(value.imageValue!, feature: input.name, shape: binding.shape(for: value.imageValue!), into: dst)
                    } else {
                        dst.update(repeating: 0, count: per)
                    }
                }
            }
        }
        _ = MLCustomFailure.take()
        let finished = try plan.run(on: base, threads: threads, times: options.layerTimes, rows: rowInputs)
        defer { finished.release() }
        // A custom layer's plugin failed (its outputs hold NaN): fail the prediction with its message.
        if let failure = MLCustomFailure.take() { throw failure }
        let slices = try outputSlices(plan: finished.plan, rows: n, options: options)
        let out = try (0..<n).map { r in try readOutputs(slices, base: finished.base, row: r, rows: n, options: options) }
        if threads == self.threads { noteRowTime(DispatchTime.now().uptimeNanoseconds - start, rows: n) }
        return out
    }

    /// Pointers to the rows' values (a new buffer to deallocate) when every row is a contiguous
    /// float32 array of `floats` values; else nil (the rows are copied in, converted or zeros).
    private static func floatRows(_ column: [MLMultiArray?], floats: Int) -> UnsafeMutablePointer<UnsafePointer<Float>>? {
        for array in column {
            guard let array, array.dataType == .float32, array.count == floats, array.isContiguous else { return nil }
        }
        let pointers = UnsafeMutablePointer<UnsafePointer<Float>>.allocate(capacity: column.count)
        for (r, array) in column.enumerated() {
            pointers[r] = UnsafePointer(array!.dataPointer.assumingMemoryBound(to: Float.self))
        }
        return pointers
    }

    /// Where one output (or the classifier's scores) lies in a batch's workspace: its blob and
    /// the shape of one row's share, looked up once per batch; for an array output, the
    /// dimensions and strides every row's array takes, and (more than one row, no backing
    /// given) one block of memory the rows' arrays share.
    /// (A class: every row reads it, and copying a struct of arrays retained each of them.)
    final class OutputSlice {
        let tensor: NNTensor
        let shape: NNShape
        /// The output's name and kind (empty and nil for the classifier's scores).
        let name: String
        let kind: OutputKind?
        /// An array output's data type.
        var dataType = MLMultiArrayDataType.float32
        var dims: [Int] = []
        var strides: [Int] = []
        var block: NNOutputBlock?
        init(tensor: NNTensor, shape: NNShape, name: String, kind: OutputKind?) {
            self.tensor = tensor
            self.shape = shape
            self.name = name
            self.kind = kind
        }
    }

    /// The slices of `outputs` (in order) and then of the classifier's blob, for `rows` rows;
    /// without `blocks`, array outputs get no shared block (their rows are written elsewhere).
    func outputSlices(plan: NNPlan, rows: Int, options: MLPredictionOptions, blocks: Bool = true) throws -> [OutputSlice] {
        let blobs = outputs.map(\.blob) + [classifier?.blob].compactMap { $0 }
        return try blobs.enumerated().map { index, blob in
            guard let t = plan.blobs[blob] else {
                throw MLModelError(.featureType, "output blob '\(blob.split(separator: "#").first.map(String.init) ?? blob)' was not written (a branch taken does not write it)")
            }
            var shape = t.shape
            shape.b /= rows
            let output = index < outputs.count ? outputs[index] : nil
            let slice = OutputSlice(tensor: t, shape: shape, name: output?.name ?? "", kind: output?.kind)
            if let output, case .array(let declared, let dataType) = output.kind {
                slice.dataType = dataType
                if tensorArrays {
                    slice.dims = shape.rank == 0 ? [1] : shape.extents
                } else if !declared.isEmpty, declared.reduce(1, *) == shape.count {
                    slice.dims = declared
                } else if shape.s == 1 && shape.b == 1 {
                    slice.dims = [shape.c, shape.h, shape.w]
                } else {
                    slice.dims = shape.dims
                }
                slice.strides = MLMultiArray.rowMajorStrides(slice.dims)
                if blocks && rows > 1 && options.outputBackings[outputs[index].name] == nil {
                    slice.block = NNOutputBlock(bytes: rows * shape.count * dataType.size)
                }
            }
            return slice
        }
    }

    private func readOutputs(_ slices: [OutputSlice], base: UnsafeMutablePointer<Float>, row: Int, rows: Int,
                             options: MLPredictionOptions) throws -> MLFeatureProvider {
        // The row's slice of a blob: for each sequence step, its share of the batch axis.
        func slice(_ s: OutputSlice, _ body: (UnsafeMutablePointer<Float>, NNShape) throws -> Void) throws {
            let shape = s.shape
            if rows == 1 || shape.s == 1 {
                try body(base + s.tensor.offset + row * shape.count, shape)
                return
            }
            let tmp = UnsafeMutablePointer<Float>.allocate(capacity: shape.count)
            defer { tmp.deallocate() }
            let block = shape.b * shape.chw
            for step in 0..<shape.s {
                (tmp + step * block).update(from: base + s.tensor.offset + (step * rows + row) * block, count: block)
            }
            try body(tmp, shape)
        }
        func value(_ s: OutputSlice) throws -> MLFeatureValue {
            var value: MLFeatureValue?
            try slice(s) { p, shape in
                switch s.kind! {
                case .array:
                    let dataType = s.dataType
                    let array: MLMultiArray
                    if let block = s.block {
                        // The row's part of the batch's block; the block lives while any row's array does.
                        let bytes = shape.count * dataType.size
                        array = try MLMultiArray(dataPointer: block.pointer + row * bytes, shape: s.dims, dataType: dataType,
                                                 strides: s.strides, owner: block)
                    } else {
                        array = try options.outputArray(named: s.name, shape: s.dims, dataType: dataType)
                    }
                    array.write(contiguous: UnsafeBufferPointer(start: p, count: shape.count))
                    value = MLFeatureValue(multiArray: array)
                case .double:
                    value = MLFeatureValue(double: Double(p[0]))
                case .image(let space):
                    value = MLFeatureValue(image: try NNImageOutput.image(p, shape: shape, colorSpace: space, feature: s.name))
                }
            }
            return value!
        }
        // One output (a regressor's, a plain network's): a provider of one value, no list.
        if outputs.count == 1 && classifier == nil {
            return MLSingleFeatureProvider(name: slices[0].name, value: try value(slices[0]))
        }
        var entries: [(name: String, value: MLFeatureValue)] = []
        entries.reserveCapacity(outputs.count + 2)
        for index in 0..<outputs.count {
            entries.append((slices[index].name, try value(slices[index])))
        }
        if let classifier {
            var provider: MLFeatureProvider?
            try slice(slices[outputs.count]) { p, shape in
                let labels = classifier.labels
                guard shape.count == labels.count else {
                    throw MLModelError(.invalidModel, "blob '\(classifier.blob)' holds \(shape.count) class scores for \(labels.count) class labels")
                }
                var scores = [Double](repeating: 0, count: labels.count)
                var best = 0
                for i in 0..<labels.count {
                    scores[i] = Double(p[i])
                    if p[i] > p[best] { best = i }
                }
                scores.withUnsafeBufferPointer { buf in
                    if entries.isEmpty {
                        provider = classifier.names.provider(labels: labels, winner: best, scores: buf)
                    } else {
                        for (k, v) in classifier.names.outputs(labels: labels, winner: best, scores: buf) { entries.append((k, v)) }
                    }
                }
            }
            if let provider { return provider }
        }
        return MLFeatureListProvider.make(entries)
    }

    // MARK: Inspect

    var summary: [String] {
        let layerCount = graph.nodes.count + graph.nodes.reduce(0) { $0 + $1.fused.count }
        var lines = ["layers: \(layerCount)" + (layerCount != graph.nodes.count ? " (\(graph.nodes.count) steps after fusing)" : "")]
        for node in graph.nodes {
            var line = "  \(node.name): \(node.type)"
            if let plan = defaultPlan {
                // (A blob between a fused blocked pair is never stored: "in cache".)
                let fused = plan.blockedSteps.contains { $0.hasPrefix(node.name + " + ") }
                line += " → " + node.outputs.map { plan.blobs[$0].map { "\($0.shape)" } ?? (fused ? "in cache" : "?") }.joined(separator: ", ")
            }
            let detail = node.layer.detail
            if !detail.isEmpty { line += "  (\(detail))" }
            if !node.fused.isEmpty { line += "  + " + node.fused.joined(separator: " + ") }
            lines.append(line)
        }
        if let plan = defaultPlan {
            lines.append("workspace: \(plan.blobFloats * 4 / 1024) KiB of blobs + \(plan.scratchFloats * 4 / 1024) KiB scratch")
            if !plan.blockedSteps.isEmpty {
                lines.append("channel-blocked layout (NCHW16c): \(plan.blockedSteps.count) layers (\(plan.blockedSteps.joined(separator: ", "))), \(plan.reorderSteps) reorders to planar")
            }
            if !plan.rowInputs.isEmpty {
                lines.append("read where the request holds them (float32 arrays, not copied): " + plan.rowInputs.joined(separator: ", "))
            }
        }
        return lines + weightWarnings
    }
}

/// The neural-network model kind.
enum NeuralNetworkKind: MLModelKind {
    static let specTypes = ["neuralNetwork", "neuralNetworkClassifier", "neuralNetworkRegressor"]

    static func compile(_ spec: CoreML_Specification_Model, context: MLCompileContext) throws -> any MLCompiledModel {
        try NNCompiledNetwork(spec: spec, context: context)
    }
}

/// Registers the neural-network model kinds.
public enum NeuralNetworkKinds {
    public static func register(in registry: MLModelKindRegistry = .shared) {
        registry.register(NeuralNetworkKind.self)
    }
}

/// Memory holding one array output of every row of a batch; each row's `MLMultiArray` wraps
/// its part and keeps the block alive.
final class NNOutputBlock: @unchecked Sendable {
    let pointer: UnsafeMutableRawPointer

    init(bytes: Int) {
        pointer = UnsafeMutableRawPointer.allocate(byteCount: Swift.max(bytes, 1), alignment: 16)
    }

    deinit { pointer.deallocate() }
}
