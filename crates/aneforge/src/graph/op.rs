//! The operator set: one enum whose variants carry their attributes. Axes stored here are already
//! normalised (non-negative, below the operand's rank); shape rules live in `shape.rs`.

use super::{DType, HostArray};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    Relu,
    /// Exact GELU, `x·Φ(x)`.
    Gelu,
    /// GELU with the tanh approximation.
    GeluTanh,
    Silu,
    Sigmoid,
    Tanh,
    Exp,
    Log,
    Sqrt,
    Rsqrt,
    Abs,
    Neg,
    Square,
    Sin,
    Cos,
    Erf,
    Softplus,
    Floor,
    Ceil,
    /// Round half to even.
    Round,
    Sign,
}

impl UnaryOp {
    pub const ALL: [UnaryOp; 21] = [
        UnaryOp::Relu,
        UnaryOp::Gelu,
        UnaryOp::GeluTanh,
        UnaryOp::Silu,
        UnaryOp::Sigmoid,
        UnaryOp::Tanh,
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Sqrt,
        UnaryOp::Rsqrt,
        UnaryOp::Abs,
        UnaryOp::Neg,
        UnaryOp::Square,
        UnaryOp::Sin,
        UnaryOp::Cos,
        UnaryOp::Erf,
        UnaryOp::Softplus,
        UnaryOp::Floor,
        UnaryOp::Ceil,
        UnaryOp::Round,
        UnaryOp::Sign,
    ];

    /// The op's name, which is also its MIL op (except `gelu_tanh`, MIL `gelu` in tanh mode, and
    /// `neg`, emitted as a multiply by −1).
    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Relu => "relu",
            UnaryOp::Gelu => "gelu",
            UnaryOp::GeluTanh => "gelu_tanh",
            UnaryOp::Silu => "silu",
            UnaryOp::Sigmoid => "sigmoid",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Exp => "exp",
            UnaryOp::Log => "log",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Rsqrt => "rsqrt",
            UnaryOp::Abs => "abs",
            UnaryOp::Neg => "neg",
            UnaryOp::Square => "square",
            UnaryOp::Sin => "sin",
            UnaryOp::Cos => "cos",
            UnaryOp::Erf => "erf",
            UnaryOp::Softplus => "softplus",
            UnaryOp::Floor => "floor",
            UnaryOp::Ceil => "ceil",
            UnaryOp::Round => "round",
            UnaryOp::Sign => "sign",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    Maximum,
    Minimum,
}

impl BinaryOp {
    pub const ALL: [BinaryOp; 7] = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Pow,
        BinaryOp::Maximum,
        BinaryOp::Minimum,
    ];

    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Pow => "pow",
            BinaryOp::Maximum => "maximum",
            BinaryOp::Minimum => "minimum",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CompareOp {
    Equal,
    NotEqual,
    Less,
    LessEqual,
    Greater,
    GreaterEqual,
}

impl CompareOp {
    pub const ALL: [CompareOp; 6] = [
        CompareOp::Equal,
        CompareOp::NotEqual,
        CompareOp::Less,
        CompareOp::LessEqual,
        CompareOp::Greater,
        CompareOp::GreaterEqual,
    ];

    pub fn name(self) -> &'static str {
        match self {
            CompareOp::Equal => "equal",
            CompareOp::NotEqual => "not_equal",
            CompareOp::Less => "less",
            CompareOp::LessEqual => "less_equal",
            CompareOp::Greater => "greater",
            CompareOp::GreaterEqual => "greater_equal",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
}

impl ReduceOp {
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "reduce_sum",
            ReduceOp::Mean => "reduce_mean",
            ReduceOp::Max => "reduce_max",
            ReduceOp::Min => "reduce_min",
            ReduceOp::Prod => "reduce_prod",
        }
    }
}

/// Convolution over the trailing 1 or 2 spatial axes of an `[N, C, *spatial]` operand.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ConvAttrs {
    pub strides: Vec<usize>,
    /// `(before, after)` per spatial axis.
    pub pads: Vec<(usize, usize)>,
    pub dilations: Vec<usize>,
    pub groups: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PoolKind {
    Max,
    /// `count_pad`: padded zeros count in the divisor (PyTorch `count_include_pad`).
    Avg {
        count_pad: bool,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PoolAttrs {
    pub kind: PoolKind,
    pub kernel: Vec<usize>,
    pub strides: Vec<usize>,
    /// `(before, after)` per spatial axis.
    pub pads: Vec<(usize, usize)>,
    pub ceil_mode: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UpsampleMode {
    Nearest,
    /// PyTorch `align_corners` semantics; `false` samples at half-pixel centres.
    Bilinear {
        align_corners: bool,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PadMode {
    Constant,
    Reflect,
    Replicate,
}

impl PadMode {
    pub fn name(self) -> &'static str {
        match self {
            PadMode::Constant => "constant",
            PadMode::Reflect => "reflect",
            PadMode::Replicate => "replicate",
        }
    }
}

/// One graph operation. Source order for each variant is documented on the variant; optional
/// sources are flagged by a `has_*` field.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// A fed program input (no sources).
    Input { name: String },
    /// Fixed data (no sources).
    Constant(HostArray),
    /// A trainable leaf with its initial value (no sources).
    Parameter { name: String, init: HostArray },
    /// `[x]`
    Unary(UnaryOp),
    /// `[x]`: `min(max(x, min), max)`.
    Clip { min: f32, max: f32 },
    /// `[x]`
    LeakyRelu { alpha: f32 },
    /// `[x]`
    Elu { alpha: f32 },
    /// `[a, b]`, broadcast.
    Binary(BinaryOp),
    /// `[a, b]`, broadcast; bool result.
    Compare(CompareOp),
    /// `[cond, a, b]`, broadcast: `cond ? a : b`.
    Select,
    /// `[a, b]`: `a[..., M, K] @ b[..., K, N]` after the optional transposes of the last two axes;
    /// batch axes broadcast.
    MatMul {
        transpose_a: bool,
        transpose_b: bool,
    },
    /// `[x, weight[out, in], bias[out]?]`: `x @ weight^T + bias`.
    Linear { has_bias: bool },
    /// `[x[N, K or 1, in], weight[experts·out, in], ids[N, K] (i32)]`: `y[n, k] = x[n, k] @
    /// W_e^T` with `W_e` rows `e·out .. (e+1)·out` of `weight` and `e = ids[n, k]` (a 1 in the
    /// middle of `x` broadcasts one row to every `k`). Only the chosen experts are computed.
    LinearExperts { experts: usize },
    /// `[x[N, C, *S], weight[O, C/groups, *K], bias[O]?]`
    Conv { attrs: ConvAttrs, has_bias: bool },
    /// `[x[N, C, *S], weight[C, O/groups, *K], bias[O]?]`; `output_padding` extends the end of
    /// each spatial axis as in PyTorch.
    ConvTranspose {
        attrs: ConvAttrs,
        output_padding: Vec<usize>,
        has_bias: bool,
    },
    /// `[x[N, C, *S]]`
    Pool(PoolAttrs),
    /// `[x[N, C, H, W]]`
    Upsample {
        mode: UpsampleMode,
        scale_h: usize,
        scale_w: usize,
    },
    /// `[x]`; `axes` sorted, unique.
    Reduce {
        op: ReduceOp,
        axes: Vec<usize>,
        keepdims: bool,
    },
    /// `[x]`; i32 result, first maximum wins.
    ArgMax { axis: usize, keepdims: bool },
    /// `[x]`
    Softmax { axis: usize },
    /// `[x, gamma?, beta?]`; normalises over `axes` (sorted, unique); gamma and beta have the shape
    /// of those axes.
    LayerNorm {
        axes: Vec<usize>,
        eps: f32,
        has_gamma: bool,
        has_beta: bool,
    },
    /// `[x[N, C, *S], mean[C], var[C], gamma[C]?, beta[C]?]`, inference statistics.
    BatchNorm {
        eps: f32,
        has_gamma: bool,
        has_beta: bool,
    },
    /// `[x]`; same element count.
    Reshape { shape: Vec<usize> },
    /// `[x]`; output axis `i` is input axis `perm[i]`.
    Transpose { perm: Vec<usize> },
    /// `[x0, x1, ...]`
    Concat { axis: usize },
    /// `[x]`: `x[begin..end; stride]` per axis, `begin < end <= dim`, `stride >= 1`.
    Slice {
        begin: Vec<usize>,
        end: Vec<usize>,
        stride: Vec<usize>,
    },
    /// `[x, begin: i32[rank]]`: the window of shape `size` starting at the runtime `begin`.
    DynamicSlice { size: Vec<usize> },
    /// `[x, update]`: `x` with the window at `begin` (shape of `update`) replaced by `update`.
    SliceUpdate { begin: Vec<usize> },
    /// `[x, update, begin: i32[rank]]`: as `SliceUpdate` at a runtime position.
    DynamicSliceUpdate,
    /// `[x]`; `(before, after)` per axis.
    Pad {
        pads: Vec<(usize, usize)>,
        mode: PadMode,
        value: f32,
    },
    /// `[x]`
    Tile { reps: Vec<usize> },
    /// `[x, indices: i32]`: output shape `x[..axis] ++ indices ++ x[axis+1..]`.
    Gather { axis: usize },
    /// `[x[N, C, H, W]]`
    SpaceToDepth { block: usize },
    /// `[x[N, C, H, W]]`
    DepthToSpace { block: usize },
    /// `[x]`
    Cumsum {
        axis: usize,
        exclusive: bool,
        reverse: bool,
    },
    /// `[x]`
    Cast { dtype: DType },
    /// `[q[*B, L, E], k[*B, S, E], v[*B, S, Ev], mask?]`: `softmax(q k^T · scale + mask) v`,
    /// `scale` defaults to `1/sqrt(E)`; a bool mask keeps `true` positions, a float mask is added;
    /// `causal` additionally masks key `j > i + S - L`.
    Sdpa {
        scale: Option<f32>,
        causal: bool,
        has_mask: bool,
    },
    /// `[x]`: identity whose gradient is zero.
    StopGradient,
    /// `[x, after...]`: `x` unchanged (gradient included), computed only once every `after`
    /// value exists. The extra sources carry no data; they order the schedule, e.g. a
    /// recomputed layer after the gradient that needs it (`autograd::Segment`).
    Barrier,
    /// `[x]`: per-tensor symmetric int8 quantize then dequantize, MIL `quantize` (int8, no zero
    /// point) then `dequantize`: `scale · clamp(round_half_even(x / scale), −128, 127)`, with
    /// `x / scale` rounded to the program's float type before the integer rounding.
    FakeQuant { scale: f32 },
}

impl Op {
    /// A short name for messages and MIL value names.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Input { .. } => "input",
            Op::Constant(_) => "constant",
            Op::Parameter { .. } => "parameter",
            Op::Unary(u) => u.name(),
            Op::Clip { .. } => "clip",
            Op::LeakyRelu { .. } => "leaky_relu",
            Op::Elu { .. } => "elu",
            Op::Binary(b) => b.name(),
            Op::Compare(c) => c.name(),
            Op::Select => "select",
            Op::MatMul { .. } => "matmul",
            Op::Linear { .. } => "linear",
            Op::LinearExperts { .. } => "linear_experts",
            Op::Conv { .. } => "conv",
            Op::ConvTranspose { .. } => "conv_transpose",
            Op::Pool(p) => match p.kind {
                PoolKind::Max => "max_pool",
                PoolKind::Avg { .. } => "avg_pool",
            },
            Op::Upsample { mode, .. } => match mode {
                UpsampleMode::Nearest => "upsample_nearest",
                UpsampleMode::Bilinear { .. } => "upsample_bilinear",
            },
            Op::Reduce { op, .. } => op.name(),
            Op::ArgMax { .. } => "argmax",
            Op::Softmax { .. } => "softmax",
            Op::LayerNorm { .. } => "layer_norm",
            Op::BatchNorm { .. } => "batch_norm",
            Op::Reshape { .. } => "reshape",
            Op::Transpose { .. } => "transpose",
            Op::Concat { .. } => "concat",
            Op::Slice { .. } => "slice",
            Op::DynamicSlice { .. } => "dynamic_slice",
            Op::SliceUpdate { .. } => "slice_update",
            Op::DynamicSliceUpdate => "dynamic_slice_update",
            Op::Pad { .. } => "pad",
            Op::Tile { .. } => "tile",
            Op::Gather { .. } => "gather",
            Op::SpaceToDepth { .. } => "space_to_depth",
            Op::DepthToSpace { .. } => "depth_to_space",
            Op::Cumsum { .. } => "cumsum",
            Op::Cast { .. } => "cast",
            Op::Sdpa { .. } => "sdpa",
            Op::StopGradient => "stop_gradient",
            Op::Barrier => "barrier",
            Op::FakeQuant { .. } => "fake_quant",
        }
    }

    pub fn is_leaf(&self) -> bool {
        matches!(
            self,
            Op::Input { .. } | Op::Constant(_) | Op::Parameter { .. }
        )
    }
}

/// The family an op's shape rule, MIL emission, VJP and CPU builder are kept under (files of
/// this name in `graph/shape/`, `lower/emit/`, `autograd/rules/` and the CPU engine's `ops/`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpFamily {
    /// Inputs, parameters and constants.
    Leaf,
    Elementwise,
    Linalg,
    Conv,
    Reduce,
    Layout,
    Gather,
    Attention,
}

impl Op {
    /// The op's family; every variant is listed, so a new one must be placed.
    pub fn family(&self) -> OpFamily {
        match self {
            Op::Input { .. } | Op::Constant(_) | Op::Parameter { .. } => OpFamily::Leaf,
            Op::Unary(_)
            | Op::LeakyRelu { .. }
            | Op::Elu { .. }
            | Op::Clip { .. }
            | Op::Binary(_)
            | Op::Compare(_)
            | Op::Select
            | Op::Cast { .. }
            | Op::StopGradient
            | Op::Barrier
            | Op::FakeQuant { .. } => OpFamily::Elementwise,
            Op::MatMul { .. } | Op::Linear { .. } | Op::LinearExperts { .. } => OpFamily::Linalg,
            Op::Conv { .. } | Op::ConvTranspose { .. } | Op::Pool(_) | Op::Upsample { .. } => {
                OpFamily::Conv
            }
            Op::Reduce { .. }
            | Op::ArgMax { .. }
            | Op::Softmax { .. }
            | Op::LayerNorm { .. }
            | Op::BatchNorm { .. }
            | Op::Cumsum { .. } => OpFamily::Reduce,
            Op::Reshape { .. }
            | Op::Transpose { .. }
            | Op::Concat { .. }
            | Op::Slice { .. }
            | Op::DynamicSlice { .. }
            | Op::SliceUpdate { .. }
            | Op::DynamicSliceUpdate
            | Op::Pad { .. }
            | Op::Tile { .. }
            | Op::SpaceToDepth { .. }
            | Op::DepthToSpace { .. } => OpFamily::Layout,
            Op::Gather { .. } => OpFamily::Gather,
            Op::Sdpa { .. } => OpFamily::Attention,
        }
    }
}
