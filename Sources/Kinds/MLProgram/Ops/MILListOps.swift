/// Tensor lists (`control_flow.py`): make_list, list_length, list_write, list_read,
/// list_gather, list_scatter. A list is `MILValue.list` of tensors; each op returns a new
/// list value, so a list carried through `while_loop` iterations behaves as a value.
///
/// Elements never written read as zeros of the declared element shape (a dimension the
/// program leaves symbolic counts as 0). Writing past the end grows the list, as a list with
/// `dynamic_length` does; a fixed-length list is not told apart, since the list value does
/// not carry the flag and the converter declares both kinds with the same length.
enum MILListOps {
    nonisolated(unsafe) static let kernels: [String: MILKernel] = [
        "make_list": { call in
            let length = try call.int("init_length", default: 1)
            guard length >= 0 else { throw call.error("init_length \(length) is negative") }
            let name = try call.string("dtype", default: "fp32")
            guard let type = MILDataType(castName: name) else { throw call.error("unknown dtype \(name)") }
            // elem_shape is a tuple of scalars: an int for a known dimension, a name for a symbolic one.
            let shape = try call.tensors("elem_shape").map { $0.dataType == .string ? 0 : ($0.ints.first ?? 0) }
            let zero = MILTensorOps.filled(shape, with: MILTensor.scalar(Float(0)).converted(to: type))
            return [.list([MILValue](repeating: .tensor(zero), count: length))]
        },
        "list_length": { call in
            [.tensor(.scalar(try list(call).count, .int32))]
        },
        "list_write": { call in
            var items = try list(call)
            let value = try call.tensor("value")
            let index = try call.int("index")
            try write(&items, at: index, value, call: call)
            return [.list(items)]
        },
        "list_read": { call in
            let items = try list(call)
            let index = try call.int("index")
            guard index >= 0 && index < items.count else { throw call.error("index \(index) is outside a list of \(items.count)") }
            return [items[index]]
        },
        "list_gather": { call in
            let items = try list(call)
            let indices = try call.ints("indices")
            let picked = try indices.map { i -> MILTensor in
                guard i >= 0 && i < items.count, let t = items[i].tensor else { throw call.error("index \(i) is outside a list of \(items.count)") }
                var row = t
                row.shape.insert(1, at: 0)
                return row
            }
            guard let first = picked.first else {
                // No rows: the element shape comes from the declared result.
                let dims = call.outputTypes.first?.dimensions?.map { $0 ?? 0 } ?? [0]
                return [.tensor(MILTensorOps.filled(dims, with: MILTensor.scalar(Float(0)).converted(to: call.outputDataType() ?? .fp32)))]
            }
            for p in picked where p.shape != first.shape {
                throw call.error("list elements of shapes \(first.shape.dropFirst()) and \(p.shape.dropFirst()) cannot be stacked")
            }
            return [.tensor(try MILShapeOps.concat(picked, axis: 0, call: call))]
        },
        "list_scatter": { call in
            var items = try list(call)
            let indices = try call.ints("indices")
            let value = try call.tensor("value")
            guard value.rank >= 1, value.shape[0] == indices.count else {
                throw call.error("\(indices.count) indices for a value of shape \(value.shape)")
            }
            let rowShape = Array(value.shape.dropFirst())
            let rowCount = MILShape.count(rowShape)
            for (k, i) in indices.enumerated() {
                let row = MILShapeOps.gather(value, offsets: Array((k * rowCount)..<((k + 1) * rowCount)), shape: rowShape)
                try write(&items, at: i, row, call: call)
            }
            return [.list(items)]
        },
    ]

    static func list(_ call: MILOpCall) throws -> [MILValue] {
        guard let v = try call.value("ls") else { throw call.error("the input 'ls' is missing") }
        guard case .list(let items) = v else { throw call.error("the input 'ls' is not a list") }
        return items
    }

    /// Stores `value` at `index`, growing the list with zeros shaped like `value` when needed.
    static func write(_ items: inout [MILValue], at index: Int, _ value: MILTensor, call: MILOpCall) throws {
        guard index >= 0 else { throw call.error("index \(index) is negative") }
        if index >= items.count {
            let zero = MILTensorOps.filled(value.shape, with: MILTensorOps.zeroScalar(like: value))
            items += [MILValue](repeating: .tensor(zero), count: index + 1 - items.count)
        }
        items[index] = .tensor(value)
    }
}
