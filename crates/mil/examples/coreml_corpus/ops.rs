//! Programs that must load: every op aneforge emits, fp16 and fp32 where both exist, argument
//! names and order as in coremltools' op definitions, output types as its type inference gives.

use crate::builder::*;
use aneforge_mil::encode::Scheme;
use aneforge_mil::encode::WEIGHT_BLOB_PATH;
use aneforge_mil::{Argument, DType, Literal, Operation};

pub type Case = (String, Built);

const FLOATS: [(DType, &str); 2] = [(DType::Fp16, "fp16"), (DType::Fp32, "fp32")];

fn scalar(dtype: DType, v: f64) -> Argument {
    Argument::Literal(Literal::float(dtype, v))
}

fn case(name: String, built: Built) -> Case {
    (name, built)
}

pub fn all() -> Vec<Case> {
    let mut cases = Vec::new();
    for (dt, tag) in FLOATS {
        for op in ["relu", "sigmoid", "tanh", "exp", "sqrt", "silu"] {
            cases.push(case(format!("{op}_{tag}"), unary(op, dt)));
        }
        for op in ["log", "rsqrt"] {
            cases.push(case(format!("{op}_{tag}"), unary_eps(op, dt)));
        }
        for mode in ["EXACT", "TANH_APPROXIMATION"] {
            cases.push(case(
                format!("gelu_{}_{tag}", mode.to_lowercase()),
                gelu(mode, dt),
            ));
        }
        for op in ["add", "sub", "mul", "real_div", "pow", "maximum", "minimum"] {
            cases.push(case(format!("{op}_{tag}"), binary(op, dt)));
        }
        cases.push(case(format!("compare_select_{tag}"), compare_select(dt)));
        cases.push(case(format!("clip_softmax_{tag}"), clip_softmax(dt)));
        cases.push(case(format!("layer_norm_{tag}"), layer_norm(dt)));
        cases.push(case(format!("reductions_{tag}"), reductions(dt)));
        cases.push(case(format!("layout_{tag}"), layout(dt)));
        cases.push(case(format!("concat_split_{tag}"), concat_split(dt)));
        cases.push(case(format!("slices_{tag}"), slices(dt)));
        cases.push(case(format!("gather_{tag}"), gather(dt)));
        cases.push(case(format!("pad_pool_{tag}"), pad_pool(dt)));
        cases.push(case(format!("conv_{tag}"), conv(dt)));
        cases.push(case(format!("linear_matmul_{tag}"), linear_matmul(dt)));
        cases.push(case(format!("space_to_depth_{tag}"), space_to_depth(dt)));
        cases.push(case(format!("sdpa_{tag}"), sdpa(dt)));
        cases.push(case(format!("slice_update_{tag}"), slice_update(dt)));
    }
    cases.push(case("cast".into(), cast()));
    cases.push(case("const_fp16_weights".into(), constexpr(Scheme::Fp16)));
    cases.push(case(
        "constexpr_affine_dequantize".into(),
        constexpr(Scheme::Int8),
    ));
    cases.push(case(
        "constexpr_lut_to_dense".into(),
        constexpr(Scheme::Int4Lut),
    ));
    cases.push(case(
        "constexpr_sparse_to_dense".into(),
        constexpr(Scheme::Sparse),
    ));
    cases.push(case(
        "constexpr_blockwise_shift_scale".into(),
        blockwise_shift_scale(),
    ));
    cases.push(case("constexpr_int8_ios16".into(), int8_ios16()));
    cases.push(case("constexpr_conv_weights".into(), constexpr_conv()));
    for opset in ["ios15", "ios16", "ios17"] {
        cases.push(case(format!("mlp_{opset}"), mlp(opset)));
    }
    cases.push(case("multifunction_ios18".into(), multifunction()));
    cases.push(case("flexible_batch".into(), flexible_batch()));
    cases
}

fn unary(op: &str, dt: DType) -> Built {
    let mut b = Builder::new("ios18", dt);
    b.input("x", t(dt, &[2, 8]));
    b.op(op, vec![("x", n("x"))], "y", t(dt, &[2, 8]));
    b.finish(&["y"])
}

fn unary_eps(op: &str, dt: DType) -> Built {
    let mut b = Builder::new("ios18", dt);
    b.input("x", t(dt, &[2, 8]));
    b.op(
        op,
        vec![("x", n("x")), ("epsilon", scalar(dt, 2f64.powi(-14)))],
        "y",
        t(dt, &[2, 8]),
    );
    b.finish(&["y"])
}

fn gelu(mode: &str, dt: DType) -> Built {
    let mut b = Builder::new("ios18", dt);
    b.input("x", t(dt, &[2, 3, 8]));
    b.op(
        "gelu",
        vec![("x", n("x")), ("mode", string(mode))],
        "y",
        t(dt, &[2, 3, 8]),
    );
    b.finish(&["y"])
}

/// Broadcasting: [2, 1, 8] with a [4, 1] weight gives [2, 4, 8].
fn binary(op: &str, dt: DType) -> Built {
    let mut b = Builder::new("ios18", dt);
    b.input("x", t(dt, &[2, 1, 8]));
    let positive: Vec<f32> = wave(4, 3).iter().map(|v| v + 1.0).collect();
    b.weight_values("w", &[4, 1], &positive);
    b.op(
        op,
        vec![("x", n("x")), ("y", n("w"))],
        "y",
        t(dt, &[2, 4, 8]),
    );
    b.finish(&["y"])
}

fn compare_select(dt: DType) -> Built {
    let mut b = Builder::new("ios18", dt);
    b.input("x", t(dt, &[2, 8])).input("z", t(dt, &[2, 8]));
    b.op(
        "greater",
        vec![("x", n("x")), ("y", n("z"))],
        "gt",
        t(DType::Bool, &[2, 8]),
    );
    b.op(
        "select",
        vec![("cond", n("gt")), ("a", n("x")), ("b", n("z"))],
        "max",
        t(dt, &[2, 8]),
    );
    b.op(
        "less",
        vec![("x", n("x")), ("y", n("z"))],
        "lt",
        t(DType::Bool, &[2, 8]),
    );
    b.op(
        "equal",
        vec![("x", n("x")), ("y", n("z"))],
        "eq",
        t(DType::Bool, &[2, 8]),
    );
    b.op(
        "cast",
        vec![("x", n("lt")), ("dtype", string("int32"))],
        "lt_i",
        t(DType::Int32, &[2, 8]),
    );
    b.op(
        "cast",
        vec![("x", n("eq")), ("dtype", string(dt.name()))],
        "eq_f",
        t(dt, &[2, 8]),
    );
    b.finish(&["max", "lt_i", "eq_f"])
}

fn clip_softmax(dt: DType) -> Built {
    let mut b = Builder::new("ios18", dt);
    b.input("x", t(dt, &[2, 4, 8]));
    b.op(
        "clip",
        vec![
            ("x", n("x")),
            ("alpha", scalar(dt, -0.5)),
            ("beta", scalar(dt, 0.75)),
        ],
        "c",
        t(dt, &[2, 4, 8]),
    );
    b.op(
        "softmax",
        vec![("x", n("c")), ("axis", int(-1))],
        "s",
        t(dt, &[2, 4, 8]),
    );
    b.finish(&["s"])
}

fn layer_norm(dt: DType) -> Built {
    let mut b = Builder::new("ios18", dt);
    b.input("x", t(dt, &[2, 4, 8]));
    b.weight("gamma", &[8], 1);
    b.weight("beta", &[8], 2);
    b.op(
        "layer_norm",
        vec![
            ("x", n("x")),
            ("axes", ints(&[-1])),
            ("gamma", n("gamma")),
            ("beta", n("beta")),
            ("epsilon", scalar(dt, 2f64.powi(-16))),
        ],
        "y",
        t(dt, &[2, 4, 8]),
    );
    b.finish(&["y"])
}

fn reductions(dt: DType) -> Built {
    let mut b = Builder::new("ios18", dt);
    b.input("x", t(dt, &[2, 4, 8]));
    b.op(
        "reduce_sum",
        vec![
            ("x", n("x")),
            ("axes", ints(&[1])),
            ("keep_dims", boolean(true)),
        ],
        "sum",
        t(dt, &[2, 1, 8]),
    );
    b.op(
        "reduce_mean",
        vec![
            ("x", n("x")),
            ("axes", ints(&[-1])),
            ("keep_dims", boolean(false)),
        ],
        "mean",
        t(dt, &[2, 4]),
    );
    b.op(
        "reduce_max",
        vec![
            ("x", n("x")),
            ("axes", ints(&[0, 2])),
            ("keep_dims", boolean(true)),
        ],
        "max",
        t(dt, &[1, 4, 1]),
    );
    b.finish(&["sum", "mean", "max"])
}

fn layout(dt: DType) -> Built {
    let mut b = Builder::new("ios18", dt);
    b.input("x", t(dt, &[2, 4, 8]));
    b.op(
        "reshape",
        vec![("x", n("x")), ("shape", ints(&[8, 8]))],
        "r",
        t(dt, &[8, 8]),
    );
    b.op(
        "transpose",
        vec![("x", n("x")), ("perm", ints(&[2, 0, 1]))],
        "p",
        t(dt, &[8, 2, 4]),
    );
    b.finish(&["r", "p"])
}

fn concat_split(dt: DType) -> Built {
    let mut b = Builder::new("ios18", dt);
    b.input("a", t(dt, &[2, 3])).input("c", t(dt, &[2, 5]));
    b.op(
        "concat",
        vec![
            ("values", list(&["a", "c"])),
            ("axis", int(1)),
            ("interleave", boolean(false)),
        ],
        "cat",
        t(dt, &[2, 8]),
    );
    b.op_multi(
        "split",
        vec![
            ("x", n("cat")),
            ("split_sizes", ints(&[3, 5])),
            ("axis", int(1)),
        ],
        &[("s0", t(dt, &[2, 3])), ("s1", t(dt, &[2, 5]))],
    );
    b.op_multi(
        "split",
        vec![("x", n("cat")), ("num_splits", int(2)), ("axis", int(-1))],
        &[("h0", t(dt, &[2, 4])), ("h1", t(dt, &[2, 4]))],
    );
    b.finish(&["s0", "s1", "h0", "h1"])
}

fn slices(dt: DType) -> Built {
    let mut b = Builder::new("ios18", dt);
    b.input("x", t(dt, &[4, 8]));
    b.op(
        "slice_by_index",
        vec![
            ("x", n("x")),
            ("begin", ints(&[1, 0])),
            ("end", ints(&[3, 8])),
            ("stride", ints(&[1, 2])),
            ("begin_mask", bools(&[false, false])),
            ("end_mask", bools(&[false, true])),
            ("squeeze_mask", bools(&[false, false])),
        ],
        "si",
        t(dt, &[2, 4]),
    );
    b.op(
        "slice_by_index",
        vec![
            ("x", n("x")),
            ("begin", ints(&[2, 0])),
            ("end", ints(&[3, 8])),
            ("squeeze_mask", bools(&[true, false])),
        ],
        "row",
        t(dt, &[8]),
    );
    b.op(
        "slice_by_size",
        vec![
            ("x", n("x")),
            ("begin", ints(&[1, 2])),
            ("size", ints(&[2, 3])),
        ],
        "ss",
        t(dt, &[2, 3]),
    );
    b.finish(&["si", "row", "ss"])
}

fn gather(dt: DType) -> Built {
    let mut b = Builder::new("ios18", dt);
    b.input("ids", t(DType::Int32, &[3]));
    b.weight("table", &[10, 8], 4);
    b.op(
        "gather",
        vec![
            ("x", n("table")),
            ("indices", n("ids")),
            ("axis", int(0)),
            ("batch_dims", int(0)),
            ("validate_indices", boolean(false)),
        ],
        "rows",
        t(dt, &[3, 8]),
    );
    b.finish(&["rows"])
}

fn pad_pool(dt: DType) -> Built {
    let mut b = Builder::new("ios18", dt);
    b.input("x", t(dt, &[1, 2, 8, 8]));
    b.op(
        "pad",
        vec![
            ("x", n("x")),
            ("pad", ints(&[1, 1, 2, 2])),
            ("mode", string("constant")),
            ("constant_val", scalar(dt, 0.0)),
        ],
        "padded",
        t(dt, &[1, 2, 10, 12]),
    );
    b.op(
        "max_pool",
        vec![
            ("x", n("padded")),
            ("kernel_sizes", ints(&[2, 2])),
            ("strides", ints(&[2, 2])),
            ("pad_type", string("valid")),
            ("pad", ints(&[0, 0, 0, 0])),
            ("ceil_mode", boolean(false)),
        ],
        "maxp",
        t(dt, &[1, 2, 5, 6]),
    );
    b.op(
        "avg_pool",
        vec![
            ("x", n("x")),
            ("kernel_sizes", ints(&[3, 3])),
            ("strides", ints(&[1, 1])),
            ("pad_type", string("same")),
            ("exclude_padding_from_average", boolean(true)),
        ],
        "avgp",
        t(dt, &[1, 2, 8, 8]),
    );
    b.finish(&["maxp", "avgp"])
}

fn conv(dt: DType) -> Built {
    let mut b = Builder::new("ios18", dt);
    b.input("x", t(dt, &[1, 3, 8, 8]));
    b.weight("w", &[4, 3, 3, 3], 5);
    b.weight("bias", &[4], 6);
    b.op(
        "conv",
        vec![
            ("x", n("x")),
            ("weight", n("w")),
            ("bias", n("bias")),
            ("strides", ints(&[1, 1])),
            ("pad_type", string("custom")),
            ("pad", ints(&[1, 1, 1, 1])),
            ("dilations", ints(&[1, 1])),
            ("groups", int(1)),
        ],
        "y",
        t(dt, &[1, 4, 8, 8]),
    );
    b.weight("dw", &[4, 1, 3, 3], 7);
    b.op(
        "conv",
        vec![
            ("x", n("y")),
            ("weight", n("dw")),
            ("strides", ints(&[2, 2])),
            ("pad_type", string("valid")),
            ("dilations", ints(&[1, 1])),
            ("groups", int(4)),
        ],
        "z",
        t(dt, &[1, 4, 3, 3]),
    );
    b.finish(&["z"])
}

fn linear_matmul(dt: DType) -> Built {
    let mut b = Builder::new("ios18", dt);
    b.input("x", t(dt, &[2, 4, 16]));
    b.weight("w", &[8, 16], 8);
    b.weight("bias", &[8], 9);
    b.op(
        "linear",
        vec![("x", n("x")), ("weight", n("w")), ("bias", n("bias"))],
        "lin",
        t(dt, &[2, 4, 8]),
    );
    b.weight("m", &[8, 16], 10);
    b.op(
        "matmul",
        vec![
            ("x", n("lin")),
            ("y", n("m")),
            ("transpose_x", boolean(false)),
            ("transpose_y", boolean(false)),
        ],
        "mm",
        t(dt, &[2, 4, 16]),
    );
    b.op(
        "matmul",
        vec![
            ("x", n("mm")),
            ("y", n("x")),
            ("transpose_x", boolean(false)),
            ("transpose_y", boolean(true)),
        ],
        "scores",
        t(dt, &[2, 4, 4]),
    );
    b.finish(&["scores"])
}

fn space_to_depth(dt: DType) -> Built {
    let mut b = Builder::new("ios18", dt);
    b.input("x", t(dt, &[1, 2, 8, 8]));
    b.op(
        "space_to_depth",
        vec![("x", n("x")), ("block_size", int(2))],
        "y",
        t(dt, &[1, 8, 4, 4]),
    );
    b.finish(&["y"])
}

fn sdpa(dt: DType) -> Built {
    let mut b = Builder::new("ios18", dt);
    b.input("q", t(dt, &[1, 2, 4, 8]))
        .input("k", t(dt, &[1, 2, 6, 8]))
        .input("v", t(dt, &[1, 2, 6, 8]));
    b.weight("mask", &[4, 6], 11);
    b.op(
        "scaled_dot_product_attention",
        vec![
            ("query", n("q")),
            ("key", n("k")),
            ("value", n("v")),
            ("attn_mask", n("mask")),
        ],
        "attn",
        t(dt, &[1, 2, 4, 8]),
    );
    b.finish(&["attn"])
}

fn slice_update(dt: DType) -> Built {
    let mut b = Builder::new("ios18", dt);
    b.input("cache", t(dt, &[1, 6, 8]))
        .input("row", t(dt, &[1, 1, 8]));
    b.op(
        "slice_update",
        vec![
            ("x", n("cache")),
            ("update", n("row")),
            ("begin", ints(&[0, 2, 0])),
            ("end", ints(&[1, 3, 8])),
            ("stride", ints(&[1, 1, 1])),
            ("begin_mask", bools(&[false, false, false])),
            ("end_mask", bools(&[false, false, false])),
            ("squeeze_mask", bools(&[false, false, false])),
        ],
        "updated",
        t(dt, &[1, 6, 8]),
    );
    b.finish(&["updated"])
}

fn cast() -> Built {
    let mut b = Builder::new("ios18", DType::Fp32);
    b.input("x", t(DType::Fp32, &[2, 8]))
        .input("i", t(DType::Int32, &[2, 8]));
    b.op(
        "cast",
        vec![("x", n("x")), ("dtype", string("fp16"))],
        "h",
        t(DType::Fp16, &[2, 8]),
    );
    b.op(
        "cast",
        vec![("x", n("h")), ("dtype", string("int32"))],
        "hi",
        t(DType::Int32, &[2, 8]),
    );
    b.op(
        "cast",
        vec![("x", n("i")), ("dtype", string("fp32"))],
        "f",
        t(DType::Fp32, &[2, 8]),
    );
    b.finish(&["h", "hi", "f"])
}

/// A weight through an encoder feeding a linear layer (fp16 program).
fn constexpr(scheme: Scheme) -> Built {
    let dt = DType::Fp16;
    let mut b = Builder::new("ios18", dt);
    b.input("x", t(dt, &[2, 32]));
    let mut values = wave(16 * 32, 12);
    if scheme == Scheme::Sparse {
        values.iter_mut().enumerate().for_each(|(i, v)| {
            if i % 3 != 0 {
                *v = 0.0
            }
        });
    }
    b.encoded_weight("w", &[16, 32], &values, scheme);
    b.op(
        "linear",
        vec![("x", n("x")), ("weight", n("w"))],
        "y",
        t(dt, &[2, 16]),
    );
    b.finish(&["y"])
}

/// Rank-4 conv weights through each compressed encoding (LUT shape [1, 1, 1, 1, 16, 1]).
fn constexpr_conv() -> Built {
    let dt = DType::Fp16;
    let mut b = Builder::new("ios18", dt);
    b.input("x", t(dt, &[1, 3, 8, 8]));
    let shape = [4, 3, 3, 3];
    let dense = wave(108, 18);
    let sparse: Vec<f32> = dense
        .iter()
        .enumerate()
        .map(|(i, &v)| if i % 4 == 0 { v } else { 0.0 })
        .collect();
    b.encoded_weight("w_int8", &shape, &dense, Scheme::Int8);
    b.encoded_weight("w_lut", &shape, &dense, Scheme::Int4Lut);
    b.encoded_weight("w_sparse", &shape, &sparse, Scheme::Sparse);
    let conv = |w: &str| {
        vec![
            ("x", n("x")),
            ("weight", n(w)),
            ("pad_type", string("same")),
        ]
    };
    b.op("conv", conv("w_int8"), "y_int8", t(dt, &[1, 4, 8, 8]));
    b.op("conv", conv("w_lut"), "y_lut", t(dt, &[1, 4, 8, 8]));
    b.op("conv", conv("w_sparse"), "y_sparse", t(dt, &[1, 4, 8, 8]));
    b.finish(&["y_int8", "y_lut", "y_sparse"])
}

/// The same int8 encoding in an iOS16 program (the op's home opset).
fn int8_ios16() -> Built {
    let dt = DType::Fp16;
    let mut b = Builder::new("ios16", dt);
    b.input("x", t(dt, &[2, 32]));
    b.encoded_weight("w", &[16, 32], &wave(16 * 32, 13), Scheme::Int8);
    b.op(
        "matmul",
        vec![
            ("x", n("x")),
            ("y", n("w")),
            ("transpose_x", boolean(false)),
            ("transpose_y", boolean(true)),
        ],
        "y",
        t(dt, &[2, 16]),
    );
    b.finish(&["y"])
}

/// int8 data in blocks of 8 along the input axis, one fp16 scale per block.
fn blockwise_shift_scale() -> Built {
    let dt = DType::Fp16;
    let mut b = Builder::new("ios18", dt);
    b.input("x", t(dt, &[2, 16]));
    let data: Vec<u8> = (0..8 * 16)
        .map(|i| (i * 37 % 255 - 127) as i8 as u8)
        .collect();
    let data_offset = b
        .blobs
        .add(DType::Int8, data.len(), &data)
        .expect("int8 blob");
    let scales: Vec<half::f16> = (0..8 * 2)
        .map(|i| half::f16::from_f32(0.001 * (i + 1) as f32))
        .collect();
    let scale_offset = b.blobs.add_f16(&scales);
    let blob = |dtype, shape: &[usize], offset| {
        Argument::Literal(Literal::Blob {
            ty: t(dtype, shape),
            path: WEIGHT_BLOB_PATH.to_string(),
            offset,
        })
    };
    b.push(
        Operation::new("constexpr_blockwise_shift_scale")
            .with_input("data", blob(DType::Int8, &[8, 16], data_offset))
            .with_input("scale", blob(DType::Fp16, &[8, 2], scale_offset))
            .with_output("w", t(dt, &[8, 16]))
            .with_attribute("name", Literal::string("w")),
    );
    b.op(
        "linear",
        vec![("x", n("x")), ("weight", n("w"))],
        "y",
        t(dt, &[2, 8]),
    );
    b.finish(&["y"])
}

/// A small fp32 MLP in an older opset (spec versions 6–8).
fn mlp(opset: &str) -> Built {
    let dt = DType::Fp32;
    let mut b = Builder::new(opset, dt);
    b.input("x", t(dt, &[3, 16]));
    b.weight("w1", &[32, 16], 14);
    b.weight("b1", &[32], 15);
    b.op(
        "linear",
        vec![("x", n("x")), ("weight", n("w1")), ("bias", n("b1"))],
        "h",
        t(dt, &[3, 32]),
    );
    b.op("relu", vec![("x", n("h"))], "a", t(dt, &[3, 32]));
    b.weight("w2", &[4, 32], 16);
    b.op(
        "linear",
        vec![("x", n("a")), ("weight", n("w2"))],
        "logits",
        t(dt, &[3, 4]),
    );
    b.op(
        "softmax",
        vec![("x", n("logits")), ("axis", int(-1))],
        "probs",
        t(dt, &[3, 4]),
    );
    b.finish(&["probs"])
}

fn multifunction() -> Built {
    let dt = DType::Fp16;
    let mut b = Builder::new("ios18", dt);
    b.input("x", t(dt, &[2, 8]));
    b.op("relu", vec![("x", n("x"))], "y", t(dt, &[2, 8]));
    b.finish_function("main", &["y"]);
    b.input("x", t(dt, &[2, 8]));
    b.weight("w", &[4, 8], 17);
    b.op(
        "linear",
        vec![("x", n("x")), ("weight", n("w"))],
        "y",
        t(dt, &[2, 4]),
    );
    b.finish_function("project", &["y"]);
    b.finish(&[])
}

/// A symbolic batch axis: an unknown MIL dimension and a Core ML shape range.
fn flexible_batch() -> Built {
    let dt = DType::Fp32;
    let mut b = Builder::new("ios18", dt);
    let batch = |last: usize| aneforge_mil::TensorType {
        dtype: dt,
        shape: vec![aneforge_mil::Dim::Symbol("batch".into()), last.into()],
    };
    b.input("x", batch(16));
    b.weight("w", &[4, 16], 19);
    b.op(
        "linear",
        vec![("x", n("x")), ("weight", n("w"))],
        "y",
        batch(4),
    );
    b.finish(&["y"])
}
