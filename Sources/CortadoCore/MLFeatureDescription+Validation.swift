extension MLFeatureDescription {
    /// Checks a value against this description: its type, and for multi-arrays its shape
    /// (fixed, enumerated or ranged), for dictionaries their key type, for sequences their
    /// element type and length. Images of any size pass (they are resized to the model's
    /// size). Throws an error naming the feature and what was expected.
    public func validate(_ value: MLFeatureValue) throws {
        if value.isUndefined {
            guard isOptional else { throw MLModelError.featureType(name, "required input has no value") }
            return
        }
        guard value.type == type else {
            // Core ML converts between int64 and double scalars.
            if (type == .double && value.type == .int64) || (type == .int64 && value.type == .double) { return }
            throw MLModelError.featureType(name, "expected \(typeSummary), got \(value.type)")
        }
        switch value.storage {
        case .multiArray(let array):
            try validateShape(array.shape)
        case .image:
            // Any size is accepted: an image whose size the constraint does not allow is
            // resized to one it does, by the image's `cropAndScale` (MLImage+Resize.swift).
            break
        case .dictionary(let d):
            if let c = dictionaryConstraint, d.count > 0, d.keyType != c.keyType {
                throw MLModelError.featureType(name, "dictionary keys are \(d.keyType), expected \(c.keyType)")
            }
        case .sequence(let s):
            if let c = sequenceConstraint {
                guard s.count == 0 || s.type == c.valueType else {
                    throw MLModelError.featureType(name, "sequence holds \(s.type), expected \(c.valueType)")
                }
                guard c.countRange.contains(s.count) else {
                    throw MLModelError.featureType(name, "sequence has \(s.count) elements, expected \(c.countRange.lowerBound)…\(c.countRange.upperBound == Int.max ? "" : String(c.countRange.upperBound))")
                }
            }
        default:
            break
        }
    }

    /// Whether `shape` is the declared shape of an array input without flexible shapes (so
    /// `validateShape` would pass it), checked without copying the constraint or making an array.
    func isDeclaredShape(_ shape: ArraySlice<Int>) -> Bool {
        guard let c = multiArrayConstraint else { return true }
        return c.shapeConstraint.type == .unspecified && c.shape.elementsEqual(shape)
    }

    /// Checks a multi-array shape against the constraint.
    public func validateShape(_ shape: [Int]) throws {
        guard let c = multiArrayConstraint else { return }
        func show(_ s: [Int]) -> String { "[" + s.map(String.init).joined(separator: ", ") + "]" }
        switch c.shapeConstraint.type {
        case .enumerated:
            let allowed = c.shapeConstraint.enumeratedShapes
            guard allowed.contains(where: { Self.sameShape($0, shape) }) else {
                throw MLModelError.featureType(name, "shape \(show(shape)) is not one of the allowed shapes \(allowed.map(show).joined(separator: " "))")
            }
        case .range:
            let ranges = c.shapeConstraint.sizeRangeForDimension
            guard ranges.count == shape.count, zip(ranges, shape).allSatisfy({ $0.contains($1) }) else {
                let want = ranges.map { $0.upperBound == Int.max ? "\($0.lowerBound)…" : "\($0.lowerBound)…\($0.upperBound)" }.joined(separator: " × ")
                throw MLModelError.featureType(name, "shape \(show(shape)) is outside the allowed ranges \(want)")
            }
        case .unspecified:
            guard !c.shape.isEmpty else { return }
            // Neural networks' rank-5 layout: a declared [C] or [C, H, W] may arrive as
            // [Seq, Batch, C, H, W] with any sequence length and batch size.
            if shape.count == 5, c.shape.count == 1 || c.shape.count == 3,
               Array(shape.suffix(3)) == (c.shape.count == 1 ? [c.shape[0], 1, 1] : c.shape) { return }
            guard Self.sameShape(c.shape, shape) else {
                throw MLModelError.featureType(name, "shape \(show(shape)) does not match the expected shape \(show(c.shape))")
            }
        }
    }

    /// Shapes are the same when equal after dropping leading 1s (a batch of one).
    static func sameShape(_ a: [Int], _ b: [Int]) -> Bool {
        a.drop(while: { $0 == 1 }).elementsEqual(b.drop(while: { $0 == 1 }))
    }
}

extension MLModelDescription {
    /// Checks every declared input of `provider`: required inputs present, each of the
    /// right type and shape. Extra features are ignored, as in Core ML.
    public func validateInputs(_ provider: MLFeatureProvider) throws {
        // Read in place: copying a description (as `for input in inputs` does) retains each
        // of its fields, on every prediction.
        try inputs.withUnsafeBufferPointer { all in
            for i in all.indices {
                guard let value = provider.featureValue(for: all[i].name) else {
                    if all[i].isOptional { continue }
                    throw MLModelError.featureType(all[i].name, "required input is missing (expected \(all[i].typeSummary))")
                }
                try all[i].validate(value)
            }
        }
    }

    /// `validateInputs` for every row of a batch, input by input (each description read once
    /// per batch, not once per row). A batch with several bad rows reports the first bad row of
    /// the first input that has one.
    public func validateInputs(_ batch: MLBatchProvider) throws {
        let rows = batch.count
        for input in inputs {
            // The shape of a multi-array this input already passed with: rows of the same shape
            // need no second check (a batch's rows mostly share one).
            var passed: [Int]?
            for r in 0..<rows {
                guard let value = batch.features(at: r).featureValue(for: input.name) else {
                    if input.isOptional { continue }
                    throw MLModelError.featureType(input.name, "required input is missing (expected \(input.typeSummary))")
                }
                try input.validate(value, passed: &passed)
            }
        }
    }
}

extension MLFeatureDescription {
    /// Checks one row's value of a batch, except a multi-array of the shape the row before
    /// already passed with (`passed`: that shape, updated).
    func validate(_ value: MLFeatureValue, passed: inout [Int]?) throws {
        if case .multiArray(let array) = value.storage {
            if let passed, array.shape == passed { return }
            try validate(value)
            passed = array.shape
        } else {
            try validate(value)
        }
    }
}
