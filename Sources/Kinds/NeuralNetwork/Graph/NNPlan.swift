import CortadoCore
import Foundation

/// The network laid out for one set of input shapes: every blob's shape, the steps to run
/// and where each blob lives in one workspace. Blobs whose lifetimes do not overlap share
/// memory; element-wise layers write over their input when nothing reads it afterwards.
/// Workspaces are pooled, so a prediction on a planned shape allocates nothing.
final class NNPlan: @unchecked Sendable {
    struct Step {
        let layer: any NNLayer
        let inputs: [NNTensor]
        let outputs: [NNTensor]
        let name: String
        let type: String
    }

    let steps: [Step]
    /// Every blob's place, by name (inputs, outputs and intermediates).
    let blobs: [String: NNTensor]
    /// Floats in a workspace: blobs, then the largest scratch space any step needs.
    let blobFloats: Int
    let scratchFloats: Int

    private let lock = NSLock()
    private var pool: [UnsafeMutablePointer<Float>] = []

    init(graph: NNGraph, inputShapes: [String: NNShape], keep outputs: Set<String>) throws {
        var shapes = inputShapes
        var lastUse: [String: Int] = [:]
        for (index, node) in graph.nodes.enumerated() {
            let ins = try node.inputs.map { name -> NNShape in
                guard let s = shapes[name] else { throw MLModelError(.invalidModel, "layer '\(node.name)' reads blob '\(name)' before it is written") }
                return s
            }
            let outs: [NNShape]
            do {
                outs = try node.layer.outputShapes(ins)
            } catch let e as NNLayerError {
                throw MLModelError(.invalidModel, "layer '\(node.name)' (\(node.type)) cannot take input shapes \(ins.map(\.description).joined(separator: ", ")): \(e.message)")
            }
            guard outs.count == node.outputs.count else {
                throw MLModelError(.invalidModel, "layer '\(node.name)' (\(node.type)) makes \(outs.count) outputs but names \(node.outputs.count)")
            }
            for (name, shape) in zip(node.outputs, outs) {
                guard shape.count > 0, [shape.s, shape.b, shape.c, shape.h, shape.w].allSatisfy({ $0 > 0 }) else {
                    throw MLModelError(.invalidModel, "layer '\(node.name)' (\(node.type)) would make blob '\(name)' of shape \(shape) from inputs \(ins.map(\.description).joined(separator: ", "))")
                }
                shapes[name] = shape
            }
            for name in node.inputs { lastUse[name] = index }
        }
        for name in outputs {
            guard shapes[name] != nil else { throw MLModelError(.invalidModel, "output '\(name)' is not written by any layer") }
            lastUse[name] = Int.max
        }

        // Offsets: first fit in a free list, released after each blob's last reader.
        var arena = Arena()
        var place: [String: NNTensor] = [:]
        for name in graph.inputs.sorted() {
            guard let shape = shapes[name] else { continue }
            place[name] = NNTensor(offset: arena.allocate(shape.count), shape: shape)
            if lastUse[name] == nil { lastUse[name] = -1 }
        }
        var steps: [Step] = []
        var scratch = 0
        for (index, node) in graph.nodes.enumerated() {
            let inTensors = node.inputs.map { place[$0]! }
            scratch = max(scratch, node.layer.scratchCount(inTensors.map(\.shape)))
            var outTensors: [NNTensor] = []
            for (k, name) in node.outputs.enumerated() {
                let shape = shapes[name]!
                if k == 0, node.layer.runsInPlace, let first = node.inputs.first, lastUse[first] == index,
                   !outputs.contains(first), node.inputs.dropFirst().allSatisfy({ $0 != first }),
                   place[first]!.count == shape.count {
                    outTensors.append(NNTensor(offset: place[first]!.offset, shape: shape))
                    lastUse[first] = -2 // handed over: do not free
                } else {
                    outTensors.append(NNTensor(offset: arena.allocate(shape.count), shape: shape))
                }
                place[name] = outTensors.last!
            }
            steps.append(Step(layer: node.layer, inputs: inTensors, outputs: outTensors, name: node.name, type: node.type))
            for name in Set(node.inputs) where lastUse[name] == index {
                arena.free(place[name]!.offset, place[name]!.count)
            }
            // Outputs nobody reads are freed at once (their memory is still written).
            for name in node.outputs where lastUse[name] == nil {
                arena.free(place[name]!.offset, place[name]!.count)
            }
        }
        self.steps = steps
        self.blobs = place
        self.blobFloats = arena.size
        self.scratchFloats = scratch
    }

    deinit { for p in pool { p.deallocate() } }

    /// A workspace to run on; return it with `checkIn`.
    func checkOut() -> UnsafeMutablePointer<Float> {
        lock.lock()
        if let p = pool.popLast() { lock.unlock(); return p }
        lock.unlock()
        let n = max(blobFloats + scratchFloats, 1)
        let p = UnsafeMutableRawPointer.allocate(byteCount: n * 4, alignment: 64).bindMemory(to: Float.self, capacity: n)
        p.initialize(repeating: 0, count: n)
        return p
    }

    func checkIn(_ p: UnsafeMutablePointer<Float>) {
        lock.lock(); pool.append(p); lock.unlock()
    }

    /// Runs every step on a workspace whose inputs are filled in.
    func run(on base: UnsafeMutablePointer<Float>, threads: Int) {
        let context = NNRunContext(base: base, scratch: base + blobFloats, threads: threads)
        for step in steps { step.layer.run(inputs: step.inputs, outputs: step.outputs, context: context) }
    }

    /// First-fit allocation of float ranges, with neighbouring free blocks merged.
    private struct Arena {
        var size = 0
        var free: [(offset: Int, count: Int)] = []

        mutating func allocate(_ count: Int) -> Int {
            let n = (count + 15) & ~15 // 64-byte aligned blobs
            if let i = free.firstIndex(where: { $0.count >= n }) {
                let block = free[i]
                if block.count == n { free.remove(at: i) } else { free[i] = (block.offset + n, block.count - n) }
                return block.offset
            }
            // Grow, reusing a free block at the end.
            if let last = free.last, last.offset + last.count == size {
                free.removeLast()
                size = last.offset + n
                return last.offset
            }
            defer { size += n }
            return size
        }

        mutating func free(_ offset: Int, _ count: Int) {
            let n = (count + 15) & ~15
            free.append((offset, n))
            free.sort { $0.offset < $1.offset }
            var merged: [(offset: Int, count: Int)] = []
            for block in free {
                if let last = merged.last, last.offset + last.count == block.offset {
                    merged[merged.count - 1].count += block.count
                } else {
                    merged.append(block)
                }
            }
            free = merged
        }
    }
}
