//! Emission of layout ops: reshape, transpose, concat, slices and slice updates, pad, tile, space_to_depth and depth_to_space.

use super::{boolean, int, ints, string, Emitter};
use crate::graph::{Op, Tensor};
use crate::lower::LowerError;
use aneforge_mil as mil;
use mil::{Argument, TensorType};

impl Emitter<'_> {
    pub(super) fn layout(&mut self, node: &Tensor) -> Result<(), LowerError> {
        let s = node.srcs();
        let x = || self.arg(&s[0]);
        match node.op() {
            Op::Reshape { shape } => {
                let args = vec![("x", x()), ("shape", ints(shape))];
                self.push(node, "reshape", args)
            }
            Op::Transpose { perm } => {
                let args = vec![("x", x()), ("perm", ints(perm))];
                self.push(node, "transpose", args)
            }
            Op::Concat { axis } => {
                let values = Argument::List(s.iter().map(|t| self.arg(t)).collect());
                let args = vec![
                    ("values", values),
                    ("axis", int(*axis)),
                    ("interleave", boolean(false)),
                ];
                self.push(node, "concat", args)
            }
            Op::Slice { begin, end, stride } => {
                let args = vec![
                    ("x", x()),
                    ("begin", ints(begin)),
                    ("end", ints(end)),
                    ("stride", ints(stride)),
                ];
                self.push(node, "slice_by_index", args)
            }
            Op::DynamicSlice { size } => {
                if self.target.is_ane() {
                    return Err(self.unsupported(node, "the window position is data-dependent"));
                }
                let args = vec![("x", x()), ("begin", self.arg(&s[1])), ("size", ints(size))];
                self.push(node, "slice_by_size", args)
            }
            Op::SliceUpdate { begin } => {
                let end: Vec<usize> = begin.iter().zip(s[1].shape()).map(|(b, u)| b + u).collect();
                let args = vec![
                    ("x", x()),
                    ("update", self.arg(&s[1])),
                    ("begin", ints(begin)),
                    ("end", ints(&end)),
                ];
                self.push(node, "slice_update", args)
            }
            Op::DynamicSliceUpdate => {
                if self.target.is_ane() {
                    return Err(self.unsupported(node, "the update position is data-dependent"));
                }
                let x = self.arg(&s[0]);
                let end = self.fresh("slice_end");
                let rank = node.rank();
                let add_args = vec![("x", self.arg(&s[2])), ("y", ints(s[1].shape()))];
                self.push_value(
                    &end,
                    TensorType::new(mil::DType::Int32, &[rank]),
                    "add",
                    add_args,
                );
                let args = vec![
                    ("x", x),
                    ("update", self.arg(&s[1])),
                    ("begin", self.arg(&s[2])),
                    ("end", Argument::Name(end)),
                ];
                self.push(node, "slice_update", args)
            }
            Op::Pad { pads, mode, value } => {
                let pad: Vec<usize> = pads.iter().flat_map(|&(b, a)| [b, a]).collect();
                let args = vec![
                    ("x", x()),
                    ("pad", ints(&pad)),
                    ("mode", string(mode.name())),
                    ("constant_val", self.float_lit(*value)),
                ];
                self.push(node, "pad", args)
            }
            Op::Tile { reps } => {
                let args = vec![("x", x()), ("reps", ints(reps))];
                self.push(node, "tile", args)
            }
            Op::SpaceToDepth { block } => {
                let args = vec![("x", x()), ("block_size", int(*block))];
                self.push(node, "space_to_depth", args)
            }
            Op::DepthToSpace { block } => {
                let args = vec![("x", x()), ("block_size", int(*block))];
                self.push(node, "depth_to_space", args)
            }
            _ => return Err(self.unsupported(node, "not an layout op")),
        }
        Ok(())
    }
}
