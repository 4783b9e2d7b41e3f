//! One vector-Jacobian product per differentiable op: given a node `y = op(srcs)` and the
//! cotangent `g` of `y`, the cotangent of each source that `wants` one (`None` means zero).

mod attention;
mod conv;
mod elementwise;
mod gather;
mod layout;
mod linalg;
mod reduce;

use crate::graph::{GraphError, Op, Tensor};

pub(crate) type Grads = Vec<Option<Tensor>>;

/// Whether gradients pass through `op` to (some of) its float sources.
pub(crate) fn passes_gradient(op: &Op) -> bool {
    !matches!(
        op,
        Op::Input { .. }
            | Op::Constant(_)
            | Op::Parameter { .. }
            | Op::Compare(_)
            | Op::ArgMax { .. }
            | Op::StopGradient
            | Op::Cast { .. }
    )
}

pub(crate) fn vjp(node: &Tensor, g: &Tensor, wants: &[bool]) -> Result<Grads, GraphError> {
    let s = node.srcs();
    match node.op() {
        Op::Input { .. }
        | Op::Constant(_)
        | Op::Parameter { .. }
        | Op::Compare(_)
        | Op::ArgMax { .. }
        | Op::StopGradient
        | Op::Cast { .. } => Ok(vec![None; s.len()]),
        Op::Unary(u) => Ok(vec![elementwise::unary(*u, &s[0], node, g)?]),
        Op::Clip { min, max } => Ok(vec![Some(elementwise::clip(&s[0], g, *min, *max)?)]),
        Op::LeakyRelu { alpha } => Ok(vec![Some(elementwise::leaky_relu(&s[0], g, *alpha)?)]),
        Op::Elu { alpha } => Ok(vec![Some(elementwise::elu(&s[0], g, *alpha)?)]),
        Op::FakeQuant { scale } => Ok(vec![Some(elementwise::fake_quant(&s[0], g, *scale)?)]),
        Op::Binary(b) => elementwise::binary(*b, &s[0], &s[1], node, g, wants),
        Op::Select => elementwise::select(s, g, wants),
        Op::MatMul {
            transpose_a,
            transpose_b,
        } => linalg::matmul(&s[0], &s[1], *transpose_a, *transpose_b, g, wants),
        Op::Linear { has_bias } => linalg::linear(s, *has_bias, g, wants),
        Op::LinearExperts { experts } => linalg::linear_experts(s, *experts, g, wants),
        Op::Conv { attrs, has_bias } => conv::conv(s, attrs, *has_bias, g, wants),
        Op::ConvTranspose {
            attrs, has_bias, ..
        } => conv::conv_transpose(s, attrs, *has_bias, g, wants),
        Op::Pool(attrs) => Ok(vec![Some(conv::pool(&s[0], node, attrs, g)?)]),
        Op::Upsample {
            mode,
            scale_h,
            scale_w,
        } => Ok(vec![Some(conv::upsample(
            &s[0], *mode, *scale_h, *scale_w, g,
        )?)]),
        Op::Reduce { op, axes, .. } => Ok(vec![Some(reduce::reduce(*op, &s[0], node, axes, g)?)]),
        Op::Softmax { axis } => Ok(vec![Some(reduce::softmax(node, *axis, g)?)]),
        Op::LayerNorm {
            axes,
            eps,
            has_gamma,
            has_beta,
        } => reduce::layer_norm(s, axes, *eps, *has_gamma, *has_beta, g, wants),
        Op::BatchNorm {
            eps,
            has_gamma,
            has_beta,
        } => reduce::batch_norm(s, *eps, *has_gamma, *has_beta, g, wants),
        Op::Sdpa {
            scale,
            causal,
            has_mask,
        } => attention::sdpa(s, *scale, *causal, *has_mask, g, wants),
        Op::Cumsum {
            axis,
            exclusive,
            reverse,
        } => Ok(vec![Some(g.cumsum(
            *axis as isize,
            *exclusive,
            !*reverse,
        )?)]),
        Op::Barrier => {
            let mut grads = vec![None; s.len()];
            grads[0] = Some(g.clone());
            Ok(grads)
        }
        Op::Reshape { .. } => Ok(vec![Some(g.reshape(&super::shape_isize(s[0].shape()))?)]),
        Op::Transpose { perm } => Ok(vec![Some(layout::transpose(perm, g)?)]),
        Op::Concat { axis } => layout::concat(s, *axis, g, wants),
        Op::Slice { begin, stride, .. } => Ok(vec![Some(super::util::strided_scatter(
            g,
            s[0].shape(),
            begin,
            stride,
        )?)]),
        Op::DynamicSlice { .. } => layout::dynamic_slice(s, g),
        Op::SliceUpdate { begin } => layout::slice_update(s, begin, g, wants),
        Op::DynamicSliceUpdate => layout::dynamic_slice_update(s, g, wants),
        Op::Pad { pads, mode, .. } => Ok(vec![Some(layout::pad(&s[0], pads, *mode, g)?)]),
        Op::Tile { reps } => Ok(vec![Some(layout::tile(&s[0], reps, g)?)]),
        Op::Gather { axis } => gather::gather(s, *axis, g),
        Op::SpaceToDepth { block } => Ok(vec![Some(g.depth_to_space(*block)?)]),
        Op::DepthToSpace { block } => Ok(vec![Some(g.space_to_depth(*block)?)]),
    }
}
