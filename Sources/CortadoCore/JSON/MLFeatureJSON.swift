import Foundation

/// Cortado's JSON encoding of feature values (DESIGN.md, "Feature values in JSON"):
/// - int64 and double: JSON numbers (double also accepts "NaN", "Infinity", "-Infinity"
///   and `null` for NaN, since JSON has no NaN);
/// - string: JSON string; sequence: JSON array of int64 or strings;
/// - dictionary: JSON object, int64 keys as decimal strings;
/// - multiArray: `{"shape":[…], "dataType":"FLOAT32"|"DOUBLE"|"INT32"|"FLOAT16", "data":[…]}`
///   (row-major), or a plain (nested) JSON array on input;
/// - image, on input: a PNG or JPEG file `{"path":"x.png"}` (a relative path resolves against
///   the current directory) or its bytes `{"base64":"…"}` (also accepted under `"png"`), or
///   raw pixels `{"width":W, "height":H, "pixelFormat":"RGB8"|"BGRA8"|"GRAY8"|"GRAY16F",
///   "data":[…]}` (bytes 0…255, GRAY16F: numbers). Any of them may add
///   `"cropAndScale":"centerCrop"|"scaleFit"|"scaleFill"` (default centerCrop, as Vision):
///   how an image of a size the model does not take is resized (MLImage+Resize.swift);
/// - image, on output: `{"width":W, "height":H, "pixelFormat":"RGB8"|"GRAY8"|"BGRA8",
///   "png":"<base64>"}` by default (BGRA8 as an RGBA PNG), or the raw form above with
///   `images: .raw`; GRAY16F is always raw (PNG holds no half floats), its data as numbers.
public enum MLFeatureJSON {
    /// How image values are written.
    public enum ImageEncoding: Sendable {
        /// `{"width","height","pixelFormat","png"}` (GRAY16F falls back to raw).
        case png
        /// `{"width","height","pixelFormat","data"}`.
        case raw
    }

    // MARK: Decoding (type-directed by the model description)

    /// Decodes one JSON value (as produced by JSONSerialization) into a feature value of
    /// the type the description expects.
    public static func decode(_ json: Any, as description: MLFeatureDescription) throws -> MLFeatureValue {
        let name = description.name
        if json is NSNull, description.type != .double {
            guard description.isOptional else { throw MLModelError.featureType(name, "null given for a required \(description.typeSummary)") }
            return MLFeatureValue(undefined: description.type)
        }
        switch description.type {
        case .int64:
            return MLFeatureValue(int64: try int64(json, feature: name))
        case .double:
            return MLFeatureValue(double: try double(json, feature: name))
        case .string:
            guard let s = json as? String else { throw mismatch(name, "a JSON string", json) }
            return MLFeatureValue(string: s)
        case .multiArray:
            return MLFeatureValue(multiArray: try multiArray(json, description: description))
        case .dictionary:
            guard let object = json as? [String: Any] else { throw mismatch(name, "a JSON object", json) }
            let keyType = description.dictionaryConstraint?.keyType ?? .string
            if keyType == .int64 {
                var d: [Int64: Double] = [:]
                for (k, v) in object {
                    guard let key = Int64(k) else { throw MLModelError.featureType(name, "dictionary key \"\(k)\" is not an int64 (int64 keys are written as decimal strings)") }
                    d[key] = try double(v, feature: "\(name)[\(k)]")
                }
                return MLFeatureValue(dictionary: .int64Keyed(d))
            }
            var d: [String: Double] = [:]
            for (k, v) in object { d[k] = try double(v, feature: "\(name)[\(k)]") }
            return MLFeatureValue(dictionary: .stringKeyed(d))
        case .sequence:
            guard let items = json as? [Any] else { throw mismatch(name, "a JSON array", json) }
            if description.sequenceConstraint?.valueType == .string {
                let strings = try items.map { item -> String in
                    guard let s = item as? String else { throw mismatch(name, "an array of strings", item) }
                    return s
                }
                return MLFeatureValue(sequence: MLSequence(strings: strings))
            }
            return MLFeatureValue(sequence: MLSequence(int64s: try items.map { try int64($0, feature: name) }))
        case .image:
            return MLFeatureValue(image: try image(json, feature: name))
        case .invalid:
            throw MLModelError.featureType(name, "feature has no valid type")
        }
    }

    static func mismatch(_ feature: String, _ expected: String, _ got: Any) -> MLModelError {
        MLModelError.featureType(feature, "expected \(expected), got \(kindName(got))")
    }

    static func kindName(_ json: Any) -> String {
        switch json {
        case is NSNull: return "null"
        case let n as NSNumber: return "the number \(n)"
        case let s as String: return "the string \"\(s.prefix(40))\""
        case is [Any]: return "an array"
        case is [String: Any]: return "an object"
        default: return "\(type(of: json))"
        }
    }

    static func double(_ json: Any, feature: String) throws -> Double {
        switch json {
        case let n as NSNumber: return n.doubleValue
        case is NSNull: return .nan
        case let s as String:
            switch s.lowercased() {
            case "nan": return .nan
            case "infinity", "inf", "+infinity": return .infinity
            case "-infinity", "-inf": return -.infinity
            default: break
            }
        default: break
        }
        throw mismatch(feature, "a number", json)
    }

    static func int64(_ json: Any, feature: String) throws -> Int64 {
        if let n = json as? NSNumber {
            let d = n.doubleValue
            if d == d.rounded(), abs(d) < 9.2e18 { return n.int64Value }
            throw MLModelError.featureType(feature, "expected an integer (int64), got \(n)")
        }
        throw mismatch(feature, "an integer (int64)", json)
    }

    static func multiArray(_ json: Any, description: MLFeatureDescription) throws -> MLMultiArray {
        let name = description.name
        let declared = description.multiArrayConstraint?.dataType ?? .double
        if let object = json as? [String: Any] {
            guard let data = object["data"] as? [Any] else { throw MLModelError.featureType(name, "multiArray object needs a \"data\" array") }
            var dataType = declared
            if let t = object["dataType"] {
                guard let s = t as? String, let parsed = MLMultiArrayDataType(name: s) else {
                    throw MLModelError.featureType(name, "unknown dataType \(t) (expected FLOAT32, DOUBLE, INT32 or FLOAT16)")
                }
                dataType = parsed
            }
            let shape: [Int]
            if let s = object["shape"] {
                guard let dims = s as? [NSNumber], dims.allSatisfy({ $0.intValue >= 0 }) else { throw MLModelError.featureType(name, "\"shape\" must be an array of non-negative integers") }
                shape = dims.map(\.intValue)
            } else {
                shape = [data.count]
            }
            let values = try data.enumerated().map { try double($0.element, feature: "\(name)[\($0.offset)]") }
            var product = 1
            for d in shape {
                let (next, overflow) = product.multipliedReportingOverflow(by: d)
                guard !overflow else { throw MLModelError.featureType(name, "shape \(shape) has more elements than memory can hold") }
                product = next
            }
            guard values.count == product else {
                throw MLModelError.featureType(name, "\(values.count) values do not fill shape \(shape)")
            }
            return try MLMultiArray(values, shape: shape, dataType: dataType)
        }
        if json is [Any] {
            var shape: [Int] = []
            var values: [Double] = []
            try flatten(json, depth: 0, shape: &shape, into: &values, feature: name)
            return try MLMultiArray(values, shape: shape, dataType: declared)
        }
        if json is NSNumber {
            return try MLMultiArray([double(json, feature: name)], shape: [1], dataType: declared)
        }
        throw mismatch(name, "a multiArray object or a (nested) array of numbers", json)
    }

    static func flatten(_ json: Any, depth: Int, shape: inout [Int], into values: inout [Double], feature: String) throws {
        if let items = json as? [Any] {
            if depth == shape.count { shape.append(items.count) }
            guard shape[depth] == items.count else { throw MLModelError.featureType(feature, "nested arrays are ragged at depth \(depth)") }
            for item in items { try flatten(item, depth: depth + 1, shape: &shape, into: &values, feature: feature) }
        } else {
            guard depth == shape.count else { throw MLModelError.featureType(feature, "nested arrays are ragged at depth \(depth)") }
            values.append(try double(json, feature: feature))
        }
    }

    static func image(_ json: Any, feature: String) throws -> MLImage {
        guard let object = json as? [String: Any] else { throw mismatch(feature, "an image object", json) }
        var mode = MLImageCropAndScale.centerCrop
        if let m = object["cropAndScale"] {
            guard let text = m as? String, let parsed = MLImageCropAndScale(rawValue: text) else {
                throw MLModelError.featureType(feature, "unknown cropAndScale \(kindName(m)) (expected \(MLImageCropAndScale.allCases.map(\.rawValue).joined(separator: ", ")))")
            }
            mode = parsed
        }
        var image: MLImage
        do {
            if let p = object["path"] {
                guard let path = p as? String, !path.isEmpty else { throw mismatch(feature, "a file path string in \"path\"", p) }
                image = try MLImage(contentsOf: URL(fileURLWithPath: path))
            } else if let b = object["base64"] ?? object["png"] {
                guard let text = b as? String else { throw mismatch(feature, "a base64 string", b) }
                guard let bytes = Data(base64Encoded: text, options: .ignoreUnknownCharacters) else {
                    throw MLModelError.featureType(feature, "the image's base64 text is not valid base64")
                }
                image = try MLImage(encoded: bytes)
            } else {
                image = try rawImage(object, feature: feature)
            }
        } catch let e as MLModelError where e.feature == nil {
            throw MLModelError(e.code, feature: feature, e.message)
        }
        image.cropAndScale = mode
        return image
    }

    static func rawImage(_ object: [String: Any], feature: String) throws -> MLImage {
        guard let w = object["width"] as? NSNumber, let h = object["height"] as? NSNumber,
              let f = object["pixelFormat"] as? String, let data = object["data"] as? [Any] else {
            throw MLModelError.featureType(feature, "image needs \"path\", \"base64\", or raw pixels \"width\", \"height\", \"pixelFormat\" and \"data\"")
        }
        guard let format = MLImagePixelFormat(rawValue: f.uppercased()) else {
            throw MLModelError.featureType(feature, "unknown pixelFormat \"\(f)\" (expected \(MLImagePixelFormat.allCases.map(\.rawValue).joined(separator: ", ")))")
        }
        var bytes: [UInt8] = []
        if format == .gray16f {
            bytes.reserveCapacity(2 * data.count)
            for v in data {
                let bits = Float16(try double(v, feature: feature)).bitPattern
                bytes.append(UInt8(bits & 0xff)); bytes.append(UInt8(bits >> 8))
            }
        } else {
            bytes = try data.map { v in
                let d = try double(v, feature: feature)
                guard d >= 0, d <= 255, d == d.rounded() else { throw MLModelError.featureType(feature, "pixel value \(d) is not a byte (0…255)") }
                return UInt8(d)
            }
        }
        return try MLImage(width: w.intValue, height: h.intValue, pixelFormat: format, data: bytes)
    }

    /// Decodes a JSON object of input features against the model's inputs. Features the
    /// model does not declare are rejected, naming them, so typos are caught.
    public static func decodeInputs(_ object: [String: Any], description: MLModelDescription) throws -> MLFeatureProvider {
        var values: [(name: String, value: MLFeatureValue)] = []
        for input in description.inputs {
            guard let json = object[input.name] else {
                if input.isOptional { continue }
                throw MLModelError.featureType(input.name, "required input is missing (expected \(input.typeSummary))")
            }
            values.append((input.name, try decode(json, as: input)))
        }
        let unknown = Set(object.keys).subtracting(description.inputs.map(\.name))
        if let extra = unknown.sorted().first {
            throw MLModelError.featureType(extra, "is not an input of the model (inputs: \(description.inputs.map(\.name).joined(separator: ", ")))")
        }
        // A list for the few inputs most models take (a lookup compares names, no hashing).
        return MLFeatureListProvider.make(values)
    }

    // MARK: Encoding

    /// Writes a feature value as JSON text (shortest round-trip doubles, sorted keys; images
    /// as PNG unless `images` is `.raw`).
    public static func encode(_ value: MLFeatureValue, into out: inout String, images: ImageEncoding = .png) {
        switch value.storage {
        case .undefined: out += "null"
        case .int64(let v): out += String(v)
        case .double(let v): number(v, into: &out)
        case .string(let s): string(s, into: &out)
        case .multiArray(let a):
            out += "{\"shape\":[" + a.shape.map(String.init).joined(separator: ",") + "],\"dataType\":\"\(a.dataType)\",\"data\":["
            for i in 0..<a.count {
                if i > 0 { out += "," }
                if a.dataType == .int32 { out += String(Int64(a.double(at: i))) } else if a.dataType == .float32 || a.dataType == .float16 {
                    number(Float(a.double(at: i)), into: &out)
                } else { number(a.double(at: i), into: &out) }
            }
            out += "]}"
        case .dictionary(.int64Keyed(let d)):
            out += "{"
            for (i, key) in d.keys.sorted().enumerated() {
                if i > 0 { out += "," }
                out += "\"\(key)\":"; number(d[key]!, into: &out)
            }
            out += "}"
        case .dictionary(.stringKeyed(let d)):
            out += "{"
            for (i, key) in d.keys.sorted().enumerated() {
                if i > 0 { out += "," }
                string(key, into: &out); out += ":"; number(d[key]!, into: &out)
            }
            out += "}"
        case .sequence(let s):
            switch s.values {
            case .int64s(let v): out += "[" + v.map(String.init).joined(separator: ",") + "]"
            case .strings(let v):
                out += "["
                for (i, item) in v.enumerated() { if i > 0 { out += "," }; string(item, into: &out) }
                out += "]"
            }
        case .image(let img):
            image(img, encoding: images, into: &out)
        }
    }

    /// Writes an image as a PNG object, or raw (GRAY16F always raw, its halves as numbers).
    static func image(_ img: MLImage, encoding: ImageEncoding, into out: inout String) {
        out += "{\"width\":\(img.width),\"height\":\(img.height),\"pixelFormat\":\"\(img.pixelFormat.rawValue)\","
        if encoding == .png, img.pixelFormat != .gray16f, let png = try? img.pngData() {
            out += "\"png\":\"" + png.base64EncodedString() + "\"}"
            return
        }
        out += "\"data\":["
        if img.pixelFormat == .gray16f {
            img.data.withUnsafeBytes { raw in
                for i in 0..<img.width * img.height {
                    if i > 0 { out += "," }
                    number(MLImage.half(raw.baseAddress!, i), into: &out)
                }
            }
        } else {
            out += img.data.map(String.init).joined(separator: ",")
        }
        out += "]}"
    }

    /// Writes a provider's features (all of them, or `names` in that order) as one JSON object.
    public static func encode(_ provider: MLFeatureProvider, names: [String]? = nil, images: ImageEncoding = .png) -> String {
        var out = "{"
        for (i, name) in (names ?? provider.featureNames.sorted()).enumerated() {
            guard let value = provider.featureValue(for: name) else { continue }
            if i > 0 { out += "," }
            string(name, into: &out); out += ":"
            encode(value, into: &out, images: images)
        }
        return out + "}"
    }

    static func number<F: BinaryFloatingPoint & LosslessStringConvertible>(_ v: F, into out: inout String) {
        if v.isNaN { out += "\"NaN\"" } else if v.isInfinite { out += v < 0 ? "\"-Infinity\"" : "\"Infinity\"" } else { out += v.description }
    }

    static func string(_ s: String, into out: inout String) {
        out += "\""
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default:
                if scalar.value < 0x20 { out += String(format: "\\u%04x", scalar.value) } else { out.unicodeScalars.append(scalar) }
            }
        }
        out += "\""
    }
}
