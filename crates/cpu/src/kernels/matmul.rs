//! Batched matmul / linear on the `gemm` crate, an own multithreaded GEMV for m ≤ 2 against
//! prepared weights, and an elementwise epilogue (bias, activation, residual, f16 rounding).

use super::ew::Chain;
use super::sgemm::{sgemm, Strides};
use super::Cx;
use crate::plan::{Value, Vid};
use crate::tensor::{Elem, SendPtr};
use half::f16;
use half::slice::HalfFloatSliceExt;

/// A compile-time weight stored as `wt[n][k]` (row j holds the k-vector of output column j):
/// read in place from the weights blob, or a copy shared with every other plan that prepared the
/// same contents.
#[derive(Debug)]
pub struct Prepared {
    pub(crate) wt: crate::known::Floats,
    pub k: usize,
}

#[derive(Debug)]
pub enum Rhs {
    /// A runtime value; `rs`/`cs` are the k- and n-strides inside one matrix.
    Value {
        v: Vid,
        elem: Elem,
        rs: usize,
        cs: usize,
        batch_strides: Vec<usize>,
    },
    Prepared(Prepared),
    /// A constant packed into column panels (any number of rows; see `packed`).
    Packed(super::packed::PackedB),
    /// A constant rounded to bf16, for products with bf16 operands (see `bf16`).
    Bf16(super::bf16::Bf16B),
    /// Compressed weight for m ≤ 2 (decode GEMV without expansion).
    Quant(super::quant::QuantWeight),
    /// A block-quantized constant `[n, k]` viewed in the weights blob (the weight of a `linear`),
    /// computed on directly for any number of rows.
    Blocks(std::sync::Arc<super::quant_blocks::QuantTensor>),
}

#[derive(Debug)]
pub struct Matmul {
    pub a: Vid,
    pub a_elem: Elem,
    /// Strides of A within one matrix: row (m) and column (k).
    pub a_rs: usize,
    pub a_cs: usize,
    pub a_batch_strides: Vec<usize>,
    pub rhs: Rhs,
    pub batch: Vec<usize>,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    /// Where the raw f32 product goes: the output itself, or an f32 temporary read by `epilogue`.
    pub raw: Vid,
    pub epilogue: Option<Chain>,
    /// Sums are rounded to fp16 after every addition (the pessimistic reading of fp16 hardware,
    /// `Accumulation::F16`), in a plain loop.
    pub acc16: bool,
}

fn batch_offsets(batch: &[usize], strides: &[usize], b: usize) -> usize {
    let mut rem = b;
    let mut off = 0;
    for i in (0..batch.len()).rev() {
        off += (rem % batch[i]) * strides[i];
        rem /= batch[i];
    }
    off
}

impl Matmul {
    fn nbatch(&self) -> usize {
        self.batch.iter().product()
    }

    fn a_len(&self, values: &[Value]) -> usize {
        values[self.a].len()
    }

    pub fn flops(&self) -> usize {
        2 * self.nbatch() * self.m * self.n * self.k
    }

    pub fn scratch_floats(&self, values: &[Value], threads: usize) -> usize {
        let e = self
            .epilogue
            .as_ref()
            .map_or(0, |e| e.scratch_floats(threads));
        if self.acc16 && !matches!(self.rhs, Rhs::Quant(_)) {
            let b = match &self.rhs {
                Rhs::Value { v, .. } => values[*v].len(),
                _ => 0,
            };
            return (self.a_len(values) + b).max(e);
        }
        if let Rhs::Blocks(q) = &self.rhs {
            let e = self
                .epilogue
                .as_ref()
                .map_or(0, |e| e.scratch_floats(threads));
            return super::quant_blocks::scratch_floats(self.nbatch() * self.m, q, threads).max(e);
        }
        let mut s = 0;
        if self.a_elem != Elem::F32 {
            s += self.a_len(values);
        }
        if let Rhs::Value { v, elem, .. } = &self.rhs {
            if *elem != Elem::F32 {
                s += values[*v].len();
            }
        }
        if let Rhs::Quant(q) = &self.rhs {
            s += self.nbatch() * self.m * q.blocks();
        }
        if let Rhs::Bf16(b) = &self.rhs {
            s += b.scratch_floats(self.m);
        }
        s.max(
            self.epilogue
                .as_ref()
                .map_or(0, |e| e.scratch_floats(threads)),
        )
    }

    pub fn run(&self, cx: &Cx) {
        if self.acc16 && !matches!(self.rhs, Rhs::Quant(_)) {
            self.run_acc16(cx);
            if let Some(e) = &self.epilogue {
                e.run(cx);
            }
            return;
        }
        if let Rhs::Blocks(q) = &self.rhs {
            super::quant_blocks::run(self, q, cx);
            if let Some(e) = &self.epilogue {
                e.run(cx);
            }
            return;
        }
        let a_len = cx.len(self.a);
        let mut used = 0;
        // f32 views of the operands (converted into scratch when stored as f16/ints)
        let a: *const f32 = if self.a_elem == Elem::F32 {
            cx.ptr(self.a) as *const f32
        } else {
            let s = cx.scratch_at(0, a_len);
            used += a_len;
            unsafe { to_f32(cx.ptr(self.a), self.a_elem, s) };
            s.as_ptr()
        };
        if let Rhs::Quant(q) = &self.rhs {
            self.run_quant(cx, q, a, a_len);
            if let Some(e) = &self.epilogue {
                e.run(cx);
            }
            return;
        }
        if let Rhs::Packed(_) | Rhs::Bf16(_) = &self.rhs {
            let out = cx.ptr(self.raw) as *mut f32;
            let scratch = match &self.rhs {
                Rhs::Bf16(w) => cx.scratch_at(used, w.scratch_floats(self.m)),
                _ => &mut [],
            };
            for bi in 0..self.nbatch() {
                let a_off = batch_offsets(&self.batch, &self.a_batch_strides, bi);
                // SAFETY: A's strides and offsets and the m × n output were validated at compile
                // time; batches write disjoint output rows.
                unsafe {
                    let (a, c) = (a.add(a_off), out.add(bi * self.m * self.n));
                    match &self.rhs {
                        Rhs::Packed(p) => {
                            super::packed::gemm(a, self.a_rs, self.a_cs, self.m, p, c, self.n, cx)
                        }
                        Rhs::Bf16(w) => super::bf16::gemm(
                            a, self.a_rs, self.a_cs, self.m, w, c, self.n, cx, scratch,
                        ),
                        _ => unreachable!("the packed and bf16 right-hand sides only"),
                    }
                };
            }
            if let Some(e) = &self.epilogue {
                e.run(cx);
            }
            return;
        }
        let (b, b_rs, b_cs, b_bs): (*const f32, usize, usize, &[usize]) = match &self.rhs {
            Rhs::Quant(_) | Rhs::Packed(_) | Rhs::Bf16(_) => unreachable!("handled above"),
            Rhs::Prepared(p) => (p.wt.as_ptr(), 1, p.k, &[]),
            Rhs::Blocks(_) => return,
            Rhs::Value {
                v,
                elem,
                rs,
                cs,
                batch_strides,
            } => {
                let ptr = if *elem == Elem::F32 {
                    cx.ptr(*v) as *const f32
                } else {
                    let n = cx.len(*v);
                    let s = cx.scratch_at(used, n);
                    unsafe { to_f32(cx.ptr(*v), *elem, s) };
                    s.as_ptr()
                };
                (ptr, *rs, *cs, batch_strides.as_slice())
            }
        };
        let out = cx.ptr(self.raw) as *mut f32;
        let (m, n, k) = (self.m, self.n, self.k);
        let nb = self.nbatch();
        let a_p = SendPtr(a as *mut f32);
        let b_p = SendPtr(b as *mut f32);
        let o_p = SendPtr(out);
        let big = self.flops() >= 1 << 20 && cx.threads > 1;
        if let (Rhs::Prepared(p), true) = (&self.rhs, m <= 2) {
            // decode-style GEMV: every A row against every weight row, split over n.
            let rows = nb * m;
            // the weight streams from L3 or memory, so it is split from 64k values (256 KiB):
            // ResNet's 512 → 1000 classifier (1.0 MFLOP) took 0.10 ms on one thread of two
            let chunks = if cx.threads > 1 && (big || n * k >= 1 << 16) {
                (cx.threads * 4).min(n.div_ceil(64))
            } else {
                1
            };
            let per = n.div_ceil(chunks.max(1));
            let wt = SendPtr(p.wt.as_ptr() as *mut f32);
            let (a_rs, a_cs) = (self.a_rs, self.a_cs);
            let a_bs = &self.a_batch_strides;
            let batch = &self.batch;
            cx.par_for(chunks.max(1), &|c| {
                let j0 = c * per;
                let j1 = (j0 + per).min(n);
                for r in 0..rows {
                    let (bi, i) = (r / m, r % m);
                    let a_off = batch_offsets(batch, a_bs, bi) + i * a_rs;
                    // SAFETY: offsets come from validated shapes; rows of `out` are disjoint per chunk.
                    unsafe {
                        let orow = std::slice::from_raw_parts_mut(o_p.get().add(r * n), n);
                        if a_cs == 1 {
                            let x = std::slice::from_raw_parts(a_p.get().add(a_off), k);
                            for j in j0..j1 {
                                let w = std::slice::from_raw_parts(wt.get().add(j * k), k);
                                orow[j] = dot(x, w);
                            }
                        } else {
                            for j in j0..j1 {
                                let mut s = 0.0;
                                for kk in 0..k {
                                    s += *a_p.get().add(a_off + kk * a_cs)
                                        * *wt.get().add(j * k + kk);
                                }
                                orow[j] = s;
                            }
                        }
                    }
                }
            });
        } else if let (Rhs::Prepared(p), 1, true) = (&self.rhs, self.a_cs, super::dots::applies()) {
            // weight rows against A's rows, both read in place along k
            for bi in 0..nb {
                let a_off = batch_offsets(&self.batch, &self.a_batch_strides, bi);
                // SAFETY: A's offsets and strides and the weight's n × k were validated at
                // compile time; batches write disjoint output rows.
                unsafe {
                    super::dots::gemm(
                        a.add(a_off),
                        self.a_rs,
                        m,
                        p.wt.as_ptr(),
                        k,
                        n,
                        k,
                        out.add(bi * m * n),
                        n,
                        cx,
                    )
                };
            }
        } else {
            let per_batch_par = big && nb >= cx.threads && m * n * k < 1 << 21;
            let run_one = |bi: usize, split: bool| {
                let a_off = batch_offsets(&self.batch, &self.a_batch_strides, bi);
                let b_off = if b_bs.is_empty() {
                    0
                } else {
                    batch_offsets(&self.batch, b_bs, bi)
                };
                // SAFETY: strides/offsets describe in-bounds matrices (validated at compile time).
                unsafe {
                    sgemm(
                        cx,
                        split,
                        (m, n, k),
                        o_p.get().add(bi * m * n),
                        Strides(1, n as isize),
                        a_p.get().add(a_off),
                        Strides(self.a_cs as isize, self.a_rs as isize),
                        b_p.get().add(b_off),
                        Strides(b_cs as isize, b_rs as isize),
                    )
                }
            };
            if per_batch_par {
                cx.par_for(nb, &|bi| run_one(bi, false));
            } else {
                for bi in 0..nb {
                    run_one(bi, big);
                }
            }
        }
        if let Some(e) = &self.epilogue {
            e.run(cx);
        }
    }
}

impl Matmul {
    /// Every product summed in order with the running sum rounded to fp16 after each addition
    /// (an fp16 product of fp16 operands is exact in f32). One thread: a preview of what fp16
    /// accumulation would do, not a fast path.
    fn run_acc16(&self, cx: &Cx) {
        let r16 = |v: f32| f16::from_f32(v).to_f32();
        let (m, n, k) = (self.m, self.n, self.k);
        let a_len = cx.len(self.a);
        let a = cx.scratch_at(0, a_len);
        // SAFETY: the value holds a_len elements of a_elem.
        unsafe { to_f32(cx.ptr(self.a), self.a_elem, a) };
        let out = cx.ptr(self.raw) as *mut f32;
        let acc_rows = |bi: usize, b_at: &dyn Fn(usize, usize) -> f32| {
            let a_off = batch_offsets(&self.batch, &self.a_batch_strides, bi);
            for i in 0..m {
                for j in 0..n {
                    let mut acc = 0.0f32;
                    for kk in 0..k {
                        let x = a[a_off + i * self.a_rs + kk * self.a_cs];
                        acc = r16(acc + x * b_at(j, kk));
                    }
                    // SAFETY: out holds nbatch · m · n floats.
                    unsafe { *out.add((bi * m + i) * n + j) = acc };
                }
            }
        };
        match &self.rhs {
            Rhs::Prepared(p) => {
                for bi in 0..self.nbatch() {
                    acc_rows(bi, &|j, kk| p.wt[j * k + kk]);
                }
            }
            Rhs::Value {
                v,
                elem,
                rs,
                cs,
                batch_strides,
            } => {
                let len = cx.len(*v);
                let b = cx.scratch_at(a_len, len);
                // SAFETY: the value holds len elements of elem.
                unsafe { to_f32(cx.ptr(*v), *elem, b) };
                for bi in 0..self.nbatch() {
                    let off = if batch_strides.is_empty() {
                        0
                    } else {
                        batch_offsets(&self.batch, batch_strides, bi)
                    };
                    acc_rows(bi, &|j, kk| b[off + kk * rs + j * cs]);
                }
            }
            Rhs::Packed(p) => {
                for bi in 0..self.nbatch() {
                    acc_rows(bi, &|j, kk| p.at(kk, j));
                }
            }
            Rhs::Bf16(p) => {
                for bi in 0..self.nbatch() {
                    acc_rows(bi, &|j, kk| p.at(kk, j));
                }
            }
            Rhs::Blocks(q) => {
                let w = q.dequantize();
                for bi in 0..self.nbatch() {
                    acc_rows(bi, &|j, kk| w[j * k + kk]);
                }
            }
            Rhs::Quant(_) => {}
        }
    }

    /// Decode GEMV against a compressed weight: rows of A must be contiguous (linear).
    fn run_quant(&self, cx: &Cx, q: &super::quant::QuantWeight, a: *const f32, a_len: usize) {
        let rows = self.nbatch() * self.m;
        let nb = q.blocks();
        let used = if self.a_elem == Elem::F32 { 0 } else { a_len };
        let xsum = cx.scratch_at(used, rows * nb);
        // SAFETY: A holds rows×k contiguous floats (linear operands are dense).
        let x = unsafe { std::slice::from_raw_parts(a, rows * self.k) };
        for r in 0..rows {
            for b in 0..nb {
                xsum[r * nb + b] = x[r * self.k + b * q.block..r * self.k + (b + 1) * q.block]
                    .iter()
                    .sum();
            }
        }
        let xsum: &[f32] = xsum;
        let out = SendPtr(cx.ptr(self.raw) as *mut f32);
        let n = self.n;
        let chunks = if cx.threads > 1 && n * self.k >= 1 << 16 {
            (cx.threads * 4).min(n.div_ceil(16))
        } else {
            1
        };
        let per = n.div_ceil(chunks);
        cx.par_for(chunks, &|c| {
            let (j0, j1) = (c * per, ((c + 1) * per).min(n));
            for r in 0..rows {
                // SAFETY: chunks write disjoint column ranges of each output row.
                let y = unsafe { std::slice::from_raw_parts_mut(out.get().add(r * n), n) };
                q.rows(
                    &x[r * self.k..(r + 1) * self.k],
                    &xsum[r * nb..(r + 1) * nb],
                    y,
                    j0,
                    j1,
                );
            }
        });
    }
}

/// Converts a whole runtime buffer of `elem` to f32.
///
/// # Safety
/// `src` must hold `dst.len()` elements of `elem`.
pub unsafe fn to_f32(src: *const u8, elem: Elem, dst: &mut [f32]) {
    let n = dst.len();
    match elem {
        Elem::F32 => dst.copy_from_slice(std::slice::from_raw_parts(src as *const f32, n)),
        Elem::F16 => std::slice::from_raw_parts(src as *const f16, n).convert_to_f32_slice(dst),
        _ => super::ew::load_block(src, elem, 0, 1, dst),
    }
}

crate::simd_dispatch! {
    pub fn dot(x: &[f32], w: &[f32]) -> f32 {
        let n = x.len().min(w.len());
        let (x, w) = (&x[..n], &w[..n]);
        let mut acc = [0f32; 32];
        let mut xi = x.chunks_exact(32);
        let mut wi = w.chunks_exact(32);
        for (xs, ws) in (&mut xi).zip(&mut wi) {
            let xs: &[f32; 32] = xs.try_into().unwrap_or(&[0.0; 32]);
            let ws: &[f32; 32] = ws.try_into().unwrap_or(&[0.0; 32]);
            for i in 0..32 {
                acc[i] = xs[i].mul_add(ws[i], acc[i]);
            }
        }
        let mut s = 0.0;
        for (a, b) in xi.remainder().iter().zip(wi.remainder()) {
            s = a.mul_add(*b, s);
        }
        let mut t = 0.0;
        for a in acc {
            t += a;
        }
        t + s
    }
}
