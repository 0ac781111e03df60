/// iOS18 state operations: a stateful program reads and updates tensors that persist
/// between the predictions of one session (`MLState`).
enum MILStateOps {
    nonisolated(unsafe) static let kernels: [String: MILKernel] = [
        "read_state": { call in
            [.tensor(try call.state("input").value)]
        },
        "coreml_update_state": { call in
            let value = try call.tensor("value")
            try store(value, in: try call.state("state"), call)
            return [.tensor(value)]
        },
        "write_state": { call in
            try store(try call.tensor("data"), in: try call.state("input"), call)
            return []
        },
    ]

    /// A state keeps its shape and element type for the session's life.
    static func store(_ value: MILTensor, in cell: MILStateCell, _ call: MILOpCall) throws {
        guard value.shape == cell.value.shape else {
            throw call.error("the new value's shape \(value.shape) differs from the state's \(cell.value.shape)")
        }
        cell.value = value.converted(to: cell.value.dataType)
    }
}
