/// A set of named feature values (CoreML.framework's `MLFeatureProvider`).
public protocol MLFeatureProvider {
    var featureNames: Set<String> { get }
    func featureValue(for featureName: String) -> MLFeatureValue?
}

/// Feature values held in a dictionary (CoreML.framework's `MLDictionaryFeatureProvider`).
public final class MLDictionaryFeatureProvider: MLFeatureProvider, @unchecked Sendable {
    public let dictionary: [String: MLFeatureValue]

    public init(dictionary: [String: MLFeatureValue]) { self.dictionary = dictionary }

    /// CoreML.framework's untyped initializer: values may be `MLFeatureValue`, `Int`, `Int64`,
    /// `Double`, `Float`, `String`, `MLMultiArray`, `MLImage` or `MLSequence`.
    public convenience init(dictionary: [String: Any]) throws {
        var values: [String: MLFeatureValue] = [:]
        for (name, raw) in dictionary {
            switch raw {
            case let v as MLFeatureValue: values[name] = v
            case let v as Int: values[name] = MLFeatureValue(int64: Int64(v))
            case let v as Int64: values[name] = MLFeatureValue(int64: v)
            case let v as Double: values[name] = MLFeatureValue(double: v)
            case let v as Float: values[name] = MLFeatureValue(double: Double(v))
            case let v as String: values[name] = MLFeatureValue(string: v)
            case let v as MLMultiArray: values[name] = MLFeatureValue(multiArray: v)
            case let v as MLImage: values[name] = MLFeatureValue(image: v)
            case let v as MLSequence: values[name] = MLFeatureValue(sequence: v)
            default:
                throw MLModelError.featureType(name, "value of type \(type(of: raw)) cannot be a feature value")
            }
        }
        self.init(dictionary: values)
    }

    public var featureNames: Set<String> { Set(dictionary.keys) }
    public func featureValue(for featureName: String) -> MLFeatureValue? { dictionary[featureName] }
    public subscript(featureName: String) -> MLFeatureValue? { dictionary[featureName] }
}

/// A batch of feature providers (CoreML.framework's `MLBatchProvider`).
public protocol MLBatchProvider {
    var count: Int { get }
    func features(at index: Int) -> MLFeatureProvider
}

/// A batch held in an array (CoreML.framework's `MLArrayBatchProvider`).
public final class MLArrayBatchProvider: MLBatchProvider, @unchecked Sendable {
    public let array: [MLFeatureProvider]
    public init(array: [MLFeatureProvider]) { self.array = array }
    public var count: Int { array.count }
    public func features(at index: Int) -> MLFeatureProvider { array[index] }
}
