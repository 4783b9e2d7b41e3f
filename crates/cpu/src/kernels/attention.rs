//! Flash-style attention: softmax(scale·Q·Kᵀ + mask)·V computed block by block with an online
//! softmax, so no L×S score matrix is ever materialised.

use super::ew::{load_block, store_block};
use super::micro::gemm_rows;
use super::rows::exp_sub_sum;
use super::Cx;
use crate::plan::Vid;
use crate::tensor::{Elem, SendPtr};
use half::f16;
use std::ops::Range;

const BQ: usize = 64;
const BK: usize = 128;
/// Query rows per batch up to which [`Attention::few_rows`] runs instead of the flash blocks.
const FEW_ROWS: usize = 16;
/// Keys per item of [`Attention::few_rows`]: a longer key axis is split into parts of this many
/// keys, each computed on its own and merged ([`Attention::merge_parts`]), so the parts of one
/// batch·head spread over the threads. Fixed, so results do not depend on the thread count.
const PART_KEYS: usize = 1024;
/// Keys and values widened to f32 at a time by [`Attention::rows`] when they are stored
/// narrower (fp16, int8 blocks).
const WIDEN_ROWS: usize = 128;
/// Values per scale of an operand stored as int8 blocks ([`BlockScales`]).
pub const SCALE_BLOCK: usize = 32;

/// A strided 2-D operand per batch: element (i, j) of batch b at
/// `batch_off(b) + i * rs + j * cs`.
#[derive(Clone, Debug)]
pub struct View {
    pub v: Vid,
    pub elem: Elem,
    pub batch_strides: Vec<usize>,
    pub rs: usize,
    pub cs: usize,
}

/// The per-block scales of an operand stored as int8 (llama.cpp's `q8_0` KV caches): element
/// (i, j) is `data(i, j) · scale(i, j / SCALE_BLOCK)`, with the operand's columns contiguous.
#[derive(Clone, Debug)]
pub struct BlockScales {
    pub v: Vid,
    /// fp16 or f32.
    pub elem: Elem,
    pub batch_strides: Vec<usize>,
    pub rs: usize,
}

#[derive(Debug)]
pub struct Attention {
    pub q: View,
    pub k: View,
    pub v: View,
    /// Scales of `k` and `v` when they are int8 blocks.
    pub k_scales: Option<BlockScales>,
    pub v_scales: Option<BlockScales>,
    /// Bool masks select (false → −∞); float masks are added to the scores.
    pub mask: Option<View>,
    /// Query row `i` reads mask row `i % mask_rows` (`l` unless the mask's rows repeat: grouped
    /// heads whose query rows are (group member, token) pairs share one `[T, S]` mask).
    pub mask_rows: usize,
    pub batch: Vec<usize>,
    pub l: usize,
    pub s: usize,
    pub e: usize,
    pub ev: usize,
    pub scale: f32,
    pub out: Vid,
    pub out_elem: Elem,
    /// Both products take bf16 operands on AMX tiles (`MatmulPrecision::Bf16`; see
    /// [`Attention::bf16_blocks`]).
    pub bf16: bool,
}

fn boff(batch: &[usize], strides: &[usize], b: usize) -> usize {
    let mut rem = b;
    let mut off = 0;
    for i in (0..batch.len()).rev() {
        off += (rem % batch[i]) * strides[i];
        rem /= batch[i];
    }
    off
}

impl Attention {
    /// Element offset of mask row `i` of batch `b`.
    fn mask_row(&self, m: &View, b: usize, i: usize) -> usize {
        boff(&self.batch, &m.batch_strides, b) + (i % self.mask_rows) * m.rs
    }

    /// Flash blocks: Q block, the head's Kᵀ [e, s] and V [s, ev] (the key columns its query
    /// blocks see, loaded once per batch·head and reused by every query block the task handles),
    /// scores, output accumulator, running max and sum. Few rows: the scaled query rows, their
    /// scores and outputs.
    fn per_task(&self) -> usize {
        if self.few_rows() {
            let widened = if self.stored_narrow() {
                WIDEN_ROWS * (self.e.max(self.ev) + self.l)
            } else {
                0
            };
            return self.l * (self.e + self.s.min(PART_KEYS) + self.ev) + widened;
        }
        if self.bf16_blocks() {
            let (ep, sp) = (self.e.div_ceil(32) * 32, self.s.div_ceil(32) * 32);
            return super::bf16::tile_words(self.e, self.s)
                + super::bf16::tile_words(self.s, self.ev)
                + BQ * ep / 2
                + BQ * sp
                + BQ * sp / 2
                + BQ * self.ev
                + self.e.max(BK);
        }
        BQ * self.e + self.s * self.e + self.s * self.ev + BQ * BK + BQ * self.ev + 2 * BQ + self.e
    }

    /// Keys or values stored narrower than f32 (fp16, int8 blocks): read through a widening.
    fn stored_narrow(&self) -> bool {
        self.k.elem != Elem::F32 || self.v.elem != Elem::F32
    }

    /// Decode and verification steps (a few query rows against a long cache): scores are dot
    /// products of the query rows with key rows read in place (no Kᵀ copy; fp16 and int8-block
    /// rows widened a few at a time), over only the keys some row can see. Needs keys and
    /// values with contiguous rows (the KV caches).
    pub fn few_rows(&self) -> bool {
        let rows = |v: &View, scales: &Option<BlockScales>| {
            v.cs == 1
                && match v.elem {
                    Elem::F32 | Elem::F16 => scales.is_none(),
                    Elem::I8 => scales.is_some(),
                    _ => false,
                }
        };
        self.l <= FEW_ROWS && rows(&self.k, &self.k_scales) && rows(&self.v, &self.v_scales)
    }

    /// Query blocks as bf16 tile products: the head's Kᵀ and V packed as AMX tiles once per
    /// batch·head, each block's scores over every key at once (an exact softmax, no running
    /// rescale), probabilities rounded to bf16 for the second product. f32 operands only.
    fn bf16_blocks(&self) -> bool {
        self.bf16
            && !self.few_rows()
            && super::bf16::uses_amx()
            && [self.q.elem, self.k.elem, self.v.elem] == [Elem::F32; 3]
    }

    fn items(&self) -> usize {
        let per_batch = if self.few_rows() {
            self.key_parts()
        } else {
            self.l.div_ceil(BQ)
        };
        self.batch.iter().product::<usize>() * per_batch
    }

    /// Key parts per batch of [`Attention::few_rows`].
    fn key_parts(&self) -> usize {
        self.s.div_ceil(PART_KEYS).max(1)
    }

    /// Per item, when the key axis is split: each query row's running max and sum, and its
    /// output before division by the sum.
    fn part_floats(&self) -> usize {
        if self.few_rows() && self.key_parts() > 1 {
            self.l * (self.ev + 2)
        } else {
            0
        }
    }

    fn tasks(&self, threads: usize) -> usize {
        threads.min(self.items()).max(1)
    }

    pub fn scratch_floats(&self, threads: usize) -> usize {
        self.tasks(threads) * self.per_task() + self.items() * self.part_floats()
    }

    pub fn flops(&self) -> usize {
        2 * self.batch.iter().product::<usize>() * self.l * self.s * (self.e + self.ev)
    }

    pub fn run(&self, cx: &Cx) {
        let tasks = self.tasks(cx.threads);
        let pt = self.per_task();
        let items = self.items();
        let pf = self.part_floats();
        let scratch = SendPtr(cx.scratch(tasks * pt + items * pf).as_mut_ptr());
        let parts_at = tasks * pt;
        let per = items.div_ceil(tasks);
        let scale_ptr = |s: &Option<BlockScales>| {
            SendPtr(s.as_ref().map_or(std::ptr::null_mut(), |s| cx.ptr(s.v)))
        };
        let ptrs = [
            SendPtr(cx.ptr(self.q.v)),
            SendPtr(cx.ptr(self.k.v)),
            SendPtr(cx.ptr(self.v.v)),
            scale_ptr(&self.k_scales),
            scale_ptr(&self.v_scales),
        ];
        let mptr = SendPtr(
            self.mask
                .as_ref()
                .map_or(std::ptr::null_mut(), |m| cx.ptr(m.v)),
        );
        let out = SendPtr(cx.ptr(self.out));
        cx.par_for(tasks, &|t| {
            // SAFETY: each task has its own scratch and writes disjoint query rows.
            let buf = unsafe { std::slice::from_raw_parts_mut(scratch.get().add(t * pt), pt) };
            let (mut loaded, mut loaded_cols) = (None, None);
            for item in t * per..((t + 1) * per).min(items) {
                if self.few_rows() {
                    let parts = self.key_parts();
                    let (b, part) = (item / parts, item % parts);
                    let keys = part * PART_KEYS..((part + 1) * PART_KEYS).min(self.s);
                    // SAFETY: each item has its own part slot, after every task's scratch.
                    let slot = (pf > 0).then(|| unsafe {
                        std::slice::from_raw_parts_mut(scratch.get().add(parts_at + item * pf), pf)
                    });
                    unsafe { self.rows(b, keys, slot, buf, ptrs, mptr, out) };
                } else if self.bf16_blocks() {
                    unsafe { self.block_bf16(item, buf, &mut loaded, ptrs, mptr, out) };
                } else {
                    unsafe { self.block(item, buf, &mut loaded_cols, ptrs, mptr, out) };
                }
            }
        });
        if pf > 0 {
            // SAFETY: every item wrote its part slot above; the first task's scratch (at least
            // `l · ev` floats) is free again and holds one merged row at a time.
            let (slots, row) = unsafe {
                (
                    std::slice::from_raw_parts(scratch.get().add(parts_at), items * pf),
                    std::slice::from_raw_parts_mut(scratch.get(), self.ev),
                )
            };
            unsafe { self.merge_parts(slots, row, out) };
        }
    }

    /// The output of every batch's query rows from its key parts' slots ([`Attention::part_floats`]
    /// each, in item order): `Σ o_p·e^(m_p − M) / Σ s_p·e^(m_p − M)` with `M` the largest
    /// running max; a row that sees no key gives NaN, as unsplit. `row` is `ev` floats of
    /// scratch.
    ///
    /// # Safety
    /// `out` is this kernel's output.
    unsafe fn merge_parts(&self, slots: &[f32], row: &mut [f32], out: SendPtr<u8>) {
        let (l, ev, parts) = (self.l, self.ev, self.key_parts());
        let pf = self.part_floats();
        let batch: usize = self.batch.iter().product();
        for b in 0..batch {
            let slot = |p: usize| &slots[(b * parts + p) * pf..(b * parts + p + 1) * pf];
            for i in 0..l {
                let top = (0..parts)
                    .map(|p| slot(p)[i])
                    .fold(f32::NEG_INFINITY, f32::max);
                row.fill(0.0);
                let mut sum = 0.0f32;
                if top == f32::NEG_INFINITY {
                    row.fill(f32::NAN);
                } else {
                    for p in 0..parts {
                        let sl = slot(p);
                        if sl[i] == f32::NEG_INFINITY {
                            continue;
                        }
                        let w = (sl[i] - top).exp();
                        sum += sl[l + i] * w;
                        let o = &sl[2 * l + i * ev..2 * l + (i + 1) * ev];
                        for (r, &x) in row.iter_mut().zip(o) {
                            *r += x * w;
                        }
                    }
                    let inv = 1.0 / sum;
                    row.iter_mut().for_each(|x| *x *= inv);
                }
                store_block(out.get(), self.out_elem, (b * l + i) * ev, row);
            }
        }
    }

    /// All `l` query rows of batch `b` over the keys `keys` ([`Attention::few_rows`]): the
    /// output when they are every key, else the part's slot (each row's max, sum of
    /// exponentials and unnormalised output; [`Attention::merge_parts`]). Keys every row masks
    /// out (bool false, additive −∞) at either end of the range are skipped; their softmax
    /// weight is exactly zero either way.
    ///
    /// # Safety
    /// Pointers are this kernel's operands; views were validated against their shapes.
    #[allow(clippy::too_many_arguments)]
    unsafe fn rows(
        &self,
        b: usize,
        keys: Range<usize>,
        slot: Option<&mut [f32]>,
        buf: &mut [f32],
        ptrs: [SendPtr<u8>; 5],
        mptr: SendPtr<u8>,
        out: SendPtr<u8>,
    ) {
        let (l, e, ev) = (self.l, self.e, self.ev);
        // positions below are relative to the part: key `keys.start + j` is column j
        let (k0, s) = (keys.start, keys.len());
        let (qs, rest) = buf.split_at_mut(l * e);
        let (ss, rest) = rest.split_at_mut(l * s);
        let (os, wide) = rest.split_at_mut(l * ev);
        let qoff = boff(&self.batch, &self.q.batch_strides, b);
        for i in 0..l {
            let row = &mut qs[i * e..(i + 1) * e];
            load_row(
                ptrs[0].get(),
                self.q.elem,
                qoff + i * self.q.rs,
                self.q.cs,
                row,
            );
            row.iter_mut().for_each(|x| *x *= self.scale);
        }
        // the mask (as additive f32) first; scores are added onto it
        let (mut lo, mut hi) = (0, s);
        match &self.mask {
            Some(m) => {
                for i in 0..l {
                    let row = &mut ss[i * s..(i + 1) * s];
                    let moff = self.mask_row(m, b, i) + k0 * m.cs;
                    load_row(mptr.get(), m.elem, moff, m.cs, row);
                    if m.elem == Elem::Bool {
                        row.iter_mut()
                            .for_each(|x| *x = if *x == 0.0 { f32::NEG_INFINITY } else { 0.0 });
                    }
                }
                let seen = |j: usize| (0..l).any(|i| ss[i * s + j] != f32::NEG_INFINITY);
                while lo < hi && !seen(lo) {
                    lo += 1;
                }
                while hi > lo && !seen(hi - 1) {
                    hi -= 1;
                }
            }
            None => ss[..l * s].fill(0.0),
        }
        let (widened, packed) = wide.split_at_mut(wide.len().min(WIDEN_ROWS * e.max(ev)));
        if self.k.elem == Elem::F32 {
            let kbase = (ptrs[1].get() as *const f32)
                .add(boff(&self.batch, &self.k.batch_strides, b) + k0 * self.k.rs);
            let blocked = add_scores16(qs, l, e, kbase, self.k.rs, lo..hi, ss, s);
            add_scores(qs, l, e, kbase, self.k.rs, lo + blocked..hi, ss, s);
        } else {
            for c0 in (lo..hi).step_by(WIDEN_ROWS) {
                let n = WIDEN_ROWS.min(hi - c0);
                for j in 0..n {
                    let row = &mut widened[j * e..(j + 1) * e];
                    self.load_operand_row(1, ptrs, b, k0 + c0 + j, row);
                }
                let kb = widened.as_ptr();
                let blocked = add_scores16(qs, l, e, kb, e, 0..n, &mut ss[c0..], s);
                add_scores(qs, l, e, kb, e, blocked..n, &mut ss[c0..], s);
            }
        }
        let split = slot.is_some();
        let mut maxes = [f32::NEG_INFINITY; FEW_ROWS];
        let mut sums = [0f32; FEW_ROWS];
        for i in 0..l {
            let row = &mut ss[i * s + lo..i * s + hi];
            let m = super::rows::max_of(row);
            // a row that sees no key: 0·(1/0) = NaN, as the flash blocks give
            let sum = if m == f32::NEG_INFINITY {
                row.fill(0.0);
                0.0
            } else {
                exp_sub_sum(row, m)
            };
            (maxes[i], sums[i]) = (m, sum);
            if !split {
                let inv = 1.0 / sum;
                row.iter_mut().for_each(|x| *x *= inv);
            }
        }
        let n = hi - lo;
        if n == 0 {
            os.fill(if split { 0.0 } else { f32::NAN });
        } else if self.v.elem != Elem::F32 {
            // P [l, rows] · V[rows] a chunk of widened rows at a time
            for c0 in (lo..hi).step_by(WIDEN_ROWS) {
                let m = WIDEN_ROWS.min(hi - c0);
                for j in 0..m {
                    let row = &mut widened[j * ev..(j + 1) * ev];
                    self.load_operand_row(2, ptrs, b, k0 + c0 + j, row);
                }
                for i in 0..l {
                    packed[i * m..(i + 1) * m].copy_from_slice(&ss[i * s + c0..i * s + c0 + m]);
                }
                gemm_rows(
                    &packed[..l * m],
                    &widened[..m * ev],
                    ev,
                    os,
                    l,
                    m,
                    ev,
                    c0 != lo,
                );
            }
        } else {
            let vbase = (ptrs[2].get() as *const f32)
                .add(boff(&self.batch, &self.v.batch_strides, b) + k0 * self.v.rs);
            // P [l, n] packed, then P · V[lo..hi] [n, ev]
            for i in 0..l {
                ss.copy_within(i * s + lo..i * s + hi, i * n);
            }
            gemm_rows(
                &ss[..l * n],
                std::slice::from_raw_parts(vbase.add(lo * self.v.rs), (n - 1) * self.v.rs + ev),
                self.v.rs,
                os,
                l,
                n,
                ev,
                false,
            );
        }
        if let Some(slot) = slot {
            slot[..l].copy_from_slice(&maxes[..l]);
            slot[l..2 * l].copy_from_slice(&sums[..l]);
            slot[2 * l..2 * l + l * ev].copy_from_slice(&os[..l * ev]);
            return;
        }
        let obase = b * l * ev;
        for i in 0..l {
            store_block(
                out.get(),
                self.out_elem,
                obase + i * ev,
                &os[i * ev..(i + 1) * ev],
            );
        }
    }

    /// # Safety
    /// Pointers are this kernel's operands; views were validated against their shapes.
    unsafe fn block(
        &self,
        item: usize,
        buf: &mut [f32],
        loaded: &mut Option<(usize, Range<usize>)>,
        ptrs: [SendPtr<u8>; 5],
        mptr: SendPtr<u8>,
        out: SendPtr<u8>,
    ) {
        let (e, ev) = (self.e, self.ev);
        let qblocks = self.l.div_ceil(BQ);
        let (b, qb) = (item / qblocks, item % qblocks);
        let i0 = qb * BQ;
        let nq = BQ.min(self.l - i0);
        let (qs, rest) = buf.split_at_mut(BQ * e);
        let (ks, rest) = rest.split_at_mut(self.s * e);
        let (vs, rest) = rest.split_at_mut(self.s * ev);
        let (ss, rest) = rest.split_at_mut(BQ * BK);
        let (os, rest) = rest.split_at_mut(BQ * ev);
        let (ms, rest) = rest.split_at_mut(BQ);
        let (ls, key) = rest.split_at_mut(BQ);
        let qoff = boff(&self.batch, &self.q.batch_strides, b);
        // key blocks no row of this block sees add exactly nothing: skip them (in whole blocks
        // of the key axis, so the blocks computed are the same as over every key)
        let cols = match &self.mask {
            Some(m) => self.visible_keys(m, mptr, b, i0..i0 + nq),
            None => 0..self.s,
        };
        let cols = cols.start / BK * BK..cols.end.next_multiple_of(BK).min(self.s);
        let have = match loaded {
            Some((lb, have)) if *lb == b && have.start < have.end => have.clone(),
            _ => cols.start..cols.start,
        };
        if !cols.is_empty() {
            let want = cols.start.min(have.start)..cols.end.max(have.end);
            self.load_keys_values(ptrs, b, want.start..have.start, ks, vs, key);
            self.load_keys_values(ptrs, b, have.end.max(want.start)..want.end, ks, vs, key);
            *loaded = Some((b, want));
        }
        for i in 0..nq {
            load_row(
                ptrs[0].get(),
                self.q.elem,
                qoff + (i0 + i) * self.q.rs,
                self.q.cs,
                &mut qs[i * e..(i + 1) * e],
            );
            for x in &mut qs[i * e..(i + 1) * e] {
                *x *= self.scale;
            }
        }
        ms[..nq].fill(f32::NEG_INFINITY);
        ls[..nq].fill(0.0);
        os[..nq * ev].fill(0.0);
        let mut j0 = cols.start;
        while j0 < cols.end {
            let nk = BK.min(cols.end - j0);
            // S = Qs · Kᵀ  [nq, nk]
            gemm_rows(
                &qs[..nq * e],
                &ks[j0..],
                self.s,
                &mut ss[..nq * nk],
                nq,
                e,
                nk,
                false,
            );
            for i in 0..nq {
                let row = &mut ss[i * nk..(i + 1) * nk];
                if let Some(m) = &self.mask {
                    let moff = self.mask_row(m, b, i0 + i) + j0 * m.cs;
                    let mut mv = [0f32; BK];
                    load_block(mptr.get(), m.elem, moff, m.cs, &mut mv[..nk]);
                    if m.elem == Elem::Bool {
                        for (x, &keep) in row.iter_mut().zip(&mv[..nk]) {
                            if keep == 0.0 {
                                *x = f32::NEG_INFINITY;
                            }
                        }
                    } else {
                        for (x, &a) in row.iter_mut().zip(&mv[..nk]) {
                            *x += a;
                        }
                    }
                }
                let bmax = super::rows::max_of(row);
                let m_new = ms[i].max(bmax);
                if m_new == f32::NEG_INFINITY {
                    row.fill(0.0);
                    continue;
                }
                let corr = if ms[i] == f32::NEG_INFINITY {
                    0.0
                } else {
                    super::math::exp(ms[i] - m_new)
                };
                let psum = exp_sub_sum(row, m_new);
                ls[i] = ls[i] * corr + psum;
                ms[i] = m_new;
                if corr != 1.0 {
                    for x in &mut os[i * ev..(i + 1) * ev] {
                        *x *= corr;
                    }
                }
            }
            // O += P · V  [nq, ev]
            gemm_rows(
                &ss[..nq * nk],
                &vs[j0 * ev..(j0 + nk) * ev],
                ev,
                &mut os[..nq * ev],
                nq,
                nk,
                ev,
                true,
            );
            j0 += nk;
        }
        let obase = b * self.l * ev;
        for i in 0..nq {
            let inv = 1.0 / ls[i];
            let row = &mut os[i * ev..(i + 1) * ev];
            for x in row.iter_mut() {
                *x *= inv;
            }
            store_block(out.get(), self.out_elem, obase + (i0 + i) * ev, row);
        }
    }
}

impl Attention {
    /// Key columns `cols` of batch `b` into the flash blocks' Kᵀ `[e, s]` (row t holds feature t
    /// of every key) and V `[s, ev]`, widened to f32; `key` is one key row of scratch.
    ///
    /// # Safety
    /// Pointers are this kernel's operands; views were validated against their shapes.
    unsafe fn load_keys_values(
        &self,
        ptrs: [SendPtr<u8>; 5],
        b: usize,
        cols: Range<usize>,
        ks: &mut [f32],
        vs: &mut [f32],
        key: &mut [f32],
    ) {
        let (e, ev, s) = (self.e, self.ev, self.s);
        if cols.is_empty() {
            return;
        }
        if self.k_scales.is_some() {
            for j in cols.clone() {
                self.load_operand_row(1, ptrs, b, j, &mut key[..e]);
                for (t, &x) in key[..e].iter().enumerate() {
                    ks[t * s + j] = x;
                }
            }
        } else {
            let koff = boff(&self.batch, &self.k.batch_strides, b) + cols.start * self.k.rs;
            for t in 0..e {
                load_row(
                    ptrs[1].get(),
                    self.k.elem,
                    koff + t * self.k.cs,
                    self.k.rs,
                    &mut ks[t * s + cols.start..t * s + cols.end],
                );
            }
        }
        for j in cols {
            self.load_operand_row(2, ptrs, b, j, &mut vs[j * ev..(j + 1) * ev]);
        }
    }

    /// The key columns between the first and the last key that some of query rows `rows` of
    /// batch `b` does not mask out (bool false, additive −∞); empty when they see none. Scans
    /// only the masked ends beyond what an earlier row already sees.
    ///
    /// # Safety
    /// `mptr` is the mask operand; its view was validated against the mask's shape.
    unsafe fn visible_keys(
        &self,
        m: &View,
        mptr: SendPtr<u8>,
        b: usize,
        rows: Range<usize>,
    ) -> Range<usize> {
        let seen = |x: f32| {
            if m.elem == Elem::Bool {
                x != 0.0
            } else {
                x != f32::NEG_INFINITY
            }
        };
        let (mut lo, mut hi) = (self.s, 0);
        let mut chunk = [0f32; BK];
        for i in rows {
            let off = self.mask_row(m, b, i);
            let mut end = self.s;
            while end > hi {
                let start = end.saturating_sub(BK).max(hi);
                let c = &mut chunk[..end - start];
                load_block(mptr.get(), m.elem, off + start * m.cs, m.cs, c);
                if let Some(j) = c.iter().rposition(|&x| seen(x)) {
                    hi = start + j + 1;
                    break;
                }
                end = start;
            }
            let mut start = 0;
            while start < lo.min(hi) {
                let end = (start + BK).min(lo).min(hi);
                let c = &mut chunk[..end - start];
                load_block(mptr.get(), m.elem, off + start * m.cs, m.cs, c);
                if let Some(j) = c.iter().position(|&x| seen(x)) {
                    lo = start + j;
                    break;
                }
                start = end;
            }
        }
        if lo < hi {
            lo..hi
        } else {
            0..0
        }
    }

    /// Row `row` of batch `b` of the key (`which` 1) or value (2) operand as f32.
    ///
    /// # Safety
    /// Pointers are this kernel's operands; views were validated against their shapes; int8
    /// operands have contiguous columns.
    unsafe fn load_operand_row(
        &self,
        which: usize,
        ptrs: [SendPtr<u8>; 5],
        b: usize,
        row: usize,
        dst: &mut [f32],
    ) {
        let (view, scales) = if which == 1 {
            (&self.k, &self.k_scales)
        } else {
            (&self.v, &self.v_scales)
        };
        let off = boff(&self.batch, &view.batch_strides, b) + row * view.rs;
        let Some(sc) = scales else {
            return load_row(ptrs[which].get(), view.elem, off, view.cs, dst);
        };
        let data = (ptrs[which].get() as *const i8).add(off);
        let soff = boff(&self.batch, &sc.batch_strides, b) + row * sc.rs;
        let sp = ptrs[which + 2].get();
        for (blk, chunk) in dst.chunks_mut(SCALE_BLOCK).enumerate() {
            let d = match sc.elem {
                Elem::F16 => (*(sp as *const f16).add(soff + blk)).to_f32(),
                _ => *(sp as *const f32).add(soff + blk),
            };
            let q = std::slice::from_raw_parts(data.add(blk * SCALE_BLOCK), chunk.len());
            for (x, &v) in chunk.iter_mut().zip(q) {
                *x = f32::from(v) * d;
            }
        }
    }

    /// One query block as bf16 tile products ([`Attention::bf16_blocks`]).
    ///
    /// # Safety
    /// Pointers are this kernel's operands (f32); views were validated against their shapes;
    /// AMX is available.
    unsafe fn block_bf16(
        &self,
        item: usize,
        buf: &mut [f32],
        loaded: &mut Option<usize>,
        ptrs: [SendPtr<u8>; 5],
        mptr: SendPtr<u8>,
        out: SendPtr<u8>,
    ) {
        use super::bf16::{pack_tiles, round_slice, tile_gemm, tile_words};
        let (e, ev, s) = (self.e, self.ev, self.s);
        let (ep, sp) = (e.div_ceil(32) * 32, s.div_ceil(32) * 32);
        let qblocks = self.l.div_ceil(BQ);
        let (b, qb) = (item / qblocks, item % qblocks);
        let i0 = qb * BQ;
        let nq = BQ.min(self.l - i0);
        let (kt, rest) = buf.split_at_mut(tile_words(e, s));
        let (vt, rest) = rest.split_at_mut(tile_words(s, ev));
        let (qa, rest) = rest.split_at_mut(BQ * ep / 2);
        let (sc, rest) = rest.split_at_mut(BQ * sp);
        let (pa, rest) = rest.split_at_mut(BQ * sp / 2);
        let (os, row) = rest.split_at_mut(BQ * ev);
        let (qa, pa): (&mut [u16], &mut [u16]) =
            (bytemuck::cast_slice_mut(qa), bytemuck::cast_slice_mut(pa));
        let f = |p: SendPtr<u8>, off: usize| *(p.get() as *const f32).add(off);
        if *loaded != Some(b) {
            let koff = boff(&self.batch, &self.k.batch_strides, b);
            let voff = boff(&self.batch, &self.v.batch_strides, b);
            let (k, v) = (&self.k, &self.v);
            // B of the scores: Kᵀ [e, s]; B of the output: V [s, ev]
            pack_tiles(
                e,
                s,
                |t, j| f(ptrs[1], koff + j * k.rs + t * k.cs),
                bytemuck::cast_slice_mut(kt),
            );
            pack_tiles(
                s,
                ev,
                |j, d| f(ptrs[2], voff + j * v.rs + d * v.cs),
                bytemuck::cast_slice_mut(vt),
            );
            *loaded = Some(b);
        }
        let qoff = boff(&self.batch, &self.q.batch_strides, b);
        for i in 0..nq.div_ceil(32) * 32 {
            let dst = &mut qa[i * ep..(i + 1) * ep];
            if i >= nq {
                dst.fill(0);
                continue;
            }
            load_row(
                ptrs[0].get(),
                self.q.elem,
                qoff + (i0 + i) * self.q.rs,
                self.q.cs,
                &mut row[..e],
            );
            row[..e].iter_mut().for_each(|x| *x *= self.scale);
            round_slice(&row[..e], &mut dst[..e]);
            dst[e..].fill(0);
        }
        // S = round(Q·scale) · round(K)ᵀ  [nq, s], row stride sp
        tile_gemm(
            qa.as_ptr(),
            ep,
            nq,
            kt.as_ptr() as *const u16,
            s,
            sc.as_mut_ptr(),
            sp,
        );
        let mut sums = [0f32; BQ];
        for i in 0..nq {
            let srow = &mut sc[i * sp..i * sp + s];
            if let Some(m) = &self.mask {
                let moff = self.mask_row(m, b, i0 + i);
                for j0 in (0..s).step_by(BK) {
                    let nk = BK.min(s - j0);
                    let mv = &mut row[..nk];
                    load_block(mptr.get(), m.elem, moff + j0 * m.cs, m.cs, mv);
                    for (x, &a) in srow[j0..j0 + nk].iter_mut().zip(mv.iter()) {
                        if m.elem != Elem::Bool {
                            *x += a;
                        } else if a == 0.0 {
                            *x = f32::NEG_INFINITY;
                        }
                    }
                }
            }
            let mx = super::rows::max_of(srow);
            // a row that sees no key: 0·(1/0) = NaN, as the flash blocks give
            sums[i] = if mx == f32::NEG_INFINITY {
                srow.fill(0.0);
                0.0
            } else {
                exp_sub_sum(srow, mx)
            };
            let prow = &mut pa[i * sp..(i + 1) * sp];
            round_slice(srow, &mut prow[..s]);
            prow[s..].fill(0);
        }
        for i in nq..nq.div_ceil(32) * 32 {
            pa[i * sp..(i + 1) * sp].fill(0);
        }
        // O = round(P) · round(V)  [nq, ev]
        tile_gemm(
            pa.as_ptr(),
            sp,
            nq,
            vt.as_ptr() as *const u16,
            ev,
            os.as_mut_ptr(),
            ev,
        );
        let obase = b * self.l * ev;
        for i in 0..nq {
            let inv = 1.0 / sums[i];
            let orow = &mut os[i * ev..(i + 1) * ev];
            orow.iter_mut().for_each(|x| *x *= inv);
            store_block(out.get(), self.out_elem, obase + (i0 + i) * ev, orow);
        }
    }
}

crate::simd_dispatch! {
    /// `scores[i·lds + j] += q_i · k_j` for the `l` rows of `q` ([l, e]) and keys `j` in `keys`
    /// (key `j` is the `e` floats at `k + j·rs`).
    fn add_scores(
        q: &[f32],
        l: usize,
        e: usize,
        k: *const f32,
        rs: usize,
        keys: std::ops::Range<usize>,
        scores: &mut [f32],
        lds: usize,
    ) {
        for j in keys {
            // SAFETY: the caller's key rows `keys` lie inside the key operand.
            let kj = unsafe { std::slice::from_raw_parts(k.add(j * rs), e) };
            for i in 0..l {
                let qi = &q[i * e..(i + 1) * e];
                let mut acc = [0f32; 16];
                let mut qc = qi.chunks_exact(16);
                let mut kc = kj.chunks_exact(16);
                for (a, b) in (&mut qc).zip(&mut kc) {
                    for t in 0..16 {
                        acc[t] = a[t].mul_add(b[t], acc[t]);
                    }
                }
                let mut dot = 0.0f32;
                for (a, b) in qc.remainder().iter().zip(kc.remainder()) {
                    dot = a.mul_add(*b, dot);
                }
                // pairwise lane sum (a fixed order, vectorised)
                let mut w = 8;
                while w > 0 {
                    for t in 0..w {
                        acc[t] += acc[t + w];
                    }
                    w /= 2;
                }
                scores[i * lds + j] += acc[0] + dot;
            }
        }
    }
}

/// [`add_scores`] for the first keys of `keys` in whole blocks of 16 (head sizes that are
/// multiples of 16, AVX-512); returns how many keys it did. Each block's 16 dot products per row
/// are summed across lanes together (a transposing add tree: 45 instructions per 16 keys
/// instead of one full reduction per key).
#[allow(clippy::too_many_arguments)]
unsafe fn add_scores16(
    q: &[f32],
    l: usize,
    e: usize,
    k: *const f32,
    rs: usize,
    keys: std::ops::Range<usize>,
    scores: &mut [f32],
    lds: usize,
) -> usize {
    #[cfg(target_arch = "x86_64")]
    if e.is_multiple_of(16) && crate::simd::has_avx512() && keys.len() >= 16 {
        let blocks = keys.len() / 16;
        for i in 0..l {
            avx512::scores16(
                q[i * e..(i + 1) * e].as_ptr(),
                e,
                k.add(keys.start * rs),
                rs,
                blocks,
                scores[i * lds + keys.start..].as_mut_ptr(),
            );
        }
        return blocks * 16;
    }
    let _ = (q, l, e, k, rs, keys, scores, lds);
    0
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    /// `out[j] += q · k_j` for `16·blocks` keys `k_j` at `k + j·rs` (`e` floats each, `e` a
    /// multiple of 16).
    #[target_feature(enable = "avx512f")]
    pub unsafe fn scores16(
        q: *const f32,
        e: usize,
        k: *const f32,
        rs: usize,
        blocks: usize,
        out: *mut f32,
    ) {
        for b in 0..blocks {
            let kb = k.add(b * 16 * rs);
            let mut acc = [_mm512_setzero_ps(); 16];
            let mut c = 0;
            while c < e {
                let qc = _mm512_loadu_ps(q.add(c));
                for (t, a) in acc.iter_mut().enumerate() {
                    *a = _mm512_fmadd_ps(qc, _mm512_loadu_ps(kb.add(t * rs + c)), *a);
                }
                c += 16;
            }
            // 16 vectors → one vector of their lane sums (key t in lane t)
            let mut pairs = [_mm512_setzero_ps(); 8];
            for (p, v) in pairs.iter_mut().enumerate() {
                let (a, b) = (acc[2 * p], acc[2 * p + 1]);
                // per 128-bit block: a0+a2, b0+b2, a1+a3, b1+b3
                *v = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
            }
            let mut quads = [_mm512_setzero_ps(); 4];
            for (p, v) in quads.iter_mut().enumerate() {
                let (a, b) = (pairs[2 * p], pairs[2 * p + 1]);
                // per 128-bit block: the block's sums of keys 4p..4p+4
                *v = _mm512_add_ps(
                    _mm512_shuffle_ps::<0b01_00_01_00>(a, b),
                    _mm512_shuffle_ps::<0b11_10_11_10>(a, b),
                );
            }
            let half = |a: __m512, b: __m512| {
                _mm512_add_ps(
                    _mm512_shuffle_f32x4::<0b10_00_10_00>(a, b),
                    _mm512_shuffle_f32x4::<0b11_01_11_01>(a, b),
                )
            };
            let (h0, h1) = (half(quads[0], quads[1]), half(quads[2], quads[3]));
            let sums = half(h0, h1);
            let o = out.add(b * 16);
            _mm512_storeu_ps(o, _mm512_add_ps(_mm512_loadu_ps(o), sums));
        }
    }
}

/// Loads `dst.len()` elements starting at `off` with stride `cs`.
unsafe fn load_row(p: *const u8, elem: Elem, off: usize, cs: usize, dst: &mut [f32]) {
    for (c, chunk) in dst.chunks_mut(256).enumerate() {
        load_block(p, elem, off + c * 256 * cs, cs, chunk);
    }
}
