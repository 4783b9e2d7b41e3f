//! Convolution shapes the ANE handles badly: a strided P×P patch convolution (ViT patch
//! embedding) becomes `space_to_depth(P)` followed by a 1×1 convolution.

use super::build::f32_const;
use super::Cx;
use crate::graph::{ConvAttrs, GraphError, Op, Tensor};

pub fn patch_conv(
    cx: &mut Cx,
    node: &Tensor,
    srcs: &[Tensor],
    attrs: &ConvAttrs,
    has_bias: bool,
) -> Result<Option<Tensor>, GraphError> {
    let (x, w) = (&srcs[0], &srcs[1]);
    let Some(weights) = w.constant_value().and_then(|c| c.as_f32()) else {
        return Ok(None);
    };
    let ws = w.shape();
    if x.rank() != 4 || ws.len() != 4 || ws[2] != ws[3] {
        return Ok(None);
    }
    let p = ws[2];
    let patch = p >= 2
        && attrs.strides == [p, p]
        && attrs.pads.iter().all(|&(b, a)| b == 0 && a == 0)
        && attrs.dilations == [1, 1]
        && attrs.groups == 1;
    if !patch {
        return Ok(None);
    }
    let (o, c) = (ws[0], ws[1]);
    let xs = x.shape();
    let (h, wd) = (xs[2] - xs[2] % p, xs[3] - xs[3] % p);
    let x = if (h, wd) == (xs[2], xs[3]) {
        x.clone()
    } else {
        x.slice(&[0, 0, 0, 0], &[xs[0], xs[1], h, wd], &[1, 1, 1, 1])?
    };
    // space_to_depth puts x[n, c, h·P + i, w·P + j] at channel (i·P + j)·C + c.
    let mut folded = vec![0f32; o * c * p * p];
    for oi in 0..o {
        for ci in 0..c {
            for i in 0..p {
                for j in 0..p {
                    folded[oi * c * p * p + (i * p + j) * c + ci] =
                        weights[((oi * c + ci) * p + i) * p + j];
                }
            }
        }
    }
    cx.rewritten(
        node,
        format!("strided {p}×{p} patch conv → space_to_depth({p}) + 1×1 conv"),
    );
    let mut conv_srcs = vec![
        x.space_to_depth(p)?,
        f32_const(&[o, c * p * p, 1, 1], folded)?,
    ];
    if has_bias {
        conv_srcs.extend(srcs.get(2).cloned());
    }
    Ok(Some(Tensor::from_op(
        Op::Conv {
            attrs: ConvAttrs {
                strides: vec![1, 1],
                pads: vec![(0, 0), (0, 0)],
                dilations: vec![1, 1],
                groups: 1,
            },
            has_bias,
        },
        conv_srcs,
    )?))
}
