import CortadoSpec
import Foundation

/// The layers that make tensors from parameters: `loadConstantND`, `fillStatic` (a shape from
/// the parameters), `fillLike` (input 0's shape) and `rangeStatic`. They have no data inputs,
/// so the plan computes small ones once at load.
final class ConstantNDLayer: NNTensorLayer, @unchecked Sendable {
    enum Source: Sendable {
        case values([Float], shape: [Int])
        case fill(Float, shape: [Int]?)
    }

    let source: Source

    init(_ source: Source) throws {
        switch source {
        case .values(let v, let shape):
            guard !shape.isEmpty, shape.allSatisfy({ $0 > 0 }) else { throw NNLayerError("shape \(shape) must hold positive sizes") }
            guard v.count == shape.reduce(1, *) else { throw NNLayerError("data has \(v.count) values for shape \(shape)") }
        case .fill(_, let shape?):
            guard !shape.isEmpty, shape.allSatisfy({ $0 > 0 }) else { throw NNLayerError("targetShape \(shape) must hold positive sizes") }
        case .fill(_, nil): break
        }
        self.source = source
    }

    static func range(_ p: CoreML_Specification_RangeStaticLayerParams) throws -> ConstantNDLayer {
        let values = try RangeDynamicLayer.values(start: p.startValue, end: p.endValue, step: p.stepSizeValue)
        guard !values.isEmpty else { throw NNLayerError("range from \(p.startValue) to \(p.endValue) by \(p.stepSizeValue) is empty") }
        return try ConstantNDLayer(.values(values, shape: [values.count]))
    }

    func outputShapes(_ inputs: [NNShape]) throws -> [NNShape] {
        switch source {
        case .values(_, let shape), .fill(_, let shape?):
            return [NNShape(tensor: shape)]
        case .fill(_, nil):
            guard inputs.count == 1 else { throw NNLayerError("takes one input (whose shape to fill), got \(inputs.count)") }
            return [inputs[0]]
        }
    }

    var detail: String {
        switch source {
        case .values(_, let shape): return "\(shape)"
        case .fill(let v, let shape): return "\(v)" + (shape.map { " × \($0)" } ?? "")
        }
    }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let y = context.pointer(outputs[0])
        switch source {
        case .values(let v, _): v.withUnsafeBufferPointer { y.update(from: $0.baseAddress!, count: v.count) }
        case .fill(let v, _): y.update(repeating: v, count: outputs[0].count)
        }
    }
}

/// `RangeDynamicLayerParams`: `[start, start + step, …)` below `end` (above it for a negative
/// step). Inputs: `end`; `end, start`; or `end, start, step` (each one value); the rest come
/// from the parameters. The length depends on values, so this is a dynamic-shape layer. A range
/// with no values (`end` not beyond `start` in the step's direction) is a tensor of shape `[0]`,
/// as in Core ML, not an error.
final class RangeDynamicLayer: NNValueShapedLayer, @unchecked Sendable {
    let start: Float
    let step: Float
    let inputCount: Int

    init(_ p: CoreML_Specification_RangeDynamicLayerParams, inputCount: Int) throws {
        guard (1...3).contains(inputCount) else { throw NNLayerError("takes 1 to 3 inputs (end, start, step), got \(inputCount)") }
        start = p.startValue
        step = p.stepSizeValue
        self.inputCount = inputCount
    }

    var shapeInputs: [Int] { Array(0..<inputCount) }

    /// The values of a range (none when it is empty); a zero step is an error.
    static func values(start: Float, end: Float, step: Float) throws -> [Float] {
        guard step != 0, step.isFinite, start.isFinite, end.isFinite else { throw NNLayerError("range from \(start) to \(end) by \(step) is not finite") }
        let count = Swift.max(0, Int(((end - start) / step).rounded(.up)))
        guard count <= 1 << 28 else { throw NNLayerError("range from \(start) to \(end) by \(step) has \(count) values") }
        return (0..<count).map { start + Float($0) * step }
    }

    private func parameters(_ values: [[Float]?]) throws -> (start: Float, end: Float, step: Float) {
        func one(_ i: Int) throws -> Float {
            guard let v = values[i], v.count == 1 else { throw NNLayerError("input \(i) must hold one value") }
            return v[0]
        }
        return (inputCount > 1 ? try one(1) : start, try one(0), inputCount > 2 ? try one(2) : step)
    }

    func outputShapes(_ inputs: [NNShape], values: [[Float]?]) throws -> [NNShape] {
        let p = try parameters(values)
        return [NNShape(tensor: [try Self.values(start: p.start, end: p.end, step: p.step).count])]
    }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        let read = inputs.map { [context.pointer($0)[0]] }
        guard let p = try? parameters(read) else { return }
        let y = context.pointer(outputs[0])
        for i in 0..<outputs[0].count { y[i] = p.start + Float(i) * p.step }
    }
}

/// `FillDynamicLayerParams`: a tensor of `value` whose shape is the values of input 0.
final class FillDynamicLayer: NNValueShapedLayer, @unchecked Sendable {
    let value: Float

    init(_ p: CoreML_Specification_FillDynamicLayerParams) { value = p.value }

    var shapeInputs: [Int] { [0] }
    var detail: String { "\(value)" }

    func outputShapes(_ inputs: [NNShape], values: [[Float]?]) throws -> [NNShape] {
        guard inputs.count == 1, let shape = values[0] else { throw NNLayerError("takes one input (the shape), got \(inputs.count)") }
        guard inputs[0].rank == 1, shape.allSatisfy({ $0 >= 1 && $0.rounded() == $0 && $0 < Float(1 << 31) }) else {
            throw NNLayerError("the shape \(shape) must be a rank-1 list of positive whole sizes")
        }
        return [NNShape(tensor: shape.map { Int($0) })]
    }

    func run(inputs: [NNTensor], outputs: [NNTensor], context: NNRunContext) {
        context.pointer(outputs[0]).update(repeating: value, count: outputs[0].count)
    }
}
