import CortadoCore
import Foundation

/// The network laid out for one set of input shapes: every blob's shape, the steps to run
/// and where each blob lives in one workspace. Blobs whose lifetimes do not overlap share
/// memory; element-wise layers write over their input when nothing reads it afterwards.
/// Workspaces are pooled, so a prediction on a planned shape allocates nothing.
///
/// Dynamic shapes: a plan may end early, before a layer whose output shapes depend on values
/// computed from the request (`NNValueShapedLayer`, `pending`). Running it then resolves that
/// layer's shapes from the workspace and continues on a plan of the rest of the graph, built
/// from that layer on with the blobs still alive as its inputs, and cached per shapes.
final class NNPlan: @unchecked Sendable {
    struct Step {
        let layer: any NNLayer
        let inputs: [NNTensor]
        let outputs: [NNTensor]
        let name: String
        let type: String
        /// Input 0's index in `rowInputs`, when it is one (given as rows when the batch leaves
        /// it there).
        var rowInput: Int?
        /// Every output is empty (an empty range and what follows from it): the step is not
        /// run, so kernels never see a tensor with nothing to write.
        var writesNothing = false
    }

    /// Where planning stopped: the layer whose shapes wait for values, the blobs still alive
    /// there (carried into the continuation) and the values the plan already knew.
    struct Pending {
        let node: Int
        let live: [String]
        let known: [String: [Float]]
    }

    let steps: [Step]
    /// Every blob's place, by name (inputs, outputs and intermediates).
    let blobs: [String: NNTensor]
    /// Floats in a workspace: blobs, then the largest scratch space any step needs.
    let blobFloats: Int
    let scratchFloats: Int
    let pending: Pending?
    /// Network inputs read only by `NNRowReading` layers (as their first input): a batch of
    /// float32 arrays may leave them in the requests (`run(on:threads:times:rows:)`).
    let rowInputs: [String]
    /// Layers that read or write a channel-blocked blob (`NNBlockedLayout`), and the reorders
    /// to planar the plan added.
    private(set) var blockedSteps: [String] = []
    private(set) var reorderSteps = 0

    private let graph: NNGraph
    private let kept: Set<String>
    private let lock = NSLock()
    /// Where workspaces come from and go back to: this plan's own pool, or that of another
    /// plan of the same layout (`shareWorkspaces`).
    private var workspaces: NNWorkspacePool?
    private var continuations: [[NNShape]: NNPlan] = [:]
    private static let maxContinuations = 16
    /// Blobs up to this many floats whose inputs are all known are computed while planning.
    static let maxKnownFloats = 4096

    /// Plans `graph` from node `start` on. `inputShapes` gives the blobs available there (the
    /// model inputs, or the live blobs of a plan that stopped at `start`); `resolved` gives the
    /// output shapes of node `start` when they were computed at run time.
    init(graph: NNGraph, inputShapes: [String: NNShape], keep outputs: Set<String>,
         from start: Int = 0, resolved: [NNShape]? = nil, known knownBefore: [String: [Float]] = [:]) throws {
        self.graph = graph
        self.kept = outputs
        var shapes = inputShapes
        var known = knownBefore
        var lastUse: [String: Int] = [:]
        for index in start..<graph.nodes.count {
            for name in graph.nodes[index].inputs { lastUse[name] = index }
        }
        for name in outputs { lastUse[name] = Int.max }
        var end = graph.nodes.count
        for index in start..<graph.nodes.count {
            let node = graph.nodes[index]
            let ins = try node.inputs.map { name -> NNShape in
                guard let s = shapes[name] else {
                    // Every read has a writer (the graph checks), so in a continuation a missing
                    // blob is one a branch or loop did not write this time.
                    if start > 0 {
                        let shown = name.split(separator: "#").first.map(String.init) ?? name
                        throw MLModelError(.featureType, "layer '\(node.name)' reads blob '\(shown)', which the branch or loop before it did not write")
                    }
                    throw MLModelError(.invalidModel, "layer '\(node.name)' reads blob '\(name)' before it is written")
                }
                return s
            }
            if node.layer is any NNControlLayer && !(index == start && resolved != nil) { end = index; break }
            var outs: [NNShape]
            do {
                if index == start, let resolved {
                    outs = resolved
                } else if let dynamic = node.layer as? any NNValueShapedLayer {
                    let values = node.inputs.indices.map { dynamic.shapeInputs.contains($0) ? known[node.inputs[$0]] : nil }
                    guard dynamic.shapeInputs.allSatisfy({ values[$0] != nil }) else { end = index; break }
                    outs = try dynamic.outputShapes(ins, values: values)
                } else {
                    outs = try node.layer.outputShapes(ins)
                    if !(node.layer is any NNTensorLayer), let first = ins.first {
                        outs = outs.map { Self.keepingRank($0, of: first) }
                    }
                }
            } catch let e as NNLayerError {
                // In a continuation the shapes came from the request's values: a request error.
                throw MLModelError(start > 0 ? .featureType : .invalidModel,
                                   "layer '\(node.name)' (\(node.type)) cannot take input shapes \(ins.map(\.description).joined(separator: ", ")): \(e.message)")
            }
            guard outs.count == node.outputs.count else {
                throw MLModelError(.invalidModel, "layer '\(node.name)' (\(node.type)) makes \(outs.count) outputs but names \(node.outputs.count)")
            }
            // Empty blobs come only from values (an empty range) and what is computed from
            // them; elsewhere a zero size is a parameter the layer cannot take.
            let mayBeEmpty = node.layer is any NNValueShapedLayer || ins.contains { $0.count == 0 }
            for (name, shape) in zip(node.outputs, outs) {
                guard shape.extents.allSatisfy({ $0 >= 0 }), shape.count > 0 || mayBeEmpty else {
                    throw MLModelError(.invalidModel, "layer '\(node.name)' (\(node.type)) would make blob '\(name)' of shape \(shape) from inputs \(ins.map(\.description).joined(separator: ", "))")
                }
                shapes[name] = shape
            }
            if let values = Self.planTimeValues(node, ins, outs, known) {
                for (name, v) in zip(node.outputs, values) { known[name] = v }
            }
        }
        // (A continuation may lack an output a branch did not write; reading it fails later.)
        if end == graph.nodes.count && start == 0 {
            for name in outputs where shapes[name] == nil {
                throw MLModelError(.invalidModel, "output '\(name)' is not written by any layer")
            }
        }

        // The channel-blocked layout (a whole network only): its steps, reorders included, and
        // each blob's last reader among them.
        let layout = start == 0 && end == graph.nodes.count
            ? NNBlockedLayout(nodes: graph.nodes[start..<end], shapes: shapes, kept: outputs) : nil
        if let layout { lastUse = layout.lastUse(keeping: outputs) }
        let items = layout?.items ?? graph.nodes[start..<end].map {
            NNBlockedLayout.Item(layer: $0.layer, inputs: $0.inputs, outputs: $0.outputs, name: $0.name, type: $0.type,
                                 blockedInputs: $0.inputs.map { _ in false }, blockedOutputs: $0.outputs.map { _ in false })
        }

        // Offsets: first fit in a free list, released after each blob's last reader.
        var arena = Arena()
        var place: [String: NNTensor] = [:]
        for name in inputShapes.keys.sorted() {
            let shape = inputShapes[name]!
            place[name] = NNTensor(offset: arena.allocate(shape.count), shape: shape)
            if lastUse[name] == nil { lastUse[name] = -1 }
        }
        var steps: [Step] = []
        var scratch = 0
        // Every read of each blob: (step, input index).
        var reads: [String: [(step: Int, input: Int)]] = [:]
        for (position, node) in items.enumerated() {
            // (A position in the layout's steps, else the graph's index.)
            let index = layout == nil ? start + position : position
            for (k, name) in node.inputs.enumerated() { reads[name, default: []].append((steps.count, k)) }
            let inTensors = node.inputs.map { place[$0]! }
            scratch = max(scratch, node.layer.scratchCount(inTensors.map(\.shape)))
            var outTensors: [NNTensor] = []
            for (k, name) in node.outputs.enumerated() {
                let shape = shapes[name] ?? place[node.inputs[0]]!.shape // (a reorder's copy: its input's shape)
                if k == 0, node.layer.runsInPlace, let first = node.inputs.first, lastUse[first] == index,
                   !outputs.contains(first), node.inputs.dropFirst().allSatisfy({ $0 != first }),
                   place[first]!.count == shape.count, !place[first]!.blocked {
                    outTensors.append(NNTensor(offset: place[first]!.offset, shape: shape))
                    lastUse[first] = -2 // handed over: do not free
                } else {
                    var tensor = NNTensor(offset: 0, shape: shape, blocked: node.blockedOutputs[k])
                    tensor.offset = arena.allocate(tensor.floats)
                    outTensors.append(tensor)
                }
                place[name] = outTensors.last!
            }
            var readTensors = inTensors
            for k in readTensors.indices { readTensors[k].blocked = node.blockedInputs[k] }
            steps.append(Step(layer: node.layer, inputs: readTensors, outputs: outTensors, name: node.name,
                              type: NNBlockedLayout.type(node.type, note: node.layer.timingNote, item: node),
                              writesNothing: outTensors.allSatisfy { $0.count == 0 }))
            for name in Set(node.inputs) where lastUse[name] == index {
                arena.free(place[name]!.offset, place[name]!.floats)
            }
            // Outputs nobody reads are freed at once (their memory is still written).
            for name in node.outputs where lastUse[name] == nil {
                arena.free(place[name]!.offset, place[name]!.floats)
            }
        }
        blockedSteps = steps.filter {
            !($0.layer is NNBlockedReorder) && ($0.inputs.contains(where: \.blocked) || $0.outputs.contains(where: \.blocked))
        }.map(\.name)
        reorderSteps = steps.filter { $0.layer is NNBlockedReorder }.count
        if end < graph.nodes.count {
            let live = place.keys.filter { (lastUse[$0] ?? -1) >= end }.sorted()
            pending = Pending(node: end, live: live, known: known)
        } else {
            pending = nil
        }
        // Inputs of a whole network (not a continuation's live blobs) that only row readers read.
        var rowInputs: [String] = []
        if start == 0 && end == graph.nodes.count {
            for name in inputShapes.keys.sorted() where !outputs.contains(name) {
                let shape = inputShapes[name]!
                guard let r = reads[name], r.allSatisfy({ read in
                    read.input == 0 && (steps[read.step].layer as? any NNRowReading)?.readsRows(shape, outputs: steps[read.step].outputs) == true
                        && r.filter({ $0.step == read.step }).count == 1
                }) else { continue }
                for read in r { steps[read.step].rowInput = rowInputs.count }
                rowInputs.append(name)
            }
        }
        self.rowInputs = rowInputs
        self.steps = steps
        self.blobs = place
        self.blobFloats = arena.size
        self.scratchFloats = scratch
    }

    /// A classic layer's rank-5 answer, brought back to its input's rank when the extra
    /// leading axes are ones (classic layers in a network of rank-N tensors).
    static func keepingRank(_ shape: NNShape, of input: NNShape) -> NNShape {
        guard input.rank < 5, shape.rank == 5, shape.extents.prefix(5 - input.rank).allSatisfy({ $0 == 1 }) else { return shape }
        return NNShape(tensor: Array(shape.extents.suffix(input.rank)))
    }

    /// Values of a node's outputs that the plan can know: from input shapes (getShape), or by
    /// running the layer once when all its inputs are known and its outputs are small.
    private static func planTimeValues(_ node: NNGraph.Node, _ ins: [NNShape], _ outs: [NNShape], _ known: [String: [Float]]) -> [[Float]]? {
        if let layer = node.layer as? any NNShapeValueLayer { return layer.values(forShapes: ins) }
        if let layer = node.layer as? any NNTensorLayer, !layer.isDeterministic { return nil }
        let inputs = node.inputs.compactMap { known[$0] }
        guard inputs.count == node.inputs.count, outs.reduce(0, { $0 + $1.count }) <= maxKnownFloats else { return nil }
        if outs.allSatisfy({ $0.count == 0 }) { return outs.map { _ in [] } }
        // A small workspace: inputs, outputs, scratch.
        var tensors: [NNTensor] = []
        var size = 0
        for shape in ins + outs {
            tensors.append(NNTensor(offset: size, shape: shape))
            size += shape.count
        }
        let scratch = node.layer.scratchCount(ins)
        let base = UnsafeMutablePointer<Float>.allocate(capacity: size + scratch)
        defer { base.deallocate() }
        base.initialize(repeating: 0, count: size + scratch)
        for (t, v) in zip(tensors, inputs) { (base + t.offset).update(from: v, count: t.count) }
        let context = NNRunContext(base: base, scratch: base + size, threads: 1)
        node.layer.run(inputs: Array(tensors.prefix(ins.count)), outputs: Array(tensors.suffix(outs.count)), context: context)
        return tensors.suffix(outs.count).map { Array(UnsafeBufferPointer(start: base + $0.offset, count: $0.count)) }
    }

    private var pool: NNWorkspacePool {
        lock.lock(); defer { lock.unlock() }
        if let workspaces { return workspaces }
        let made = NNWorkspacePool(floats: max(blobFloats + scratchFloats, 1))
        workspaces = made
        return made
    }

    /// Takes its workspaces from `other`'s pool when both lay out the same number of floats
    /// (a variant's plan and its base's, for the same shapes): a thousand variants of one
    /// network then hold as many workspaces as run at once, not a thousand sets. Call before
    /// the plan runs.
    func shareWorkspaces(with other: NNPlan) {
        guard other !== self, other.blobFloats + other.scratchFloats == blobFloats + scratchFloats else { return }
        let shared = other.pool
        lock.lock(); workspaces = shared; lock.unlock()
    }

    /// A workspace to run on; return it with `checkIn`.
    func checkOut() -> UnsafeMutablePointer<Float> { pool.checkOut() }

    func checkIn(_ p: UnsafeMutablePointer<Float>) {
        pool.checkIn(p)
    }

    /// Runs this plan's steps on a workspace whose inputs are filled in, except those of
    /// `rowInputs` given in `rows` (by index in `rowInputs`; read by their layers where the
    /// requests left them).
    func runSteps(on base: UnsafeMutablePointer<Float>, threads: Int, times: MLLayerTimes? = nil,
                  rows: [NNInputRows?] = []) {
        let context = NNRunContext(base: base, scratch: base + blobFloats, threads: threads)
        for step in steps where !step.writesNothing {
            var stepContext = context
            if let index = step.rowInput, index < rows.count, let given = rows[index] { stepContext.inputRows = given }
            guard let times else {
                step.layer.run(inputs: step.inputs, outputs: step.outputs, context: stepContext)
                continue
            }
            let start = DispatchTime.now().uptimeNanoseconds
            step.layer.run(inputs: step.inputs, outputs: step.outputs, context: stepContext)
            times.add(name: step.name, type: step.type, nanoseconds: DispatchTime.now().uptimeNanoseconds - start)
        }
    }

    /// Where a run ended: the plan and workspace holding the outputs, and the workspaces of
    /// continuation plans to give back (`release`) once the outputs are read.
    struct Finished {
        let plan: NNPlan
        let base: UnsafeMutablePointer<Float>
        fileprivate(set) var held: [(NNPlan, UnsafeMutablePointer<Float>)] = []
        /// Not `.normal` when a loopBreak or loopContinue (in this network or a branch in it)
        /// stopped the run: the steps after it did not run.
        fileprivate(set) var signal = NNControlSignal.normal
        func release() { for (plan, base) in held { plan.checkIn(base) } }
    }

    /// Runs the network on a workspace of this plan whose inputs are filled in, following
    /// continuations where shapes are resolved at run time. Throws when a resolved shape is
    /// impossible (the message names the layer).
    func run(on base: UnsafeMutablePointer<Float>, threads: Int, times: MLLayerTimes? = nil,
             rows: [NNInputRows?] = []) throws -> Finished {
        var finished = Finished(plan: self, base: base)
        while true {
            // (Row inputs exist only in a plan of the whole network, which has no continuation.)
            finished.plan.runSteps(on: finished.base, threads: threads, times: times, rows: finished.plan === self ? rows : [])
            guard let pending = finished.plan.pending else { return finished }
            let next: NNPlan
            var produced: [(String, NNValue)] = []
            do {
                if let control = graph.nodes[pending.node].layer as? any NNControlLayer {
                    let node = graph.nodes[pending.node]
                    let inputs = node.inputs.map { name -> NNValue in
                        let t = finished.plan.blobs[name]!
                        return NNValue(shape: t.shape, data: Array(UnsafeBufferPointer(start: finished.base + t.offset, count: t.count)))
                    }
                    let (signal, values) = try control.execute(inputs: inputs, threads: threads)
                    if case .normal = signal {} else {
                        finished.signal = signal
                        return finished
                    }
                    produced = zip(node.outputs, values).compactMap { name, value in value.map { (name, $0) } }
                    next = try finished.plan.continuation(afterControl: pending, produced: produced)
                } else {
                    next = try finished.plan.continuation(pending, base: finished.base)
                }
            } catch {
                finished.release()
                throw error
            }
            let nextBase = next.checkOut()
            for name in pending.live {
                let from = finished.plan.blobs[name]!, to = next.blobs[name]!
                (nextBase + to.offset).update(from: finished.base + from.offset, count: from.count)
            }
            for (name, value) in produced {
                let to = next.blobs[name]!
                value.data.withUnsafeBufferPointer { (nextBase + to.offset).update(from: $0.baseAddress!, count: to.count) }
            }
            finished = Finished(plan: next, base: nextBase, held: finished.held + [(next, nextBase)])
        }
    }

    /// The plan of the rest of the graph after a control-flow layer made `produced`.
    private func continuation(afterControl pending: Pending, produced: [(String, NNValue)]) throws -> NNPlan {
        for (name, value) in produced where value.shape.count <= 0 || value.data.count != value.shape.count {
            throw MLModelError(.featureType, "blob '\(name)' came out of a control-flow layer empty or malformed (shape \(value.shape))")
        }
        let key = pending.live.map { blobs[$0]!.shape } + produced.map(\.1.shape)
        lock.lock()
        if let plan = continuations[key] { lock.unlock(); return plan }
        lock.unlock()
        var shapes = Dictionary(uniqueKeysWithValues: pending.live.map { ($0, blobs[$0]!.shape) })
        for (name, value) in produced { shapes[name] = value.shape }
        let plan = try NNPlan(graph: graph, inputShapes: shapes, keep: kept, from: pending.node + 1, known: pending.known)
        return remember(plan, key)
    }

    private func remember(_ plan: NNPlan, _ key: [NNShape]) -> NNPlan {
        lock.lock(); defer { lock.unlock() }
        if let existing = continuations[key] { return existing }
        if continuations.count >= Self.maxContinuations, let evict = continuations.keys.first { continuations[evict] = nil }
        continuations[key] = plan
        return plan
    }

    /// The plan of the rest of the graph once the pending layer's shapes are read from `base`.
    private func continuation(_ pending: Pending, base: UnsafeMutablePointer<Float>) throws -> NNPlan {
        let node = graph.nodes[pending.node]
        let layer = node.layer as! any NNValueShapedLayer
        let ins = node.inputs.map { blobs[$0]!.shape }
        let values = node.inputs.indices.map { i -> [Float]? in
            guard layer.shapeInputs.contains(i) else { return nil }
            let t = blobs[node.inputs[i]]!
            return Array(UnsafeBufferPointer(start: base + t.offset, count: t.count))
        }
        let outs: [NNShape]
        do {
            outs = try layer.outputShapes(ins, values: values)
        } catch let e as NNLayerError {
            throw MLModelError(.featureType, "layer '\(node.name)' (\(node.type)) cannot make its output from inputs \(ins.map(\.description).joined(separator: ", ")) and the values computed for them: \(e.message)")
        }
        for (name, shape) in zip(node.outputs, outs) where !shape.extents.allSatisfy({ $0 >= 0 }) {
            throw MLModelError(.featureType, "layer '\(node.name)' (\(node.type)) would make blob '\(name)' of shape \(shape)")
        }
        let key = pending.live.map { blobs[$0]!.shape } + outs
        lock.lock()
        if let plan = continuations[key] { lock.unlock(); return plan }
        lock.unlock()
        let liveShapes = Dictionary(uniqueKeysWithValues: pending.live.map { ($0, blobs[$0]!.shape) })
        let plan = try NNPlan(graph: graph, inputShapes: liveShapes, keep: kept, from: pending.node, resolved: outs, known: pending.known)
        return remember(plan, key)
    }

    /// First-fit allocation of float ranges, with neighbouring free blocks merged.
    private struct Arena {
        var size = 0
        var free: [(offset: Int, count: Int)] = []

        mutating func allocate(_ count: Int) -> Int {
            let n = (count + 15) & ~15 // 64-byte aligned blobs
            guard n > 0 else { return 0 } // an empty blob takes no room
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
            guard n > 0 else { return }
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

/// Workspaces of one size, reused: a prediction checks one out and back in.
final class NNWorkspacePool: @unchecked Sendable {
    let floats: Int
    private let lock = NSLock()
    private var free: [UnsafeMutablePointer<Float>] = []

    init(floats: Int) { self.floats = floats }

    func checkOut() -> UnsafeMutablePointer<Float> {
        lock.lock()
        if let p = free.popLast() { lock.unlock(); return p }
        lock.unlock()
        let p = UnsafeMutableRawPointer.allocate(byteCount: floats * 4, alignment: 64).bindMemory(to: Float.self, capacity: floats)
        p.initialize(repeating: 0, count: floats)
        return p
    }

    func checkIn(_ p: UnsafeMutablePointer<Float>) {
        lock.lock(); free.append(p); lock.unlock()
    }

    deinit { for p in free { p.deallocate() } }
}
