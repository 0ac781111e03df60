// swift-tools-version:6.1
import PackageDescription

// No unsafeFlags in the targets of the `Cortado` product: SwiftPM refuses a versioned dependency
// whose products use them ("the target … in product 'Cortado' contains unsafe build flags"). The
// speed flags (-Xcc -mf16c on x86_64, -enforce-exclusivity=unchecked, -O3 for the C kernels,
// -Ounchecked in release) come from the Makefile's SWIFT_FLAGS instead (`make -s swift-flags`).
// The plugin targets below keep theirs: SwiftPM checks only the products a dependent uses.

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
        // `import Cortado`: the Core ML-named API with every built-in kind registered before first use.
        .library(name: "Cortado", targets: ["Cortado"]),
        .library(name: "CortadoEncryption", targets: ["CortadoEncryption"]),
        .executable(name: "cortado", targets: ["cortado"]),
        .executable(name: "cortado-load", targets: ["cortado-load"]),
        // `import CortadoClient`: a typed client of both gRPC APIs (docs/swift.md, "CortadoClient").
        .library(name: "CortadoClient", targets: ["CortadoClient"]),
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
            dependencies: ["CortadoSpec", "CLibPNG", "CLibJPEG", "CCortadoKindsHook", .product(name: "SwiftProtobuf", package: "swift-protobuf")],
            path: "Sources/CortadoCore"
        ),
        // The hook through which the registry finds the built-in kinds on first use (set by CCortadoAutoload).
        .target(name: "CCortadoKindsHook", path: "Sources/CCortadoKindsHook"),
        // Image codecs for image features (PNG in and out, JPEG in).
        .systemLibrary(name: "CLibPNG", path: "Sources/CSystem/CLibPNG", pkgConfig: "libpng"),
        .systemLibrary(name: "CLibJPEG", path: "Sources/CSystem/CLibJPEG", pkgConfig: "libjpeg"),
    ] + kinds.map { kind in
        .target(name: kind.name, dependencies: ["CortadoCore", "CortadoSpec"] + kind.extra, path: kind.path)
    } + [
        // OpenBLAS (Debian's pthread build) for the neural-network GEMMs.
        .systemLibrary(name: "COpenBLAS", path: "Sources/CSystem/COpenBLAS", pkgConfig: "openblas"),
        // Cortado's own packed SGEMM (AVX-512F kernels chosen at run time, not -march=native);
        // optimised in debug builds too (the Makefile's -Xcc -O3), so the tests run the kernels as shipped.
        .target(name: "CCortadoGemm", path: "Sources/CGemm"),
        .target(
            name: "CortadoModels",
            dependencies: ["CortadoCore", "CortadoSpec"] + kinds.map { .byName(name: $0.name) },
            path: "Sources/CortadoModels"
        ),
        // The library product's module: re-exports the core and registers every built-in kind
        // before `main` (a C constructor in CCortadoAutoload installs the registry's hook).
        .target(name: "CCortadoAutoload", dependencies: ["CCortadoKindsHook"], path: "Sources/CCortadoAutoload"),
        .target(name: "Cortado", dependencies: ["CortadoModels", "CCortadoAutoload"], path: "Sources/Cortado"),
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
        // gRPC semantics without a transport (status, framing, grpc-timeout, metadata, method
        // paths): shared by the server transport (CortadoGRPC re-exports it) and the client layers.
        .target(name: "CortadoGRPCCore", path: "Sources/CortadoGRPCCore"),
        .target(
            name: "CortadoGRPC",
            dependencies: ["CortadoGRPCCore", "CLibUV", "CNGHTTP2", "CHTTPParser", "COpenSSL"],
            path: "Sources/CortadoGRPC"
        ),
        .target(
            name: "CortadoServerProtos",
            dependencies: [.product(name: "SwiftProtobuf", package: "swift-protobuf")],
            path: "Sources/CortadoServerProtos"
        ),
        // The client side of the transport: HTTP/2 over libuv + nghttp2, with reconnects.
        .target(
            name: "CortadoGRPCClient",
            dependencies: ["CortadoGRPCCore", "CLibUV", "CNGHTTP2"],
            path: "Sources/CortadoGRPCClient"
        ),
        // cortado.v1 feature values <-> Core ML feature values, for the server and the client.
        .target(
            name: "CortadoNativeCoding",
            dependencies: ["CortadoCore", "CortadoGRPCCore", "CortadoServerProtos"],
            path: "Sources/CortadoNativeCoding"
        ),
        .target(
            name: "CortadoClient",
            dependencies: [
                "CortadoCore", "CortadoGRPCCore", "CortadoGRPCClient", "CortadoNativeCoding", "CortadoServerProtos",
                .product(name: "SwiftProtobuf", package: "swift-protobuf"),
            ],
            path: "Sources/CortadoClient"
        ),
        .target(
            name: "CortadoServer",
            dependencies: [
                "CortadoCore", "CortadoGRPC", "CortadoServerProtos", "CortadoNativeCoding",
                .product(name: "SwiftProtobuf", package: "swift-protobuf"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Sources/CortadoServer"
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
                "CCortadoGemm", // the kernel path, for report and inspect
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "SwiftProtobuf", package: "swift-protobuf"),
            ],
            path: "Sources/cortado"
        ),
        // The load tester, on the client transport's single-threaded loop (CortadoGRPCClient).
        .target(
            name: "CortadoLoad",
            dependencies: [
                "CLibUV", "CortadoCore", "CortadoServerProtos", "CortadoGRPCCore", "CortadoGRPCClient",
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
            path: "Sources/cortado-bench"
        ),
        .testTarget(
            name: "CortadoCoreTests",
            dependencies: ["CortadoCore"],
            path: "Tests/CortadoCoreTests"
        ),
        .testTarget(
            name: "CortadoGRPCTests",
            dependencies: ["CortadoGRPC", "CortadoGRPCClient"],
            path: "Tests/CortadoGRPCTests"
        ),
        .testTarget(
            name: "CortadoServerTests",
            dependencies: ["CortadoServer", "CortadoGRPC", "CortadoModels", "CortadoServerProtos",
                           .product(name: "Logging", package: "swift-log")],
            path: "Tests/CortadoServerTests"
        ),
        .testTarget(
            name: "CortadoLoadTests",
            dependencies: ["CortadoLoad", "CortadoGRPCClient"],
            path: "Tests/CortadoLoadTests"
        ),
        .testTarget(
            name: "CortadoClientTests",
            dependencies: ["CortadoClient", "CortadoGRPC", "CortadoServer", "CortadoModels"],
            path: "Tests/CortadoClientTests"
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
