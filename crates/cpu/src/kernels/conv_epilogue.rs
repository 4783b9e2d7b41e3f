//! The epilogue a conv applies as it writes its output, instead of a separate elementwise pass:
//! `act((conv + bias[c]) + residual)`, where the residual is a tensor of the output's own shape
//! and the activation is relu, relu6, a clip or h-swish (with its scalar scale and shift). This
//! covers the conv blocks of ResNets, MobileNets, EfficientNets and PP-LCNets; any other
//! epilogue stays an elementwise chain run afterwards.
//! The arithmetic is the chain's, in the chain's order, so fusing never changes a result.

use super::ew::{broadcast_strides, BinOp, Chain, Instr, UnOp};
use super::{math, Cx};
use crate::plan::Vid;
use crate::tensor::Elem;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Act {
    None,
    Relu,
    Relu6,
    Clip(f32, f32),
    /// `UnOp::HardSwish(s, t)`.
    HardSwish(f32, f32),
}

/// Evaluates `$body` with `$f` bound to the activation `$act` as a closure of its own type for
/// each kind of activation, so every loop using it is compiled (and vectorised) for one.
macro_rules! with_act {
    ($act:expr, |$f:ident| $body:expr) => {{
        use $crate::kernels::conv_epilogue::Act;
        match $act {
            Act::None => {
                let $f = |v: f32| v;
                $body
            }
            Act::Relu => {
                let $f = |v: f32| Act::Relu.apply(v);
                $body
            }
            Act::Relu6 => {
                let $f = |v: f32| Act::Relu6.apply(v);
                $body
            }
            Act::Clip(lo, hi) => {
                let $f = move |v: f32| Act::Clip(lo, hi).apply(v);
                $body
            }
            Act::HardSwish(s, t) => {
                let $f = move |v: f32| Act::HardSwish(s, t).apply(v);
                $body
            }
        }
    }};
}
pub(crate) use with_act;

impl Act {
    /// The chain's own definition of each activation (`ew::apply_unary`).
    #[inline(always)]
    pub fn apply(self, v: f32) -> f32 {
        match self {
            Act::None => v,
            Act::Relu => v.max(0.0),
            Act::Relu6 => v.clamp(0.0, 6.0),
            Act::Clip(a, b) => v.max(a).min(b),
            Act::HardSwish(s, t) => math::hard_swish_affine(v, s, t),
        }
    }
}

#[derive(Debug)]
pub struct Fused {
    /// `cout` floats.
    pub bias: Option<Vid>,
    /// Dense in the output's shape, added after the bias.
    pub residual: Option<Vid>,
    pub act: Act,
    /// The value written instead of the conv's raw product.
    pub target: Vid,
}

impl Fused {
    /// The fused form of `e`, a chain over the conv output `raw` of shape `[n, cout, oh, ow]`,
    /// when it is `act?((raw + bias?) + residual?)` stored once as f32.
    pub fn recognize(e: &Chain, raw: Vid, shape: &[usize]) -> Option<Fused> {
        if e.shape != shape {
            return None;
        }
        let [(result, target, Elem::F32)] = e.stores[..] else {
            return None;
        };
        let dense = broadcast_strides(shape, shape);
        let per_channel = broadcast_strides(&[shape[1], 1, 1], shape);
        let first = e.loads.first()?;
        if first.value != raw || first.elem != Elem::F32 || first.strides != dense {
            return None;
        }
        let mut fused = Fused {
            bias: None,
            residual: None,
            act: Act::None,
            target,
        };
        let mut reg = 0;
        let mut instrs = e.instrs.iter().peekable();
        // Register i < loads.len() holds load i.
        let operand = |d: usize, a: usize, b: usize, reg: usize| -> Option<(usize, usize)> {
            match (a == reg, b == reg) {
                (true, false) if b > 0 && b < e.loads.len() => Some((d, b)),
                (false, true) if a > 0 && a < e.loads.len() => Some((d, a)),
                _ => None,
            }
        };
        if let Some(&&Instr::Bin(BinOp::Add, d, a, b)) = instrs.peek() {
            if let Some((d, l)) = operand(d, a, b, reg) {
                let load = &e.loads[l];
                if load.elem == Elem::F32 && load.strides == per_channel {
                    fused.bias = Some(load.value);
                    reg = d;
                    instrs.next();
                }
            }
        }
        if let Some(&&Instr::Bin(BinOp::Add, d, a, b)) = instrs.peek() {
            if let Some((d, l)) = operand(d, a, b, reg) {
                let load = &e.loads[l];
                if load.elem == Elem::F32 && load.strides == dense && load.value != raw {
                    fused.residual = Some(load.value);
                    reg = d;
                    instrs.next();
                }
            }
        }
        if let Some(&&Instr::Un(op, d, s)) = instrs.peek() {
            let act = match op {
                UnOp::Relu => Some(Act::Relu),
                UnOp::Relu6 => Some(Act::Relu6),
                UnOp::Clip(a, b) => Some(Act::Clip(a, b)),
                UnOp::HardSwish(s, t) => Some(Act::HardSwish(s, t)),
                _ => None,
            };
            if let (Some(act), true) = (act, s == reg) {
                fused.act = act;
                reg = d;
                instrs.next();
            }
        }
        // every load must be one of those consumed
        let used = 1 + usize::from(fused.bias.is_some()) + usize::from(fused.residual.is_some());
        (instrs.next().is_none() && result == reg && e.loads.len() == used).then_some(fused)
    }

    pub fn bind(&self, cx: &Cx) -> Bound {
        Bound {
            bias: self
                .bias
                .map_or(std::ptr::null(), |b| cx.ptr(b) as *const f32),
            residual: self
                .residual
                .map_or(std::ptr::null(), |r| cx.ptr(r) as *const f32),
            act: self.act,
            out: cx.ptr(self.target) as *mut f32,
        }
    }
}

/// A fused epilogue's buffers for one run.
#[derive(Clone, Copy)]
pub struct Bound {
    bias: *const f32,
    residual: *const f32,
    act: Act,
    pub out: *mut f32,
}

// SAFETY: the buffers live for the run; tasks write disjoint output positions.
unsafe impl Send for Bound {}
unsafe impl Sync for Bound {}

impl Bound {
    pub fn has_residual(&self) -> bool {
        !self.residual.is_null()
    }

    pub fn act(&self) -> Act {
        self.act
    }

    /// Channel `c`'s bias.
    ///
    /// # Safety
    /// `c` < cout.
    pub unsafe fn bias_of(&self, c: usize) -> Option<f32> {
        (!self.bias.is_null()).then(|| *self.bias.add(c))
    }
    /// Writes `act((v[i] + bias[c]) + residual[at + i])` to output position `at + i`, or, with
    /// `v` = `None`, the same of the values already at those positions.
    ///
    /// # Safety
    /// Positions `at..at + len` (`len` = `v`'s length when given) are in the output and the
    /// residual, channel `c` in the bias; no other task touches them.
    #[inline]
    pub unsafe fn store(&self, c: usize, at: usize, len: usize, v: Option<&[f32]>) {
        let out = std::slice::from_raw_parts_mut(self.out.add(at), len);
        let res = (!self.residual.is_null())
            .then(|| std::slice::from_raw_parts(self.residual.add(at), len));
        finish(v, self.bias_of(c), res, self.act, out);
    }
}

crate::simd_dispatch! {
    fn finish(src: Option<&[f32]>, bias: Option<f32>, res: Option<&[f32]>, act: Act, out: &mut [f32]) {
        with_act!(act, |f| each(src, bias, res, out, f))
    }
}

/// One loop per operand combination, each with the activation inlined, so each vectorises.
#[inline(always)]
fn each(
    src: Option<&[f32]>,
    bias: Option<f32>,
    res: Option<&[f32]>,
    out: &mut [f32],
    f: impl Fn(f32) -> f32,
) {
    let n = out.len();
    let res = res.map(|r| &r[..n]);
    macro_rules! over {
        ($i:ident, $v:ident => $e:expr) => {
            match src {
                Some(src) => {
                    let src = &src[..n];
                    for $i in 0..n {
                        let $v = src[$i];
                        out[$i] = $e;
                    }
                }
                None => {
                    for $i in 0..n {
                        let $v = out[$i];
                        out[$i] = $e;
                    }
                }
            }
        };
    }
    match (bias, res) {
        (Some(b), Some(r)) => over!(i, v => f((v + b) + r[i])),
        (Some(b), None) => over!(i, v => f(v + b)),
        (None, Some(r)) => over!(i, v => f(v + r[i])),
        (None, None) => over!(i, v => f(v)),
    }
}
