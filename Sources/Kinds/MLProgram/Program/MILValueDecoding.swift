import CortadoCore
import CortadoSpec
import Foundation

/// Values written in the program itself: immediate tensors, tuples, lists and dictionaries,
/// and blob references resolved through the model's weight files.
struct MILValueDecoder {
    let resources: MLModelResources?
    let model: String

    func value(_ proto: CoreML_Specification_MILSpec_Value, op: String) throws -> MILValue {
        let type = try MILType(proto.type, op: op)
        switch proto.value {
        case .blobFileValue(let blob):
            return .tensor(try MILBlobStorage.tensor(file: blob.fileName, offset: blob.offset, type: type, resources: resources,
                                                     model: model, op: op))
        case .immediateValue(let imm):
            return try immediate(imm, type: type, op: op)
        case nil:
            throw MILError.invalid(op, "a value holds neither an immediate value nor a blob reference")
        }
    }

    func immediate(_ imm: CoreML_Specification_MILSpec_Value.ImmediateValue, type: MILType, op: String) throws -> MILValue {
        switch imm.value {
        case .tensor(let t):
            return .tensor(try tensor(t, type: type, op: op))
        case .tuple(let t):
            guard case .tuple(let types) = type, types.count == t.values.count else {
                return .tuple(try t.values.map { try value($0, op: op) })
            }
            return .tuple(try t.values.map { try value($0, op: op) })
        case .list(let l):
            return .list(try l.values.map { try value($0, op: op) })
        case .dictionary(let d):
            return .dictionary(try d.values.map { (key: try value($0.key, op: op), value: try value($0.value, op: op)) })
        case nil:
            throw MILError.invalid(op, "an immediate value is empty")
        }
    }

    func tensor(_ t: CoreML_Specification_MILSpec_TensorValue, type: MILType, op: String) throws -> MILTensor {
        guard case .tensor(let dt, let dims) = type else { throw MILError.invalid(op, "a tensor value has type \(type)") }
        let declared: [Int]? = dims.flatMap { d in d.allSatisfy { $0 != nil } ? d.map { $0! } : nil }
        var result: MILTensor
        switch t.value {
        case .floats(let v): result = MILTensor(floats: v.values, shape: [v.values.count], dataType: dt)
        case .doubles(let v): result = MILTensor(floats: v.values.map { Float($0) }, shape: [v.values.count], dataType: dt)
        case .ints(let v):
            result = dt.isFloat ? MILTensor(floats: v.values.map { Float($0) }, shape: [v.values.count], dataType: dt)
                : MILTensor(ints: v.values.map { Int($0) }, shape: [v.values.count], dataType: dt)
        case .longInts(let v):
            result = dt.isFloat ? MILTensor(floats: v.values.map { Float($0) }, shape: [v.values.count], dataType: dt)
                : MILTensor(ints: v.values.map { Int($0) }, shape: [v.values.count], dataType: dt)
        case .bools(let v): result = MILTensor(bools: v.values, shape: [v.values.count])
        case .strings(let v): result = MILTensor(.string, shape: [v.values.count], storage: .string(v.values))
        case .bytes(let v):
            // Raw little-endian elements of the declared type (fp16, int8, uint8, sub-byte types, …).
            let count = declared?.reduce(1, *) ?? (v.values.count * 8 / max(MILBlobStorage.bits(dt), 1))
            guard v.values.count * 8 >= count * MILBlobStorage.bits(dt) else {
                throw MILError.invalid(op, "\(v.values.count) bytes hold fewer than \(count) \(dt.rawValue) values")
            }
            result = v.values.withUnsafeBytes { MILBlobStorage.decode($0, type: dt, count: count, shape: [count]) }
        case nil:
            result = MILTensor(dt, shape: [0], storage: dt.isFloat ? .float([]) : dt == .bool ? .bool([]) : dt == .string ? .string([]) : .int([]))
        }
        if result.dataType != dt { result = result.converted(to: dt) }
        let shape = declared ?? [result.count]
        guard shape.reduce(1, *) == result.count else {
            throw MILError.invalid(op, "an immediate value holds \(result.count) elements, its type \(type) needs \(shape.reduce(1, *))")
        }
        result.shape = shape
        return result
    }
}
