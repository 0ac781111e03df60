import CortadoSpec

/// Allowed shapes of a multi-array feature beyond its default shape.
public struct MLMultiArrayShapeConstraint: Sendable, Equatable {
    public enum Kind: Sendable, Equatable { case unspecified, enumerated, range }
    public var type: Kind
    /// For `.enumerated`: the allowed shapes.
    public var enumeratedShapes: [[Int]]
    /// For `.range`: per dimension, the smallest and largest size (`Int.max`: unbounded).
    public var sizeRangeForDimension: [ClosedRange<Int>]

    public static let unspecified = MLMultiArrayShapeConstraint(type: .unspecified, enumeratedShapes: [], sizeRangeForDimension: [])
}

/// What a multi-array feature must look like.
public struct MLMultiArrayConstraint: Sendable, Equatable {
    /// The default shape (may be empty when the model leaves it open).
    public var shape: [Int]
    /// The declared element type; nil when the model leaves it unset.
    public var dataType: MLMultiArrayDataType?
    public var shapeConstraint: MLMultiArrayShapeConstraint
}

/// The colour layout of an image feature (the format's ImageFeatureType.ColorSpace).
public enum MLImageColorSpace: String, Sendable {
    case grayscale = "GRAYSCALE"
    case rgb = "RGB"
    case bgr = "BGR"
    case grayscaleFloat16 = "GRAYSCALE_FLOAT16"

    /// Planes an image of this colour space has: 3 for RGB and BGR, 1 for gray.
    public var channels: Int {
        switch self {
        case .rgb, .bgr: return 3
        case .grayscale, .grayscaleFloat16: return 1
        }
    }
}

/// What an image feature must look like.
public struct MLImageConstraint: Sendable, Equatable {
    public var pixelsWide: Int
    public var pixelsHigh: Int
    public var colorSpace: MLImageColorSpace
    /// Other sizes allowed: enumerated (width, height) pairs.
    public var enumeratedSizes: [(width: Int, height: Int)]
    /// Or a range of widths and heights.
    public var widthRange: ClosedRange<Int>?
    public var heightRange: ClosedRange<Int>?

    public static func == (a: MLImageConstraint, b: MLImageConstraint) -> Bool {
        a.pixelsWide == b.pixelsWide && a.pixelsHigh == b.pixelsHigh && a.colorSpace == b.colorSpace
            && a.enumeratedSizes.map { [$0.width, $0.height] } == b.enumeratedSizes.map { [$0.width, $0.height] }
            && a.widthRange == b.widthRange && a.heightRange == b.heightRange
    }
}

/// What a dictionary feature's keys are.
public struct MLDictionaryConstraint: Sendable, Equatable {
    /// `.int64` or `.string`.
    public var keyType: MLFeatureType
}

/// What a sequence feature holds.
public struct MLSequenceConstraint: Sendable, Equatable {
    /// `.int64` or `.string`.
    public var valueType: MLFeatureType
    public var countRange: ClosedRange<Int>
}

/// Name, type and constraints of one input or output (CoreML.framework's `MLFeatureDescription`).
public struct MLFeatureDescription: Sendable, Equatable, CustomStringConvertible {
    public var name: String
    public var shortDescription: String
    public var type: MLFeatureType
    public var isOptional: Bool
    public var multiArrayConstraint: MLMultiArrayConstraint?
    public var imageConstraint: MLImageConstraint?
    public var dictionaryConstraint: MLDictionaryConstraint?
    public var sequenceConstraint: MLSequenceConstraint?

    public init(name: String, type: MLFeatureType, isOptional: Bool = false, shortDescription: String = "") {
        self.name = name
        self.type = type
        self.isOptional = isOptional
        self.shortDescription = shortDescription
    }

    /// Reads a description from the format. Throws for a feature with no or an unknown type.
    public init(_ spec: CoreML_Specification_FeatureDescription) throws {
        self.init(name: spec.name, type: .invalid, isOptional: spec.type.isOptional, shortDescription: spec.shortDescription)
        switch spec.type.type {
        case .int64Type?: type = .int64
        case .doubleType?: type = .double
        case .stringType?: type = .string
        case .multiArrayType(let a)?:
            type = .multiArray
            multiArrayConstraint = try Self.arrayConstraint(a, feature: spec.name)
        case .stateType(let s)?:
            type = .multiArray
            multiArrayConstraint = try Self.arrayConstraint(s.arrayType, feature: spec.name)
        case .imageType(let i)?:
            type = .image
            imageConstraint = try Self.imageConstraint(i, feature: spec.name)
        case .dictionaryType(let d)?:
            type = .dictionary
            switch d.keyType {
            case .int64KeyType?: dictionaryConstraint = MLDictionaryConstraint(keyType: .int64)
            case .stringKeyType?: dictionaryConstraint = MLDictionaryConstraint(keyType: .string)
            case nil: throw MLModelError(.invalidModel, feature: spec.name, "dictionary feature has no key type")
            }
        case .sequenceType(let s)?:
            type = .sequence
            let valueType: MLFeatureType
            switch s.type {
            case .int64Type?: valueType = .int64
            case .stringType?: valueType = .string
            case nil: throw MLModelError(.invalidModel, feature: spec.name, "sequence feature has no element type")
            }
            let range = s.hasSizeRange ? Self.range(s.sizeRange) : 0...Int.max
            sequenceConstraint = MLSequenceConstraint(valueType: valueType, countRange: range)
        case nil:
            throw MLModelError(.invalidModel, feature: spec.name, "feature has no type")
        }
    }

    static func range(_ r: CoreML_Specification_SizeRange) -> ClosedRange<Int> {
        let lower = Int(clamping: r.lowerBound)
        let upper = r.upperBound < 0 ? Int.max : max(Int(r.upperBound), lower)
        return lower...upper
    }

    static func arrayConstraint(_ a: CoreML_Specification_ArrayFeatureType, feature: String) throws -> MLMultiArrayConstraint {
        let dataType: MLMultiArrayDataType?
        switch a.dataType {
        case .double: dataType = .double
        case .float32: dataType = .float32
        case .float16: dataType = .float16
        case .int32: dataType = .int32
        case .invalidArrayDataType: dataType = nil
        case .int8, .UNRECOGNIZED:
            throw MLModelError(.unsupported, feature: feature, "multi-array element type \(a.dataType) is not supported (expected FLOAT16, FLOAT32, DOUBLE or INT32)")
        }
        var shapeConstraint = MLMultiArrayShapeConstraint.unspecified
        switch a.shapeFlexibility {
        case .enumeratedShapes(let e)?:
            shapeConstraint = MLMultiArrayShapeConstraint(type: .enumerated, enumeratedShapes: e.shapes.map { $0.shape.map { Int($0) } }, sizeRangeForDimension: [])
        case .shapeRange(let r)?:
            shapeConstraint = MLMultiArrayShapeConstraint(type: .range, enumeratedShapes: [], sizeRangeForDimension: r.sizeRanges.map(range))
        case nil:
            break
        }
        return MLMultiArrayConstraint(shape: a.shape.map { Int($0) }, dataType: dataType, shapeConstraint: shapeConstraint)
    }

    static func imageConstraint(_ i: CoreML_Specification_ImageFeatureType, feature: String) throws -> MLImageConstraint {
        let space: MLImageColorSpace
        switch i.colorSpace {
        case .grayscale: space = .grayscale
        case .rgb: space = .rgb
        case .bgr: space = .bgr
        case .grayscaleFloat16: space = .grayscaleFloat16
        case .invalidColorSpace, .UNRECOGNIZED:
            throw MLModelError(.invalidModel, feature: feature, "image feature has no valid colour space")
        }
        var c = MLImageConstraint(pixelsWide: Int(i.width), pixelsHigh: Int(i.height), colorSpace: space, enumeratedSizes: [], widthRange: nil, heightRange: nil)
        switch i.sizeFlexibility {
        case .enumeratedSizes(let e)?:
            c.enumeratedSizes = e.sizes.map { (Int($0.width), Int($0.height)) }
        case .imageSizeRange(let r)?:
            c.widthRange = range(r.widthRange)
            c.heightRange = range(r.heightRange)
        case nil:
            break
        }
        return c
    }

    /// A one-line summary of the type and its constraints, as `cortado inspect` shows it.
    public var typeSummary: String {
        var s: String
        switch type {
        case .multiArray:
            let c = multiArrayConstraint
            s = "MultiArray (\(c?.dataType?.description ?? "unspecified type")"
            if let shape = c?.shape, !shape.isEmpty { s += " " + shape.map(String.init).joined(separator: " × ") }
            s += ")"
            if let sc = c?.shapeConstraint {
                switch sc.type {
                case .enumerated: s += " shapes: " + sc.enumeratedShapes.map { "[\($0.map(String.init).joined(separator: ","))]" }.joined(separator: " ")
                case .range: s += " ranges: " + sc.sizeRangeForDimension.map { $0.upperBound == Int.max ? "\($0.lowerBound)…" : "\($0.lowerBound)…\($0.upperBound)" }.joined(separator: " × ")
                case .unspecified: break
                }
            }
        case .image:
            let c = imageConstraint!
            s = "Image (\(c.colorSpace.rawValue) \(c.pixelsWide) × \(c.pixelsHigh))"
        case .dictionary:
            s = "Dictionary (\(dictionaryConstraint?.keyType ?? .invalid) → Double)"
        case .sequence:
            s = "Sequence of \(sequenceConstraint?.valueType ?? .invalid)"
        default:
            s = type.description.prefix(1).uppercased() + type.description.dropFirst()
        }
        return isOptional ? s + ", optional" : s
    }

    public var description: String { "\(name): \(typeSummary)" }
}
