import CortadoSpec

/// A compiled model that can compile a variant of itself: the same model with other values of
/// its updatable parameters (what an update changes), sharing the compiled parts that did not
/// change. A server holding thousands of personalised variants of one network then holds one
/// copy of its frozen layers, not thousands.
public protocol MLVariantCompiling: MLCompiledModel {
    /// Compiles `specification` (`base` as an update left it: the same structure, other
    /// parameter values), reusing this model's compiled parts wherever `specification` holds
    /// what `base` holds. Returns nil when it cannot share here; the caller then compiles the
    /// spec in full.
    func compileVariant(_ specification: CoreML_Specification_Model, base: CoreML_Specification_Model,
                        context: MLCompileContext) throws -> (any MLCompiledModel)?

    /// What of `specification` differs from `base`, as a spec that `variantSpecification`
    /// turns back into `specification` given the same `base`: the part a store keeps per
    /// variant. The default is the whole of `specification`.
    func variantHead(of specification: CoreML_Specification_Model, base: CoreML_Specification_Model) -> CoreML_Specification_Model

    /// The variant's whole spec from a head `variantHead` made over `base`. Throws
    /// `invalidModel` when the head does not fit `base`. The default takes the head as the
    /// whole spec.
    func variantSpecification(head: CoreML_Specification_Model, base: CoreML_Specification_Model) throws -> CoreML_Specification_Model
}

extension MLVariantCompiling {
    public func variantHead(of specification: CoreML_Specification_Model, base: CoreML_Specification_Model) -> CoreML_Specification_Model {
        specification
    }

    public func variantSpecification(head: CoreML_Specification_Model, base: CoreML_Specification_Model) throws -> CoreML_Specification_Model {
        head
    }
}

extension MLModel {
    /// The model `specification` describes (this model's spec as an update left it), compiled
    /// sharing this model's unchanged parts when its kind can (`MLVariantCompiling`), else in
    /// full. Its spec should come from this model's (as `MLUpdateContext.specification` does):
    /// protobuf values are copied on write, so the untouched weights are not copied there
    /// either.
    public func variant(specification spec: CoreML_Specification_Model, name: String? = nil) throws -> MLModel {
        let name = name ?? self.name
        do {
            let (specType, kind, context) = try Self.resolveKind(spec, configuration: configuration, name: name, depth: 0)
            let shared = try (compiled as? any MLVariantCompiling)?.compileVariant(spec, base: specification, context: context)
            let compiled = try shared ?? kind.compile(spec, context: context)
            var description = context.description
            description.classLabels = compiled.classLabels
            description.isUpdatable = spec.isUpdatable
            return MLModel(description: description, configuration: configuration, specification: spec, name: name,
                           specType: specType, compiled: compiled, sharesBase: shared != nil)
        } catch let error as MLModelError {
            throw error.inModel(name)
        }
    }

    /// The head of a variant of this model (its spec as an update left it) to store:
    /// only what differs from this model where the kind can say so (neural networks: the
    /// layers the update changed), else the whole spec.
    public func variantHead(of specification: CoreML_Specification_Model) -> CoreML_Specification_Model {
        (compiled as? any MLVariantCompiling)?.variantHead(of: specification, base: self.specification) ?? specification
    }

    /// The whole spec of the variant a stored head describes over this model.
    public func variantSpecification(head: CoreML_Specification_Model) throws -> CoreML_Specification_Model {
        do {
            guard let kind = compiled as? any MLVariantCompiling else { return head }
            return try kind.variantSpecification(head: head, base: specification)
        } catch let error as MLModelError {
            throw error.inModel(name)
        }
    }
}
