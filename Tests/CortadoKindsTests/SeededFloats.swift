/// Deterministic floats in [-1, 1) from a 64-bit LCG, for the kernel tests' inputs and weights.
struct SeededFloats {
    var state: UInt64
    mutating func next() -> Float {
        state = state &* 6364136223846793005 &+ 1442695040888963407
        return Float(Int64(bitPattern: state >> 11) % 2_000_000) / 1_000_000 - 1
    }
    mutating func array(_ count: Int) -> [Float] { (0..<count).map { _ in next() } }
}
