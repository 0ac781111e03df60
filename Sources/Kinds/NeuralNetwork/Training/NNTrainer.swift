import CortadoCore
import CortadoSpec
import Foundation

/// Trains a neural network as its spec declares (`NetworkUpdateParameters`).
///
/// What runs, and the choices made where the format is silent:
/// - The layers from the inputs to the loss's input, in spec order, each through its
///   `NNTrainOp` (a layer on that path with no training form is refused at load, by name).
///   Only `innerProduct` and `convolution` weights and biases marked `isUpdatable` (in a
///   layer marked `isUpdatable`) change; every other layer is fixed, batchnorm included.
/// - One loss layer. `categoricalCrossEntropyLossLayer`: `−log p[target]` where `p` is a
///   softmax output over `[C, 1, 1]` (Core ML requires the softmax) and the target a class
///   index (an INT32 `[1]` array, or the class label of a classifier); its gradient is taken
///   through the softmax as `p − onehot`. `meanSquaredErrorLossLayer`: the mean over the
///   elements of `(y − target)²`.
/// - A mini-batch's loss and gradients are the means over its examples. The last mini-batch
///   of an epoch may be smaller; it is used, averaged over its own size.
/// - SGD: `v ← μ v + g; w ← w − η v` (plain SGD when μ = 0). Adam: Kingma & Ba with bias
///   correction, `w ← w − η m̂ / (√v̂ + ε)`, one step count across epochs.
/// - With `shuffle`, each epoch visits the examples in a new order drawn from a generator
///   seeded once with `seed` (SplitMix64, Fisher–Yates), so a run is reproducible; without,
///   in the given order.
/// - A loss or weight that is not finite stops training with an error; the task fails and
///   nothing is written.
/// - Layers that no updatable parameter reaches (a fixed body under a trained head) run once,
///   before the first epoch, over all the examples (inner products as one dgemm); epochs run
///   the layers that train and what follows them.
/// Arithmetic is in Double; weights are written back as Float32.
final class NNTrainer: MLModelTrainer {
    private enum Loss {
        /// Index of the softmax op whose output the loss reads.
        case crossEntropy(softmax: Int)
        case meanSquaredError(blob: String)
    }
    private enum Target {
        case classIndex(Int)
        case values([Double])
    }
    private struct Example {
        var inputs: [String: NNTrainTensor]
        var target: Target
    }

    private var spec: CoreML_Specification_Model
    private let settings: NNUpdateParameters
    private let ops: [any NNTrainOp]
    /// The spec layer each op came from.
    private let layerIndex: [Int]
    /// Ops the backward pass runs (they hold, or follow, an updatable parameter).
    private let needsGradient: [Bool]
    private let gradientBlobs: Set<String>
    private let loss: Loss
    /// The training input holding the target, and how to read it.
    private let targetName: String
    private let classLabels: MLClassLabels?
    private let classCount: Int?
    /// Network inputs on the path to the loss.
    private let networkInputs: [String]
    private var examples: [Example] = []
    private var random: SplitMix64
    private var adamStep = 0
    private var updatable: [NNTrainParameter]

    var parameters: [MLParameterKey: MLParameterValue] { settings.reported }
    var epochCount: Int { settings.epochs }

    init(spec: CoreML_Specification_Model, description: MLModelDescription, overrides: [MLParameterKey: MLParameterValue]) throws {
        self.spec = spec
        let network = try Self.network(spec)
        guard network.mapping != .exactArrayMapping else {
            throw MLModelError(.unsupported, "training runs networks with the classic rank-5 array mapping, not EXACT_ARRAY_MAPPING")
        }
        let update = network.update
        settings = try NNUpdateParameters(update, overrides: overrides)
        guard update.lossLayers.count == 1, let lossLayer = update.lossLayers.first else {
            throw MLModelError(.invalidModel, "the network's updateParams declare \(update.lossLayers.count) loss layers; training needs exactly one")
        }
        let lossInput: String, lossTarget: String
        switch lossLayer.lossLayerType {
        case .categoricalCrossEntropyLossLayer(let l)?: (lossInput, lossTarget) = (l.input, l.target)
        case .meanSquaredErrorLossLayer(let l)?: (lossInput, lossTarget) = (l.input, l.target)
        case nil: throw MLModelError(.invalidModel, "loss layer '\(lossLayer.name)' has no type")
        }

        // The layers the loss depends on, found backwards from its input (in spec order).
        let layers = network.layers
        var wanted: Set<String> = [lossInput]
        var chosen: [Int] = []
        for i in layers.indices.reversed() where layers[i].output.contains(where: wanted.contains) {
            chosen.append(i)
            wanted.subtract(layers[i].output)
            wanted.formUnion(layers[i].input)
        }
        chosen.reverse()
        let inputNames = Set(description.inputs.map(\.name))
        if let missing = wanted.subtracting(inputNames).sorted().first {
            throw MLModelError(.invalidModel, "loss layer '\(lossLayer.name)': blob '\(missing)' is neither a network input nor a layer's output")
        }
        networkInputs = wanted.sorted()
        for name in networkInputs where description.input(named: name)?.type != .multiArray {
            throw MLModelError(.unsupported, feature: name, "training reads multi-array inputs; this input is \(description.input(named: name).map { "\($0.type)" } ?? "undeclared")")
        }
        for layer in layers where layer.isUpdatable {
            switch layer.layer {
            case .innerProduct?, .convolution?: break
            default: throw MLModelError(.unsupported, "layer '\(layer.name)' (\(Self.typeName(layer))) is marked updatable; Core ML updates only innerProduct and convolution layers")
            }
        }

        var ops: [any NNTrainOp] = []
        var produced = Set(networkInputs)
        for i in chosen {
            let layer = layers[i]
            do {
                let op = try NNTrainOps.make(layer)
                guard !produced.contains(op.output) else {
                    throw NNTrainError("writes blob '\(op.output)', which an earlier layer or input already holds; training needs each blob written once")
                }
                produced.insert(op.output)
                ops.append(op)
            } catch let error as NNTrainError {
                throw MLModelError(.unsupported, "layer '\(layer.name)' (\(Self.typeName(layer))) \(error.message)")
            }
        }
        self.ops = ops
        layerIndex = chosen
        updatable = ops.flatMap { $0.parameters.filter(\.updatable) }
        guard !updatable.isEmpty else {
            throw MLModelError(.invalidModel, "no updatable weights lie on the path to loss layer '\(lossLayer.name)' (mark innerProduct or convolution weights isUpdatable)")
        }
        var gradientBlobs = Set<String>()
        var needs: [Bool] = []
        for op in ops {
            let needed = op.parameters.contains(where: \.updatable) || op.inputs.contains(where: gradientBlobs.contains)
            if needed { gradientBlobs.insert(op.output) }
            needs.append(needed)
        }
        needsGradient = needs
        self.gradientBlobs = gradientBlobs

        // The loss and its target.
        switch lossLayer.lossLayerType {
        case .categoricalCrossEntropyLossLayer?:
            guard let s = ops.lastIndex(where: { $0.output == lossInput }), ops[s] is NNTrainSoftmax else {
                throw MLModelError(.invalidModel, "categorical cross-entropy loss '\(lossLayer.name)' reads '\(lossInput)', which is not a softmax output (Core ML requires one)")
            }
            loss = .crossEntropy(softmax: s)
            // A classifier's target is its class label (coremltools names that training input
            // after the predicted feature); other networks take the class index.
            if description.trainingInputs.contains(where: { $0.name == lossTarget }) {
                targetName = lossTarget
                classLabels = nil
            } else if let labels = network.labels, let label = description.predictedFeatureName,
                      description.trainingInputs.contains(where: { $0.name == label }) {
                targetName = label
                classLabels = labels
            } else {
                throw MLModelError(.invalidModel, "loss layer '\(lossLayer.name)' targets '\(lossTarget)', which is not a training input")
            }
        case .meanSquaredErrorLossLayer?:
            loss = .meanSquaredError(blob: lossInput)
            guard description.trainingInputs.contains(where: { $0.name == lossTarget }) else {
                throw MLModelError(.invalidModel, "loss layer '\(lossLayer.name)' targets '\(lossTarget)', which is not a training input")
            }
            targetName = lossTarget
            classLabels = nil
        case nil:
            fatalError("checked above")
        }
        random = SplitMix64(seed: settings.seed)

        // A dry run on zeros of the declared shapes surfaces shape errors now, not mid-training.
        var probe: [String: NNTrainTensor] = [:]
        for name in networkInputs {
            guard let dims = description.input(named: name)?.multiArrayConstraint?.shape, !dims.isEmpty,
                  let shape = try? Self.blobShape(dims) else { probe = [:]; break }
            probe[name] = NNTrainTensor(zerosC: shape.c, h: shape.h, w: shape.w)
        }
        var outputCount: Int?
        if !probe.isEmpty {
            var blobs = probe
            for op in ops {
                do { blobs[op.output] = try op.forward(op.inputs.map { blobs[$0]! }) } catch let error as NNTrainError {
                    throw MLModelError(.invalidModel, "layer '\(op.layerName)' \(error.message)")
                }
            }
            outputCount = blobs[lossInput]?.count
            if case .crossEntropy = loss, let p = blobs[lossInput], p.h * p.w != 1 {
                throw MLModelError(.unsupported, "cross-entropy loss reads '\(lossInput)' of shape \(p.shapeText); training needs class probabilities of shape [C, 1, 1]")
            }
        }
        if case .crossEntropy = loss { classCount = classLabels?.count ?? outputCount } else { classCount = outputCount }
    }

    // MARK: Examples

    func prepare(_ data: MLBatchProvider) throws {
        examples.reserveCapacity(data.count)
        for i in 0..<data.count {
            let row = data.features(at: i)
            var inputs: [String: NNTrainTensor] = [:]
            for name in networkInputs {
                guard let value = row.featureValue(for: name), case .multiArray(let array) = value.storage else {
                    throw MLModelError.featureType(name, "training example \(i): expected a multi-array")
                }
                do {
                    let s = try Self.blobShape(array.shape)
                    inputs[name] = NNTrainTensor(c: s.c, h: s.h, w: s.w, data: array.doubleValues())
                } catch let error as MLModelError {
                    throw MLModelError.featureType(name, "training example \(i): \(error.message)")
                }
            }
            examples.append(Example(inputs: inputs, target: try target(of: row, example: i)))
        }
        try runFixedLayers()
    }

    /// Layers no trained parameter reaches (a fixed body under a trained head) give the same
    /// output every epoch: they run once here, over all the examples together, and each
    /// example keeps the outputs the trained layers read. Epochs then run the trained part
    /// alone (`step` skips these layers).
    private func runFixedLayers() throws {
        guard needsGradient.contains(false), !examples.isEmpty else { return }
        var blobs = examples.map(\.inputs)
        var fixedOutputs = Set<String>()
        for (k, op) in ops.enumerated() where !needsGradient[k] {
            let ys: [NNTrainTensor]
            do { ys = try op.forwardBatch(blobs.map { b in op.inputs.map { b[$0]! } }) } catch let error as NNTrainError {
                throw MLModelError(.featureType, "layer '\(op.layerName)' \(error.message)")
            }
            for e in blobs.indices { blobs[e][op.output] = ys[e] }
            fixedOutputs.insert(op.output)
        }
        // What the trained layers (and the loss) read of those outputs.
        var read = Set(ops.indices.filter { needsGradient[$0] }.flatMap { ops[$0].inputs })
        if case .meanSquaredError(let blob) = loss { read.insert(blob) }
        let kept = fixedOutputs.intersection(read)
        for e in examples.indices {
            for name in kept { examples[e].inputs[name] = blobs[e][name] }
        }
    }

    private func target(of row: MLFeatureProvider, example i: Int) throws -> Target {
        guard let value = row.featureValue(for: targetName) else {
            throw MLModelError.featureType(targetName, "training example \(i): the target is missing")
        }
        func bad(_ message: String) -> MLModelError { .featureType(targetName, "training example \(i): \(message)") }
        switch loss {
        case .meanSquaredError:
            guard case .multiArray(let array) = value.storage else { throw bad("the target must be a multi-array, not \(value.type)") }
            let values = array.doubleValues()
            if let classCount, values.count != classCount {
                throw bad("the target has \(values.count) values; the loss's input has \(classCount)")
            }
            return .values(values)
        case .crossEntropy:
            let index: Int
            if let labels = classLabels {
                var found: Int?
                switch (labels, value.storage) {
                case (.strings(let l), .string(let s)): found = l.firstIndex(of: s)
                case (.int64s(let l), .int64(let v)): found = l.firstIndex(of: v)
                default: throw bad("the class label must be \(labels.type), not \(value.type)")
                }
                guard let found else { throw bad("\(value) is not one of the model's class labels") }
                index = found
            } else {
                let raw: Double
                switch value.storage {
                case .multiArray(let a) where a.count == 1: raw = a.double(at: 0)
                case .int64(let v): raw = Double(v)
                case .double(let v): raw = v
                default: throw bad("the target must be one class index (an INT32 array of shape [1]), not \(value.type)")
                }
                guard raw == raw.rounded(), raw >= 0, raw < Double(classCount ?? Int.max) else {
                    throw bad("class index \(raw) is not one of 0..<\(classCount.map(String.init) ?? "the class count")")
                }
                index = Int(raw)
            }
            return .classIndex(index)
        }
    }

    /// A multi-array's shape as a blob `[C, H, W]` (rank 1: `[C, 1, 1]`; rank 5 with one
    /// sequence step and one batch row).
    static func blobShape(_ dims: [Int]) throws -> (c: Int, h: Int, w: Int) {
        switch dims.count {
        case 1: return (dims[0], 1, 1)
        case 3: return (dims[0], dims[1], dims[2])
        case 5 where dims[0] == 1 && dims[1] == 1: return (dims[2], dims[3], dims[4])
        default: throw MLModelError(.featureType, "shape \(dims) is not [C] or [C, H, W]")
        }
    }

    // MARK: Epochs

    func runEpoch(_ index: Int, miniBatchEnd: (_ batch: Int, _ loss: Double?) -> Bool) throws -> Double? {
        var order = Array(examples.indices)
        if settings.shuffle {
            for i in stride(from: order.count - 1, to: 0, by: -1) {
                order.swapAt(i, Int(random.next() % UInt64(i + 1)))
            }
        }
        var total = 0.0, seen = 0
        var batch = 0
        for start in stride(from: 0, to: order.count, by: settings.miniBatchSize) {
            let members = order[start..<min(start + settings.miniBatchSize, order.count)]
            for p in updatable { p.zeroGrad() }
            var sum = 0.0
            for e in members { sum += try step(examples[e]) }
            let mean = sum / Double(members.count)
            guard mean.isFinite else { throw diverged("the loss is \(mean)", epoch: index, batch: batch) }
            let scale = 1 / Double(members.count)
            for p in updatable { for i in p.grad.indices { p.grad[i] *= scale } }
            try applyOptimizer(epoch: index, batch: batch)
            total += sum; seen += members.count
            let goOn = miniBatchEnd(batch, mean)
            batch += 1
            if !goOn { break }
        }
        return total / Double(max(seen, 1))
    }

    private func diverged(_ what: String, epoch: Int, batch: Int) -> MLModelError {
        MLModelError(.generic, "training diverged at epoch \(epoch), mini-batch \(batch): \(what); stopped, the model is unchanged (try a smaller learning rate)")
    }

    /// Forward and backward for one example: adds its gradients, returns its loss.
    private func step(_ example: Example) throws -> Double {
        var blobs = example.inputs
        var xs: [[NNTrainTensor]] = []
        var ys: [NNTrainTensor] = []
        xs.reserveCapacity(ops.count); ys.reserveCapacity(ops.count)
        for (k, op) in ops.enumerated() {
            // A fixed layer's output came with the example (`runFixedLayers`); nothing reads
            // its slots here (the backward pass visits only the trained layers).
            guard needsGradient[k] else {
                xs.append([]); ys.append(NNTrainTensor(zerosC: 0, h: 0, w: 0))
                continue
            }
            let x = op.inputs.map { blobs[$0]! }
            let y: NNTrainTensor
            do { y = try op.forward(x) } catch let error as NNTrainError {
                throw MLModelError(.featureType, "layer '\(op.layerName)' \(error.message)")
            }
            blobs[op.output] = y
            xs.append(x); ys.append(y)
        }
        var grads: [String: NNTrainTensor] = [:]
        let lossValue: Double
        var last = ops.count - 1
        switch (loss, example.target) {
        case (.crossEntropy(let s), .classIndex(let t)):
            // Through the softmax at once: d(−log p_t)/dz = p − onehot(t); the loss from the
            // logits (log-sum-exp) stays finite when p_t underflows.
            let z = xs[s][0], p = ys[s]
            guard t < p.count else {
                throw MLModelError.featureType(targetName, "class index \(t) is not one of 0..<\(p.count)")
            }
            let m = z.data.max() ?? 0
            lossValue = log(z.data.reduce(0) { $0 + exp($1 - m) }) + m - z.data[t]
            var dz = p
            dz.data[t] -= 1
            grads[ops[s].inputs[0]] = dz
            last = s - 1
        case (.meanSquaredError(let blob), .values(let target)):
            let y = blobs[blob]!
            guard y.count == target.count else {
                throw MLModelError.featureType(targetName, "the target has \(target.count) values; '\(blob)' has \(y.count)")
            }
            var dy = y, sum = 0.0
            let n = Double(y.count)
            for i in y.data.indices {
                let d = y.data[i] - target[i]
                sum += d * d
                dy.data[i] = 2 * d / n
            }
            lossValue = sum / n
            grads[blob] = dy
        default:
            fatalError("targets are read for the loss")
        }
        guard last >= 0 else { return lossValue }
        for k in stride(from: last, through: 0, by: -1) where needsGradient[k] {
            let op = ops[k]
            guard let dy = grads.removeValue(forKey: op.output) else { continue }
            let dx = op.backward(xs[k], ys[k], dy)
            for (i, name) in op.inputs.enumerated() where gradientBlobs.contains(name) {
                if grads[name] == nil { grads[name] = dx[i] } else { grads[name]!.add(dx[i]) }
            }
        }
        return lossValue
    }

    private func applyOptimizer(epoch: Int, batch: Int) throws {
        let lr = settings.learningRate
        switch settings.optimizer {
        case .sgd(let momentum):
            for p in updatable {
                for i in p.value.indices {
                    let v = momentum * p.first[i] + p.grad[i]
                    p.first[i] = v
                    p.value[i] -= lr * v
                }
            }
        case .adam(let beta1, let beta2, let eps):
            adamStep += 1
            let c1 = 1 - pow(beta1, Double(adamStep)), c2 = 1 - pow(beta2, Double(adamStep))
            for p in updatable {
                for i in p.value.indices {
                    let g = p.grad[i]
                    p.first[i] = beta1 * p.first[i] + (1 - beta1) * g
                    p.second[i] = beta2 * p.second[i] + (1 - beta2) * g * g
                    p.value[i] -= lr * (p.first[i] / c1) / ((p.second[i] / c2).squareRoot() + eps)
                }
            }
        }
        for p in updatable where !p.value.allSatisfy(\.isFinite) {
            throw diverged("\(p.name) are no longer finite", epoch: epoch, batch: batch)
        }
    }

    // MARK: The trained spec

    func currentSpecification() throws -> CoreML_Specification_Model {
        var layers = try Self.network(spec).layers
        for (k, op) in ops.enumerated() where op.parameters.contains(where: \.updatable) {
            var layer = layers[layerIndex[k]]
            func written(_ w: CoreML_Specification_WeightParams, _ p: NNTrainParameter) -> CoreML_Specification_WeightParams {
                var w = w
                w.floatValue = p.value.map(Float.init)
                return w
            }
            switch layer.layer {
            case .innerProduct(var params)?:
                let op = op as! NNTrainInnerProduct
                if op.weights.updatable { params.weights = written(params.weights, op.weights) }
                if let b = op.bias, b.updatable { params.bias = written(params.bias, b) }
                layer.innerProduct = params
            case .convolution(var params)?:
                let op = op as! NNTrainConvolution
                if op.weights.updatable { params.weights = written(params.weights, op.weights) }
                if let b = op.bias, b.updatable { params.bias = written(params.bias, b) }
                layer.convolution = params
            default:
                break
            }
            layers[layerIndex[k]] = layer
        }
        var out = spec
        switch out.type {
        case .neuralNetwork(var nn)?: nn.layers = layers; out.neuralNetwork = nn
        case .neuralNetworkClassifier(var nn)?: nn.layers = layers; out.neuralNetworkClassifier = nn
        case .neuralNetworkRegressor(var nn)?: nn.layers = layers; out.neuralNetworkRegressor = nn
        default: break
        }
        return out
    }

    // MARK: Spec access

    private struct Network {
        let layers: [CoreML_Specification_NeuralNetworkLayer]
        let update: CoreML_Specification_NetworkUpdateParameters
        let hasUpdate: Bool
        let mapping: CoreML_Specification_NeuralNetworkMultiArrayShapeMapping
        let labels: MLClassLabels?
    }

    private static func network(_ spec: CoreML_Specification_Model) throws -> Network {
        let network: Network
        switch spec.type {
        case .neuralNetwork(let nn)?:
            network = Network(layers: nn.layers, update: nn.updateParams, hasUpdate: nn.hasUpdateParams, mapping: nn.arrayInputShapeMapping, labels: nil)
        case .neuralNetworkRegressor(let nn)?:
            network = Network(layers: nn.layers, update: nn.updateParams, hasUpdate: nn.hasUpdateParams, mapping: nn.arrayInputShapeMapping, labels: nil)
        case .neuralNetworkClassifier(let nn)?:
            let labels: MLClassLabels?
            switch nn.classLabels {
            case .stringClassLabels(let l)?: labels = MLClassLabels(strings: l)
            case .int64ClassLabels(let l)?: labels = MLClassLabels(int64s: l)
            case nil: labels = nil
            }
            network = Network(layers: nn.layers, update: nn.updateParams, hasUpdate: nn.hasUpdateParams, mapping: nn.arrayInputShapeMapping, labels: labels)
        default:
            throw MLModelError(.invalidModel, "not a neural network")
        }
        guard network.hasUpdate else {
            throw MLModelError(.invalidModel, "the network is marked updatable but has no updateParams (loss layer and optimizer)")
        }
        return network
    }

    private static func typeName(_ layer: CoreML_Specification_NeuralNetworkLayer) -> String {
        guard let type = layer.layer else { return "no type" }
        return String(String(describing: type).prefix { $0 != "(" })
    }
}

/// SplitMix64 (Steele, Lea & Flood): a small seeded generator, the same sequence everywhere.
struct SplitMix64 {
    private var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

extension NNCompiledNetwork: MLUpdatableCompiledModel {
    func makeTrainer(specification: CoreML_Specification_Model, description: MLModelDescription,
                     overrides: [MLParameterKey: MLParameterValue]) throws -> any MLModelTrainer {
        try NNTrainer(spec: specification, description: description, overrides: overrides)
    }
}
