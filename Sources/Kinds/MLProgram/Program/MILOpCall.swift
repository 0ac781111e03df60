import CortadoCore

/// How an operation's kernel runs: it reads its inputs through `MILOpCall` and returns one
/// value per declared output.
public typealias MILKernel = (MILOpCall) throws -> [MILValue]

/// Where an operation's input comes from: another operation's output, or a constant known at
/// load (a `const` op, an immediate value, or an op folded at load).
enum MILArgument {
    case slot(Int, String)
    case constant(MILValue)
}

/// The values of one running function (one slot per named value), and its state.
final class MILFrame {
    var slots: [MILValue?]
    /// Function inputs only lowered segments read, left in the request's fp32 arrays (their
    /// slots stay empty): a segment hands them to its network as they are (`MILLoweredSegment`).
    var arrays: [Int: MLMultiArray] = [:]
    /// States by name, for the iOS18 state ops (kept by a prediction session).
    var states: [String: MILStateCell]
    /// Threads one op may use (MLModelConfiguration.threadCount; 0 there means every core).
    let threads: Int
    init(slotCount: Int, states: [String: MILStateCell] = [:], threads: Int = 1) {
        slots = [MILValue?](repeating: nil, count: slotCount)
        self.states = states
        self.threads = threads
    }

    /// An argument's value: the constant, or the slot's (nil when not computed yet).
    func value(_ a: MILArgument) -> MILValue? {
        switch a {
        case .constant(let v): return v
        case .slot(let i, _): return slots[i]
        }
    }
}

/// An operation's view of its inputs while it runs.
public struct MILOpCall {
    let step: MILStep
    let frame: MILFrame
    let runner: MILRunner

    /// Threads this op may split its work over.
    public var threads: Int { frame.threads }

    /// The op's type, e.g. "conv".
    public var type: String { step.type }
    /// The op's name (its first output's name), for messages.
    public var name: String { step.name }
    /// The declared types of the outputs.
    public var outputTypes: [MILType] { step.outputTypes }

    public func error(_ why: String) -> MILError { .invalid("\(step.type) '\(step.name)'", why) }

    func resolve(_ a: MILArgument) throws -> MILValue {
        guard let v = frame.value(a) else {
            if case .slot(_, let n) = a { throw error("the value '\(n)' was not computed before it is read") }
            throw error("a value was not computed before it is read")
        }
        return v
    }

    public func has(_ input: String) -> Bool { step.inputs[input] != nil }

    /// True when the input is known at load (a constant), so what a kernel derives from it
    /// can be kept in `step.cache`.
    public func isConstant(_ input: String) -> Bool {
        guard let bound = step.inputs[input], bound.count == 1, case .constant = bound[0] else { return false }
        return true
    }

    /// The input's one value, or nil when absent.
    public func value(_ input: String) throws -> MILValue? {
        guard let bound = step.inputs[input], let first = bound.first else { return nil }
        return try resolve(first)
    }

    /// Every value bound to a variadic input (e.g. concat's `values`).
    public func values(_ input: String) throws -> [MILValue] {
        try (step.inputs[input] ?? []).map(resolve)
    }

    public func tensor(_ input: String) throws -> MILTensor {
        guard let v = try value(input) else { throw error("the input '\(input)' is missing") }
        guard let t = v.tensor else { throw error("the input '\(input)' is not a tensor") }
        return t
    }

    public func optionalTensor(_ input: String) throws -> MILTensor? {
        guard let v = try value(input) else { return nil }
        guard let t = v.tensor else { throw error("the input '\(input)' is not a tensor") }
        return t
    }

    public func tensors(_ input: String) throws -> [MILTensor] {
        try values(input).map { v in
            guard let t = v.tensor else { throw error("an element of '\(input)' is not a tensor") }
            return t
        }
    }

    public func int(_ input: String, default d: Int? = nil) throws -> Int {
        guard let t = try optionalTensor(input) else {
            if let d { return d }
            throw error("the input '\(input)' is missing")
        }
        guard t.count == 1, let v = t.ints.first else { throw error("the input '\(input)' must be one integer, has \(t.count) values") }
        return v
    }

    public func float(_ input: String, default d: Float? = nil) throws -> Float {
        guard let t = try optionalTensor(input) else {
            if let d { return d }
            throw error("the input '\(input)' is missing")
        }
        guard t.count == 1, let v = t.floats.first else { throw error("the input '\(input)' must be one number, has \(t.count) values") }
        return v
    }

    public func bool(_ input: String, default d: Bool? = nil) throws -> Bool {
        guard let t = try optionalTensor(input) else {
            if let d { return d }
            throw error("the input '\(input)' is missing")
        }
        guard t.count == 1, let v = t.bools.first else { throw error("the input '\(input)' must be one bool") }
        return v
    }

    public func string(_ input: String, default d: String? = nil) throws -> String {
        guard let t = try optionalTensor(input) else {
            if let d { return d }
            throw error("the input '\(input)' is missing")
        }
        guard t.count == 1, let v = t.strings.first else { throw error("the input '\(input)' must be one string") }
        return v
    }

    public func ints(_ input: String, default d: [Int]? = nil) throws -> [Int] {
        guard let t = try optionalTensor(input) else {
            if let d { return d }
            throw error("the input '\(input)' is missing")
        }
        return t.ints
    }

    public func floats(_ input: String, default d: [Float]? = nil) throws -> [Float] {
        guard let t = try optionalTensor(input) else {
            if let d { return d }
            throw error("the input '\(input)' is missing")
        }
        return t.floats
    }

    /// The declared element type of output `i` (for ops whose output type the program fixes).
    public func outputDataType(_ i: Int = 0) -> MILDataType? { step.outputTypes[i].dataType }

    /// Number of nested blocks (`cond` has two, `while_loop` two).
    public var blockCount: Int { step.blocks.count }

    /// Runs nested block `i` with its inputs bound to `inputs`; returns its outputs.
    public func runBlock(_ i: Int, inputs: [MILValue]) throws -> [MILValue] {
        let block = step.blocks[i]
        guard inputs.count == block.inputSlots.count else {
            throw error("block \(i) takes \(block.inputSlots.count) inputs, was given \(inputs.count)")
        }
        return try runner.run(block, frame: frame, inputs: inputs)
    }

    /// A named state of the running session.
    public func state(_ input: String) throws -> MILStateCell {
        guard let v = try value(input) else { throw error("the input '\(input)' is missing") }
        guard case .state(let cell) = v else { throw error("the input '\(input)' is not a state") }
        return cell
    }
}
