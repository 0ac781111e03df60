/// The one error type of the Cortado runtime.
///
/// Its message names the model, the feature (when there is one) and what was expected,
/// so a single line tells a user what to fix. The codes follow CoreML.framework's
/// `MLModelError.Code`, with a few additions for what a server meets.
public struct MLModelError: Error, CustomStringConvertible, Equatable, Sendable {
    public enum Code: Int, Sendable {
        /// Anything not covered below.
        case generic = 0
        /// A feature has the wrong type, shape or value, or is missing.
        case featureType = 1
        /// A file could not be read or written.
        case io = 3
        /// A custom layer failed to load or run.
        case customLayer = 4
        /// A custom model failed to load or run.
        case customModel = 5
        /// The model file is not a valid Core ML model.
        case invalidModel = 100
        /// The model is valid, but of a kind or version Cortado does not run.
        case unsupported = 101
        /// The input rows could not be parsed (JSON, wire format).
        case parse = 102
    }

    public var code: Code
    /// The model's name (file base name), when known.
    public var model: String?
    /// The feature concerned, when there is one.
    public var feature: String?
    /// What went wrong and what was expected.
    public var message: String

    public init(_ code: Code, model: String? = nil, feature: String? = nil, _ message: String) {
        self.code = code
        self.model = model
        self.feature = feature
        self.message = message
    }

    public var description: String {
        var parts: [String] = []
        if let model { parts.append("model '\(model)'") }
        if let feature { parts.append("feature '\(feature)'") }
        parts.append(message)
        return parts.joined(separator: ": ")
    }

    /// The same error, attributed to a model if it was not yet.
    public func inModel(_ name: String?) -> MLModelError {
        var copy = self
        if copy.model == nil { copy.model = name }
        return copy
    }

    public static func featureType(_ feature: String, _ message: String) -> MLModelError {
        MLModelError(.featureType, feature: feature, message)
    }

    public static func invalidModel(_ message: String) -> MLModelError {
        MLModelError(.invalidModel, message)
    }
}
