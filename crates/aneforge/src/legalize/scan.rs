//! The last pass: every node of the legalized graph against the family's shape limits, and any
//! value the ANE cannot carry.

use super::Cx;
use crate::graph::{topo_order, DType, Op, Tensor};

pub fn scan_limits(cx: &mut Cx, outputs: &[Tensor]) {
    let l = cx.limits;
    let family = cx.family;
    for node in topo_order(outputs) {
        let shape = node.shape().to_vec();
        let constant = matches!(node.op(), Op::Constant(_));
        for (axis, &d) in shape.iter().enumerate() {
            if d > l.max_axis {
                cx.oversized(
                    &node,
                    format!("axis {axis} is {d} > {} (any axis)", l.max_axis),
                );
            } else if !constant && axis + 2 >= shape.len() && d > l.max_spatial {
                cx.oversized(
                    &node,
                    format!(
                        "axis {axis} is {d} > {} (width/height cap of {family})",
                        l.max_spatial
                    ),
                );
            }
        }
        if node.dtype() == DType::I32 && cx.report.is_legal() {
            cx.reject(&node, "an i32 value remains (the ANE computes in fp16)");
        }
        let s = node.srcs();
        match node.op() {
            Op::MatMul { transpose_a, .. } => {
                let a = s[0].shape();
                let k = if *transpose_a {
                    a[a.len() - 2]
                } else {
                    a[a.len() - 1]
                };
                if k > l.max_spatial {
                    cx.oversized(
                        &node,
                        format!("contraction {k} > {} (cap of {family})", l.max_spatial),
                    );
                }
            }
            Op::Linear { .. } => {
                let w = s[1].shape();
                if w[1] > l.max_spatial {
                    cx.oversized(
                        &node,
                        format!("contraction {} > {} (cap of {family})", w[1], l.max_spatial),
                    );
                }
                if w[0] > l.max_channels {
                    cx.oversized(
                        &node,
                        format!("{} output features > {}", w[0], l.max_channels),
                    );
                }
            }
            Op::Conv { .. } | Op::ConvTranspose { .. } => {
                let w = s[1].shape();
                let kw = w[w.len() - 1];
                if kw > l.max_kernel_width {
                    cx.oversized(
                        &node,
                        format!(
                            "kernel width {kw} > {} (cap of {family})",
                            l.max_kernel_width
                        ),
                    );
                }
                for &c in &w[..2] {
                    if c > l.max_channels {
                        cx.oversized(&node, format!("{c} channels > {}", l.max_channels));
                    }
                }
            }
            _ => {}
        }
    }
}
