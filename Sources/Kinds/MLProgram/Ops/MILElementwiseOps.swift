import Foundation

/// Element-wise math: one-input functions, and two-input arithmetic, comparisons and logic
/// with NumPy broadcasting.
enum MILElementwiseOps {
    nonisolated(unsafe) static let kernels: [String: MILKernel] = {
        var k: [String: MILKernel] = [:]
        let unary: [String: (Float) -> Float] = [
            "abs": { abs($0) }, "acos": { acosf($0) }, "asin": { asinf($0) }, "atan": { atanf($0) }, "atanh": { atanhf($0) },
            "ceil": { ceilf($0) }, "cos": { cosf($0) }, "cosh": { coshf($0) }, "erf": { erff($0) }, "exp": { expf($0) },
            "exp2": { exp2f($0) }, "floor": { floorf($0) }, "round": { $0.rounded(.toNearestOrEven) },
            "sign": { $0 > 0 ? 1 : ($0 < 0 ? -1 : 0) }, "sin": { sinf($0) }, "sinh": { sinhf($0) }, "sqrt": { sqrtf($0) },
            "square": { $0 * $0 }, "tan": { tanf($0) }, "tanh": { tanhf($0) },
        ]
        for (name, f) in unary { k[name] = { call in [.tensor(try map(try call.tensor("x"), f))] } }
        // Integer inputs stay integers where the op is exact on them.
        for name in ["abs", "sign", "square", "ceil", "floor", "round"] {
            let f = unary[name]!
            k[name] = { call in
                let x = try call.tensor("x")
                if case .int(let v) = x.storage {
                    let g: (Int) -> Int
                    switch name {
                    case "abs": g = { Swift.abs($0) }
                    case "sign": g = { $0.signum() }
                    case "square": g = { $0 &* $0 }
                    default: g = { $0 }
                    }
                    return [.tensor(MILTensor(ints: v.map(g), shape: x.shape, dataType: x.dataType))]
                }
                return [.tensor(try map(x, f))]
            }
        }
        k["inverse"] = { call in
            let e = try call.float("epsilon", default: 1e-4)
            return [.tensor(try map(try call.tensor("x")) { 1 / ($0 + e) })]
        }
        k["log"] = { call in
            let e = try call.float("epsilon", default: Float.leastNonzeroMagnitude)
            return [.tensor(try map(try call.tensor("x")) { logf($0 + e) })]
        }
        k["rsqrt"] = { call in
            let e = try call.float("epsilon", default: 1e-12)
            return [.tensor(try map(try call.tensor("x")) { 1 / sqrtf($0 + e) })]
        }
        k["threshold"] = { call in
            let a = try call.float("alpha")
            return [.tensor(try map(try call.tensor("x")) { Swift.max($0, a) })]
        }
        k["clip"] = { call in
            let a = try call.float("alpha"), b = try call.float("beta")
            return [.tensor(try map(try call.tensor("x")) { Swift.min(Swift.max($0, a), b) })]
        }
        k["logical_not"] = { call in
            let x = try call.tensor("x")
            return [.tensor(MILTensor(bools: x.bools.map { !$0 }, shape: x.shape))]
        }

        // Each written out with its closures at the call, so the loops specialise on them.
        k["add"] = { call in
            var sum = try binary(call, { $0 + $1 }, { $0 &+ $1 })
            if try call.string(MILFusion.activationInput, default: "") == "relu" { sum.clampBelowZero() }
            return [.tensor(sum)]
        }
        k["sub"] = { call in [.tensor(try binary(call, { $0 - $1 }, { $0 &- $1 }))] }
        k["mul"] = { call in [.tensor(try binary(call, { $0 * $1 }, { $0 &* $1 }))] }
        k["real_div"] = { call in [.tensor(try binary(call, { $0 / $1 }, nil))] }
        k["floor_div"] = { call in
            [.tensor(try binary(call, { floorf($0 / $1) }, { b, c in c == 0 ? 0 : Int((Double(b) / Double(c)).rounded(.down)) }))]
        }
        k["mod"] = { call in [.tensor(try binary(call, { a, b in a - floorf(a / b) * b }, { a, b in b == 0 ? 0 : ((a % b) + b) % b }))] }
        k["pow"] = { call in [.tensor(try binary(call, { powf($0, $1) }, { a, b in b < 0 ? 0 : Int(pow(Double(a), Double(b))) }))] }
        k["maximum"] = { call in [.tensor(try binary(call, { Swift.max($0, $1) }, { Swift.max($0, $1) }))] }
        k["minimum"] = { call in [.tensor(try binary(call, { Swift.min($0, $1) }, { Swift.min($0, $1) }))] }
        let comparisons: [String: (Float, Float) -> Bool] = [
            "equal": { $0 == $1 }, "not_equal": { $0 != $1 }, "greater": { $0 > $1 },
            "greater_equal": { $0 >= $1 }, "less": { $0 < $1 }, "less_equal": { $0 <= $1 },
        ]
        for (name, f) in comparisons {
            k[name] = { call in [.tensor(try compare(call, f))] }
        }
        let logic: [String: (Bool, Bool) -> Bool] = [
            "logical_and": { $0 && $1 }, "logical_or": { $0 || $1 }, "logical_xor": { $0 != $1 },
        ]
        for (name, f) in logic {
            k[name] = { call in
                let (x, y, shape, ix, iy) = try broadcastPair(call)
                let a = x.bools, b = y.bools
                let out = (0..<ix.count).map { f(a[ix[$0]], b[iy[$0]]) }
                return [.tensor(MILTensor(bools: out, shape: shape))]
            }
        }
        return k
    }()

    /// f applied to every element; the result keeps x's element type.
    @inline(__always)
    static func map(_ x: MILTensor, _ f: (Float) -> Float) throws -> MILTensor {
        var v = x.floats
        for i in v.indices { v[i] = f(v[i]) }
        return MILTensor(floats: v, shape: x.shape, dataType: x.dataType.isFloat ? x.dataType : .fp32)
    }

    /// x and y of `call`, their broadcast shape and, per output element, the element of each.
    static func broadcastPair(_ call: MILOpCall) throws -> (MILTensor, MILTensor, [Int], [Int], [Int]) {
        let x = try call.tensor("x"), y = try call.tensor("y")
        guard let shape = MILShape.broadcast(x.shape, y.shape) else {
            throw call.error("shapes \(x.shape) and \(y.shape) do not broadcast")
        }
        return (x, y, shape, MILShape.broadcastIndices(from: x.shape, to: shape), MILShape.broadcastIndices(from: y.shape, to: shape))
    }

    @inline(__always)
    static func binary(_ call: MILOpCall, _ f: (Float, Float) -> Float, _ g: ((Int, Int) -> Int)?) throws -> MILTensor {
        let x = try call.tensor("x"), y = try call.tensor("y")
        if let g, case .int(let a) = x.storage, case .int(let b) = y.storage {
            if x.shape == y.shape {
                return MILTensor(ints: (0..<a.count).map { g(a[$0], b[$0]) }, shape: x.shape, dataType: x.dataType)
            }
            let (_, _, shape, ix, iy) = try broadcastPair(call)
            return MILTensor(ints: (0..<ix.count).map { g(a[ix[$0]], b[iy[$0]]) }, shape: shape, dataType: x.dataType)
        }
        let type: MILDataType = x.dataType.isFloat ? x.dataType : (y.dataType.isFloat ? y.dataType : .fp32)
        let a = x.floats, b = y.floats
        if x.shape == y.shape {
            var out = a
            for i in out.indices { out[i] = f(a[i], b[i]) }
            return MILTensor(floats: out, shape: x.shape, dataType: type)
        }
        if y.count == 1 {
            let s = b[0]
            return MILTensor(floats: a.map { f($0, s) }, shape: MILShape.broadcast(x.shape, y.shape)!, dataType: type)
        }
        guard let shape = MILShape.broadcast(x.shape, y.shape) else {
            throw call.error("shapes \(x.shape) and \(y.shape) do not broadcast")
        }
        // The longest run of trailing axes along which both operands advance together, or one
        // of them stays put: the inner loop runs over that block, contiguous in the output.
        let r = shape.count
        let xs = [Int](repeating: 1, count: r - x.rank) + x.shape, ys = [Int](repeating: 1, count: r - y.rank) + y.shape
        enum Run { case both, xOnly, yOnly }
        var run: Run?
        var axis = r
        while axis > 0 {
            let d = axis - 1, o = shape[d]
            let kind: Run? = xs[d] == o && ys[d] == o ? .both : (xs[d] == o && ys[d] == 1 ? .xOnly : (ys[d] == o && xs[d] == 1 ? .yOnly : nil))
            guard let kind, o == 1 || run == nil || run! == kind || (kind == .both && o == 1) else { break }
            if o != 1 && run == nil { run = kind }
            if o != 1 && run != kind { break }
            axis -= 1
        }
        let block = shape[axis...].reduce(1, *)
        let outer = Array(shape[..<axis])
        let ix = MILShape.broadcastIndices(from: Array(xs[..<axis]), to: outer)
        let iy = MILShape.broadcastIndices(from: Array(ys[..<axis]), to: outer)
        let xBlock = xs[axis...].reduce(1, *), yBlock = ys[axis...].reduce(1, *)
        var out = [Float](repeating: 0, count: ix.count * block)
        a.withUnsafeBufferPointer { ap in
            b.withUnsafeBufferPointer { bp in
                out.withUnsafeMutableBufferPointer { op in
                    for o in 0..<ix.count {
                        let xo = ix[o] * xBlock, yo = iy[o] * yBlock, base = o * block
                        if xBlock == block && yBlock == block {
                            for i in 0..<block { op[base + i] = f(ap[xo + i], bp[yo + i]) }
                        } else if xBlock == block {
                            let v = bp[yo]
                            for i in 0..<block { op[base + i] = f(ap[xo + i], v) }
                        } else {
                            let v = ap[xo]
                            for i in 0..<block { op[base + i] = f(v, bp[yo + i]) }
                        }
                    }
                }
            }
        }
        return MILTensor(floats: out, shape: shape, dataType: type)
    }

    static func compare(_ call: MILOpCall, _ f: (Float, Float) -> Bool) throws -> MILTensor {
        let (x, y, shape, ix, iy) = try broadcastPair(call)
        if case .string(let a) = x.storage, case .string(let b) = y.storage {
            let equal = f(0, 0)
            return MILTensor(bools: (0..<ix.count).map { (a[ix[$0]] == b[iy[$0]]) == equal }, shape: shape)
        }
        let a = x.floats, b = y.floats
        return MILTensor(bools: (0..<ix.count).map { f(a[ix[$0]], b[iy[$0]]) }, shape: shape)
    }
}

extension MILTensor {
    /// max(x, 0) in place (a ReLU the planner folded into the op that made this tensor).
    mutating func clampBelowZero() {
        switch storage {
        case .float(var v):
            storage = .float([])  // v is now the only reference: no copy while it is clamped
            for i in v.indices { v[i] = Swift.max(v[i], 0) }
            storage = .float(v)
        case .int(var v):
            storage = .int([])
            for i in v.indices { v[i] = Swift.max(v[i], 0) }
            storage = .int(v)
        default:
            break
        }
    }
}
