import Foundation
import Synchronization

/// A dictionary feature's contents: keys are all int64 or all strings, values are numbers.
public enum MLFeatureDictionary: Equatable, Sendable {
    case int64Keyed([Int64: Double])
    case stringKeyed([String: Double])

    public var count: Int {
        switch self {
        case .int64Keyed(let d): return d.count
        case .stringKeyed(let d): return d.count
        }
    }

    /// The key type, `.int64` or `.string`.
    public var keyType: MLFeatureType {
        switch self {
        case .int64Keyed: return .int64
        case .stringKeyed: return .string
        }
    }
}

/// One feature's value (CoreML.framework's `MLFeatureValue`).
public final class MLFeatureValue: @unchecked Sendable, CustomStringConvertible {
    public enum Storage: Sendable {
        case undefined(MLFeatureType)
        case int64(Int64)
        case double(Double)
        case string(String)
        case multiArray(MLMultiArray)
        case dictionary(MLFeatureDictionary)
        case image(MLImage)
        case sequence(MLSequence)
    }

    /// The value, or nil for a classifier's scores whose dictionary is built on first use.
    private let eager: Storage?
    /// A classifier's scores in label order (`MLClassLabels.dictionary(scores:)`): readers
    /// that want them in that order (the Open Inference Protocol's tensors) skip the
    /// dictionary, which is only built when `storage` is read.
    public let classScores: MLClassScores?
    private let built: Mutex<Storage?>

    public var storage: Storage {
        if let eager { return eager }
        return built.withLock { cached in
            if let cached { return cached }
            let value = Storage.dictionary(classScores!.dictionary)
            cached = value
            return value
        }
    }

    public init(storage: Storage) {
        eager = storage
        classScores = nil
        built = Mutex(nil)
    }

    /// A label → score dictionary value kept as the scores in label order.
    public init(classScores: MLClassScores) {
        precondition(classScores.scores.count == classScores.labels.count)
        eager = nil
        self.classScores = classScores
        built = Mutex(nil)
    }
    public convenience init(int64: Int64) { self.init(storage: .int64(int64)) }
    public convenience init(double: Double) { self.init(storage: .double(double)) }
    public convenience init(string: String) { self.init(storage: .string(string)) }
    public convenience init(multiArray: MLMultiArray) { self.init(storage: .multiArray(multiArray)) }
    public convenience init(image: MLImage) { self.init(storage: .image(image)) }
    public convenience init(sequence: MLSequence) { self.init(storage: .sequence(sequence)) }
    public convenience init(dictionary: MLFeatureDictionary) { self.init(storage: .dictionary(dictionary)) }
    /// A value standing for "no value" of a type (for optional inputs).
    public convenience init(undefined type: MLFeatureType) { self.init(storage: .undefined(type)) }

    /// CoreML.framework's dictionary initializer: keys must be all integers or all strings.
    public convenience init(dictionary: [AnyHashable: NSNumber]) throws {
        var ints: [Int64: Double] = [:]
        var strings: [String: Double] = [:]
        for (key, value) in dictionary {
            if let s = key.base as? String {
                strings[s] = value.doubleValue
            } else if let i = key.base as? Int64 {
                ints[i] = value.doubleValue
            } else if let i = key.base as? Int {
                ints[Int64(i)] = value.doubleValue
            } else if let n = key.base as? NSNumber {
                ints[n.int64Value] = value.doubleValue
            } else {
                throw MLModelError(.featureType, "dictionary key \(key) is neither an integer nor a string")
            }
        }
        guard ints.isEmpty || strings.isEmpty else {
            throw MLModelError(.featureType, "dictionary mixes integer and string keys")
        }
        self.init(storage: .dictionary(strings.isEmpty ? .int64Keyed(ints) : .stringKeyed(strings)))
    }

    public var type: MLFeatureType {
        if classScores != nil { return .dictionary }
        switch storage {
        case .undefined(let t): return t
        case .int64: return .int64
        case .double: return .double
        case .string: return .string
        case .multiArray: return .multiArray
        case .dictionary: return .dictionary
        case .image: return .image
        case .sequence: return .sequence
        }
    }

    public var isUndefined: Bool {
        if classScores != nil { return false }
        if case .undefined = storage { return true }
        return false
    }

    public var int64Value: Int64 {
        switch storage {
        case .int64(let v): return v
        case .double(let v): return v.isFinite ? Int64(clamping: Int64(exactly: v.rounded(.towardZero)) ?? (v < 0 ? .min : .max)) : 0
        default: return 0
        }
    }

    public var doubleValue: Double {
        switch storage {
        case .double(let v): return v
        case .int64(let v): return Double(v)
        default: return 0
        }
    }

    public var stringValue: String {
        if case .string(let v) = storage { return v }
        return ""
    }

    public var multiArrayValue: MLMultiArray? {
        if case .multiArray(let v) = storage { return v }
        return nil
    }

    public var imageValue: MLImage? {
        if case .image(let v) = storage { return v }
        return nil
    }

    public var sequenceValue: MLSequence? {
        if case .sequence(let v) = storage { return v }
        return nil
    }

    public var dictionary: MLFeatureDictionary? {
        if case .dictionary(let v) = storage { return v }
        return nil
    }

    /// CoreML.framework-style dictionary view.
    public var dictionaryValue: [AnyHashable: NSNumber] {
        switch dictionary {
        case .int64Keyed(let d)?:
            return Dictionary(uniqueKeysWithValues: d.map { (AnyHashable($0.key), NSNumber(value: $0.value)) })
        case .stringKeyed(let d)?:
            return Dictionary(uniqueKeysWithValues: d.map { (AnyHashable($0.key), NSNumber(value: $0.value)) })
        case nil:
            return [:]
        }
    }

    public var description: String {
        if let classScores { return "dictionary of \(classScores.labels.count) entries" }
        switch storage {
        case .undefined(let t): return "undefined \(t)"
        case .int64(let v): return "int64 \(v)"
        case .double(let v): return "double \(v)"
        case .string(let v): return "string \"\(v)\""
        case .multiArray(let a): return a.description
        case .dictionary(let d): return "dictionary of \(d.count) entries"
        case .image(let i): return "image \(i.width)×\(i.height) \(i.pixelFormat.rawValue)"
        case .sequence(let s): return "sequence of \(s.count) \(s.type)"
        }
    }
}
