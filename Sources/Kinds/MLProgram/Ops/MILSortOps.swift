import CortadoCore

/// Ordering and selection (`tensor_operation.py`): topk, argsort and non_maximum_suppression.
///
/// Sorts are stable: equal values keep their index order in either direction, which is what
/// NumPy's stable argsort of `x` (ascending) or `-x` (descending) gives.
enum MILSortOps {
    nonisolated(unsafe) static let kernels: [String: MILKernel] = [
        "topk": { call in
            let x = try call.tensor("x")
            let axis = try MILShape.axis(try call.int("axis", default: -1), rank: x.rank, op: call.name)
            let n = x.shape[axis]
            var k = try call.int("k", default: 1)
            if k == -1 { k = n }
            guard k >= 0 && k <= n else { throw call.error("k \(k) is outside [0, \(n)] for axis \(axis) of \(x.shape)") }
            let ascending = try call.bool("ascending", default: false)
            let order = sortedIndices(x, axis: axis, ascending: ascending, keep: k)
            var shape = x.shape
            shape[axis] = k
            let values = MILShapeOps.gather(x, offsets: order.offsets, shape: shape)
            // iOS16 `return_indices` false declares the values alone.
            guard try call.bool("return_indices", default: true), call.outputTypes.count > 1 else { return [.tensor(values)] }
            return [.tensor(values), .tensor(MILTensor(ints: order.positions, shape: shape, dataType: .int32))]
        },
        "argsort": { call in
            let x = try call.tensor("x")
            let axis = try MILShape.axis(try call.int("axis", default: -1), rank: x.rank, op: call.name)
            let order = sortedIndices(x, axis: axis, ascending: try call.bool("ascending", default: false), keep: x.shape[axis])
            return [.tensor(MILTensor(ints: order.positions, shape: x.shape, dataType: .int32))]
        },
        "non_maximum_suppression": { call in try nonMaximumSuppression(call) },
    ]

    /// Along `axis`, the first `keep` elements in sorted order: their position on the axis and
    /// their flat offset in x, laid out like x with the axis cut to `keep`.
    static func sortedIndices(_ x: MILTensor, axis: Int, ascending: Bool, keep: Int) -> (positions: [Int], offsets: [Int]) {
        let n = x.shape[axis], inner = x.shape[(axis + 1)...].reduce(1, *)
        let outer = n * inner == 0 ? 0 : x.count / (n * inner)
        var positions = [Int](repeating: 0, count: outer * keep * inner), offsets = positions
        func run<T: Comparable>(_ v: [T]) {
            var lane = [Int](repeating: 0, count: n)
            for o in 0..<outer {
                for i in 0..<inner {
                    let base = o * n * inner + i
                    for j in 0..<n { lane[j] = j }
                    lane.sort { a, b in
                        let va = v[base + a * inner], vb = v[base + b * inner]
                        if va == vb { return a < b }
                        return ascending ? va < vb : va > vb
                    }
                    for j in 0..<keep {
                        let slot = (o * keep + j) * inner + i
                        positions[slot] = lane[j]
                        offsets[slot] = base + lane[j] * inner
                    }
                }
            }
        }
        if case .int(let v) = x.storage { run(v) } else { run(x.floats) }
        return (positions, offsets)
    }

    /// iOS15: boxes `[n, B, 4]`, scores `[n, B, K]`, a score threshold, four outputs (boxes,
    /// scores, indices, counts). iOS17 drops the score threshold and the counts and puts the
    /// box axis last (`[n, 4, B]`, `[n, K, B]`). Boxes are (centre x, centre y, width, height);
    /// a box ranks by its largest class score (`MLBoxSuppression`, shared with the
    /// neural-network layer and the NMS model kind). Rows past the kept boxes are zeros, their
    /// indices -1.
    static func nonMaximumSuppression(_ call: MILOpCall) throws -> [MILValue] {
        var boxes = try call.tensor("boxes"), scores = try call.tensor("scores")
        let boxAxisLast = !call.has("score_threshold")
        if boxAxisLast {
            boxes = MILShapeOps.transpose(boxes, [0, 2, 1])
            scores = MILShapeOps.transpose(scores, [0, 2, 1])
        }
        guard boxes.rank == 3, boxes.shape[2] == 4, scores.rank == 3, scores.shape[0] == boxes.shape[0], scores.shape[1] == boxes.shape[1] else {
            throw call.error("boxes \(boxes.shape) and scores \(scores.shape) are not [n, B, 4] and [n, B, K]")
        }
        let maxBoxes = try call.int("max_boxes")
        guard maxBoxes >= 0 else { throw call.error("max_boxes \(maxBoxes) is negative") }
        let suppression = MLBoxSuppression(
            iouThreshold: Double(try call.float("iou_threshold")),
            confidenceThreshold: boxAxisLast ? -.infinity : Double(try call.float("score_threshold")),
            perClass: try call.bool("per_class_suppression", default: false))
        let (batch, n, classes) = (scores.shape[0], scores.shape[1], scores.shape[2])
        let xywh = boxes.floats.map(Double.init), confidence = scores.floats.map(Double.init)
        var outBoxes = [Float](repeating: 0, count: batch * maxBoxes * 4)
        var outScores = [Float](repeating: 0, count: batch * maxBoxes * classes)
        var outIndices = [Int](repeating: -1, count: batch * maxBoxes)
        var counts = [Int](repeating: 0, count: batch)
        for b in 0..<batch {
            let rowBoxes = Array(xywh[(b * n * 4)..<((b + 1) * n * 4)])
            let rowScores = Array(confidence[(b * n * classes)..<((b + 1) * n * classes)])
            let kept = rowBoxes.withUnsafeBufferPointer { c in
                rowScores.withUnsafeBufferPointer { s in suppression.keptRows(confidence: s, coordinates: c, boxes: n, classes: classes) }
            }
            for (slot, row) in kept.prefix(maxBoxes).enumerated() {
                for j in 0..<4 { outBoxes[(b * maxBoxes + slot) * 4 + j] = Float(xywh[(b * n + row) * 4 + j]) }
                for j in 0..<classes { outScores[(b * maxBoxes + slot) * classes + j] = Float(confidence[(b * n + row) * classes + j]) }
                outIndices[b * maxBoxes + slot] = row
            }
            counts[b] = Swift.min(kept.count, maxBoxes)
        }
        var boxesOut = MILTensor(floats: outBoxes, shape: [batch, maxBoxes, 4], dataType: boxes.dataType)
        var scoresOut = MILTensor(floats: outScores, shape: [batch, maxBoxes, classes], dataType: scores.dataType)
        let indicesOut = MILTensor(ints: outIndices, shape: [batch, maxBoxes], dataType: .int32)
        if boxAxisLast {
            boxesOut = MILShapeOps.transpose(boxesOut, [0, 2, 1])
            scoresOut = MILShapeOps.transpose(scoresOut, [0, 2, 1])
            return [.tensor(boxesOut), .tensor(scoresOut), .tensor(indicesOut)]
        }
        return [.tensor(boxesOut), .tensor(scoresOut), .tensor(indicesOut), .tensor(MILTensor(ints: counts, shape: [batch], dataType: .int32))]
    }
}
