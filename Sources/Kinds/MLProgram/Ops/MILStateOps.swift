/// iOS18 state operations: a stateful program reads and updates tensors that persist
/// between the predictions of one session (`MLState`).
enum MILStateOps {
    nonisolated(unsafe) static let kernels: [String: MILKernel] = [
        "read_state": { call in
            [.tensor(try call.state("input").value)]
        },
        "coreml_update_state": { call in
            let cell = try call.state("state")
            let value = try call.tensor("value")
            guard value.shape == cell.value.shape else {
                throw call.error("the new value's shape \(value.shape) differs from the state's \(cell.value.shape)")
            }
            cell.value = value.converted(to: cell.value.dataType)
            return [.tensor(value)]
        },
        "write_state": { call in
            let cell = try call.state("input")
            let value = try call.tensor("data")
            guard value.shape == cell.value.shape else {
                throw call.error("the new value's shape \(value.shape) differs from the state's \(cell.value.shape)")
            }
            cell.value = value.converted(to: cell.value.dataType)
            return []
        },
    ]
}
