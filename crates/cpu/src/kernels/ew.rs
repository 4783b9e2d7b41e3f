//! Fused elementwise chains: loads (with NumPy broadcasting) → f32 register program → stores.
//! Work runs in blocks of `BLOCK` elements so each instruction is a tight, vectorisable loop.

use super::{math, Cx};
use crate::plan::{Value, Vid};
use crate::tensor::{Elem, SendPtr};
use half::f16;
use half::slice::HalfFloatSliceExt;

pub const BLOCK: usize = 256;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum UnOp {
    Relu,
    Relu6,
    GeluExact,
    GeluTanh,
    GeluSigmoid,
    Silu,
    Sigmoid,
    SigmoidHard(f32, f32),
    Tanh,
    Exp,
    Exp2,
    Log(f32),
    Sqrt,
    Rsqrt(f32),
    Inverse(f32),
    Abs,
    Sign,
    Square,
    /// `x^3` or `x^4` as products (MIL `pow` by a constant 3 or 4, as GELU's tanh form uses).
    Cube,
    Fourth,
    Sin,
    Cos,
    Erf,
    Softplus,
    Softsign,
    Clip(f32, f32),
    LeakyRelu(f32),
    Elu(f32),
    Floor,
    Ceil,
    Round,
    Not,
    /// Plain copy (cast: the conversion happens in the store).
    Copy,
    /// Rounds through f16 (an fp16-typed intermediate inside a fused chain).
    RoundF16,
    /// `hard_swish(x)·s + t` (MobileNetV3's h-swish, `math::hard_swish`; PP-LCNetV3 follows it
    /// with a learned scalar scale and shift). Plain h-swish is `(1, −0)`, both exact identities.
    HardSwish(f32, f32),
    /// A binary op whose other operand is a scalar constant: `x + k`, `x·k`, `x / k`, `k − x`,
    /// `k / x`, `max(x, k)`, `min(x, k)` (a subtraction of k is the addition of −k, bit for bit).
    AddK(f32),
    MulK(f32),
    DivK(f32),
    KSub(f32),
    KDiv(f32),
    MaxK(f32),
    MinK(f32),
}

impl UnOp {
    /// The immediate form of `op` with the scalar `k` as its left (`k_left`) or right operand.
    pub fn with_scalar(op: BinOp, k: f32, k_left: bool) -> Option<UnOp> {
        Some(match (op, k_left) {
            (BinOp::Add, _) => UnOp::AddK(k),
            (BinOp::Mul, _) => UnOp::MulK(k),
            (BinOp::Sub, false) => UnOp::AddK(-k),
            (BinOp::Sub, true) => UnOp::KSub(k),
            (BinOp::Div, false) => UnOp::DivK(k),
            (BinOp::Div, true) => UnOp::KDiv(k),
            // max/min of a number and a NaN is the number, in either operand order
            (BinOp::Max, _) if !k.is_nan() => UnOp::MaxK(k),
            (BinOp::Min, _) if !k.is_nan() => UnOp::MinK(k),
            _ => return None,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    Max,
    Min,
    FloorDiv,
    Mod,
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
    And,
    Or,
    Xor,
}

impl BinOp {
    pub fn is_compare(self) -> bool {
        matches!(
            self,
            BinOp::Eq | BinOp::Ne | BinOp::Gt | BinOp::Ge | BinOp::Lt | BinOp::Le
        )
    }
    pub fn is_logical(self) -> bool {
        matches!(self, BinOp::And | BinOp::Or | BinOp::Xor)
    }

    #[inline(always)]
    pub fn apply_f64(self, a: f64, b: f64) -> f64 {
        let t = |c: bool| if c { 1.0 } else { 0.0 };
        match self {
            BinOp::Add => a + b,
            BinOp::Sub => a - b,
            BinOp::Mul => a * b,
            BinOp::Div => a / b,
            BinOp::Pow => a.powf(b),
            BinOp::Max => a.max(b),
            BinOp::Min => a.min(b),
            BinOp::FloorDiv => (a / b).floor(),
            BinOp::Mod => a - (a / b).floor() * b,
            BinOp::Eq => t(a == b),
            BinOp::Ne => t(a != b),
            BinOp::Gt => t(a > b),
            BinOp::Ge => t(a >= b),
            BinOp::Lt => t(a < b),
            BinOp::Le => t(a <= b),
            BinOp::And => t(a != 0.0 && b != 0.0),
            BinOp::Or => t(a != 0.0 || b != 0.0),
            BinOp::Xor => t((a != 0.0) != (b != 0.0)),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Instr {
    Un(UnOp, usize, usize),
    Bin(BinOp, usize, usize, usize),
    /// dst = cond != 0 ? a : b
    Select(usize, usize, usize, usize),
}

#[derive(Clone, Debug)]
pub struct Load {
    pub value: Vid,
    pub elem: Elem,
    /// Element strides per output axis (0 where broadcast).
    pub strides: Vec<usize>,
}

#[derive(Clone, Debug)]
pub struct Chain {
    pub shape: Vec<usize>,
    pub loads: Vec<Load>,
    /// Register `i < loads.len()` holds load `i`; instruction `j` writes its `dst`.
    pub instrs: Vec<Instr>,
    pub nregs: usize,
    pub stores: Vec<(usize, Vid, Elem)>,
}

/// Row-major strides of `in_shape` broadcast against `out_shape` (right-aligned, NumPy rules).
pub fn broadcast_strides(in_shape: &[usize], out_shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![0; out_shape.len()];
    let mut s = 1;
    let off = out_shape.len() - in_shape.len();
    for i in (0..in_shape.len()).rev() {
        if in_shape[i] != 1 {
            strides[off + i] = s;
        }
        s *= in_shape[i];
    }
    strides
}

/// NumPy broadcast of two shapes; `None` when incompatible.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let da = if i + a.len() >= n {
            a[i + a.len() - n]
        } else {
            1
        };
        let db = if i + b.len() >= n {
            b[i + b.len() - n]
        } else {
            1
        };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return None;
        };
    }
    Some(out)
}

impl Chain {
    /// The values every load of which reads the positions the chain stores `out` to: the whole
    /// value, dense in the chain's shape, with `out`'s element type.
    pub fn dense_loads(&self, values: &[Value], out: Vid) -> Vec<Vid> {
        let Some(&(_, _, out_elem)) = self.stores.iter().find(|s| s.1 == out) else {
            return Vec::new();
        };
        let mut dense = vec![1; self.shape.len()];
        for a in (0..self.shape.len().saturating_sub(1)).rev() {
            dense[a] = dense[a + 1] * self.shape[a + 1];
        }
        let at_out = |l: &Load| {
            l.elem == out_elem && l.strides == dense && values[l.value].len() == self.len()
        };
        let mut vids: Vec<Vid> = self
            .loads
            .iter()
            .filter(|l| at_out(l))
            .map(|l| l.value)
            .collect();
        // a value also loaded elsewhere (broadcast, strided) is not safe to overwrite
        vids.retain(|&v| self.loads.iter().all(|l| l.value != v || at_out(l)));
        vids.dedup();
        vids
    }

    /// Merges adjacent axes where every load's strides allow it and drops size-1 axes.
    pub fn collapse(&mut self) {
        let mut shape: Vec<usize> = Vec::new();
        let mut strides: Vec<Vec<usize>> = vec![Vec::new(); self.loads.len()];
        for ax in 0..self.shape.len() {
            let d = self.shape[ax];
            if d == 1 {
                continue;
            }
            let can_merge = !shape.is_empty()
                && self.loads.iter().enumerate().all(|(i, l)| {
                    let prev = *strides[i].last().unwrap_or(&0);
                    prev == l.strides[ax] * d
                });
            if can_merge {
                let last = shape.len() - 1;
                shape[last] *= d;
                for (i, l) in self.loads.iter().enumerate() {
                    let k = strides[i].len() - 1;
                    strides[i][k] = l.strides[ax];
                }
            } else {
                shape.push(d);
                for (i, l) in self.loads.iter().enumerate() {
                    strides[i].push(l.strides[ax]);
                }
            }
        }
        if shape.is_empty() {
            shape.push(1);
            strides.iter_mut().for_each(|s| s.push(0));
        }
        self.shape = shape;
        for (l, s) in self.loads.iter_mut().zip(strides) {
            l.strides = s;
        }
    }

    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    fn tasks(&self, threads: usize) -> usize {
        let n = self.len();
        if threads <= 1 || n < 1 << 15 {
            1
        } else {
            threads.min(n / (1 << 14)).max(1)
        }
    }

    pub fn scratch_floats(&self, threads: usize) -> usize {
        self.tasks(threads) * self.block_floats()
    }

    /// Scratch floats one call of [`Chain::run_part`] needs.
    pub fn block_floats(&self) -> usize {
        self.nregs * BLOCK
    }

    /// Runs the chain over output positions `start..end` only, on the calling thread: a kernel
    /// applies its epilogue to the part it has just written, while it is in cache. `regs` holds
    /// at least [`Chain::block_floats`] floats.
    pub fn run_part(&self, cx: &Cx, start: usize, end: usize, regs: &mut [f32]) {
        assert!(
            end <= self.len() && regs.len() >= self.block_floats(),
            "chain part"
        );
        if start < end {
            self.run_range(cx, start, end, regs);
        }
    }

    pub fn run(&self, cx: &Cx) {
        let n = self.len();
        if n == 0 {
            return;
        }
        let tasks = self.tasks(cx.threads);
        let scratch = cx.scratch(tasks * self.nregs * BLOCK);
        let base = SendPtr(scratch.as_mut_ptr());
        if tasks == 1 {
            self.run_range(cx, 0, n, scratch);
            return;
        }
        let per = n.div_ceil(tasks);
        cx.par_for(tasks, &|t| {
            let start = t * per;
            let end = (start + per).min(n);
            if start < end {
                // SAFETY: each task uses its own disjoint scratch region.
                let regs = unsafe {
                    std::slice::from_raw_parts_mut(
                        base.get().add(t * self.nregs * BLOCK),
                        self.nregs * BLOCK,
                    )
                };
                self.run_range(cx, start, end, regs);
            }
        });
    }

    fn run_range(&self, cx: &Cx, start: usize, end: usize, regs: &mut [f32]) {
        let rank = self.shape.len();
        let inner = self.shape[rank - 1];
        let mut idx = vec_idx(&self.shape, start);
        let mut pos = start;
        let srcs: [(*const u8, Elem); 8] = std::array::from_fn(|i| match self.loads.get(i) {
            Some(l) => (cx.ptr(l.value) as *const u8, l.elem),
            None => (std::ptr::null(), Elem::F32),
        });
        let dsts: [*mut u8; 4] = std::array::from_fn(|i| match self.stores.get(i) {
            Some(s) => cx.ptr(s.1),
            None => std::ptr::null_mut(),
        });
        while pos < end {
            let ipos = idx[rank - 1];
            let run = (inner - ipos).min(end - pos).min(BLOCK);
            for (li, l) in self.loads.iter().enumerate() {
                let mut off = 0;
                for a in 0..rank {
                    off += idx[a] * l.strides[a];
                }
                let inner_stride = l.strides[rank - 1];
                let reg = &mut regs[li * BLOCK..li * BLOCK + run];
                let src = if li < 8 {
                    srcs[li]
                } else {
                    (cx.ptr(l.value) as *const u8, l.elem)
                };
                // SAFETY: offsets stay inside the load's value (strides from its shape).
                unsafe { load_block(src.0, src.1, off, inner_stride, reg) };
            }
            for ins in &self.instrs {
                exec_instr(ins, regs, run);
            }
            for (si, &(reg, v, elem)) in self.stores.iter().enumerate() {
                let dst = if si < 4 { dsts[si] } else { cx.ptr(v) };
                let src = &regs[reg * BLOCK..reg * BLOCK + run];
                // SAFETY: stores are dense in the output shape; `pos + run <= len`.
                unsafe { store_block(dst, elem, pos, src) };
            }
            pos += run;
            // advance multi-index by `run` (stays within the innermost axis, then carries)
            idx[rank - 1] += run;
            let mut a = rank - 1;
            while idx[a] >= self.shape[a] && a > 0 {
                idx[a] = 0;
                idx[a - 1] += 1;
                a -= 1;
            }
        }
    }
}

fn vec_idx(shape: &[usize], mut flat: usize) -> [usize; 8] {
    let mut idx = [0usize; 8];
    for a in (0..shape.len()).rev() {
        idx[a] = flat % shape[a];
        flat /= shape[a];
    }
    idx
}

/// Loads `dst.len()` elements starting at element `off` with `stride` (0 = splat) as f32.
///
/// # Safety
/// `src` must point to a buffer of `elem` holding every addressed element.
pub unsafe fn load_block(src: *const u8, elem: Elem, off: usize, stride: usize, dst: &mut [f32]) {
    let n = dst.len();
    macro_rules! ld {
        ($t:ty, $conv:expr) => {{
            let p = (src as *const $t).add(off);
            if stride == 0 {
                let v = $conv(*p);
                dst.fill(v);
            } else if stride == 1 {
                let s = std::slice::from_raw_parts(p, n);
                for (d, &x) in dst.iter_mut().zip(s) {
                    *d = $conv(x);
                }
            } else {
                for (i, d) in dst.iter_mut().enumerate() {
                    *d = $conv(*p.add(i * stride));
                }
            }
        }};
    }
    match elem {
        Elem::F32 => ld!(f32, |x: f32| x),
        Elem::F16 => {
            let p = (src as *const f16).add(off);
            if stride == 1 {
                std::slice::from_raw_parts(p, n).convert_to_f32_slice(dst);
            } else if stride == 0 {
                dst.fill((*p).to_f32());
            } else {
                for (i, d) in dst.iter_mut().enumerate() {
                    *d = (*p.add(i * stride)).to_f32();
                }
            }
        }
        Elem::I32 => ld!(i32, |x: i32| x as f32),
        Elem::I8 => ld!(i8, |x: i8| x as f32),
        Elem::U8 | Elem::Bool => ld!(u8, |x: u8| x as f32),
    }
}

/// Stores `src` at element `pos` of a dense buffer of `elem` (bool: nonzero; ints: truncation).
///
/// # Safety
/// `dst` must hold at least `pos + src.len()` elements of `elem`.
pub unsafe fn store_block(dst: *mut u8, elem: Elem, pos: usize, src: &[f32]) {
    let n = src.len();
    match elem {
        Elem::F32 => {
            std::slice::from_raw_parts_mut((dst as *mut f32).add(pos), n).copy_from_slice(src)
        }
        Elem::F16 => std::slice::from_raw_parts_mut((dst as *mut f16).add(pos), n)
            .convert_from_f32_slice(src),
        Elem::I32 => {
            let d = std::slice::from_raw_parts_mut((dst as *mut i32).add(pos), n);
            for (o, &x) in d.iter_mut().zip(src) {
                *o = x as i32;
            }
        }
        Elem::I8 => {
            let d = std::slice::from_raw_parts_mut((dst as *mut i8).add(pos), n);
            for (o, &x) in d.iter_mut().zip(src) {
                *o = x as i8;
            }
        }
        Elem::U8 => {
            let d = std::slice::from_raw_parts_mut(dst.add(pos), n);
            for (o, &x) in d.iter_mut().zip(src) {
                *o = x as u8;
            }
        }
        Elem::Bool => {
            let d = std::slice::from_raw_parts_mut(dst.add(pos), n);
            for (o, &x) in d.iter_mut().zip(src) {
                *o = (x != 0.0) as u8;
            }
        }
    }
}

#[inline(always)]
pub fn round_f16_inplace(x: &mut [f32]) {
    let mut tmp = [f16::ZERO; BLOCK];
    for chunk in x.chunks_mut(BLOCK) {
        let t = &mut tmp[..chunk.len()];
        t.convert_from_f32_slice(chunk);
        t.convert_to_f32_slice(chunk);
    }
}

fn exec_instr(ins: &Instr, regs: &mut [f32], n: usize) {
    match *ins {
        Instr::Un(op, d, s) => {
            if d == s {
                apply_unary(op, &mut regs[d * BLOCK..d * BLOCK + n]);
            } else {
                let (src, dst) = two_regs(regs, s, d);
                dst[..n].copy_from_slice(&src[..n]);
                apply_unary(op, &mut dst[..n]);
            }
        }
        Instr::Bin(op, d, a, b) if d != a && d != b => {
            // the destination register is neither operand: write it directly
            let (lo, rest) = regs.split_at_mut(d * BLOCK);
            let (dst, hi) = rest.split_at_mut(BLOCK);
            let reg = |r: usize| -> &[f32] {
                if r < d {
                    &lo[r * BLOCK..r * BLOCK + n]
                } else {
                    &hi[(r - d - 1) * BLOCK..(r - d - 1) * BLOCK + n]
                }
            };
            apply_binary(op, reg(a), reg(b), &mut dst[..n]);
        }
        Instr::Bin(op, d, a, b) => {
            let mut out = [0f32; BLOCK];
            {
                let ra = &regs[a * BLOCK..a * BLOCK + n];
                let rb = &regs[b * BLOCK..b * BLOCK + n];
                apply_binary(op, ra, rb, &mut out[..n]);
            }
            regs[d * BLOCK..d * BLOCK + n].copy_from_slice(&out[..n]);
        }
        Instr::Select(d, c, a, b) => {
            let mut out = [0f32; BLOCK];
            for i in 0..n {
                out[i] = if regs[c * BLOCK + i] != 0.0 {
                    regs[a * BLOCK + i]
                } else {
                    regs[b * BLOCK + i]
                };
            }
            regs[d * BLOCK..d * BLOCK + n].copy_from_slice(&out[..n]);
        }
    }
}

fn two_regs(regs: &mut [f32], s: usize, d: usize) -> (&[f32], &mut [f32]) {
    if s < d {
        let (lo, hi) = regs.split_at_mut(d * BLOCK);
        (&lo[s * BLOCK..(s + 1) * BLOCK], &mut hi[..BLOCK])
    } else {
        let (lo, hi) = regs.split_at_mut(s * BLOCK);
        (&hi[..BLOCK], &mut lo[d * BLOCK..(d + 1) * BLOCK])
    }
}

crate::simd_dispatch! {
    pub fn apply_unary(op: UnOp, x: &mut [f32]) {
        macro_rules! map {
            ($f:expr) => {
                for v in x.iter_mut() {
                    *v = $f(*v);
                }
            };
        }
        match op {
            UnOp::Relu => map!(|v: f32| v.max(0.0)),
            UnOp::Relu6 => map!(|v: f32| v.clamp(0.0, 6.0)),
            UnOp::GeluExact => map!(math::gelu_exact),
            UnOp::GeluTanh => map!(math::gelu_tanh),
            UnOp::GeluSigmoid => map!(math::gelu_sigmoid),
            UnOp::Silu => map!(math::silu),
            UnOp::Sigmoid => map!(math::sigmoid),
            UnOp::SigmoidHard(a, b) => map!(|v: f32| (a * v + b).clamp(0.0, 1.0)),
            UnOp::Tanh => map!(math::tanh),
            UnOp::Exp => map!(math::exp),
            UnOp::Exp2 => map!(|v: f32| math::exp(v * std::f32::consts::LN_2)),
            UnOp::Log(e) => map!(|v: f32| (v + e).ln()),
            UnOp::Sqrt => map!(|v: f32| v.sqrt()),
            UnOp::Rsqrt(e) => map!(|v: f32| 1.0 / (v + e).sqrt()),
            UnOp::Inverse(e) => map!(|v: f32| 1.0 / (v + e)),
            UnOp::Abs => map!(|v: f32| v.abs()),
            UnOp::Sign => map!(|v: f32| if v > 0.0 { 1.0 } else if v < 0.0 { -1.0 } else { v }),
            UnOp::Square => map!(|v: f32| v * v),
            UnOp::Cube => map!(|v: f32| v * v * v),
            UnOp::Fourth => map!(|v: f32| (v * v) * (v * v)),
            UnOp::Sin => map!(|v: f32| v.sin()),
            UnOp::Cos => map!(|v: f32| v.cos()),
            UnOp::Erf => map!(math::erf),
            UnOp::Softplus => map!(math::softplus),
            UnOp::Softsign => map!(|v: f32| v / (1.0 + v.abs())),
            UnOp::Clip(a, b) => map!(|v: f32| v.max(a).min(b)),
            UnOp::LeakyRelu(a) => map!(|v: f32| if v >= 0.0 { v } else { a * v }),
            UnOp::Elu(a) => map!(|v: f32| if v > 0.0 { v } else { a * (math::exp(v) - 1.0) }),
            UnOp::Floor => map!(|v: f32| v.floor()),
            UnOp::Ceil => map!(|v: f32| v.ceil()),
            UnOp::Round => map!(|v: f32| v.round_ties_even()),
            UnOp::Not => map!(|v: f32| if v == 0.0 { 1.0 } else { 0.0 }),
            UnOp::RoundF16 => round_f16_inplace(x),
            UnOp::Copy => {}
            UnOp::HardSwish(s, t) => map!(|v: f32| math::hard_swish_affine(v, s, t)),
            UnOp::AddK(k) => map!(|v: f32| v + k),
            UnOp::MulK(k) => map!(|v: f32| v * k),
            UnOp::DivK(k) => map!(|v: f32| v / k),
            UnOp::KSub(k) => map!(|v: f32| k - v),
            UnOp::KDiv(k) => map!(|v: f32| k / v),
            UnOp::MaxK(k) => map!(|v: f32| v.max(k)),
            UnOp::MinK(k) => map!(|v: f32| v.min(k)),
        }
    }
}

crate::simd_dispatch! {
    pub fn apply_binary(op: BinOp, a: &[f32], b: &[f32], out: &mut [f32]) {
        macro_rules! zip {
            ($f:expr) => {
                for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
                    *o = $f(x, y);
                }
            };
        }
        let t = |c: bool| if c { 1.0f32 } else { 0.0 };
        match op {
            BinOp::Add => zip!(|x: f32, y: f32| x + y),
            BinOp::Sub => zip!(|x: f32, y: f32| x - y),
            BinOp::Mul => zip!(|x: f32, y: f32| x * y),
            BinOp::Div => zip!(|x: f32, y: f32| x / y),
            BinOp::Pow => zip!(|x: f32, y: f32| x.powf(y)),
            BinOp::Max => zip!(|x: f32, y: f32| x.max(y)),
            BinOp::Min => zip!(|x: f32, y: f32| x.min(y)),
            BinOp::FloorDiv => zip!(|x: f32, y: f32| (x / y).floor()),
            BinOp::Mod => zip!(|x: f32, y: f32| {
                let r = x % y;
                if r != 0.0 && ((r < 0.0) != (y < 0.0)) { r + y } else { r }
            }),
            BinOp::Eq => zip!(|x: f32, y: f32| t(x == y)),
            BinOp::Ne => zip!(|x: f32, y: f32| t(x != y)),
            BinOp::Gt => zip!(|x: f32, y: f32| t(x > y)),
            BinOp::Ge => zip!(|x: f32, y: f32| t(x >= y)),
            BinOp::Lt => zip!(|x: f32, y: f32| t(x < y)),
            BinOp::Le => zip!(|x: f32, y: f32| t(x <= y)),
            BinOp::And => zip!(|x: f32, y: f32| t(x != 0.0 && y != 0.0)),
            BinOp::Or => zip!(|x: f32, y: f32| t(x != 0.0 || y != 0.0)),
            BinOp::Xor => zip!(|x: f32, y: f32| t((x != 0.0) != (y != 0.0))),
        }
    }
}

/// Elementwise op over integer/bool operands, computed in f64 (exact for every int32).
#[derive(Clone, Debug)]
pub struct IntEw {
    pub shape: Vec<usize>,
    pub loads: Vec<Load>,
    pub op: IntOp,
    pub out: Vid,
    pub out_elem: Elem,
}

#[derive(Clone, Copy, Debug)]
pub enum IntOp {
    Un(UnOp),
    Bin(BinOp),
    Select,
    /// MIL `quantize` (float → int8/uint8).
    Quantize(Affine),
    /// MIL `dequantize` (int8/uint8 → float).
    Dequantize(Affine),
}

/// One per-tensor affine quantizer, as coremltools' `quantize`/`dequantize` value inference
/// computes it (`optimize/_utils.py`): `q = clip(round_half_even(x / scale) + zero, lo, hi)` with
/// the quotient rounded to the input's float type, and `x = scale · (q − zero)` rounded once to
/// the output's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Affine {
    /// The scale as stored (an fp16 scale is exact in f64).
    pub scale: f64,
    pub zero: f64,
    /// The integer type's range (`[-128, 127]` for int8, `[0, 255]` for uint8).
    pub lo: f64,
    pub hi: f64,
    /// The float type of the quantized input.
    pub float: Elem,
}

impl Affine {
    pub fn quantize(&self, x: f64) -> f64 {
        // The f64 quotient rounded to f32 or f16 is the correctly rounded quotient of that type
        // (f64 carries more than twice their significand bits plus two).
        let r = x / self.scale;
        let r = match self.float {
            Elem::F16 => f16::from_f64(r).to_f64(),
            _ => r as f32 as f64,
        };
        (r.round_ties_even() + self.zero).clamp(self.lo, self.hi)
    }

    /// Exact in f64 (an 8-bit integer times an f32 scale); the store rounds it once.
    pub fn dequantize(&self, q: f64) -> f64 {
        (q - self.zero) * self.scale
    }
}

unsafe fn load_f64(p: *const u8, elem: Elem, i: usize) -> f64 {
    match elem {
        Elem::F32 => *(p as *const f32).add(i) as f64,
        Elem::F16 => (*(p as *const f16).add(i)).to_f64(),
        Elem::I32 => *(p as *const i32).add(i) as f64,
        Elem::I8 => *(p as *const i8).add(i) as f64,
        Elem::U8 | Elem::Bool => *p.add(i) as f64,
    }
}

unsafe fn store_f64(p: *mut u8, elem: Elem, i: usize, x: f64) {
    match elem {
        Elem::F32 => *(p as *mut f32).add(i) = x as f32,
        Elem::F16 => *(p as *mut f16).add(i) = f16::from_f64(x),
        Elem::I32 => *(p as *mut i32).add(i) = x as i32,
        Elem::I8 => *(p as *mut i8).add(i) = x as i8,
        Elem::U8 => *p.add(i) = x as u8,
        Elem::Bool => *p.add(i) = (x != 0.0) as u8,
    }
}

fn unary_f64(op: UnOp, v: f64) -> f64 {
    match op {
        UnOp::Abs => v.abs(),
        UnOp::Sign => v.signum() * (v != 0.0) as i32 as f64,
        UnOp::Square => v * v,
        UnOp::Relu => v.max(0.0),
        UnOp::Not => (v == 0.0) as i32 as f64,
        UnOp::Clip(a, b) => v.max(a as f64).min(b as f64),
        UnOp::Copy => v,
        _ => {
            let mut x = [v as f32];
            apply_unary(op, &mut x);
            x[0] as f64
        }
    }
}

impl IntEw {
    pub fn run(&self, cx: &Cx) {
        let n: usize = self.shape.iter().product();
        let rank = self.shape.len();
        let ptrs: [*const u8; 3] = std::array::from_fn(|j| {
            self.loads
                .get(j)
                .map_or(std::ptr::null(), |l| cx.ptr(l.value) as *const u8)
        });
        let out = cx.ptr(self.out);
        let mut idx = [0usize; 8];
        let mut offs = [0usize; 3];
        for i in 0..n {
            // SAFETY: offsets derived from broadcast strides of validated shapes.
            unsafe {
                let v = |j: usize| load_f64(ptrs[j], self.loads[j].elem, offs[j]);
                let r = match self.op {
                    IntOp::Un(op) => unary_f64(op, v(0)),
                    IntOp::Bin(op) => {
                        let (a, b) = (v(0), v(1));
                        match op {
                            BinOp::Div if self.out_elem == Elem::I32 => (a / b).trunc(),
                            _ => op.apply_f64(a, b),
                        }
                    }
                    IntOp::Select => {
                        if v(0) != 0.0 {
                            v(1)
                        } else {
                            v(2)
                        }
                    }
                    IntOp::Quantize(a) => a.quantize(v(0)),
                    IntOp::Dequantize(a) => a.dequantize(v(0)),
                };
                store_f64(out, self.out_elem, i, r);
            }
            let mut a = rank;
            while a > 0 {
                a -= 1;
                idx[a] += 1;
                for (j, l) in self.loads.iter().enumerate() {
                    offs[j] += l.strides[a];
                }
                if idx[a] < self.shape[a] {
                    break;
                }
                for (j, l) in self.loads.iter().enumerate() {
                    offs[j] -= l.strides[a] * idx[a];
                }
                idx[a] = 0;
            }
        }
    }
}
