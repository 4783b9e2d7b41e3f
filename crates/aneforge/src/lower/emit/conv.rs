//! Emission of convolution, transposed convolution, pooling and upsampling.

use super::{boolean, int, ints, string, Emitter};
use crate::graph::{Op, PoolKind, Tensor, UpsampleMode};
use crate::lower::LowerError;

impl Emitter<'_> {
    pub(super) fn conv(&mut self, node: &Tensor) -> Result<(), LowerError> {
        let s = node.srcs();
        let x = || self.arg(&s[0]);
        match node.op() {
            Op::Conv { attrs, .. } => {
                let mut args = vec![("x", x()), ("weight", self.arg(&s[1]))];
                if let Some(b) = s.get(2) {
                    args.push(("bias", self.arg(b)));
                }
                let pad: Vec<usize> = attrs.pads.iter().flat_map(|&(b, a)| [b, a]).collect();
                args.extend([
                    ("strides", ints(&attrs.strides)),
                    ("pad_type", string("custom")),
                    ("pad", ints(&pad)),
                    ("dilations", ints(&attrs.dilations)),
                    ("groups", int(attrs.groups)),
                ]);
                self.push(node, "conv", args)
            }
            Op::ConvTranspose {
                attrs,
                output_padding,
                ..
            } => {
                let mut args = vec![("x", x()), ("weight", self.arg(&s[1]))];
                if let Some(b) = s.get(2) {
                    args.push(("bias", self.arg(b)));
                }
                // PyTorch's output_padding extends the end of each axis: keep that many more
                // positions of the uncropped output by cropping less at the end.
                let pad: Vec<usize> = attrs
                    .pads
                    .iter()
                    .zip(output_padding)
                    .flat_map(|(&(b, a), &op)| [b, a - op])
                    .collect();
                args.extend([
                    ("pad", ints(&pad)),
                    ("pad_type", string("custom")),
                    ("strides", ints(&attrs.strides)),
                    ("dilations", ints(&attrs.dilations)),
                    ("groups", int(attrs.groups)),
                ]);
                self.push(node, "conv_transpose", args)
            }
            Op::Pool(p) => {
                let pad: Vec<usize> = p.pads.iter().flat_map(|&(b, a)| [b, a]).collect();
                let mut args = Vec::new();
                let op = match p.kind {
                    PoolKind::Max => "max_pool",
                    PoolKind::Avg { count_pad } => {
                        args.push(("exclude_padding_from_average", boolean(!count_pad)));
                        "avg_pool"
                    }
                };
                args.extend([
                    ("x", x()),
                    ("kernel_sizes", ints(&p.kernel)),
                    ("strides", ints(&p.strides)),
                    ("pad_type", string("custom")),
                    ("pad", ints(&pad)),
                    ("ceil_mode", boolean(p.ceil_mode)),
                ]);
                self.push(node, op, args)
            }
            Op::Upsample {
                mode,
                scale_h,
                scale_w,
            } => {
                let mut args = vec![
                    ("x", x()),
                    ("scale_factor_height", int(*scale_h)),
                    ("scale_factor_width", int(*scale_w)),
                ];
                let op = match mode {
                    UpsampleMode::Nearest => "upsample_nearest_neighbor",
                    UpsampleMode::Bilinear { align_corners } => {
                        args.push(("align_corners", boolean(*align_corners)));
                        args.push(("half_pixel_centers", boolean(!align_corners)));
                        "upsample_bilinear"
                    }
                };
                self.push(node, op, args)
            }
            _ => return Err(self.unsupported(node, "not an conv op")),
        }
        Ok(())
    }
}
