import CortadoCore

/// The operations the ML Program kind runs, by MIL op type. Each family of operations lives
/// in its own file and lists its kernels; this is the one place that gathers them.
enum MILOpRegistry {
    nonisolated(unsafe) static let families: [[String: MILKernel]] = [
        MILElementwiseOps.kernels,
        MILActivationOps.kernels,
        MILLinearAlgebraOps.kernels,
        MILReductionOps.kernels,
        MILShapeOps.kernels,
        MILControlFlowOps.kernels,
        MILConstexprOps.kernels,
        MILStateOps.kernels,
        MILConvolutionOps.kernels,
        MILPoolingOps.kernels,
        MILNormalizationOps.kernels,
        MILImageResizeOps.kernels,
        MILSpaceOps.kernels,
        MILTensorOps.kernels,
        MILGatherScatterOps.kernels,
        MILSortOps.kernels,
        MILListOps.kernels,
        MILRandomOps.kernels,
        MILRecurrentOps.kernels,
        MILAttentionOps.kernels,
        MILQuantizedConvOps.kernels,
    ]

    nonisolated(unsafe) static let kernels: [String: MILKernel] = {
        var all: [String: MILKernel] = [:]
        for family in families {
            all.merge(family) { first, _ in first }
        }
        return all
    }()

    static func kernel(_ type: String) -> MILKernel? { kernels[type] }

    /// Every MIL operation of the iOS15–iOS18 opsets as coremltools 9 defines them, plus the
    /// Core ML dialect's `coreml_update_state` (what stateful programs are written with).
    static let opsetOperations: [String] = """
        abs acos add affine argsort asin atan atanh avg_pool band_part batch_norm batch_to_space cast ceil clamped_relu \
        classify clip concat cond const constexpr_affine_dequantize constexpr_blockwise_shift_scale constexpr_cast \
        constexpr_lut_to_dense constexpr_lut_to_sparse constexpr_sparse_blockwise_shift_scale constexpr_sparse_to_dense \
        conv conv_quantized conv_transpose coreml_update_state cos cosh crop crop_resize cumsum depth_to_space dequantize \
        einsum elu equal erf exp exp2 expand_dims fill fill_like flatten2d floor floor_div gather gather_along_axis \
        gather_nd gelu greater greater_equal gru identity instance_norm inverse l2_norm l2_pool layer_norm leaky_relu less \
        less_equal linear linear_activation list_gather list_length list_read list_scatter list_write local_response_norm \
        log logical_and logical_not logical_or logical_xor lstm make_list matmul max_pool maximum minimum mod mul \
        non_maximum_suppression non_zero not_equal one_hot pad pixel_shuffle pixel_unshuffle pow prelu quantize \
        random_bernoulli random_categorical random_normal random_uniform range_1d read_state real_div reduce_argmax \
        reduce_argmin reduce_l1_norm reduce_l2_norm reduce_log_sum reduce_log_sum_exp reduce_max reduce_mean reduce_min \
        reduce_prod reduce_sum reduce_sum_square relu relu6 resample reshape reshape_like resize resize_bilinear \
        resize_nearest_neighbor reverse reverse_sequence rnn round rsqrt scaled_dot_product_attention scaled_tanh scatter \
        scatter_along_axis scatter_nd select shape sigmoid sigmoid_hard sign silu sin sinh slice_by_index slice_by_size \
        slice_update sliding_windows softmax softplus softplus_parametric softsign space_to_batch space_to_depth split \
        sqrt square squeeze stack sub tan tanh threshold thresholded_relu tile topk transpose upsample_bilinear \
        upsample_nearest_neighbor while_loop
        """.split(separator: " ").map(String.init)

    /// Why an operation does not run, for those that deliberately do not.
    static let notes: [String: String] = [:]

    static func whyNot(_ type: String) -> String {
        if let note = notes[type] { return "the operation \(type) does not run in Cortado: \(note)" }
        if opsetOperations.contains(type) { return "the operation \(type) does not run in Cortado yet" }
        return "\(type) is not an operation of the iOS15–iOS18 opsets"
    }

    static var coverageItems: [MLKindCoverage.Item] {
        opsetOperations.map { name in
            MLKindCoverage.Item(name: name, runs: name == "const" || kernels[name] != nil, note: notes[name] ?? "")
        }
    }
}
