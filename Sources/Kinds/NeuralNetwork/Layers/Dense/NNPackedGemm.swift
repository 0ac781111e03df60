import CCortadoGemm
import Foundation

/// Cortado's own SGEMM (`Sources/CGemm`): micro-kernels per instruction set (AVX-512, AVX2)
/// over packed operands, used by convolution and inner product when the kernel path in use
/// (`cg_isa()`, chosen from the CPU and `CORTADO_ISA`) is not the portable one. Constant weights are packed once
/// when the layer is built (`NNPackedWeights`); activations are packed per prediction, a
/// convolution's straight from its input image (im2col folded into the packing).
///
/// `CORTADO_GEMM=openblas` keeps every layer on OpenBLAS (to compare the two side by side).
enum NNPackedGemm {
    /// Whether the layers use it: the kernel path has vector kernels and `CORTADO_GEMM` does
    /// not say `openblas`.
    static let enabled: Bool = {
        guard cg_available() != 0 else { return false }
        return ProcessInfo.processInfo.environment["CORTADO_GEMM"]?.lowercased() != "openblas"
    }()

    static let mr = Int(CG_MR), nr = Int(CG_NR)

    /// Floats of workspace one `cg_gemm` call may use (alignment slack included).
    static let workspace = Int(cg_workspace_count())

    /// Workers for `items` independent pieces (one per core at most).
    @inline(__always) static func workers(_ context: NNRunContext, items: Int) -> Int {
        Swift.max(1, Swift.min(context.threads, NNThreads.cores, items))
    }

    /// `count` rounded up to a multiple of `step`.
    @inline(__always) static func roundUp(_ count: Int, _ step: Int) -> Int { (count + step - 1) / step * step }

    /// `p` moved up to the next 64-byte boundary (buffers carved from scratch space reserve
    /// 16 floats of slack for it).
    @inline(__always) static func aligned(_ p: UnsafeMutablePointer<Float>) -> UnsafeMutablePointer<Float> {
        UnsafeMutablePointer(bitPattern: (Int(bitPattern: p) + 63) & ~63)!
    }

    /// A row-major (or transposed) operand read in place.
    @inline(__always) static func plain(_ p: UnsafePointer<Float>, ld: Int, transposed: Bool = false) -> cg_operand {
        cg_operand(data: p, ld: ld, form: transposed ? CG_TRANSPOSED : CG_ROW_MAJOR, width: 0, panel: 0)
    }

    /// A packed operand of padded width `width`, from panel `panel` on.
    @inline(__always) static func packed(_ p: UnsafePointer<Float>, width: Int, panel: Int) -> cg_operand {
        cg_operand(data: p, ld: 0, form: CG_PACKED, width: width, panel: panel)
    }
}

/// A constant GEMM operand packed once (weights), in 64-byte aligned memory it owns: the A
/// operand `[m × k]` in row panels, or the B operand `[k × n]` in column panels; or a
/// convolution's weights in blocks of 16 output channels for the direct kernel
/// (`cortado_direct.h`), or transformed for the Winograd kernel (`cortado_winograd.h`).
final class NNPackedWeights: @unchecked Sendable {
    enum Role { case a, b, direct, winograd }
    let role: Role
    /// Rows of A or columns of B, and the shared dimension.
    let count: Int, k: Int
    /// `count` rounded up to whole panels.
    let width: Int
    /// Winograd weights: the output tile's side, 4 (F(4×4, 3×3)) or 2 (F(2×2, 3×3)); 0 otherwise.
    let winogradTile: Int
    let data: UnsafeMutablePointer<Float>
    private let raw: UnsafeMutableRawPointer

    /// Packs A = `w` (`m × k`, row-major with leading dimension `ld`): a convolution's
    /// `[Cout, Cin·kH·kW]` weights.
    init(a w: UnsafePointer<Float>, m: Int, k: Int, ld: Int) {
        role = .a
        winogradTile = 0
        count = m
        self.k = k
        width = NNPackedGemm.roundUp(m, NNPackedGemm.mr)
        (raw, data) = Self.allocate(Int(cg_packed_a_count(m, k)))
        cg_pack_a(NNPackedGemm.plain(w, ld: ld), m, k, data)
    }

    /// Packs B = `wᵀ` for `w` of `n × k` (row-major, leading dimension `ld`): an inner
    /// product's `[Cout, Cin]` weights as the `[Cin × Cout]` right operand.
    init(bTransposed w: UnsafePointer<Float>, n: Int, k: Int, ld: Int) {
        role = .b
        winogradTile = 0
        count = n
        self.k = k
        width = NNPackedGemm.roundUp(n, NNPackedGemm.nr)
        (raw, data) = Self.allocate(Int(cg_packed_b_count(k, n)))
        cg_pack_b(NNPackedGemm.plain(w, ld: ld, transposed: true), k, 0, n, data, width, 0)
    }

    /// Packs `w` (`m × k`, row-major: a convolution's `[Cout, Cin·kH·kW]` weights) as
    /// `[⌈m/16⌉][k][16]` for `cg_direct_conv`.
    init(direct w: UnsafePointer<Float>, m: Int, k: Int) {
        role = .direct
        winogradTile = 0
        count = m
        self.k = k
        width = NNPackedGemm.roundUp(m, 16)
        (raw, data) = Self.allocate(Int(cg_direct_weights_count(m, k)))
        cg_direct_pack(w, m, k, data)
    }

    /// Transforms `w` (a 3×3 convolution's `[m, c, 3, 3]` weights) for `cg_winograd_conv`
    /// (`tile` 4: 36 matrices of `c × m`) or `cg_winograd2_conv` (`tile` 2: 16 of them), each in
    /// the direct kernel's blocks of 16 output channels.
    init(winograd w: UnsafePointer<Float>, m: Int, c: Int, tile: Int = 4) {
        precondition(tile == 4 || tile == 2, "Winograd tiles are 4×4 or 2×2")
        role = .winograd
        winogradTile = tile
        count = m
        k = c
        width = NNPackedGemm.roundUp(m, 16)
        if tile == 2 {
            (raw, data) = Self.allocate(Int(cg_winograd2_weights_count(m, c)))
            cg_winograd2_pack(w, m, c, data)
        } else {
            (raw, data) = Self.allocate(Int(cg_winograd_weights_count(m, c)))
            cg_winograd_pack(w, m, c, data)
        }
    }

    private static func allocate(_ floats: Int) -> (UnsafeMutableRawPointer, UnsafeMutablePointer<Float>) {
        let raw = UnsafeMutableRawPointer.allocate(byteCount: Swift.max(1, floats) * 4, alignment: 64)
        return (raw, raw.bindMemory(to: Float.self, capacity: Swift.max(1, floats)))
    }

    deinit { raw.deallocate() }

    /// The operand from row panel (A) or column panel (B) `panel` on.
    @inline(__always) func operand(panel: Int = 0) -> cg_operand {
        NNPackedGemm.packed(data, width: width, panel: panel)
    }
}
