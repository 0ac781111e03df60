import CortadoCore
import CortadoServerProtos
import Foundation

/// Reads the JSON part of a REST infer request in one pass, straight into the form
/// `InferenceRun` reads: names, datatypes, shapes and parameters as values, each input's
/// `data` (flat or nested) written as little-endian bytes of its datatype behind the
/// request's storage. No `[String: Any]` tree, no NSNumber: a request of a few numbers was
/// spending more time building and walking the tree than predicting.
///
/// JSON is read as RFC 8259 writes it (the grammar of `MLJSONParser`, which the repository
/// and control bodies still use): no `NaN`/`Infinity`, no leading zeros or `+`, strings
/// valid UTF-8 with every escape and surrogate pair, numbers that overflow a Double
/// refused, nesting to 512 levels. A key given twice counts with its last value, as a tree
/// would keep it; errors about what a value means are held until the body has been read,
/// so a body that is not JSON always says so, and a later duplicate can still replace a bad
/// value. A client's `data` can make the server hold at most a few times the body's bytes
/// (each element is written in at most 8 bytes, and takes at least 2 in the text), and an
/// input that holds more elements than its shape stops being written at its shape's count.
struct RESTInferReader {
    /// The request without its model name and version (the caller sets them).
    struct Result {
        var view = InferRequestView()
        var binaryOutput = false
    }

    let p: UnsafeBufferPointer<UInt8>
    var at = 0
    /// Where the binary inputs start in the body, and the body's length.
    let jsonEnd: Int
    let bodyCount: Int
    let hasBinaryHeader: Bool
    var view = InferRequestView()

    static let maxDepth = 512
    /// Stands for a tensor's name in a message written before the name is known.
    static let unnamed = "\u{0}"

    private init(_ p: UnsafeBufferPointer<UInt8>, bodyCount: Int, hasBinaryHeader: Bool) {
        self.p = p
        self.jsonEnd = p.count
        self.bodyCount = bodyCount
        self.hasBinaryHeader = hasBinaryHeader
    }

    static func bad(_ message: String) -> ServeStatus { ServeStatus(.invalidArgument, message) }

    /// Reads `body[0..<jsonEnd]`; with `hasBinaryHeader`, binary inputs follow the JSON and the
    /// view's storage starts as the whole body (binary inputs are ranges of it).
    static func read(_ body: [UInt8], jsonEnd: Int, hasBinaryHeader: Bool) throws -> Result {
        try body.withUnsafeBufferPointer { all in
            var reader = RESTInferReader(UnsafeBufferPointer(rebasing: all[0..<jsonEnd]), bodyCount: body.count, hasBinaryHeader: hasBinaryHeader)
            if hasBinaryHeader { reader.view.storage = body }
            return try reader.request()
        }
    }

    // MARK: the request

    enum Field<T> {
        case missing
        case value(T)
        case invalid(ServeStatus)
    }

    mutating func request() throws -> Result {
        skipSpace()
        guard at < p.count, p[at] == UInt8(ascii: "{") else {
            try skipValue(depth: 0)
            try end()
            throw Self.bad("the request body must be a JSON object with \"inputs\"")
        }
        var id: Field<String> = .missing
        var binaryOutput: Field<Bool> = .missing
        var parametersError: ServeStatus?
        var inputsSeen = false
        var inputsError: ServeStatus?
        var outputs: Field<[InferRequestView.Output]> = .missing
        let storageBase = view.storage.count
        var binaryAt = jsonEnd
        if try open(UInt8(ascii: "{")) {
            repeat {
                let key = try key()
                switch key {
                case .id:
                    if at < p.count, p[at] == UInt8(ascii: "\"") { id = .value(try string()) } else {
                        try skipValue(depth: 1)
                        id = .invalid(Self.bad("\"id\" must be a string"))
                    }
                case .parameters:
                    // Only binary_data_output is read; the rest is checked as JSON.
                    binaryOutput = .missing
                    parametersError = nil
                    try parameterObject(depth: 1, what: "parameters", onError: &parametersError) { reader, key in
                        if key == "binary_data_output" {
                            binaryOutput = .value(try reader.flag("parameters.binary_data_output"))
                        } else {
                            try reader.skipValue(depth: 2)
                        }
                    }
                case .inputs:
                    // A second "inputs" replaces the first: everything it wrote goes.
                    inputsSeen = true
                    inputsError = nil
                    view.inputs.removeAll()
                    view.raw.removeAll()
                    view.storage.removeSubrange(storageBase...)
                    binaryAt = jsonEnd
                    if at < p.count, p[at] == UInt8(ascii: "[") {
                        try inputList(binaryAt: &binaryAt, error: &inputsError)
                    } else {
                        try skipValue(depth: 1)
                        inputsError = Self.bad("the request needs \"inputs\": a list of tensors")
                    }
                case .outputs:
                    outputs = try outputList()
                default:
                    try skipValue(depth: 1)
                }
            } while try next(UInt8(ascii: "}"))
        }
        try end()
        // The decisions, in the order the request's parts are described.
        if case .invalid(let e) = id { throw e }
        if case .value(let s) = id { view.id = s }
        if let parametersError { throw parametersError }
        if case .invalid(let e) = binaryOutput { throw e }
        guard inputsSeen else { throw Self.bad("the request needs \"inputs\": a list of tensors") }
        if let inputsError { throw inputsError }
        guard binaryAt == bodyCount else {
            throw Self.bad("the body holds \(bodyCount - binaryAt) bytes of binary data that no input's binary_data_size accounts for")
        }
        switch outputs {
        case .invalid(let e): throw e
        case .value(let list): view.outputs = list
        case .missing: break
        }
        var result = Result()
        if case .value(let b) = binaryOutput { result.binaryOutput = b }
        result.view = view
        return result
    }

    /// The end of the JSON part: only whitespace may follow the value.
    mutating func end() throws {
        skipSpace()
        guard at == p.count else { throw syntax("unexpected text after the value") }
    }

    // MARK: inputs

    /// One input as read so far.
    struct InputFields {
        var name: Field<String> = .missing
        var datatype: Field<String> = .missing
        var shape: Field<[Int]> = .missing
        var parameters: [String: Inference_InferParameter] = [:]
        var parametersError: ServeStatus?
        var binaryDataSize: Field<Int> = .missing
        /// The `data` value's text, its element count, and whether the bytes behind
        /// `dataStart` are its conversion under `convertedAs`.
        var data: Range<Int>?
        var count = 0
        var convertedAs: ElementKind?
    }

    mutating func inputList(binaryAt: inout Int, error: inout ServeStatus?) throws {
        guard try open(UInt8(ascii: "[")) else { return }
        var index = 0
        repeat {
            skipSpace()
            guard at < p.count else { throw syntax("unexpected end of input") }
            if error != nil || p[at] != UInt8(ascii: "{") {
                // After the first bad input the rest is only checked as JSON.
                try skipValue(depth: 2)
                if error == nil { error = Self.bad("inputs[\(index)] must be a JSON object") }
            } else if let e = try input(index: index, binaryAt: &binaryAt) {
                error = e
            }
            index += 1
        } while try next(UInt8(ascii: "]"))
    }

    /// Reads one input object, appends it to the view, or returns why it is not one.
    mutating func input(index: Int, binaryAt: inout Int) throws -> ServeStatus? {
        var f = InputFields()
        let dataStart = view.storage.count
        if try open(UInt8(ascii: "{")) {
            repeat {
                switch try key() {
                case .name:
                    f.name = try stringField { Self.bad("inputs[\(index)] needs a \"name\"") }
                case .datatype:
                    f.datatype = try stringField { Self.bad("needs a \"datatype\"") }  // named once the input is read
                case .shape:
                    f.shape = try shape()
                case .parameters:
                    f.parameters = [:]
                    f.parametersError = nil
                    f.binaryDataSize = .missing
                    var parameters: [String: Inference_InferParameter] = [:]
                    var size: Field<Int> = .missing
                    // The input's name may come later: the message names it then.
                    let what = Self.unnamed
                    try parameterObject(depth: 3, what: "\(what) parameters", onError: &f.parametersError) { reader, key in
                        if key == "binary_data_size" {
                            size = try reader.byteCount()
                        } else {
                            parameters[key] = try reader.parameter(key: key, what: what)
                        }
                    }
                    f.parameters = parameters
                    f.binaryDataSize = size
                case .data:
                    view.storage.removeSubrange(dataStart...)
                    f.convertedAs = nil
                    let start = at
                    // Written right away when the input says what it is before its data (as
                    // clients write it); otherwise, or on any error, only counted now and
                    // converted (or its error raised) once the whole input is known.
                    if case .value = f.name, case .value(let datatype) = f.datatype, let kind = ElementKind(datatype) {
                        let limit = f.expectedCount
                        do {
                            f.count = try data(kind, depth: 3, limit: limit, name: f.nameText)
                            f.convertedAs = kind
                        } catch is Overflow {
                            at = start
                            view.storage.removeSubrange(dataStart...)
                            f.count = try count(depth: 3)
                        } catch let e as ServeStatus where e.code == .invalidArgument && !e.isSyntax {
                            at = start
                            view.storage.removeSubrange(dataStart...)
                            f.count = try count(depth: 3)
                        }
                    } else {
                        f.count = try count(depth: 3)
                    }
                    f.data = start..<at
                default:
                    try skipValue(depth: 3)
                }
            } while try next(UInt8(ascii: "}"))
        }
        // The checks, in the order of the protocol's description of a tensor.
        let name: String
        switch f.name {
        case .value(let s): name = s
        case .invalid(let e): return e
        case .missing: return Self.bad("inputs[\(index)] needs a \"name\"")
        }
        let datatype: String
        switch f.datatype {
        case .value(let s): datatype = s
        case .invalid: return Self.bad("input '\(name)' needs a \"datatype\"")
        case .missing: return Self.bad("input '\(name)' needs a \"datatype\"")
        }
        let shape: [Int]
        switch f.shape {
        case .value(let s): shape = s
        case .invalid(let e) where e.message.isEmpty: return Self.bad("input '\(name)' needs a \"shape\": a list of dimensions")
        case .invalid(let e): return Self.bad("input '\(name)': \(e.message)")
        case .missing: return Self.bad("input '\(name)' needs a \"shape\": a list of dimensions")
        }
        if let e = f.parametersError { return Self.bad(e.message.replacingOccurrences(of: Self.unnamed, with: "input '\(name)'")) }
        var input = InferRequestView.Input(name: name, datatype: datatype, shape: shape)
        input.parameters = f.parameters
        switch f.binaryDataSize {
        case .invalid:
            return Self.bad("input '\(name)': binary_data_size must be a non-negative integer")
        case .value(let size):
            view.storage.removeSubrange(dataStart...)
            guard hasBinaryHeader else { return Self.bad("input '\(name)' has binary_data_size but the request has no Inference-Header-Content-Length header") }
            guard size <= bodyCount - binaryAt else {
                return Self.bad("input '\(name)': binary_data_size \(size) runs past the end of the body (\(bodyCount - binaryAt) bytes left)")
            }
            view.raw.append(binaryAt..<binaryAt + size)
            binaryAt += size
        case .missing:
            if input.parameters["shared_memory_region"] != nil {
                view.storage.removeSubrange(dataStart...)
                view.raw.append(0..<0)  // read from the region (`InferenceRun` looks there first)
            } else {
                guard let range = f.data else { return Self.bad("input '\(name)' has neither \"data\" nor binary_data_size") }
                if let expected = MLMultiArray.byteCount(shape, elementSize: 1), expected >= 0, f.count != expected {
                    return Self.bad("input '\(name)': shape \(shape) needs \(expected) values, \"data\" holds \(f.count)")
                }
                guard let kind = ElementKind(datatype) else { return Self.bad("input '\(name)': unknown datatype '\(datatype)'") }
                if f.convertedAs != kind {
                    view.storage.removeSubrange(dataStart...)
                    let resume = at
                    at = range.lowerBound
                    defer { at = resume }
                    do { _ = try data(kind, depth: 3, limit: nil, name: name) } catch let e as ServeStatus { return e }
                }
                view.raw.append(dataStart..<view.storage.count)
            }
        }
        view.inputs.append(input)
        return nil
    }

    /// A string value, or `invalid` (the value skipped) when it is another JSON value.
    mutating func stringField(_ error: () -> ServeStatus) throws -> Field<String> {
        if at < p.count, p[at] == UInt8(ascii: "\"") { return .value(try string()) }
        try skipValue(depth: 3)
        return .invalid(error())
    }

    mutating func shape() throws -> Field<[Int]> {
        guard at < p.count, p[at] == UInt8(ascii: "[") else {
            try skipValue(depth: 3)
            return .invalid(Self.bad(""))
        }
        var dims: [Int] = []
        var problem: ServeStatus?
        if try open(UInt8(ascii: "[")) {
            repeat {
                skipSpace()
                let start = at
                if problem == nil, at < p.count, isNumberStart(p[at]) {
                    let (range, integral) = try scanNumber()
                    if let d = try integer(range, integral: integral).flatMap({ Int(exactly: $0) }) {
                        dims.append(d)
                        continue
                    }
                    problem = Self.bad("the shape holds \(text(range)), not an integer")
                } else {
                    try skipValue(depth: 4)
                    if problem == nil { problem = Self.bad("the shape holds \(text(start..<at)), not an integer") }
                }
            } while try next(UInt8(ascii: "]"))
        }
        if let problem { return .invalid(problem) }
        return .value(dims)
    }

    // MARK: outputs

    mutating func outputList() throws -> Field<[InferRequestView.Output]> {
        guard at < p.count, p[at] == UInt8(ascii: "[") else {
            try skipValue(depth: 1)
            return .invalid(Self.bad("\"outputs\" must be a list"))
        }
        var list: [InferRequestView.Output] = []
        var problem: ServeStatus?
        var index = 0
        if try open(UInt8(ascii: "[")) {
            repeat {
                skipSpace()
                if problem != nil || at >= p.count || p[at] != UInt8(ascii: "{") {
                    try skipValue(depth: 2)
                    if problem == nil { problem = Self.bad("outputs[\(index)] needs a \"name\"") }
                } else {
                    var name: Field<String> = .missing
                    var parameters: [String: Inference_InferParameter] = [:]
                    var parametersError: ServeStatus?
                    if try open(UInt8(ascii: "{")) {
                        repeat {
                            switch try key() {
                            case .name:
                                name = try stringField { [index] in Self.bad("outputs[\(index)] needs a \"name\"") }
                            case .parameters:
                                parameters = [:]
                                parametersError = nil
                                var collected: [String: Inference_InferParameter] = [:]
                                // The output's name may come later: the message names it then.
                                try parameterObject(depth: 3, what: "\(Self.unnamed) parameters", onError: &parametersError) { reader, key in
                                    collected[key] = try reader.parameter(key: key, what: Self.unnamed)
                                }
                                parameters = collected
                            default:
                                try skipValue(depth: 3)
                            }
                        } while try next(UInt8(ascii: "}"))
                    }
                    if case .value(let n) = name {
                        if let e = parametersError {
                            problem = Self.bad(e.message.replacingOccurrences(of: Self.unnamed, with: "output '\(n)'"))
                        } else {
                            list.append(InferRequestView.Output(name: n, parameters: parameters))
                        }
                    } else {
                        problem = Self.bad("outputs[\(index)] needs a \"name\"")
                    }
                }
                index += 1
            } while try next(UInt8(ascii: "]"))
        }
        if let problem { return .invalid(problem) }
        return .value(list)
    }

    // MARK: parameters

    /// An object of parameters, each value handed to `member` (which must consume it); a
    /// value that is not an object (null counts as none) or a member's error is kept in
    /// `onError`, the first one, and the rest read as JSON only.
    mutating func parameterObject(depth: Int, what: String, onError: inout ServeStatus?,
                                          _ member: (inout RESTInferReader, String) throws -> Void) throws {
        skipSpace()
        guard at < p.count else { throw syntax("unexpected end of input") }
        if p[at] == UInt8(ascii: "n") {
            try literal("null")
            return
        }
        guard p[at] == UInt8(ascii: "{") else {
            try skipValue(depth: depth)
            onError = Self.bad("\(what) must be a JSON object")
            return
        }
        guard depth + 1 < Self.maxDepth else { throw syntax("nesting is too deep") }
        guard try open(UInt8(ascii: "{")) else { return }
        repeat {
            skipSpace()
            guard at < p.count, p[at] == UInt8(ascii: "\"") else { throw syntax("expected a string key") }
            let key = try string()
            try colon()
            if onError != nil {
                try skipValue(depth: depth + 1)
                continue
            }
            let start = at
            do {
                try member(&self, key)
            } catch let e as ServeStatus where !e.isSyntax {
                at = start
                try skipValue(depth: depth + 1)
                onError = e
            }
        } while try next(UInt8(ascii: "}"))
    }

    /// A parameter as the protobuf parameter `InferenceRun` reads: a string, a boolean
    /// (`binary_data` given as a number too), an integer, or another number.
    mutating func parameter(key: String, what: String) throws -> Inference_InferParameter {
        var parameter = Inference_InferParameter()
        guard at < p.count else { throw syntax("unexpected end of input") }
        switch p[at] {
        case UInt8(ascii: "\""):
            parameter.stringParam = try string()
        case UInt8(ascii: "t"), UInt8(ascii: "f"):
            parameter.boolParam = try boolean()
        case let c where isNumberStart(c):
            let (range, integral) = try scanNumber()
            if key == "binary_data" {
                parameter.boolParam = try truth(range)
            } else if let i = try integer(range, integral: integral) {
                parameter.int64Param = i
            } else {
                parameter.doubleParam = try double(range)
            }
        default:
            try skipValue(depth: 4)
            throw Self.bad("\(what): parameter '\(key)' must be a string, a number or a boolean")
        }
        return parameter
    }

    /// A boolean given as true/false or a number (non-zero is true).
    mutating func flag(_ what: String) throws -> Bool {
        guard at < p.count else { throw syntax("unexpected end of input") }
        switch p[at] {
        case UInt8(ascii: "t"), UInt8(ascii: "f"): return try boolean()
        case let c where isNumberStart(c): return try truth(try scanNumber().0)
        default:
            try skipValue(depth: 2)
            throw Self.bad("\(what) must be true or false")
        }
    }

    /// A number where a boolean belongs: true when its whole part is not zero (as a C cast
    /// to an integer, and NSNumber's `boolValue`, read it: 0.5 is false).
    func truth(_ range: Range<Int>) throws -> Bool {
        try double(range).magnitude >= 1
    }

    /// `binary_data_size`: a non-negative integer.
    mutating func byteCount() throws -> Field<Int> {
        guard at < p.count else { throw syntax("unexpected end of input") }
        let invalid = Field<Int>.invalid(Self.bad("binary_data_size must be a non-negative integer"))
        guard isNumberStart(p[at]) else {
            try skipValue(depth: 4)
            return invalid
        }
        let (range, integral) = try scanNumber()
        guard let n = try integer(range, integral: integral).flatMap({ Int(exactly: $0) }), n >= 0 else { return invalid }
        return .value(n)
    }
}

extension RESTInferReader.InputFields {
    /// The name for messages: empty until the input has one.
    var nameText: String {
        if case .value(let s) = name { return s }
        return ""
    }

    /// The element count the shape asks for, when it is known and sensible.
    var expectedCount: Int? {
        guard case .value(let shape) = shape, let n = MLMultiArray.byteCount(shape, elementSize: 1), n >= 0 else { return nil }
        return n
    }
}

extension ServeStatus {
    /// Whether this is the reader's "not JSON" error, which no later value can undo.
    fileprivate var isSyntax: Bool { message.hasPrefix(RESTInferReader.syntaxPrefix) }
}
