//! Op builders: one function per MIL op type (coremltools iOS15–iOS18 definitions) that checks
//! arguments, computes output shapes and emits kernels.

mod attention;
mod constexpr;
mod conv;
mod elementwise;
mod gather;
mod layout;
mod linalg;
mod quant;
mod reduce;

use crate::compile::{const_literal, OpCx};
use crate::error::Result;
use crate::known::decode_literal;

pub(crate) fn build(cx: &mut OpCx) -> Result<()> {
    let t = cx.op.op_type.clone();
    match t.as_str() {
        "const" => {
            let lit =
                const_literal(cx.op).ok_or_else(|| cx.err("const without a `val` attribute"))?;
            let k = decode_literal(lit, cx.b.blobs).map_err(|e| cx.err(e))?;
            cx.known_output(0, k)?;
            Ok(())
        }
        "constexpr_blockwise_shift_scale" | "constexpr_cast" => quant::constexpr(cx, &t),
        "constexpr_affine_dequantize" | "constexpr_lut_to_dense" | "constexpr_sparse_to_dense" => {
            constexpr::build(cx, &t)
        }
        "gather" if quant::gather(cx)? => Ok(()),
        "gather" | "gather_along_axis" | "one_hot" => gather::build(cx, &t),
        "conv" => conv::conv(cx, false),
        "conv_transpose" => conv::conv(cx, true),
        "max_pool" => conv::pool(cx, true),
        "avg_pool" => conv::pool(cx, false),
        "upsample_nearest_neighbor" => conv::upsample(cx, false),
        "upsample_bilinear" => conv::upsample(cx, true),
        "scaled_dot_product_attention" => attention::sdpa(cx),
        "matmul" => linalg::matmul(cx),
        "linear" => linalg::linear(cx),
        "einsum" => linalg::einsum(cx),
        "fill" => layout::fill(cx),
        "range_1d" => layout::range_1d(cx),
        "concat" => layout::concat(cx),
        "identity" => layout::identity(cx),
        "reshape" => layout::reshape(cx),
        "squeeze" => layout::squeeze(cx),
        "expand_dims" => layout::expand_dims(cx),
        "transpose" => layout::transpose(cx),
        "slice_by_index" => layout::slice_by_index(cx),
        "slice_by_size" => layout::slice_by_size(cx),
        "slice_update" => layout::slice_update(cx),
        "split" => layout::split(cx),
        "tile" => layout::tile(cx),
        "pad" => layout::pad(cx),
        "space_to_depth" | "depth_to_space" => layout::space_to_depth(cx, &t),
        "band_part" => layout::band_part(cx),
        "softmax" | "layer_norm" | "instance_norm" | "l2_norm" | "cumsum" | "topk"
        | "batch_norm" => reduce::build(cx, &t),
        t2 if t2.starts_with("reduce_") => reduce::build(cx, t2),
        _ => elementwise::build(cx, &t),
    }
}
