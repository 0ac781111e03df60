import Foundation

/// The fuzz targets (`make fuzz`, fuzz/README.md): each takes arbitrary bytes, runs one reader
/// the server exposes to clients or model files, and stops the process (`fatalError`) when a
/// property fails, so libFuzzer records the input as a crash. Without a property to break, a
/// target still catches traps, overflows, and (under AddressSanitizer) memory errors.
///
/// The targets reach internal readers through `@testable` imports, which only debug builds
/// allow: a release build compiles them to nothing (`isAvailable` false).
public enum CortadoFuzzTarget: String, CaseIterable, Sendable {
    /// `.mlmodel` bytes, compiled and encrypted containers, `.mlpackage` folders.
    case modelLoader = "model-loader"
    /// The hand-written ModelInferRequest reader against SwiftProtobuf.
    case inferDecoder = "infer-decoder"
    /// The HTTP/2 frame filter, request-header checks and gRPC message reader, each against a
    /// plain reading of the same bytes.
    case http2 = "http2"
    /// The JSON reader and feature decoding for `cortado predict` and REST rows.
    case featureJSON = "feature-json"
    /// The REST infer request reader against the JSON tree it replaced.
    case restInfer = "rest-infer"

    #if DEBUG
    public static let isAvailable = true
    #else
    public static let isAvailable = false
    #endif

    /// Runs one input through the target.
    public func run(_ bytes: UnsafeRawBufferPointer) {
        #if DEBUG
        switch self {
        case .modelLoader: ModelLoaderFuzz.run(bytes)
        case .inferDecoder: InferDecoderFuzz.run(bytes)
        case .http2: HTTP2Fuzz.run(bytes)
        case .featureJSON: FeatureJSONFuzz.run(bytes)
        case .restInfer: RESTInferFuzz.run(bytes)
        }
        #endif
    }

    public func run(_ data: Data) {
        data.withUnsafeBytes { run($0) }
    }
}

/// A property the target checks failed: stop here, naming it.
func fuzzFailure(_ what: String, file: StaticString = #file, line: UInt = #line) -> Never {
    fatalError("fuzz property failed: \(what)", file: file, line: line)
}
