// swift-tools-version:6.1
import PackageDescription

// Kernels and F16C: Float16 conversions vectorize with -mf16c (see NOTES.md).
let fastMath: [SwiftSetting] = [
    .unsafeFlags(["-Xcc", "-mf16c", "-enforce-exclusivity=unchecked"]),
    .unsafeFlags(["-Ounchecked"], .when(configuration: .release)),
]

/// One target per model kind: each lives in its own folder and registers itself.
let kinds: [(name: String, path: String)] = [
    ("CortadoGLM", "Sources/Kinds/GLM"),
    ("CortadoSVM", "Sources/Kinds/SVM"),
    ("CortadoTreeEnsemble", "Sources/Kinds/TreeEnsemble"),
    ("CortadoFeatureEngineering", "Sources/Kinds/FeatureEngineering"),
    ("CortadoKNN", "Sources/Kinds/KNN"),
    ("CortadoPipeline", "Sources/Kinds/Pipeline"),
    ("CortadoBayesian", "Sources/Kinds/Bayesian"),
]

let package = Package(
    name: "Cortado",
    products: [
        .library(name: "Cortado", targets: ["CortadoModels"]),
        .executable(name: "cortado", targets: ["cortado"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-protobuf", exact: "1.39.0", traits: []),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
    ],
    targets: [
        .target(
            name: "CortadoSpec",
            dependencies: [.product(name: "SwiftProtobuf", package: "swift-protobuf")],
            path: "Sources/CortadoSpec"
        ),
        .target(
            name: "CortadoCore",
            dependencies: ["CortadoSpec", .product(name: "SwiftProtobuf", package: "swift-protobuf")],
            path: "Sources/CortadoCore",
            swiftSettings: fastMath
        ),
    ] + kinds.map { kind in
        .target(name: kind.name, dependencies: ["CortadoCore", "CortadoSpec"], path: kind.path, swiftSettings: fastMath)
    } + [
        .target(
            name: "CortadoModels",
            dependencies: ["CortadoCore", "CortadoSpec"] + kinds.map { .byName(name: $0.name) },
            path: "Sources/CortadoModels"
        ),
        .executableTarget(
            name: "cortado",
            dependencies: [
                "CortadoModels",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "SwiftProtobuf", package: "swift-protobuf"),
            ],
            path: "Sources/cortado"
        ),
        .executableTarget(
            name: "cortado-bench",
            dependencies: ["CortadoModels"],
            path: "Sources/cortado-bench",
            swiftSettings: fastMath
        ),
        .testTarget(
            name: "CortadoCoreTests",
            dependencies: ["CortadoCore"],
            path: "Tests/CortadoCoreTests"
        ),
        .testTarget(
            name: "CortadoKindsTests",
            dependencies: ["CortadoModels"],
            path: "Tests/CortadoKindsTests"
        ),
    ]
)
