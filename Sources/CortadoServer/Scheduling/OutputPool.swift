import CortadoCore
import Foundation

/// Output arrays a model's one-row predictions write into (`MLPredictionOptions.outputBackings`,
/// each of shape [1] + the output's shape, as a one-row batch's output column)
/// and that go back here once the response has been written from them, so steady-state
/// predictions allocate no output arrays.
///
/// Only models whose outputs cannot change shape take part: at least one multi-array output
/// and no input with flexible shapes or image sizes. The arrays' shapes and types are learned
/// from the first prediction (run without backings), so they are exactly what the model
/// produces; the pool allocates its own arrays from then on and never keeps an array a model
/// returned (that could be memory the model or a caller still holds).
final class OutputPool: @unchecked Sendable {
    struct Counts: Equatable, Sendable {
        /// Predictions given a set of arrays from the pool (reused, no allocation).
        var hits = 0
        /// Sets of arrays allocated (the pool was empty).
        var allocations = 0
    }

    private let names: [String]
    private let capacity: Int
    private let lock = NSLock()
    private var layout: [(name: String, shape: [Int], dataType: MLMultiArrayDataType)]?
    private var free: [[String: MLMultiArray]] = []
    private var counts = Counts()

    /// nil when the model does not qualify.
    init?(model: MLModel, capacity: Int) {
        let d = model.modelDescription
        let fixedInputs = d.inputs.allSatisfy { f in
            if let c = f.multiArrayConstraint, c.shapeConstraint.type != .unspecified { return false }
            if let c = f.imageConstraint, !c.enumeratedSizes.isEmpty || c.widthRange != nil || c.heightRange != nil { return false }
            return true
        }
        names = d.outputs.filter { $0.type == .multiArray }.map(\.name)
        guard fixedInputs, !names.isEmpty else { return nil }
        self.capacity = max(1, capacity)
    }

    var statistics: Counts { lock.withLock { counts } }

    /// Arrays for one prediction's outputs; nil until the first prediction taught the shapes.
    func checkOut() -> [String: MLMultiArray]? {
        lock.lock()
        guard let layout else { lock.unlock(); return nil }
        if let set = free.popLast() {
            counts.hits += 1
            lock.unlock()
            return set
        }
        counts.allocations += 1
        lock.unlock()
        var set: [String: MLMultiArray] = [:]
        for entry in layout {
            guard let array = try? MLMultiArray(shape: entry.shape, dataType: entry.dataType) else { return nil }
            set[entry.name] = array
        }
        return set
    }

    /// Takes back a set after the response was written from it.
    func checkIn(_ set: [String: MLMultiArray]) {
        lock.withLock { if free.count < capacity { free.append(set) } }
    }

    /// Learns the output shapes from a one-row prediction that ran without backings.
    func learn(from outputs: MLFeatureColumns) {
        var found: [(name: String, shape: [Int], dataType: MLMultiArrayDataType)] = []
        for name in names {
            guard outputs.count == 1, case .arrays(let array)? = outputs.column(name) else { return }
            found.append((name, array.shape, array.dataType))
        }
        lock.withLock { if layout == nil { layout = found } }
    }
}
