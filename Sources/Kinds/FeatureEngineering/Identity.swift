import CortadoCore
import CortadoSpec

/// `identity` (Identity.proto): returns its inputs, unchanged, as its outputs.
///
/// Each output takes the input of the same name when there is one (the usual form:
/// outputs declared with the inputs' names), otherwise the input at the same position in
/// the description, so `(a, b) → (x, y)` renames. An output with neither is a load error,
/// and so is an output whose type differs from its input's (int64 and double convert
/// into each other, as Core ML converts scalars). An absent optional input leaves its
/// output absent. Multi-arrays pass through without a copy, unless the caller gave an
/// output backing, which then receives the elements.
public enum MLIdentityKind: MLModelKind {
    public static let specTypes = ["identity"]

    public static func compile(_ spec: CoreML_Specification_Model, context: MLCompileContext) throws -> any MLCompiledModel {
        try MLCompiledIdentity(description: context.description)
    }
}

final class MLCompiledIdentity: MLCompiledModel {
    struct Route: Sendable {
        let input: String
        let output: String
        /// Set when a scalar must change type on the way.
        let convertTo: MLFeatureType?
    }

    static let kind = "identity"

    let routes: [Route]

    init(description: MLModelDescription) throws {
        let kind = Self.kind
        guard !description.outputs.isEmpty else {
            throw MLModelError(.invalidModel, "\(kind) declares no outputs")
        }
        var routes: [Route] = []
        for (i, out) in description.outputs.enumerated() {
            let source: MLFeatureDescription
            if let same = description.input(named: out.name) {
                source = same
            } else if i < description.inputs.count {
                source = description.inputs[i]
            } else {
                throw MLModelError(.invalidModel, feature: out.name,
                                   "\(kind) output \(i) has no input of the same name and the model declares only \(description.inputs.count) input\(description.inputs.count == 1 ? "" : "s")")
            }
            let scalars: Set<MLFeatureType> = [.int64, .double]
            guard source.type == out.type || (scalars.contains(source.type) && scalars.contains(out.type)) else {
                throw MLModelError(.invalidModel, feature: out.name,
                                   "\(kind) output is \(out.typeSummary) but it passes on the input '\(source.name)', which is \(source.typeSummary)")
            }
            routes.append(Route(input: source.name, output: out.name, convertTo: scalars.contains(out.type) ? out.type : nil))
        }
        self.routes = routes
    }

    var summary: [String] {
        let renamed = routes.filter { $0.input != $0.output }.count
        return ["Identity: \(routes.count) feature\(routes.count == 1 ? "" : "s")" + (renamed > 0 ? ", \(renamed) renamed" : "")]
    }

    func prediction(from input: MLFeatureProvider, options: MLPredictionOptions) throws -> MLFeatureProvider {
        var out = [String: MLFeatureValue](minimumCapacity: routes.count)
        for route in routes {
            guard var value = input.featureValue(for: route.input), !value.isUndefined else { continue }
            switch (route.convertTo, value.storage) {
            case (.double?, .int64(let i)):
                value = MLFeatureValue(double: Double(i))
            case (.int64?, .double(let d)):
                guard let i = Int64(exactly: d) else {
                    throw MLModelError.featureType(route.input, "value \(d) is not an int64, which the output '\(route.output)' is")
                }
                value = MLFeatureValue(int64: i)
            case (nil, .multiArray(let a)):
                if let backing = options.outputBackings[route.output], backing !== a {
                    guard backing.count == a.count else {
                        throw MLModelError.featureType(route.output, "output backing has \(backing.count) elements, the output has \(a.count) (shape \(a.shape))")
                    }
                    try FeatureEngineeringArrayInput.withDoubles(a) { x, n in
                        if backing.dataType == .int32, let bad = (0..<n).first(where: { !FeatureEngineeringArrayOutput.fitsInt32(x[$0]) }) {
                            throw MLModelError.featureType(route.output, "element \(bad) is \(x[bad]), which the INT32 output backing cannot hold")
                        }
                        backing.write(contiguous: UnsafeBufferPointer(start: x, count: n))
                    }
                    value = MLFeatureValue(multiArray: backing)
                }
            default:
                break
            }
            out[route.output] = value
        }
        return MLDictionaryFeatureProvider(dictionary: out)
    }
}
