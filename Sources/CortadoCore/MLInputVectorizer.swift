/// Concatenates a model's numeric inputs into one vector of Doubles, in the order the
/// model declares them: the way Core ML feeds the classical model kinds (GLM, SVM,
/// trees, k-NN), which accept either one multi-array or several int64/double features.
public struct MLInputVectorizer: Sendable {
    struct Slot: Sendable {
        let name: String
        let width: Int
        let isArray: Bool
        /// A multi-array's declared shape (`[width]` when it declares none).
        let shape: [Int]
    }
    let slots: [Slot]
    /// The vector's length.
    public let length: Int

    /// One input's place in the vector: `width` Doubles from `offset`, a scalar (int64 or
    /// double) or a multi-array of `shape`.
    public struct Field: Sendable {
        public let name: String
        public let offset: Int
        public let width: Int
        public let isArray: Bool
        public let shape: [Int]
    }

    /// The inputs in vector order.
    public let fields: [Field]

    /// `inputs` are the features to gather (usually the whole description's inputs).
    /// Multi-array inputs need a fixed shape, unless there is exactly one input, in which
    /// case its length is `expectedLength` (when given) or whatever arrives.
    public init(inputs: [MLFeatureDescription], expectedLength: Int? = nil) throws {
        var slots: [Slot] = []
        var total = 0
        for f in inputs {
            switch f.type {
            case .int64, .double:
                slots.append(Slot(name: f.name, width: 1, isArray: false, shape: []))
                total += 1
            case .multiArray:
                var width = f.multiArrayConstraint?.shape.reduce(1, *) ?? 0
                if f.multiArrayConstraint?.shape.isEmpty ?? true { width = 0 }
                if width == 0 {
                    guard inputs.count == 1, let n = expectedLength else {
                        throw MLModelError(.invalidModel, feature: f.name, "multi-array input needs a fixed shape to be vectorized")
                    }
                    width = n
                }
                let declared = f.multiArrayConstraint?.shape ?? []
                slots.append(Slot(name: f.name, width: width, isArray: true, shape: declared.reduce(1, *) == width && !declared.isEmpty ? declared : [width]))
                total += width
            default:
                throw MLModelError(.invalidModel, feature: f.name, "input of type \(f.type) cannot feed a numeric model (expected int64, double or multiArray)")
            }
        }
        if let n = expectedLength, n != total {
            throw MLModelError(.invalidModel, "inputs give \(total) values but the model expects \(n)")
        }
        self.slots = slots
        self.length = total
        var offset = 0
        fields = slots.map { s in
            defer { offset += s.width }
            return Field(name: s.name, offset: offset, width: s.width, isArray: s.isArray, shape: s.shape)
        }
    }

    /// Writes the vector into `out` (capacity `length`).
    @inline(__always)
    public func gather(_ input: MLFeatureProvider, into out: UnsafeMutablePointer<Double>) throws {
        var at = 0
        for slot in slots {
            guard let value = input.featureValue(for: slot.name) else {
                throw MLModelError.featureType(slot.name, "required input is missing")
            }
            if slot.isArray {
                guard let array = value.multiArrayValue else {
                    throw MLModelError.featureType(slot.name, "expected a multiArray, got \(value.type)")
                }
                guard array.count == slot.width else {
                    throw MLModelError.featureType(slot.name, "expected \(slot.width) values, got \(array.count) (shape \(array.shape))")
                }
                array.copyDoubles(into: out + at)
            } else {
                switch value.storage {
                case .double(let d): out[at] = d
                case .int64(let i): out[at] = Double(i)
                default: throw MLModelError.featureType(slot.name, "expected a number, got \(value.type)")
                }
            }
            at += slot.width
        }
    }

    /// The vector as an array.
    public func vector(_ input: MLFeatureProvider) throws -> [Double] {
        var out = [Double](repeating: 0, count: length)
        try out.withUnsafeMutableBufferPointer { try gather(input, into: $0.baseAddress!) }
        return out
    }
}
