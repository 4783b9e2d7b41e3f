//! Row kernels over an [outer, r, inner] view: reductions, softmax, norms, cumsum, topk.

use super::ew::{load_block, store_block, BLOCK};
use super::{math, Cx};
use crate::plan::Vid;
use crate::tensor::{Elem, SendPtr};

/// Inner-axis elements one column-reduction job accumulates.
const COLUMN_CHUNK: usize = 256;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ReduceOp {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
    LogSumExp,
    L2,
    L1,
    SumSquare,
    LogSum,
    ArgMax,
    ArgMin,
}

#[derive(Debug)]
pub enum RowKind {
    Reduce(ReduceOp),
    Softmax,
    /// (x - mean) / sqrt(var + eps) * gamma + beta over each row.
    LayerNorm {
        gamma: Option<Vec<f32>>,
        beta: Option<Vec<f32>>,
        eps: f32,
    },
    /// Per-channel gamma/beta indexed by row % channels.
    InstanceNorm {
        gamma: Vec<f32>,
        beta: Vec<f32>,
        channels: usize,
        eps: f32,
    },
    L2Norm {
        eps: f32,
    },
    /// x * rsqrt(mean(x²) + eps; rsqrt's own epsilon eps2) [* weight], with the fp16 rounding
    /// points of the unfused pattern.
    RmsNorm {
        weight: Option<Vec<f32>>,
        eps: f32,
        eps2: f32,
        round16: bool,
    },
    Cumsum {
        exclusive: bool,
        reverse: bool,
    },
    /// Writes the k largest (or smallest) along the row: values to `out`, indices to `out2`.
    TopK {
        k: usize,
        ascending: bool,
    },
}

#[derive(Debug)]
pub struct Rows {
    pub x: Vid,
    pub x_elem: Elem,
    pub out: Vid,
    pub out_elem: Elem,
    pub out2: Option<Vid>,
    pub outer: usize,
    pub r: usize,
    pub inner: usize,
    pub kind: RowKind,
    /// Sums are rounded to fp16 after every addition (`Accumulation::F16`).
    pub acc16: bool,
}

fn r16(v: f32) -> f32 {
    half::f16::from_f32(v).to_f32()
}

/// Σ x in order, the running sum rounded to fp16 after each addition.
fn sum16(x: impl IntoIterator<Item = f32>) -> f32 {
    x.into_iter().fold(0.0, |a, b| r16(a + b))
}

impl Rows {
    fn out_len(&self) -> usize {
        match self.kind {
            RowKind::Reduce(_) => 1,
            RowKind::TopK { k, .. } => k,
            _ => self.r,
        }
    }

    fn rows(&self) -> usize {
        self.outer * self.inner
    }

    fn tasks(&self, threads: usize) -> usize {
        let work = self.rows() * self.r;
        if threads <= 1 || work < 1 << 15 || self.rows() < 2 {
            1
        } else {
            threads.min(self.rows())
        }
    }

    pub fn scratch_floats(&self, threads: usize) -> usize {
        if self.columnwise() {
            return self.column_tasks(threads) * 2 * COLUMN_CHUNK;
        }
        // row buffer + (topk) index buffer as floats
        self.tasks(threads) * (2 * self.r + BLOCK)
    }

    /// Sum/mean/max/min over a strided axis accumulate whole contiguous rows of the inner axes
    /// instead of gathering one strided row per output.
    fn columnwise(&self) -> bool {
        matches!(
            self.kind,
            RowKind::Reduce(ReduceOp::Sum | ReduceOp::Mean | ReduceOp::Max | ReduceOp::Min)
        ) && self.inner > 1
    }

    fn column_jobs(&self) -> usize {
        self.outer * self.inner.div_ceil(COLUMN_CHUNK)
    }

    fn column_tasks(&self, threads: usize) -> usize {
        if threads <= 1 || self.elements() < 1 << 15 {
            1
        } else {
            threads.min(self.column_jobs())
        }
    }

    fn run_columns(&self, op: ReduceOp, cx: &Cx) {
        let (r, inner) = (self.r, self.inner);
        let chunks = inner.div_ceil(COLUMN_CHUNK);
        let jobs = self.column_jobs();
        let tasks = self.column_tasks(cx.threads);
        let scratch = SendPtr(cx.scratch(tasks * 2 * COLUMN_CHUNK).as_mut_ptr());
        let xp = SendPtr(cx.ptr(self.x));
        let op_ptr = SendPtr(cx.ptr(self.out));
        let per = jobs.div_ceil(tasks);
        let init = match op {
            ReduceOp::Max => f32::NEG_INFINITY,
            ReduceOp::Min => f32::INFINITY,
            _ => 0.0,
        };
        cx.par_for(tasks, &|t| {
            // SAFETY: each task owns its scratch region and a disjoint set of output chunks.
            let buf = unsafe {
                std::slice::from_raw_parts_mut(
                    scratch.get().add(t * 2 * COLUMN_CHUNK),
                    2 * COLUMN_CHUNK,
                )
            };
            let (acc, row) = buf.split_at_mut(COLUMN_CHUNK);
            for job in t * per..((t + 1) * per).min(jobs) {
                let (o, c) = (job / chunks, job % chunks);
                let i0 = c * COLUMN_CHUNK;
                let w = COLUMN_CHUNK.min(inner - i0);
                let (acc, row) = (&mut acc[..w], &mut row[..w]);
                acc.fill(init);
                for j in 0..r {
                    // SAFETY: the row [o, j, i0..i0 + w] lies inside x.
                    unsafe { load_block(xp.get(), self.x_elem, (o * r + j) * inner + i0, 1, row) };
                    match op {
                        ReduceOp::Max => {
                            acc.iter_mut().zip(&*row).for_each(|(a, &b)| *a = a.max(b))
                        }
                        ReduceOp::Min => {
                            acc.iter_mut().zip(&*row).for_each(|(a, &b)| *a = a.min(b))
                        }
                        _ if self.acc16 => acc
                            .iter_mut()
                            .zip(&*row)
                            .for_each(|(a, &b)| *a = r16(*a + b)),
                        _ => acc.iter_mut().zip(&*row).for_each(|(a, &b)| *a += b),
                    }
                }
                if op == ReduceOp::Mean {
                    let inv = 1.0 / r as f32;
                    acc.iter_mut().for_each(|a| *a *= inv);
                }
                // SAFETY: the outputs [o, i0..i0 + w] lie inside out.
                unsafe { store_block(op_ptr.get(), self.out_elem, o * inner + i0, acc) };
            }
        });
    }

    pub fn elements(&self) -> usize {
        self.rows() * self.r
    }

    pub fn run(&self, cx: &Cx) {
        if let (true, RowKind::Reduce(op)) = (self.columnwise(), &self.kind) {
            return self.run_columns(*op, cx);
        }
        let rows = self.rows();
        let tasks = self.tasks(cx.threads);
        let per_task = 2 * self.r + BLOCK;
        let scratch = SendPtr(cx.scratch(tasks * per_task).as_mut_ptr());
        let xp = SendPtr(cx.ptr(self.x));
        let op = SendPtr(cx.ptr(self.out));
        let op2 = SendPtr(self.out2.map_or(std::ptr::null_mut(), |v| cx.ptr(v)));
        let per = rows.div_ceil(tasks);
        cx.par_for(tasks, &|t| {
            // SAFETY: each task owns a scratch region and a disjoint set of rows.
            let buf = unsafe {
                std::slice::from_raw_parts_mut(scratch.get().add(t * per_task), per_task)
            };
            let (row, rest) = buf.split_at_mut(self.r);
            for q in t * per..((t + 1) * per).min(rows) {
                let (o, i) = (q / self.inner, q % self.inner);
                let in_off = o * self.r * self.inner + i;
                let out_off = o * self.out_len() * self.inner + i;
                unsafe {
                    gather(xp.get(), self.x_elem, in_off, self.inner, row);
                    self.row(q, row, rest, op.get(), op2.get(), out_off);
                }
            }
        });
    }

    /// # Safety
    /// `out`/`out2` point at this kernel's outputs; `out_off` is this row's first element.
    unsafe fn row(
        &self,
        q: usize,
        x: &mut [f32],
        rest: &mut [f32],
        out: *mut u8,
        out2: *mut u8,
        out_off: usize,
    ) {
        let n = x.len() as f32;
        let st = self.inner;
        match &self.kind {
            RowKind::Reduce(op) => {
                let v = match op {
                    ReduceOp::Sum if self.acc16 => sum16(x.iter().copied()),
                    ReduceOp::Mean if self.acc16 => sum16(x.iter().copied()) / n,
                    _ => reduce(*op, x),
                };
                if matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin) {
                    *(out as *mut i32).add(out_off) = v as i32;
                } else {
                    store_block(out, self.out_elem, out_off, &[v]);
                }
                return;
            }
            RowKind::Softmax => {
                let m = max_of(x);
                let mut s = exp_sub_sum(x, m);
                if self.acc16 {
                    s = sum16(x.iter().map(|&v| r16(v)));
                }
                let inv = 1.0 / s;
                x.iter_mut().for_each(|v| *v *= inv);
            }
            RowKind::LayerNorm { gamma, beta, eps } => {
                let (mean, var) = if self.acc16 {
                    let mean = sum16(x.iter().copied()) / n;
                    (
                        mean,
                        sum16(x.iter().map(|v| r16((v - mean) * (v - mean)))) / n,
                    )
                } else {
                    mean_var(x)
                };
                normalize(
                    x,
                    mean,
                    1.0 / (var + eps).sqrt(),
                    gamma.as_deref(),
                    beta.as_deref().map_or(Shift::None, Shift::Each),
                );
            }
            RowKind::InstanceNorm {
                gamma,
                beta,
                channels,
                eps,
            } => {
                let c = (q / self.inner) % channels;
                let (mean, var) = mean_var(x);
                let inv = 1.0 / (var + eps).sqrt();
                normalize(x, mean, inv * gamma[c], None, Shift::All(beta[c]));
            }
            RowKind::L2Norm { eps } => {
                let s: f32 = if self.acc16 {
                    sum16(x.iter().map(|v| r16(v * v)))
                } else {
                    x.iter().map(|v| v * v).sum()
                };
                let inv = 1.0 / (s + eps).sqrt();
                x.iter_mut().for_each(|v| *v *= inv);
            }
            RowKind::RmsNorm {
                weight,
                eps,
                eps2,
                round16,
            } => {
                let r16 = |v: f32| {
                    if *round16 {
                        half::f16::from_f32(v).to_f32()
                    } else {
                        v
                    }
                };
                if *round16 {
                    // unfused: mul(x,x) → reduce_mean → add eps → rsqrt → mul x → mul w, each
                    // rounded
                    let sq = x.iter().map(|v| r16(v * v));
                    let total = if self.acc16 {
                        sum16(sq)
                    } else {
                        sq.sum::<f32>()
                    };
                    let ms = r16(total / n);
                    let inv = r16(1.0 / (r16(ms + eps) + eps2).sqrt());
                    for (j, v) in x.iter_mut().enumerate() {
                        let y = r16(*v * inv);
                        *v = match weight {
                            Some(w) => y * w[j],
                            None => y,
                        };
                    }
                } else {
                    let inv = 1.0 / (sum_squares(x) / n + eps + eps2).sqrt();
                    scale_by(x, inv, weight.as_deref());
                }
            }
            RowKind::Cumsum { exclusive, reverse } => {
                let len = x.len();
                let mut acc = 0.0f32;
                for j in 0..len {
                    let idx = if *reverse { len - 1 - j } else { j };
                    let v = x[idx];
                    if *exclusive {
                        x[idx] = acc;
                        acc += v;
                    } else {
                        acc += v;
                        x[idx] = acc;
                    }
                }
            }
            RowKind::TopK { k, ascending } => {
                let len = x.len();
                let idx = &mut rest[..len];
                for (j, v) in idx.iter_mut().enumerate() {
                    *v = f32::from_bits(j as u32);
                }
                let key = |j: &f32| x[j.to_bits() as usize];
                idx.sort_unstable_by(|a, b| {
                    let (va, vb) = (key(a), key(b));
                    let ord = if *ascending {
                        va.total_cmp(&vb)
                    } else {
                        vb.total_cmp(&va)
                    };
                    ord.then(a.to_bits().cmp(&b.to_bits()))
                });
                for j in 0..*k {
                    let src = idx[j].to_bits() as usize;
                    store_block(out, self.out_elem, out_off + j * st, &[x[src]]);
                    if !out2.is_null() {
                        *(out2 as *mut i32).add(out_off + j * st) = src as i32;
                    }
                }
                return;
            }
        }
        scatter(out, self.out_elem, out_off, st, x);
    }
}

fn reduce(op: ReduceOp, x: &[f32]) -> f32 {
    let n = x.len() as f32;
    match op {
        ReduceOp::Sum => sum(x),
        ReduceOp::Mean => sum(x) / n,
        ReduceOp::Max => x.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)),
        ReduceOp::Min => x.iter().fold(f32::INFINITY, |a, &b| a.min(b)),
        ReduceOp::Prod => x.iter().product(),
        ReduceOp::LogSumExp => {
            let m = x.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
            if m == f32::NEG_INFINITY {
                return m;
            }
            m + x.iter().map(|&v| math::exp(v - m)).sum::<f32>().ln()
        }
        ReduceOp::L2 => x.iter().map(|v| v * v).sum::<f32>().sqrt(),
        ReduceOp::L1 => x.iter().map(|v| v.abs()).sum(),
        ReduceOp::SumSquare => x.iter().map(|v| v * v).sum(),
        ReduceOp::LogSum => sum(x).ln(),
        ReduceOp::ArgMax => {
            let mut best = 0;
            for j in 1..x.len() {
                if x[j] > x[best] {
                    best = j;
                }
            }
            best as f32
        }
        ReduceOp::ArgMin => {
            let mut best = 0;
            for j in 1..x.len() {
                if x[j] < x[best] {
                    best = j;
                }
            }
            best as f32
        }
    }
}

crate::simd_dispatch! {
    pub fn sum(x: &[f32]) -> f32 {
        let mut acc = [0f32; 16];
        let mut it = x.chunks_exact(16);
        for ch in &mut it {
            let ch: &[f32; 16] = ch.try_into().unwrap_or(&[0.0; 16]);
            for i in 0..16 {
                acc[i] += ch[i];
            }
        }
        let mut s: f32 = it.remainder().iter().sum();
        for a in acc {
            s += a;
        }
        s
    }
}

/// Σ (v − c)² over x: a fused multiply-add chain in each of 16 lanes, then across them (the
/// tail added in order). With c = 0 this is Σ v² exactly (v − 0 is v).
#[inline(always)]
fn squared_deviations(x: &[f32], c: f32) -> f32 {
    let mut acc = [0f32; 16];
    let mut it = x.chunks_exact(16);
    for ch in &mut it {
        for i in 0..16 {
            let d = ch[i] - c;
            acc[i] = d.mul_add(d, acc[i]);
        }
    }
    let mut s: f32 = it.remainder().iter().map(|v| (v - c) * (v - c)).sum();
    for a in acc {
        s += a;
    }
    s
}

crate::simd_dispatch! {
    /// Σ x² in 16 lanes, then across them.
    fn sum_squares(x: &[f32]) -> f32 {
        squared_deviations(x, 0.0)
    }
}

crate::simd_dispatch! {
    /// The mean of x and the mean of its squared deviations, each summed in 16 lanes.
    fn mean_var(x: &[f32]) -> (f32, f32) {
        let n = x.len() as f32;
        let mean = sum(x) / n;
        (mean, squared_deviations(x, mean) / n)
    }
}

/// What [`normalize`] adds last: nothing, β elementwise, or one shift for the whole row.
#[derive(Clone, Copy)]
enum Shift<'a> {
    None,
    Each(&'a [f32]),
    All(f32),
}

crate::simd_dispatch! {
    /// x ← (x − mean)·k (·γ elementwise) (+ the shift).
    fn normalize(x: &mut [f32], mean: f32, k: f32, gamma: Option<&[f32]>, shift: Shift<'_>) {
        match (gamma, shift) {
            (Some(g), Shift::Each(b)) => {
                for ((v, &g), &b) in x.iter_mut().zip(g).zip(b) {
                    *v = ((*v - mean) * k).mul_add(g, b);
                }
            }
            (Some(g), Shift::All(b)) => {
                x.iter_mut().zip(g).for_each(|(v, &g)| *v = (*v - mean) * k * g + b)
            }
            (Some(g), Shift::None) => {
                x.iter_mut().zip(g).for_each(|(v, &g)| *v = (*v - mean) * k * g)
            }
            (None, Shift::Each(b)) => {
                x.iter_mut().zip(b).for_each(|(v, &b)| *v = (*v - mean) * k + b)
            }
            (None, Shift::All(b)) => x.iter_mut().for_each(|v| *v = (*v - mean) * k + b),
            (None, Shift::None) => x.iter_mut().for_each(|v| *v = (*v - mean) * k),
        }
    }
}

crate::simd_dispatch! {
    /// x ← x·k (·w elementwise).
    fn scale_by(x: &mut [f32], k: f32, w: Option<&[f32]>) {
        match w {
            Some(w) => x.iter_mut().zip(w).for_each(|(v, &g)| *v = *v * k * g),
            None => x.iter_mut().for_each(|v| *v *= k),
        }
    }
}

crate::simd_dispatch! {
    fn exp_sub(x: &mut [f32], m: f32) {
        for v in x.iter_mut() {
            *v = math::exp(*v - m);
        }
    }
}

/// x ← exp(x − m); returns the sum (a map then a lane-parallel sum, so both vectorise).
pub fn exp_sub_sum(x: &mut [f32], m: f32) -> f32 {
    exp_sub(x, m);
    sum(x)
}

crate::simd_dispatch! {
    pub fn max_of(x: &[f32]) -> f32 {
        let mut acc = [f32::NEG_INFINITY; 16];
        let mut it = x.chunks_exact(16);
        for ch in &mut it {
            let ch: &[f32; 16] = ch.try_into().unwrap_or(&[f32::NEG_INFINITY; 16]);
            for i in 0..16 {
                acc[i] = if ch[i] > acc[i] { ch[i] } else { acc[i] };
            }
        }
        let mut m = f32::NEG_INFINITY;
        for &v in it.remainder() {
            m = m.max(v);
        }
        for a in acc {
            m = m.max(a);
        }
        m
    }
}

/// Loads a (possibly strided) row as f32.
///
/// # Safety
/// The row must lie inside the source buffer.
pub unsafe fn gather(src: *const u8, elem: Elem, off: usize, stride: usize, dst: &mut [f32]) {
    for (c, chunk) in dst.chunks_mut(BLOCK).enumerate() {
        load_block(src, elem, off + c * BLOCK * stride, stride, chunk);
    }
}

/// Stores a (possibly strided) row from f32.
///
/// # Safety
/// The row must lie inside the destination buffer.
pub unsafe fn scatter(dst: *mut u8, elem: Elem, off: usize, stride: usize, src: &[f32]) {
    if stride == 1 {
        for (c, chunk) in src.chunks(BLOCK).enumerate() {
            store_block(dst, elem, off + c * BLOCK, chunk);
        }
    } else {
        for (j, v) in src.iter().enumerate() {
            store_block(dst, elem, off + j * stride, std::slice::from_ref(v));
        }
    }
}
