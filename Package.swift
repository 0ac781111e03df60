// swift-tools-version:6.1
import PackageDescription

// Kernels and F16C: Float16 conversions vectorize with -mf16c (see NOTES.md).
let fastMath: [SwiftSetting] = [
    .unsafeFlags(["-Xcc", "-mf16c", "-enforce-exclusivity=unchecked"]),
    .unsafeFlags(["-Ounchecked"], .when(configuration: .release)),
]

/// One target per model kind: each lives in its own folder and registers itself.
let kinds: [(name: String, path: String, extra: [Target.Dependency])] = [
    ("CortadoGLM", "Sources/Kinds/GLM", []),
    ("CortadoSVM", "Sources/Kinds/SVM", []),
    ("CortadoTreeEnsemble", "Sources/Kinds/TreeEnsemble", []),
    ("CortadoFeatureEngineering", "Sources/Kinds/FeatureEngineering", []),
    ("CortadoKNN", "Sources/Kinds/KNN", []),
    ("CortadoPipeline", "Sources/Kinds/Pipeline", []),
    ("CortadoBayesian", "Sources/Kinds/Bayesian", []),
    ("CortadoNeuralNetwork", "Sources/Kinds/NeuralNetwork", ["COpenBLAS", "CCortadoGemm"]),
    ("CortadoMLProgram", "Sources/Kinds/MLProgram", ["COpenBLAS", "CCortadoGemm"]),
    ("CortadoLinkedModel", "Sources/Kinds/LinkedModel", []),
    ("CortadoNonMaximumSuppression", "Sources/Kinds/NonMaximumSuppression", []),
    ("CortadoCustomModel", "Sources/Kinds/CustomModel", []),
]

/// C plugins: only the entry point is exported (NOTES.md, "dlopen plugin pitfalls").
/// (SwiftPM keeps header search paths inside a target, so the shared ABI header is found by -I.)
let pluginC: [CSetting] = [.unsafeFlags(["-fvisibility=hidden", "-I\(Context.packageDirectory)/Plugins/include"])]

let package = Package(
    name: "Cortado",
    products: [
        .library(name: "Cortado", targets: ["CortadoModels"]),
        .library(name: "CortadoEncryption", targets: ["CortadoEncryption"]),
        .executable(name: "cortado", targets: ["cortado"]),
        .executable(name: "cortado-load", targets: ["cortado-load"]),
        // Plugins (Plugins/): shared libraries Cortado loads with --plugins / CORTADO_PLUGIN_PATH.
        .library(name: "CortadoSwish", type: .dynamic, targets: ["CortadoSwishPlugin"]),
        .library(name: "CortadoKMeans", type: .dynamic, targets: ["CortadoKMeansPlugin"]),
        .library(name: "CortadoTestWrongABI", type: .dynamic, targets: ["CortadoTestWrongABIPlugin"]),
        .library(name: "CortadoTestFailing", type: .dynamic, targets: ["CortadoTestFailingPlugin"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-protobuf", exact: "1.39.0", traits: []),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        // AES-GCM for encrypted models; only CortadoEncryption (and what links it) builds it.
        .package(url: "https://github.com/apple/swift-crypto", exact: "3.12.3"),
    ],
    targets: [
        .target(
            name: "CortadoSpec",
            dependencies: [.product(name: "SwiftProtobuf", package: "swift-protobuf")],
            path: "Sources/CortadoSpec"
        ),
        .target(
            name: "CortadoCore",
            dependencies: ["CortadoSpec", "CLibPNG", "CLibJPEG", .product(name: "SwiftProtobuf", package: "swift-protobuf")],
            path: "Sources/CortadoCore",
            swiftSettings: fastMath
        ),
        // Image codecs for image features (PNG in and out, JPEG in).
        .systemLibrary(name: "CLibPNG", path: "Sources/CSystem/CLibPNG", pkgConfig: "libpng"),
        .systemLibrary(name: "CLibJPEG", path: "Sources/CSystem/CLibJPEG", pkgConfig: "libjpeg"),
    ] + kinds.map { kind in
        .target(name: kind.name, dependencies: ["CortadoCore", "CortadoSpec"] + kind.extra, path: kind.path, swiftSettings: fastMath)
    } + [
        // OpenBLAS (Debian's pthread build) for the neural-network GEMMs.
        .systemLibrary(name: "COpenBLAS", path: "Sources/CSystem/COpenBLAS", pkgConfig: "openblas"),
        // Cortado's own packed SGEMM (AVX-512F kernels chosen at run time, not -march=native);
        // optimised in debug builds too, so the tests run the kernels as shipped.
        .target(name: "CCortadoGemm", path: "Sources/CGemm", cSettings: [.unsafeFlags(["-O3"])]),
        .target(
            name: "CortadoModels",
            dependencies: ["CortadoCore", "CortadoSpec"] + kinds.map { .byName(name: $0.name) },
            path: "Sources/CortadoModels"
        ),
        // Encrypted models (AES-GCM-256): registers a decryptor with the core, so that only
        // what links this target pays for swift-crypto.
        .target(
            name: "CortadoEncryption",
            dependencies: ["CortadoCore", .product(name: "Crypto", package: "swift-crypto")],
            path: "Sources/CortadoEncryption"
        ),
        // The server: C libraries, the transport (knows no protobuf and no model), the
        // generated service messages, and the services on top (know no model kind).
        .systemLibrary(name: "CLibUV", path: "Sources/CSystem/CLibUV", pkgConfig: "libuv"),
        .systemLibrary(name: "CNGHTTP2", path: "Sources/CSystem/CNGHTTP2", pkgConfig: "libnghttp2"),
        // Node's http-parser for the HTTP/1.1 (REST) port; Debian ships no .pc file for it.
        .systemLibrary(name: "CHTTPParser", path: "Sources/CSystem/CHTTPParser"),
        // OpenSSL 3 (Debian's libssl-dev): TLS between libuv and nghttp2, with memory BIOs.
        .systemLibrary(name: "COpenSSL", path: "Sources/CSystem/COpenSSL", pkgConfig: "openssl",
                       providers: [.apt(["libssl-dev"])]),
        // jemalloc for the cortado executable only (Sources/cortado/Allocator.swift).
        .systemLibrary(name: "CJemalloc", path: "Sources/CSystem/CJemalloc", pkgConfig: "jemalloc"),
        // The plugin ABI (a header-only module over Plugins/include/cortado_plugin.h), the host
        // that dlopens plugins into MLCustomRegistry, and the example and test plugins.
        .systemLibrary(name: "CCortadoPlugin", path: "Plugins/ABI"),
        .target(
            name: "CortadoPlugins",
            dependencies: ["CortadoCore", "CCortadoPlugin", "CLibUV"],
            path: "Sources/CortadoPlugins"
        ),
        .target(name: "CortadoSwishPlugin", path: "Plugins/Swish", publicHeadersPath: ".", cSettings: pluginC),
        .target(name: "CortadoKMeansPlugin", dependencies: ["CCortadoPlugin"], path: "Plugins/KMeans"),
        .target(name: "CortadoTestWrongABIPlugin", path: "Plugins/TestWrongABI", publicHeadersPath: ".", cSettings: pluginC),
        .target(name: "CortadoTestFailingPlugin", path: "Plugins/TestFailing", publicHeadersPath: ".", cSettings: pluginC),
        .target(
            name: "CortadoGRPC",
            dependencies: ["CLibUV", "CNGHTTP2", "CHTTPParser", "COpenSSL"],
            path: "Sources/CortadoGRPC",
            swiftSettings: fastMath
        ),
        .target(
            name: "CortadoServerProtos",
            dependencies: [.product(name: "SwiftProtobuf", package: "swift-protobuf")],
            path: "Sources/CortadoServerProtos"
        ),
        .target(
            name: "CortadoServer",
            dependencies: [
                "CortadoCore", "CortadoGRPC", "CortadoServerProtos",
                .product(name: "SwiftProtobuf", package: "swift-protobuf"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Sources/CortadoServer",
            swiftSettings: fastMath
        ),
        .executableTarget(
            name: "cortado",
            dependencies: [
                "CortadoModels",
                "CortadoServer",
                "CortadoGRPC",
                "CortadoPlugins",
                "CortadoEncryption",
                "CJemalloc",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "SwiftProtobuf", package: "swift-protobuf"),
            ],
            path: "Sources/cortado"
        ),
        // The load tester: its own gRPC client on libuv + nghttp2 (Sources/CortadoLoad).
        .target(
            name: "CortadoLoad",
            dependencies: [
                "CLibUV", "CNGHTTP2", "CortadoCore", "CortadoServerProtos",
                .product(name: "SwiftProtobuf", package: "swift-protobuf"),
            ],
            path: "Sources/CortadoLoad",
            swiftSettings: [.swiftLanguageMode(.v5)]
        ),
        .executableTarget(
            name: "cortado-load",
            dependencies: ["CortadoLoad", .product(name: "ArgumentParser", package: "swift-argument-parser")],
            path: "Sources/cortado-load",
            swiftSettings: [.swiftLanguageMode(.v5)]
        ),
        // Fuzz targets (fuzz/README.md): `make fuzz` builds cortado-fuzz with libFuzzer; an
        // ordinary build replays inputs, and CortadoFuzzTests runs the seed corpora.
        .target(
            name: "CortadoFuzz",
            dependencies: [
                "CortadoCore", "CortadoSpec", "CortadoModels", "CortadoEncryption", "CortadoServer", "CortadoGRPC",
                "CortadoServerProtos", .product(name: "SwiftProtobuf", package: "swift-protobuf"),
            ],
            path: "Sources/CortadoFuzz"
        ),
        .executableTarget(name: "cortado-fuzz", dependencies: ["CortadoFuzz"], path: "Sources/cortado-fuzz"),
        .executableTarget(
            name: "cortado-bench",
            dependencies: ["CortadoModels", "CCortadoGemm", "COpenBLAS"],
            path: "Sources/cortado-bench",
            swiftSettings: fastMath
        ),
        .testTarget(
            name: "CortadoCoreTests",
            dependencies: ["CortadoCore"],
            path: "Tests/CortadoCoreTests"
        ),
        .testTarget(
            name: "CortadoGRPCTests",
            dependencies: ["CortadoGRPC"],
            path: "Tests/CortadoGRPCTests"
        ),
        .testTarget(
            name: "CortadoServerTests",
            dependencies: ["CortadoServer", "CortadoGRPC", "CortadoModels", "CortadoServerProtos"],
            path: "Tests/CortadoServerTests"
        ),
        .testTarget(
            name: "CortadoLoadTests",
            dependencies: ["CortadoLoad"],
            path: "Tests/CortadoLoadTests"
        ),
        .testTarget(
            name: "CortadoEncryptionTests",
            dependencies: ["CortadoEncryption", "CortadoModels"],
            path: "Tests/CortadoEncryptionTests"
        ),
        .testTarget(
            name: "CortadoFuzzTests",
            dependencies: ["CortadoFuzz"],
            path: "Tests/CortadoFuzzTests"
        ),
        .testTarget(
            name: "CortadoKindsTests",
            dependencies: ["CortadoModels", "CortadoNeuralNetwork", "CortadoEncryption", "CCortadoGemm", "COpenBLAS"],
            path: "Tests/CortadoKindsTests"
        ),
    ]
)
