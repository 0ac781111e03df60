import Foundation

/// An `.mlpackage` folder: `Manifest.json` names the root model item (the spec) among its
/// items; the spec's folder also holds the weights an ML Program refers to
/// (`@model_path/weights/weight.bin`).
public struct MLModelPackage: Sendable {
    /// The package folder.
    public let url: URL
    /// The root model item's file (usually `Data/com.apple.CoreML/model.mlmodel`).
    public let specificationURL: URL
    /// The folder `@model_path` names: the one holding the spec.
    public var modelPath: URL { specificationURL.deletingLastPathComponent() }

    /// Reads the manifest. A package without one is read the way Xcode writes them today
    /// (`Data/com.apple.CoreML/model.mlmodel`) only when that file exists.
    public init(url: URL, name: String) throws {
        self.url = url
        let manifestURL = url.appendingPathComponent("Manifest.json")
        let fallback = url.appendingPathComponent("Data/com.apple.CoreML/model.mlmodel")
        guard let manifest = try? Data(contentsOf: manifestURL) else {
            guard FileManager.default.fileExists(atPath: fallback.path) else {
                throw MLModelError(.invalidModel, model: name, "\(url.path) is a folder without Manifest.json: not an .mlpackage")
            }
            specificationURL = fallback
            return
        }
        func bad(_ why: String) -> MLModelError {
            MLModelError(.invalidModel, model: name, "\(manifestURL.path): \(why)")
        }
        guard let object = try? JSONSerialization.jsonObject(with: manifest) as? [String: Any] else {
            throw bad("not a JSON object")
        }
        guard let root = object["rootModelIdentifier"] as? String else {
            throw bad("no rootModelIdentifier")
        }
        guard let items = object["itemInfoEntries"] as? [String: Any], let item = items[root] as? [String: Any] else {
            throw bad("the root model item \(root) is not among itemInfoEntries")
        }
        guard let path = item["path"] as? String, !path.isEmpty else {
            throw bad("the root model item \(root) has no path")
        }
        guard !path.hasPrefix("/"), !path.split(separator: "/").contains("..") else {
            throw bad("the root model item's path \(path) leaves the package")
        }
        specificationURL = url.appendingPathComponent("Data").appendingPathComponent(path)
        guard FileManager.default.fileExists(atPath: specificationURL.path) else {
            throw bad("the root model item's file \(specificationURL.path) does not exist")
        }
    }

    /// True when `url` is a folder (an `.mlpackage` is one).
    public static func isPackage(_ url: URL) -> Bool {
        var isDirectory: ObjCBool = false
        return FileManager.default.fileExists(atPath: url.path, isDirectory: &isDirectory) && isDirectory.boolValue
    }
}
