import Foundation

/// The non-finite values (NaN, ±infinity) in the weights each layer decodes while a network
/// loads, for `cortado inspect`.
///
/// Core ML does not check weight values: a model whose weights hold NaN or infinities loads and
/// runs, and those values spread through the arithmetic as IEEE says. Cortado does the same, so
/// such a model is not refused; but weights like these are almost always the trace of a broken
/// conversion or training run, so inspect names the layers that hold them.
///
/// Every weight goes through `NNWeights`, which reports what it decoded here; the graph says
/// which layer is being built (`building`). Nothing is counted unless a load set `current`.
final class NNWeightAudit: @unchecked Sendable {
    struct Finding {
        let layer: String
        var nan: Int
        var infinite: Int
    }

    /// The audit of the network loading on this task.
    @TaskLocal static var current: NNWeightAudit?
    /// The layer whose weights are being decoded on this task.
    @TaskLocal private static var layer: String?

    private let lock = NSLock()
    private var found: [Finding] = []

    /// Layers with non-finite weights, in the order they were built.
    var findings: [Finding] {
        lock.lock(); defer { lock.unlock() }
        return found
    }

    /// One line per layer for `cortado inspect`.
    var warnings: [String] {
        findings.map { "warning: layer '\($0.layer)' weights hold \($0.nan) NaN and \($0.infinite) infinite values" }
    }

    /// Runs `body` (a layer's builder) with the weights it decodes counted against `layer`.
    static func building<T>(_ layer: String, _ body: () throws -> T) rethrows -> T {
        guard current != nil else { return try body() }
        return try $layer.withValue(layer) { try body() }
    }

    /// Counts the non-finite values of weights a layer decoded.
    static func note(_ values: UnsafeBufferPointer<Float>) {
        guard let audit = current, let layer else { return }
        // An exponent of all ones is NaN or an infinity; integer counting keeps the common,
        // all-finite case one pass without branches.
        var nonFinite = 0
        for v in values { nonFinite += (v.bitPattern & 0x7f80_0000) == 0x7f80_0000 ? 1 : 0 }
        guard nonFinite > 0 else { return }
        let nan = values.reduce(0) { $0 + ($1.isNaN ? 1 : 0) }
        audit.add(layer: layer, nan: nan, infinite: nonFinite - nan)
    }

    static func note(_ values: NNFloats) {
        guard current != nil else { return }
        values.withUnsafeBufferPointer { note($0) }
    }

    private func add(layer: String, nan: Int, infinite: Int) {
        lock.lock(); defer { lock.unlock() }
        if let i = found.firstIndex(where: { $0.layer == layer }) {
            found[i].nan += nan
            found[i].infinite += infinite
        } else {
            found.append(Finding(layer: layer, nan: nan, infinite: infinite))
        }
    }
}
