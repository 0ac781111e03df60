import CortadoSpec

/// The Core ML 3/4 layers on rank-N tensors (`NNTensorLayer`), by `oneof` case name. A new
/// rank-N layer is one file in this folder plus one line here.
enum TensorLayers {
    static let builders: [String: NNLayerBuilder] = {
        var all: [String: NNLayerBuilder] = [
            "batchedMatmul": { spec in try BatchedMatMulLayer(spec.batchedMatmul, inputCount: spec.input.count) },
            "embeddingNd": { spec in try EmbeddingNDLayer(spec.embeddingNd) },
            "softmaxNd": { spec in SoftmaxNDLayer(spec.softmaxNd) },
            "layerNormalization": { spec in try LayerNormalizationLayer(spec.layerNormalization) },
            "gelu": { spec in try UnaryNDLayer.gelu(spec.gelu) },
            "clip": { spec in try UnaryNDLayer(.clip(min: spec.clip.minVal, max: spec.clip.maxVal)) },
            "clampedReLu": { spec in try UnaryNDLayer(.clampedReLU(alpha: spec.clampedReLu.alpha, beta: spec.clampedReLu.beta)) },
            "transpose": { spec in TransposeLayer(spec.transpose) },
            "reshapeStatic": { spec in try ReshapeNDLayer(.target(spec.reshapeStatic.targetShape.map { Int($0) })) },
            "rankPreservingReshape": { spec in try ReshapeNDLayer(.rankPreserving(spec.rankPreservingReshape.targetShape.map { Int($0) })) },
            "reshapeLike": { _ in try ReshapeNDLayer(.like) },
            "reshapeDynamic": { _ in ReshapeDynamicLayer() },
            "squeeze": { spec in try ReshapeNDLayer(.squeeze(axes: spec.squeeze.axes, all: spec.squeeze.squeezeAll)) },
            "expandDims": { spec in try ReshapeNDLayer(.expand(axes: spec.expandDims.axes)) },
            "flattenTo2D": { spec in try ReshapeNDLayer(.flatten2D(axis: spec.flattenTo2D.axis)) },
            "copy": { _ in try ReshapeNDLayer(.same) },
            "getShape": { _ in GetShapeLayer() },
            "concatNd": { spec in ConcatNDLayer(spec.concatNd) },
            "splitNd": { spec in try SplitNDLayer(spec.splitNd, outputs: spec.output.count) },
            "sliceStatic": { spec in try SliceStaticLayer(spec.sliceStatic) },
            "sliceDynamic": { spec in try SliceDynamicLayer(spec.sliceDynamic, inputCount: spec.input.count) },
            "slidingWindows": { spec in try SlidingWindowsLayer(spec.slidingWindows) },
            "reverseSeq": { spec in ReverseSeqLayer(spec.reverseSeq) },
            "tile": { spec in try TileLayer.make(spec) },
            "stack": { spec in StackLayer(spec.stack) },
            "gather": { spec in GatherLayer(spec.gather) },
            "gatherNd": { _ in GatherNDLayer() },
            "whereBroadcastable": { _ in WhereLayer() },
            "argMax": { spec in ArgReduceLayer(max: true, axis: spec.argMax.axis, removeDim: spec.argMax.removeDim) },
            "argMin": { spec in ArgReduceLayer(max: false, axis: spec.argMin.axis, removeDim: spec.argMin.removeDim) },
            "loadConstantNd": { spec in
                try ConstantNDLayer(.values(try NNWeights.floats(spec.loadConstantNd.data, name: "data"), shape: spec.loadConstantNd.shape.map { Int($0) }))
            },
            "fillStatic": { spec in try ConstantNDLayer(.fill(spec.fillStatic.value, shape: spec.fillStatic.targetShape.map { Int($0) })) },
            "fillLike": { spec in try ConstantNDLayer(.fill(spec.fillLike.value, shape: nil)) },
            "fillDynamic": { spec in FillDynamicLayer(spec.fillDynamic) },
            "rangeStatic": { spec in try ConstantNDLayer.range(spec.rangeStatic) },
            "rangeDynamic": { spec in try RangeDynamicLayer(spec.rangeDynamic, inputCount: spec.input.count) },
            "whereNonZero": { _ in WhereNonZeroLayer() },
            "sliceBySize": { spec in try SliceBySizeLayer(spec.sliceBySize) },
            "matrixBandPart": { spec in BandLayer.bandPart(spec.matrixBandPart) },
            "lowerTriangular": { spec in BandLayer(lowest: nil, highest: Int(spec.lowerTriangular.k)) },
            "upperTriangular": { spec in BandLayer(lowest: Int(spec.upperTriangular.k), highest: nil) },
            "reverse": { spec in ReverseLayer(spec.reverse) },
            "cumSum": { spec in try CumSumLayer(spec.cumSum, inputCount: spec.input.count) },
            "oneHot": { spec in try OneHotLayer(spec.oneHot, inputCount: spec.input.count) },
            "broadcastToStatic": { spec in BroadcastToLayer(.fixed(spec.broadcastToStatic.targetShape.map { Int($0) })) },
            "broadcastToLike": { _ in BroadcastToLayer(.like) },
            "broadcastToDynamic": { _ in BroadcastToLayer(.values) },
            "scatter": { spec in try ScatterLayer(.axis(spec.scatter.axis), mode: spec.scatter.mode) },
            "scatterNd": { spec in try ScatterLayer(.nd, mode: spec.scatterNd.mode) },
            "scatterAlongAxis": { spec in try ScatterLayer(.alongAxis(spec.scatterAlongAxis.axis), mode: spec.scatterAlongAxis.mode) },
            "gatherAlongAxis": { spec in GatherAlongAxisLayer(spec.gatherAlongAxis) },
            "topK": { spec in
                try SortLayer(axis: spec.topK.axis, descending: !spec.topK.useBottomK, k: Int(spec.topK.k), kFromInput: spec.input.count == 2)
            },
            "nonMaximumSuppression": { spec in
                try NonMaximumSuppressionLayer(spec.nonMaximumSuppression, inputCount: spec.input.count, outputCount: spec.output.count)
            },
            "argSort": { spec in try SortLayer(axis: spec.argSort.axis, descending: spec.argSort.descending, k: nil) },
            "constantPad": { spec in try ConstantPadLayer(spec.constantPad, inputCount: spec.input.count) },
            "randomNormalStatic": { s in
                let p = s.randomNormalStatic
                return try RandomLayer(.normal(mean: p.mean, std: p.stdDev), shape: .fixed(p.outputShape.map { Int($0) }), seed: p.seed)
            },
            "randomNormalLike": { s in
                let p = s.randomNormalLike
                return try RandomLayer(.normal(mean: p.mean, std: p.stdDev), shape: .like, seed: p.seed)
            },
            "randomNormalDynamic": { s in
                let p = s.randomNormalDynamic
                return try RandomLayer(.normal(mean: p.mean, std: p.stdDev), shape: .values, seed: p.seed)
            },
            "randomUniformStatic": { s in
                let p = s.randomUniformStatic
                return try RandomLayer(.uniform(p.minVal, p.maxVal), shape: .fixed(p.outputShape.map { Int($0) }), seed: p.seed)
            },
            "randomUniformLike": { s in
                let p = s.randomUniformLike
                return try RandomLayer(.uniform(p.minVal, p.maxVal), shape: .like, seed: p.seed)
            },
            "randomUniformDynamic": { s in
                let p = s.randomUniformDynamic
                return try RandomLayer(.uniform(p.minVal, p.maxVal), shape: .values, seed: p.seed)
            },
            "randomBernoulliStatic": { s in
                let p = s.randomBernoulliStatic
                return try RandomLayer(.bernoulli(p.prob), shape: .fixed(p.outputShape.map { Int($0) }), seed: p.seed)
            },
            "randomBernoulliLike": { s in try RandomLayer(.bernoulli(s.randomBernoulliLike.prob), shape: .like, seed: s.randomBernoulliLike.seed) },
            "randomBernoulliDynamic": { s in
                try RandomLayer(.bernoulli(s.randomBernoulliDynamic.prob), shape: .values, seed: s.randomBernoulliDynamic.seed)
            },
            "categoricalDistribution": { spec in try CategoricalLayer(spec.categoricalDistribution) },
            "convolution3D": { spec in try Convolution3DLayer(spec.convolution3D) },
            "pooling3D": { spec in try Pooling3DLayer(spec.pooling3D) },
            "globalPooling3D": { spec in Pooling3DLayer(global: spec.globalPooling3D) },
        ]
        let unary: [String: UnaryNDLayer.Op] = [
            "ceil": .ceil, "floor": .floor, "sign": .sign, "round": .round, "exp2": .exp2,
            "sin": .sin, "cos": .cos, "tan": .tan, "asin": .asin, "acos": .acos, "atan": .atan,
            "sinh": .sinh, "cosh": .cosh, "tanh": .tanh, "asinh": .asinh, "acosh": .acosh, "atanh": .atanh,
            "erf": .erf, "logicalNot": .logicalNot,
        ]
        for (name, op) in unary { all[name] = { _ in try UnaryNDLayer(op) } }
        let binary: [String: BroadcastBinaryLayer.Op] = [
            "addBroadcastable": .add, "subtractBroadcastable": .subtract, "multiplyBroadcastable": .multiply,
            "divideBroadcastable": .divide, "maxBroadcastable": .max, "minBroadcastable": .min,
            "powBroadcastable": .pow, "modBroadcastable": .mod, "floorDivBroadcastable": .floorDiv,
            "logicalAnd": .and, "logicalOr": .or, "logicalXor": .xor,
        ]
        for (name, op) in binary { all[name] = { spec in try BroadcastBinaryLayer(op, inputCount: spec.input.count) } }
        all["equal"] = { spec in try BroadcastBinaryLayer(.equal, alpha: spec.equal.alpha, inputCount: spec.input.count) }
        all["notEqual"] = { spec in try BroadcastBinaryLayer(.notEqual, alpha: spec.notEqual.alpha, inputCount: spec.input.count) }
        all["lessThan"] = { spec in try BroadcastBinaryLayer(.less, alpha: spec.lessThan.alpha, inputCount: spec.input.count) }
        all["lessEqual"] = { spec in try BroadcastBinaryLayer(.lessEqual, alpha: spec.lessEqual.alpha, inputCount: spec.input.count) }
        all["greaterThan"] = { spec in try BroadcastBinaryLayer(.greater, alpha: spec.greaterThan.alpha, inputCount: spec.input.count) }
        all["greaterEqual"] = { spec in try BroadcastBinaryLayer(.greaterEqual, alpha: spec.greaterEqual.alpha, inputCount: spec.input.count) }
        all["reduceSum"] = { s in try ReduceNDLayer(.sum, s.reduceSum.axes, s.reduceSum.keepDims, s.reduceSum.reduceAll) }
        all["reduceMean"] = { s in try ReduceNDLayer(.mean, s.reduceMean.axes, s.reduceMean.keepDims, s.reduceMean.reduceAll) }
        all["reduceProd"] = { s in try ReduceNDLayer(.prod, s.reduceProd.axes, s.reduceProd.keepDims, s.reduceProd.reduceAll) }
        all["reduceMax"] = { s in try ReduceNDLayer(.max, s.reduceMax.axes, s.reduceMax.keepDims, s.reduceMax.reduceAll) }
        all["reduceMin"] = { s in try ReduceNDLayer(.min, s.reduceMin.axes, s.reduceMin.keepDims, s.reduceMin.reduceAll) }
        all["reduceL1"] = { s in try ReduceNDLayer(.l1, s.reduceL1.axes, s.reduceL1.keepDims, s.reduceL1.reduceAll) }
        all["reduceL2"] = { s in try ReduceNDLayer(.l2, s.reduceL2.axes, s.reduceL2.keepDims, s.reduceL2.reduceAll) }
        all["reduceLogSum"] = { s in try ReduceNDLayer(.logSum, s.reduceLogSum.axes, s.reduceLogSum.keepDims, s.reduceLogSum.reduceAll) }
        all["reduceSumSquare"] = { s in try ReduceNDLayer(.sumSquare, s.reduceSumSquare.axes, s.reduceSumSquare.keepDims, s.reduceSumSquare.reduceAll) }
        all["reduceLogSumExp"] = { s in try ReduceNDLayer(.logSumExp, s.reduceLogSumExp.axes, s.reduceLogSumExp.keepDims, s.reduceLogSumExp.reduceAll) }
        return all
    }()
}

extension ReduceNDLayer {
    convenience init(_ op: Op, _ axes: [Int64], _ keepDims: Bool, _ reduceAll: Bool) throws {
        try self.init(op, axes: axes, keepDims: keepDims, reduceAll: reduceAll)
    }
}
