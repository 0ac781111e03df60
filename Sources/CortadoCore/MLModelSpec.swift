import CortadoSpec
import Foundation
import SwiftProtobuf

/// Facts about a spec that the core reads without knowing any model kind.
public enum MLModelSpec {
    /// The newest specification version Cortado reads (Core ML for iOS 26 / macOS 26).
    public static let newestSpecificationVersion: Int32 = 10

    /// The `Model.Type` case name of a spec (e.g. "glmRegressor"), or nil when unset.
    public static func typeName(_ spec: CoreML_Specification_Model) -> String? {
        guard let type = spec.type else { return nil }
        return Mirror(reflecting: type).children.first?.label
    }

    /// Parses a serialized spec, rejecting what is not a Core ML model.
    public static func parse(_ data: Data, name: String) throws -> CoreML_Specification_Model {
        let spec: CoreML_Specification_Model
        do {
            spec = try CoreML_Specification_Model(serializedBytes: data)
        } catch {
            throw MLModelError(.invalidModel, model: name, "not a Core ML model: the protobuf does not parse (\(error)); the file may be truncated or of another format")
        }
        if spec.type == nil {
            if spec.specificationVersion == 0 && !spec.hasDescription_p {
                throw MLModelError(.invalidModel, model: name, "not a Core ML model: no specification version, description or model type found in \(data.count) bytes")
            }
            throw MLModelError(.invalidModel, model: name, "the model has no type (its Model.Type field is empty or of a newer format)")
        }
        return spec
    }

    /// Reads a model file: a `.mlmodel` protobuf, or the spec inside an `.mlpackage` folder.
    public static func read(contentsOf url: URL) throws -> (spec: CoreML_Specification_Model, data: Data) {
        let name = url.deletingPathExtension().lastPathComponent
        let file = MLModelPackage.isPackage(url) ? try MLModelPackage(url: url, name: name).specificationURL : url
        let data: Data
        do {
            data = try Data(contentsOf: file, options: .mappedIfSafe)
        } catch {
            throw MLModelError(.io, model: name, "cannot read \(file.path): \((error as NSError).localizedDescription)")
        }
        return (try parse(data, name: name), data)
    }

    /// Checks the specification version. Low versions are accepted: converters often
    /// write 1 even for features that arrived later.
    public static func checkVersion(_ spec: CoreML_Specification_Model, name: String) throws {
        if spec.specificationVersion > newestSpecificationVersion {
            throw MLModelError(.unsupported, model: name, "specification version \(spec.specificationVersion) is newer than Cortado reads (up to \(newestSpecificationVersion))")
        }
    }
}
