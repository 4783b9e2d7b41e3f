//! Signatures of MIL ops as coremltools defines them (`ops/defs/iOS15..iOS18/*.py`): argument
//! names in definition order, which are required, how many outputs, and the opset each signature
//! first appears in. Ops whose arguments changed between opsets have one entry per version.

use std::fmt;

/// MIL opsets, in order. `CoreML5..8` are the protobuf names of `ios15..18`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Opset {
    Ios15,
    Ios16,
    Ios17,
    Ios18,
}

impl Opset {
    pub const ALL: [Opset; 4] = [Opset::Ios15, Opset::Ios16, Opset::Ios17, Opset::Ios18];

    /// Reads `ios15`..`ios18` or `CoreML5`..`CoreML8`.
    pub fn parse(name: &str) -> Option<Opset> {
        Some(match name {
            "ios15" | "CoreML5" => Opset::Ios15,
            "ios16" | "CoreML6" => Opset::Ios16,
            "ios17" | "CoreML7" => Opset::Ios17,
            "ios18" | "CoreML8" => Opset::Ios18,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Opset::Ios15 => "ios15",
            Opset::Ios16 => "ios16",
            Opset::Ios17 => "ios17",
            Opset::Ios18 => "ios18",
        }
    }
}

impl fmt::Display for Opset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArgSpec {
    pub name: &'static str,
    pub required: bool,
}

/// How many values an op produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outputs {
    Fixed(usize),
    /// One or more, decided by the arguments (`split`).
    Variadic,
}

impl Outputs {
    pub fn accepts(self, n: usize) -> bool {
        match self {
            Outputs::Fixed(k) => n == k,
            Outputs::Variadic => n >= 1,
        }
    }
}

impl fmt::Display for Outputs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outputs::Fixed(1) => f.write_str("1 output"),
            Outputs::Fixed(n) => write!(f, "{n} outputs"),
            Outputs::Variadic => f.write_str("1 or more outputs"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpSignature {
    pub op_type: &'static str,
    /// The opset this signature first appears in.
    pub since: Opset,
    /// Arguments in the order the definition lists them (the order emitters print them in).
    pub args: &'static [ArgSpec],
    pub outputs: Outputs,
}

impl OpSignature {
    pub fn arg(&self, name: &str) -> Option<&ArgSpec> {
        self.args.iter().find(|a| a.name == name)
    }

    pub fn required_args(&self) -> impl Iterator<Item = &ArgSpec> {
        self.args.iter().filter(|a| a.required)
    }

    /// iOS16-style compile-time ops (`constexpr_*`) whose arguments Core ML writes as attributes.
    pub fn is_constexpr(&self) -> bool {
        self.op_type.starts_with("constexpr_")
    }
}

const fn req(name: &'static str) -> ArgSpec {
    ArgSpec {
        name,
        required: true,
    }
}

const fn opt(name: &'static str) -> ArgSpec {
    ArgSpec {
        name,
        required: false,
    }
}

const fn sig(op_type: &'static str, since: Opset, args: &'static [ArgSpec]) -> OpSignature {
    OpSignature {
        op_type,
        since,
        args,
        outputs: Outputs::Fixed(1),
    }
}

const fn sig_n(
    op_type: &'static str,
    since: Opset,
    args: &'static [ArgSpec],
    outputs: Outputs,
) -> OpSignature {
    OpSignature {
        op_type,
        since,
        args,
        outputs,
    }
}

use Opset::*;

const X: &[ArgSpec] = &[req("x")];
const XY: &[ArgSpec] = &[req("x"), req("y")];
const X_ALPHA: &[ArgSpec] = &[req("x"), req("alpha")];
const X_ALPHA_BETA: &[ArgSpec] = &[req("x"), req("alpha"), req("beta")];
const X_EPSILON: &[ArgSpec] = &[req("x"), opt("epsilon")];
const REDUCE: &[ArgSpec] = &[req("x"), opt("axes"), opt("keep_dims")];
const ARG_REDUCE: &[ArgSpec] = &[req("x"), opt("axis"), opt("keep_dims")];
const ARG_REDUCE_17: &[ArgSpec] = &[req("x"), opt("axis"), opt("keep_dims"), opt("output_dtype")];
const POOL: &[ArgSpec] = &[
    req("x"),
    req("kernel_sizes"),
    opt("strides"),
    req("pad_type"),
    opt("pad"),
    opt("ceil_mode"),
];
const SLICE_MASKS: &[ArgSpec] = &[
    req("x"),
    req("begin"),
    req("end"),
    opt("stride"),
    opt("begin_mask"),
    opt("end_mask"),
    opt("squeeze_mask"),
];
const SCATTER: &[ArgSpec] = &[
    req("data"),
    req("indices"),
    req("updates"),
    opt("axis"),
    opt("mode"),
];
const SCATTER_17: &[ArgSpec] = &[
    req("data"),
    req("indices"),
    req("updates"),
    opt("axis"),
    opt("mode"),
    opt("validate_indices"),
];

macro_rules! unary {
    ($($name:literal),*) => { [$(sig($name, Ios15, X)),*] };
}

macro_rules! binary {
    ($($name:literal),*) => { [$(sig($name, Ios15, XY)),*] };
}

const UNARY: [OpSignature; 30] = unary!(
    "abs",
    "acos",
    "asin",
    "atan",
    "atanh",
    "ceil",
    "cos",
    "cosh",
    "erf",
    "exp",
    "exp2",
    "floor",
    "round",
    "sign",
    "sin",
    "sinh",
    "sqrt",
    "square",
    "tan",
    "tanh",
    "relu",
    "relu6",
    "sigmoid",
    "silu",
    "softplus",
    "softsign",
    "logical_not",
    "identity",
    "shape",
    "non_zero"
);

const BINARY: [OpSignature; 18] = binary!(
    "add",
    "sub",
    "mul",
    "real_div",
    "pow",
    "maximum",
    "minimum",
    "floor_div",
    "mod",
    "equal",
    "not_equal",
    "greater",
    "greater_equal",
    "less",
    "less_equal",
    "logical_and",
    "logical_or",
    "logical_xor"
);

const OTHERS: &[OpSignature] = &[
    // Constants. `const` carries its value in the `val` attribute.
    sig("const", Ios15, &[]),
    // Activations and elementwise ops with parameters.
    sig("clip", Ios15, X_ALPHA_BETA),
    sig("clamped_relu", Ios15, X_ALPHA_BETA),
    sig("linear_activation", Ios15, X_ALPHA_BETA),
    sig("scaled_tanh", Ios15, X_ALPHA_BETA),
    sig("sigmoid_hard", Ios15, X_ALPHA_BETA),
    sig("softplus_parametric", Ios15, X_ALPHA_BETA),
    sig("elu", Ios15, X_ALPHA),
    sig("leaky_relu", Ios15, X_ALPHA),
    sig("prelu", Ios15, X_ALPHA),
    sig("thresholded_relu", Ios15, X_ALPHA),
    sig("threshold", Ios15, X_ALPHA),
    sig("gelu", Ios15, &[req("x"), opt("mode")]),
    sig("softmax", Ios15, &[req("x"), opt("axis")]),
    sig("inverse", Ios15, X_EPSILON),
    sig("log", Ios15, X_EPSILON),
    sig("rsqrt", Ios15, X_EPSILON),
    sig("cast", Ios15, &[req("x"), req("dtype")]),
    sig("select", Ios15, &[req("cond"), req("a"), req("b")]),
    // Linear algebra.
    sig("linear", Ios15, &[req("x"), req("weight"), opt("bias")]),
    sig(
        "matmul",
        Ios15,
        &[req("x"), req("y"), opt("transpose_x"), opt("transpose_y")],
    ),
    sig("einsum", Ios15, &[req("values"), req("equation")]),
    sig(
        "conv",
        Ios15,
        &[
            req("x"),
            req("weight"),
            opt("bias"),
            opt("strides"),
            opt("pad_type"),
            opt("pad"),
            opt("dilations"),
            opt("groups"),
        ],
    ),
    sig(
        "conv_transpose",
        Ios15,
        &[
            req("x"),
            req("weight"),
            opt("bias"),
            opt("pad"),
            opt("output_shape"),
            opt("pad_type"),
            opt("strides"),
            opt("dilations"),
            opt("groups"),
        ],
    ),
    // Normalization.
    sig(
        "batch_norm",
        Ios15,
        &[
            req("x"),
            req("mean"),
            req("variance"),
            opt("gamma"),
            opt("beta"),
            opt("epsilon"),
        ],
    ),
    sig(
        "instance_norm",
        Ios15,
        &[req("x"), opt("gamma"), opt("beta"), opt("epsilon")],
    ),
    sig("l2_norm", Ios15, &[req("x"), opt("axes"), opt("epsilon")]),
    sig(
        "layer_norm",
        Ios15,
        &[
            req("x"),
            opt("axes"),
            opt("gamma"),
            opt("beta"),
            opt("epsilon"),
        ],
    ),
    sig(
        "local_response_norm",
        Ios15,
        &[req("x"), req("size"), opt("alpha"), opt("beta"), opt("k")],
    ),
    // Reductions.
    sig("reduce_sum", Ios15, REDUCE),
    sig("reduce_mean", Ios15, REDUCE),
    sig("reduce_max", Ios15, REDUCE),
    sig("reduce_min", Ios15, REDUCE),
    sig("reduce_prod", Ios15, REDUCE),
    sig("reduce_l1_norm", Ios15, REDUCE),
    sig("reduce_l2_norm", Ios15, REDUCE),
    sig("reduce_log_sum", Ios15, REDUCE),
    sig("reduce_log_sum_exp", Ios15, REDUCE),
    sig("reduce_sum_square", Ios15, REDUCE),
    sig("reduce_argmax", Ios15, ARG_REDUCE),
    sig("reduce_argmin", Ios15, ARG_REDUCE),
    sig("reduce_argmax", Ios17, ARG_REDUCE_17),
    sig("reduce_argmin", Ios17, ARG_REDUCE_17),
    // Pooling.
    sig(
        "avg_pool",
        Ios15,
        &[
            req("x"),
            req("kernel_sizes"),
            opt("strides"),
            req("pad_type"),
            opt("pad"),
            opt("exclude_padding_from_average"),
            opt("ceil_mode"),
        ],
    ),
    sig("max_pool", Ios15, POOL),
    sig("l2_pool", Ios15, POOL),
    // Shape and layout.
    sig("reshape", Ios15, &[req("x"), req("shape")]),
    sig("transpose", Ios15, &[req("x"), req("perm")]),
    sig("squeeze", Ios15, &[req("x"), opt("axes")]),
    sig("expand_dims", Ios15, &[req("x"), req("axes")]),
    sig("slice_by_index", Ios15, SLICE_MASKS),
    sig(
        "slice_by_size",
        Ios15,
        &[req("x"), req("begin"), req("size")],
    ),
    sig("space_to_depth", Ios15, &[req("x"), req("block_size")]),
    sig("depth_to_space", Ios15, &[req("x"), req("block_size")]),
    sig(
        "space_to_batch",
        Ios15,
        &[req("x"), req("block_shape"), req("paddings")],
    ),
    sig(
        "batch_to_space",
        Ios15,
        &[req("x"), req("block_shape"), req("crops")],
    ),
    sig("pixel_shuffle", Ios15, &[req("x"), req("upscale_factor")]),
    sig(
        "pixel_unshuffle",
        Ios16,
        &[req("x"), req("downscale_factor")],
    ),
    sig("reverse", Ios15, &[req("x"), opt("axes")]),
    sig(
        "reverse_sequence",
        Ios15,
        &[req("x"), req("lengths"), opt("seq_axis"), opt("batch_axis")],
    ),
    sig(
        "sliding_windows",
        Ios15,
        &[req("x"), req("axis"), req("size"), opt("stride")],
    ),
    sig("flatten2d", Ios15, &[req("x"), opt("axis")]),
    sig(
        "reshape_like",
        Ios16,
        &[
            req("ref_tensors"),
            req("begins"),
            req("ends"),
            req("end_masks"),
        ],
    ),
    sig(
        "concat",
        Ios15,
        &[req("values"), req("axis"), opt("interleave")],
    ),
    sig_n(
        "split",
        Ios15,
        &[req("x"), opt("num_splits"), opt("split_sizes"), req("axis")],
        Outputs::Variadic,
    ),
    sig("stack", Ios15, &[req("values"), req("axis")]),
    sig("tile", Ios15, &[req("x"), req("reps")]),
    sig(
        "pad",
        Ios15,
        &[req("x"), req("pad"), opt("mode"), opt("constant_val")],
    ),
    // Tensor construction and misc.
    sig("band_part", Ios15, &[req("x"), opt("lower"), opt("upper")]),
    sig(
        "cumsum",
        Ios15,
        &[req("x"), opt("axis"), opt("exclusive"), opt("reverse")],
    ),
    sig("fill", Ios15, &[req("shape"), opt("value")]),
    sig("fill_like", Ios16, &[req("ref_tensor"), opt("value")]),
    sig("range_1d", Ios15, &[req("end"), req("start"), req("step")]),
    sig(
        "one_hot",
        Ios15,
        &[
            req("indices"),
            req("one_hot_vector_size"),
            opt("axis"),
            opt("on_value"),
            opt("off_value"),
        ],
    ),
    sig("argsort", Ios15, &[req("x"), opt("axis"), opt("ascending")]),
    sig_n(
        "topk",
        Ios15,
        &[req("x"), opt("k"), opt("axis"), opt("ascending")],
        Outputs::Fixed(2),
    ),
    sig_n(
        "topk",
        Ios16,
        &[
            req("x"),
            opt("k"),
            opt("axis"),
            opt("ascending"),
            opt("sort"),
            opt("return_indices"),
        ],
        Outputs::Fixed(2),
    ),
    sig_n(
        "non_maximum_suppression",
        Ios15,
        &[
            req("boxes"),
            req("scores"),
            req("iou_threshold"),
            req("score_threshold"),
            req("max_boxes"),
            opt("per_class_suppression"),
        ],
        Outputs::Fixed(4),
    ),
    // Gather and scatter.
    sig("gather", Ios15, &[req("x"), req("indices"), opt("axis")]),
    sig(
        "gather",
        Ios16,
        &[req("x"), req("indices"), opt("axis"), opt("batch_dims")],
    ),
    sig(
        "gather",
        Ios17,
        &[
            req("x"),
            req("indices"),
            opt("axis"),
            opt("batch_dims"),
            opt("validate_indices"),
        ],
    ),
    sig(
        "gather_along_axis",
        Ios15,
        &[req("x"), req("indices"), opt("axis")],
    ),
    sig(
        "gather_along_axis",
        Ios17,
        &[
            req("x"),
            req("indices"),
            opt("axis"),
            opt("validate_indices"),
        ],
    ),
    sig("gather_nd", Ios15, &[req("x"), req("indices")]),
    sig(
        "gather_nd",
        Ios16,
        &[req("x"), req("indices"), opt("batch_dims")],
    ),
    sig(
        "gather_nd",
        Ios17,
        &[
            req("x"),
            req("indices"),
            opt("batch_dims"),
            opt("validate_indices"),
        ],
    ),
    sig("scatter", Ios15, SCATTER),
    sig("scatter", Ios17, SCATTER_17),
    sig("scatter_along_axis", Ios15, SCATTER),
    sig("scatter_along_axis", Ios17, SCATTER_17),
    sig(
        "scatter_nd",
        Ios15,
        &[req("data"), req("indices"), req("updates"), opt("mode")],
    ),
    sig(
        "scatter_nd",
        Ios17,
        &[
            req("data"),
            req("indices"),
            req("updates"),
            opt("mode"),
            opt("validate_indices"),
        ],
    ),
    // Image resizing.
    sig(
        "upsample_nearest_neighbor",
        Ios15,
        &[
            req("x"),
            opt("scale_factor_height"),
            opt("scale_factor_width"),
        ],
    ),
    sig(
        "upsample_bilinear",
        Ios15,
        &[
            req("x"),
            opt("scale_factor_height"),
            opt("scale_factor_width"),
            opt("align_corners"),
        ],
    ),
    sig(
        "upsample_bilinear",
        Ios16,
        &[
            req("x"),
            opt("scale_factor_height"),
            opt("scale_factor_width"),
            opt("align_corners"),
            opt("half_pixel_centers"),
        ],
    ),
    sig(
        "resize_bilinear",
        Ios15,
        &[
            req("x"),
            opt("target_size_height"),
            opt("target_size_width"),
            opt("sampling_mode"),
        ],
    ),
    sig(
        "resize_nearest_neighbor",
        Ios15,
        &[
            req("x"),
            req("target_size_height"),
            req("target_size_width"),
        ],
    ),
    sig(
        "crop",
        Ios15,
        &[req("x"), req("crop_height"), req("crop_width")],
    ),
    // Quantization (iOS17).
    sig(
        "quantize",
        Ios17,
        &[
            req("input"),
            opt("zero_point"),
            req("scale"),
            opt("axis"),
            req("output_dtype"),
        ],
    ),
    sig(
        "dequantize",
        Ios17,
        &[req("input"), opt("zero_point"), req("scale"), opt("axis")],
    ),
    // Compressed constants: iOS16 forms (arguments written as attributes) ...
    sig(
        "constexpr_affine_dequantize",
        Ios16,
        &[
            req("quantized_data"),
            req("zero_point"),
            req("scale"),
            req("axis"),
        ],
    ),
    sig(
        "constexpr_cast",
        Ios16,
        &[req("source_val"), req("output_dtype")],
    ),
    sig(
        "constexpr_lut_to_dense",
        Ios16,
        &[req("lut"), req("indices"), req("shape")],
    ),
    sig(
        "constexpr_sparse_to_dense",
        Ios16,
        &[req("nonzero_data"), req("mask"), req("shape")],
    ),
    // ... and the iOS18 block-wise forms.
    sig(
        "constexpr_blockwise_shift_scale",
        Ios18,
        &[req("data"), req("scale"), opt("offset")],
    ),
    sig(
        "constexpr_lut_to_dense",
        Ios18,
        &[req("indices"), req("lut"), opt("vector_axis")],
    ),
    sig(
        "constexpr_sparse_to_dense",
        Ios18,
        &[req("nonzero_data"), req("mask")],
    ),
    sig_n(
        "constexpr_lut_to_sparse",
        Ios18,
        &[
            req("indices_mask"),
            req("indices_nonzero_data"),
            req("lut"),
            opt("vector_axis"),
        ],
        Outputs::Fixed(2),
    ),
    sig_n(
        "constexpr_sparse_blockwise_shift_scale",
        Ios18,
        &[
            req("data_mask"),
            req("nonzero_data"),
            req("scale"),
            opt("offset"),
        ],
        Outputs::Fixed(2),
    ),
    // Transformers and states (iOS18).
    sig(
        "scaled_dot_product_attention",
        Ios18,
        &[req("query"), req("key"), req("value"), opt("attn_mask")],
    ),
    sig(
        "slice_update",
        Ios18,
        &[
            req("x"),
            req("update"),
            req("begin"),
            req("end"),
            opt("stride"),
            opt("begin_mask"),
            opt("end_mask"),
            opt("squeeze_mask"),
        ],
    ),
    sig("read_state", Ios18, &[req("input")]),
    sig("coreml_update_state", Ios18, &[req("state"), req("value")]),
];

/// Every signature in the registry.
pub fn signatures() -> impl Iterator<Item = &'static OpSignature> {
    UNARY.iter().chain(BINARY.iter()).chain(OTHERS.iter())
}

/// The signature `op_type` has in `opset`: the newest one introduced at or before it.
pub fn lookup(op_type: &str, opset: Opset) -> Option<&'static OpSignature> {
    signatures()
        .filter(|s| s.op_type == op_type && s.since <= opset)
        .max_by_key(|s| s.since)
}

/// The opset `op_type` first appears in, if the registry knows it.
pub fn first_opset(op_type: &str) -> Option<Opset> {
    signatures()
        .filter(|s| s.op_type == op_type)
        .map(|s| s.since)
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_signature_at_or_before_the_opset_wins() {
        let g15 = lookup("gather", Opset::Ios15).unwrap();
        assert!(g15.arg("batch_dims").is_none());
        let g17 = lookup("gather", Opset::Ios18).unwrap();
        assert_eq!(g17.since, Opset::Ios17);
        assert!(g17.arg("validate_indices").is_some());
        assert!(lookup("scaled_dot_product_attention", Opset::Ios17).is_none());
        assert_eq!(
            first_opset("scaled_dot_product_attention"),
            Some(Opset::Ios18)
        );
        assert_eq!(
            lookup("constexpr_lut_to_dense", Opset::Ios17).unwrap().args[0].name,
            "lut"
        );
        assert_eq!(
            lookup("constexpr_lut_to_dense", Opset::Ios18).unwrap().args[0].name,
            "indices"
        );
    }

    #[test]
    fn no_duplicate_signatures_or_arguments() {
        let all: Vec<_> = signatures().collect();
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                assert!(
                    !(a.op_type == b.op_type && a.since == b.since),
                    "{} twice at {}",
                    a.op_type,
                    a.since
                );
            }
            for (j, x) in a.args.iter().enumerate() {
                assert!(
                    a.args[j + 1..].iter().all(|y| y.name != x.name),
                    "{} lists {} twice",
                    a.op_type,
                    x.name
                );
            }
        }
    }

    #[test]
    fn opset_names() {
        assert_eq!(Opset::parse("CoreML7"), Some(Opset::Ios17));
        assert_eq!(Opset::parse("ios18"), Some(Opset::Ios18));
        assert_eq!(Opset::parse("ios19"), None);
    }
}
