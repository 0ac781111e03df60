#if DEBUG
import CortadoCore
import CortadoSpec
import Foundation

/// The JSON row reader (`MLJSONParser`) and the type-directed feature decoding behind
/// `cortado predict` and the REST port. Properties:
/// - what `MLJSONParser` accepts, Foundation's `JSONSerialization` accepts too, with the same
///   structure, strings and numbers (to a relative 1e-12: Foundation on Linux may round to a
///   neighbouring double);
/// - a value that decodes as a feature encodes to JSON that parses and decodes again, to the
///   same text (the encoding is a fixed point after one round).
/// Image inputs that name a file (`"path"`) are left alone: the fuzzer must not read files.
enum FeatureJSONFuzz {
    static let features: [MLFeatureDescription] = {
        func feature(_ name: String, _ set: (inout CoreML_Specification_FeatureType) -> Void) -> MLFeatureDescription {
            var f = CoreML_Specification_FeatureDescription()
            f.name = name
            set(&f.type)
            return try! MLFeatureDescription(f)
        }
        func array(_ name: String, _ shape: [Int64], _ type: CoreML_Specification_ArrayFeatureType.ArrayDataType,
                   range: [(Int64, Int64)]? = nil) -> MLFeatureDescription {
            feature(name) {
                var a = CoreML_Specification_ArrayFeatureType()
                a.shape = shape
                a.dataType = type
                if let range {
                    var r = CoreML_Specification_ArrayFeatureType.ShapeRange()
                    r.sizeRanges = range.map { var s = CoreML_Specification_SizeRange(); s.lowerBound = UInt64($0.0); s.upperBound = $0.1; return s }
                    a.shapeRange = r
                }
                $0.multiArrayType = a
            }
        }
        return [
            feature("i") { $0.int64Type = .init() },
            feature("d") { $0.doubleType = .init() },
            feature("s") { $0.stringType = .init() },
            feature("o") { $0.doubleType = .init(); $0.isOptional = true },
            array("a", [2, 3], .float32),
            array("h", [4], .float16),
            array("n", [1, 2], .int32, range: [(1, 4), (1, -1)]),
            array("x", [3], .double),
            feature("di") { var d = CoreML_Specification_DictionaryFeatureType(); d.int64KeyType = .init(); $0.dictionaryType = d },
            feature("ds") { var d = CoreML_Specification_DictionaryFeatureType(); d.stringKeyType = .init(); $0.dictionaryType = d },
            feature("qi") { var q = CoreML_Specification_SequenceFeatureType(); q.int64Type = .init(); $0.sequenceType = q },
            feature("qs") { var q = CoreML_Specification_SequenceFeatureType(); q.stringType = .init(); $0.sequenceType = q },
            feature("img") { var t = CoreML_Specification_ImageFeatureType(); t.width = 4; t.height = 3; t.colorSpace = .rgb; $0.imageType = t },
            feature("gray") { var t = CoreML_Specification_ImageFeatureType(); t.width = 2; t.height = 2; t.colorSpace = .grayscale; $0.imageType = t },
        ]
    }()

    static func run(_ raw: UnsafeRawBufferPointer) {
        let bytes = [UInt8](raw)
        guard let value = try? MLJSONParser.parse(bytes) else { return }
        guard let foundation = try? JSONSerialization.jsonObject(with: Data(bytes), options: [.fragmentsAllowed]) else {
            fuzzFailure("MLJSONParser accepts JSON that JSONSerialization refuses")
        }
        if let why = difference(value, foundation) { fuzzFailure("MLJSONParser and JSONSerialization read different values: \(why)") }
        // The value itself as each feature, and (a row) each member as the feature of its name.
        var candidates: [(Any, MLFeatureDescription)] = features.map { (value, $0) }
        if let row = value as? [String: Any] {
            candidates += features.compactMap { f in row[f.name].map { ($0, f) } }
        }
        for (json, feature) in candidates {
            if feature.type == .image, let object = json as? [String: Any], object["path"] != nil { continue }
            roundTrip(json, feature)
        }
    }

    static func roundTrip(_ json: Any, _ feature: MLFeatureDescription) {
        guard let decoded = try? MLFeatureJSON.decode(json, as: feature) else { return }
        _ = try? feature.validate(decoded)
        var text = ""
        MLFeatureJSON.encode(decoded, into: &text, images: .raw)
        let again: MLFeatureValue
        do {
            again = try MLFeatureJSON.decode(try MLJSONParser.parse(Array(text.utf8)), as: feature)
        } catch {
            fuzzFailure("the \(feature.type) written as \(text.prefix(200)) does not read back: \(error)")
        }
        var text2 = ""
        MLFeatureJSON.encode(again, into: &text2, images: .raw)
        if text != text2 { fuzzFailure("the \(feature.type) \(text.prefix(200)) reads back as \(text2.prefix(200))") }
    }

    /// Why two parsed JSON values differ, or nil.
    static func difference(_ a: Any, _ b: Any) -> String? {
        switch (a, b) {
        case (let x as [String: Any], let y as [String: Any]):
            guard Set(x.keys) == Set(y.keys) else { return "object keys \(x.keys.sorted()) vs \(y.keys.sorted())" }
            for (k, v) in x { if let why = difference(v, y[k]!) { return why } }
            return nil
        case (let x as [Any], let y as [Any]):
            guard x.count == y.count else { return "arrays of \(x.count) and \(y.count)" }
            for (v, w) in zip(x, y) { if let why = difference(v, w) { return why } }
            return nil
        case (let x as String, let y as String):
            return x == y ? nil : "strings \(x.debugDescription) vs \(y.debugDescription)"
        case (is NSNull, is NSNull):
            return nil
        case (let x as NSNumber, let y as NSNumber):
            let (u, v) = (x.doubleValue, y.doubleValue)
            return u == v || abs(u - v) <= 1e-12 * max(abs(u), abs(v)) ? nil : "numbers \(x) vs \(y)"
        default:
            return "\(type(of: a)) vs \(type(of: b))"
        }
    }
}
#endif
