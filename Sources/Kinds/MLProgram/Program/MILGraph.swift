import CortadoCore
import CortadoSpec
import Dispatch
import Foundation

/// One planned operation.
final class MILStep {
    let type: String
    let name: String
    let kernel: MILKernel
    let inputs: [String: [MILArgument]]
    let outputSlots: [Int]
    let outputNames: [String]
    let outputTypes: [MILType]
    let blocks: [MILBlock]
    /// What a kernel derives once from this op's constant inputs (packed weights), kept
    /// across predictions.
    let cache = MILStepCache()

    init(type: String, name: String, kernel: @escaping MILKernel, inputs: [String: [MILArgument]], outputSlots: [Int],
         outputNames: [String], outputTypes: [MILType], blocks: [MILBlock]) {
        self.type = type; self.name = name; self.kernel = kernel; self.inputs = inputs
        self.outputSlots = outputSlots; self.outputNames = outputNames; self.outputTypes = outputTypes; self.blocks = blocks
    }
}

/// One value a kernel computes from an op's constant inputs on its first run and reuses.
final class MILStepCache: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: AnyObject?

    func value<T: AnyObject>(_ make: () throws -> T) rethrows -> T {
        lock.lock(); defer { lock.unlock() }
        if let stored = stored as? T { return stored }
        let made = try make()
        stored = made
        return made
    }
}

/// A planned block: its inputs' slots, its steps in order, its outputs.
final class MILBlock {
    let inputSlots: [Int]
    let steps: [MILStep]
    let outputs: [MILArgument]
    /// For each step, the slots no later step of this block (nor its outputs) reads: released
    /// once the step ran, so a value's memory lives only as long as its last reader and the
    /// next op can often update a buffer in place instead of copying it.
    let releases: [[Int]]

    init(inputSlots: [Int], steps: [MILStep], outputs: [MILArgument]) {
        self.inputSlots = inputSlots; self.steps = steps; self.outputs = outputs
        var lastUse: [Int: Int] = [:]
        for (i, step) in steps.enumerated() {
            for slot in step.readSlots { lastUse[slot] = i }
            for slot in step.outputSlots where lastUse[slot] == nil { lastUse[slot] = i }
        }
        var kept = Set<Int>(inputSlots)
        for case .slot(let s, _) in outputs { kept.insert(s) }
        var releases = [[Int]](repeating: [], count: steps.count)
        for (slot, i) in lastUse where !kept.contains(slot) && steps.indices.contains(i) {
            // Slots defined outside this block (an enclosing block's values) are not ours to release.
            if steps.contains(where: { $0.outputSlots.contains(slot) }) { releases[i].append(slot) }
        }
        self.releases = releases
    }

    /// Every slot this block's steps read, nested blocks included.
    var readSlots: Set<Int> {
        var all = Set<Int>()
        for step in steps { all.formUnion(step.readSlots) }
        for case .slot(let s, _) in outputs { all.insert(s) }
        return all
    }
}

extension MILStep {
    /// The slots this step reads, its nested blocks' reads included.
    var readSlots: Set<Int> {
        var all = Set<Int>()
        for bound in inputs.values { for case .slot(let s, _) in bound { all.insert(s) } }
        for block in blocks { all.formUnion(block.readSlots) }
        return all
    }
}

/// Runs planned blocks.
final class MILRunner {
    /// Per-op times of one prediction (`cortado report --layers`), nil when not asked for.
    var layerTimes: MLLayerTimes?

    init(layerTimes: MLLayerTimes? = nil) { self.layerTimes = layerTimes }

    /// Runs a block in `frame`; nested blocks share the frame (names are unique in a function).
    func run(_ block: MILBlock, frame: MILFrame, inputs: [MILValue]) throws -> [MILValue] {
        for (slot, v) in zip(block.inputSlots, inputs) { frame.slots[slot] = v }
        for (i, step) in block.steps.enumerated() {
            if let layerTimes {
                let start = DispatchTime.now().uptimeNanoseconds
                try execute(step, frame: frame)
                layerTimes.add(name: step.name, type: step.type, nanoseconds: DispatchTime.now().uptimeNanoseconds - start)
            } else {
                try execute(step, frame: frame)
            }
            for slot in block.releases[i] { frame.slots[slot] = nil }
        }
        return try block.outputs.map { output in
            guard let value = frame.value(output) else { throw MILError.invalid("block", "an output was not computed") }
            return value
        }
    }

    func execute(_ step: MILStep, frame: MILFrame) throws {
        let call = MILOpCall(step: step, frame: frame, runner: self)
        let results = try step.kernel(call)
        guard results.count >= step.outputSlots.count else {
            throw call.error("the kernel returned \(results.count) values for \(step.outputSlots.count) outputs")
        }
        for (i, slot) in step.outputSlots.enumerated() {
            frame.slots[slot] = try Self.conform(results[i], to: step.outputTypes[i], call: call, output: i)
        }
    }

    /// Holds a result to its declared type: elements converted to the declared element type
    /// (fp16 outputs rounded to fp16), the shape checked against fixed declared dimensions.
    static func conform(_ value: MILValue, to type: MILType, call: MILOpCall, output: Int) throws -> MILValue {
        guard case .tensor(var t) = value, case .tensor(let dt, let dims) = type else { return value }
        if t.dataType != dt {
            t = t.converted(to: dt)  // rounds when it narrows to fp16 or bf16
        } else if dt == .fp16 || dt == .bf16 {
            t.roundToStoredPrecision()  // computed in Float: stored as the narrow type holds it
        }
        if let dims {
            let fixed = dims.count == t.rank && zip(dims, t.shape).allSatisfy { $0.0 == nil || $0.0 == $0.1 }
            if !fixed {
                throw call.error("output \(output) has shape \(t.shape), the program declares \(type)")
            }
        }
        return .tensor(t)
    }
}
