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

/// A provider of one feature (a model with one output): no list or dictionary to allocate.
public final class MLSingleFeatureProvider: MLFeatureProvider, @unchecked Sendable {
    public let name: String
    public let value: MLFeatureValue

    public init(name: String, value: MLFeatureValue) {
        self.name = name
        self.value = value
    }

    public var featureNames: Set<String> { [name] }
    public func featureValue(for featureName: String) -> MLFeatureValue? { featureName == name ? value : nil }
}

/// A provider of a few features kept as a list: looking a name up compares it with each
/// entry (a small string compares in a couple of instructions) instead of hashing it, and
/// building one allocates once. For the one to a handful of features most predictions read
/// and write; `MLDictionaryFeatureProvider` suits many.
public final class MLFeatureListProvider: MLFeatureProvider, @unchecked Sendable {
    public let entries: [(name: String, value: MLFeatureValue)]

    /// `entries` must not repeat a name.
    public init(entries: [(name: String, value: MLFeatureValue)]) { self.entries = entries }

    public var featureNames: Set<String> { Set(entries.map(\.name)) }

    public func featureValue(for featureName: String) -> MLFeatureValue? {
        for entry in entries where entry.name == featureName { return entry.value }
        return nil
    }

    /// Entries at most this many go in a list; more, in a dictionary.
    public static let listLimit = 8

    /// A list provider for a few entries, a dictionary provider for more.
    public static func make(_ entries: [(name: String, value: MLFeatureValue)]) -> MLFeatureProvider {
        if entries.count <= listLimit { return MLFeatureListProvider(entries: entries) }
        return MLDictionaryFeatureProvider(dictionary: Dictionary(entries, uniquingKeysWith: { _, last in last }))
    }
}
