//! Block-quantized weights computed on directly: MIL's `constexpr_blockwise_shift_scale` over a
//! `[rows, cols]` matrix with blocks along the columns, `w[r, c] = scale[r, b]·(q[r, c] −
//! offset[r, b])`, `b = c / block`, with 4- or 8-bit `q` (GGUF's block types map onto it).
//!
//! The weights stay in the program's weights blob (shared by every plan of that blob, never
//! copied or expanded). Linear layers run as a GEMV for a few activation rows — f32 activations
//! against weights unpacked in registers, `Σ_b scale_b·(x_b·q_b) − Σ_b scale_b·offset_b·Σx_b` —
//! and as tiles dequantized into scratch followed by a GEMM for many rows (prefill). Embedding
//! lookups dequantize only the rows they pick.
//!
//! fp16 matrices (`constexpr_cast` of an fp16 blob entry to fp32) take the same paths as a 16-bit
//! "format" whose value is the f16 itself: one block per row, scale 1, no offset.

use std::sync::Arc;

use half::f16;

use super::matmul::Matmul;
use super::packed;
use super::Cx;
use crate::tensor::{Elem, SendPtr};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QFormat {
    U4,
    I4,
    U8,
    I8,
    /// IEEE half-precision values (see [`QuantTensor::half`]).
    F16,
}

impl QFormat {
    pub fn bits(self) -> usize {
        match self {
            QFormat::U4 | QFormat::I4 => 4,
            QFormat::U8 | QFormat::I8 => 8,
            QFormat::F16 => 16,
        }
    }
}

/// Per-block floats (scales or offsets): in the blob as f32 or f16, or owned.
#[derive(Clone, Debug)]
pub enum Params {
    F32 {
        off: usize,
    },
    F16 {
        off: usize,
    },
    Owned(Arc<[f32]>),
    /// f32 values that are all exactly f16 (see [`QuantTensor::narrow_params`]).
    OwnedF16(Arc<[f16]>),
}

/// Shared storage of weights (a weights blob).
pub type Storage = Arc<dyn AsRef<[u8]> + Send + Sync>;

/// A block-quantized `[rows, cols]` matrix viewed in its storage.
#[derive(Clone)]
pub struct QuantTensor {
    bytes: Storage,
    data: usize,
    pub format: QFormat,
    pub rows: usize,
    pub cols: usize,
    pub block: usize,
    scale: Params,
    offset: Option<Params>,
    /// How few-row products take their activation rows (integer forms: see
    /// [`super::int_activations`]).
    pub activations: crate::Activations,
}

impl std::fmt::Debug for QuantTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuantTensor")
            .field("format", &self.format)
            .field("rows", &self.rows)
            .field("cols", &self.cols)
            .field("block", &self.block)
            .field("offset", &self.offset.is_some())
            .finish()
    }
}

pub(crate) enum ParamSlice<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
}

impl<'a> ParamSlice<'a> {
    /// Values `start..start + len`.
    #[inline(always)]
    #[cfg(target_arch = "x86_64")]
    pub(crate) fn sub(&self, start: usize, len: usize) -> ParamSlice<'a> {
        match self {
            ParamSlice::F32(v) => ParamSlice::F32(&v[start..start + len]),
            ParamSlice::F16(v) => ParamSlice::F16(&v[start..start + len]),
        }
    }

    #[inline(always)]
    pub(crate) fn get(&self, i: usize) -> f32 {
        match self {
            ParamSlice::F32(v) => v[i],
            ParamSlice::F16(v) => v[i].to_f32(),
        }
    }
}

impl QuantTensor {
    /// Checks that every region lies inside `bytes` with the alignment its type needs; returns
    /// why not otherwise. `scale`/`offset` regions hold `rows · cols / block` values.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        bytes: Storage,
        data: usize,
        format: QFormat,
        rows: usize,
        cols: usize,
        block: usize,
        scale: Params,
        offset: Option<Params>,
    ) -> Result<QuantTensor, String> {
        if rows == 0 || cols == 0 || block == 0 || !cols.is_multiple_of(block) {
            return Err(format!("blocks of {block} do not tile {cols} columns"));
        }
        if format.bits() == 4 && !cols.is_multiple_of(2) {
            return Err(format!(
                "4-bit rows need an even column count, found {cols}"
            ));
        }
        let t = QuantTensor {
            bytes,
            data,
            format,
            rows,
            cols,
            block,
            scale,
            offset,
            activations: crate::Activations::F32,
        };
        let len = (*t.bytes).as_ref().len();
        let data_end = data.checked_add(rows * t.row_bytes());
        if data_end.is_none_or(|e| e > len) {
            return Err("the quantized data lies outside its storage".into());
        }
        if format == QFormat::F16 && !(t.base() + data).is_multiple_of(2) {
            return Err("fp16 data is not 2-byte aligned in its storage".into());
        }
        let n = t.blocks_per_row() * rows;
        for p in std::iter::once(&t.scale).chain(t.offset.as_ref()) {
            let ok = match p {
                Params::F32 { off } => {
                    off.checked_add(4 * n).is_some_and(|e| e <= len)
                        && (t.base() + off).is_multiple_of(4)
                }
                Params::F16 { off } => {
                    off.checked_add(2 * n).is_some_and(|e| e <= len)
                        && (t.base() + off).is_multiple_of(2)
                }
                Params::Owned(v) => v.len() == n,
                Params::OwnedF16(v) => v.len() == n,
            };
            if !ok {
                return Err(
                    "scale or offset values lie outside their storage or are misaligned".into(),
                );
            }
        }
        Ok(t)
    }

    /// An fp16 `[rows, cols]` matrix at byte `data` of `bytes`, computed on as f32 values.
    pub fn half(
        bytes: Storage,
        data: usize,
        rows: usize,
        cols: usize,
    ) -> Result<QuantTensor, String> {
        let ones: Arc<[f32]> = vec![1.0; rows].into();
        QuantTensor::new(
            bytes,
            data,
            QFormat::F16,
            rows,
            cols,
            cols,
            Params::Owned(ones),
            None,
        )
    }

    /// Replaces f32 scales and offsets in the blob whose every value is exactly an f16 (GGUF's
    /// block scales, say) by an f16 copy, shared by every plan over the same blob: the decode
    /// GEMV streams its parameters with the weights, and f16 halves those bytes (Q8_0: 36 → 34
    /// bytes per 32 weights) with identical values.
    pub fn narrow_params(&mut self) {
        let n = self.blocks_per_row() * self.rows;
        let narrow = |p: &Params| -> Option<Params> {
            let Params::F32 { off } = p else {
                return None;
            };
            let key = (self.base(), *off, n);
            crate::shared_weights::narrowed_f16(key, || {
                let v: &[f32] = bytemuck::cast_slice(&self.all()[*off..off + 4 * n]);
                let exact = |x: &f32| f16::from_f32(*x).to_f32().to_bits() == x.to_bits();
                v.iter()
                    .all(exact)
                    .then(|| v.iter().map(|&x| f16::from_f32(x)).collect())
            })
            .map(Params::OwnedF16)
        };
        let scale = narrow(&self.scale);
        let offset = self.offset.as_ref().and_then(narrow);
        if let Some(p) = scale {
            self.scale = p;
        }
        if let Some(p) = offset {
            self.offset = Some(p);
        }
    }

    fn base(&self) -> usize {
        (*self.bytes).as_ref().as_ptr() as usize
    }

    pub fn row_bytes(&self) -> usize {
        self.cols * self.format.bits() / 8
    }

    pub fn blocks_per_row(&self) -> usize {
        self.cols / self.block
    }

    /// 4-bit data in blocks of whole 32-column chunks: activations are prepared chunk-wise as 16
    /// even then 16 odd columns, the two nibbles of each byte.
    pub(crate) fn interleaved(&self) -> bool {
        self.format.bits() == 4 && self.block.is_multiple_of(32)
    }

    fn all(&self) -> &[u8] {
        (*self.bytes).as_ref()
    }

    pub(crate) fn data_row(&self, r: usize) -> &[u8] {
        let rb = self.row_bytes();
        &self.all()[self.data + r * rb..self.data + (r + 1) * rb]
    }

    /// The parameters of every row.
    pub(crate) fn params_all<'a>(&'a self, p: &'a Params) -> ParamSlice<'a> {
        let n = self.blocks_per_row() * self.rows;
        match p {
            Params::F32 { off } => {
                ParamSlice::F32(bytemuck::cast_slice(&self.all()[*off..off + 4 * n]))
            }
            Params::F16 { off } => {
                ParamSlice::F16(bytemuck::cast_slice(&self.all()[*off..off + 2 * n]))
            }
            Params::Owned(v) => ParamSlice::F32(v),
            Params::OwnedF16(v) => ParamSlice::F16(v),
        }
    }

    /// The quantized data of every row.
    pub(crate) fn data_all(&self) -> &[u8] {
        &self.all()[self.data..self.data + self.rows * self.row_bytes()]
    }

    pub(crate) fn params<'a>(&'a self, p: &'a Params, r: usize) -> ParamSlice<'a> {
        let nb = self.blocks_per_row();
        match p {
            Params::F32 { off } => {
                let v: &[f32] =
                    bytemuck::cast_slice(&self.all()[off + 4 * r * nb..off + 4 * (r + 1) * nb]);
                ParamSlice::F32(v)
            }
            Params::F16 { off } => {
                let v: &[f16] =
                    bytemuck::cast_slice(&self.all()[off + 2 * r * nb..off + 2 * (r + 1) * nb]);
                ParamSlice::F16(v)
            }
            Params::Owned(v) => ParamSlice::F32(&v[r * nb..(r + 1) * nb]),
            Params::OwnedF16(v) => ParamSlice::F16(&v[r * nb..(r + 1) * nb]),
        }
    }

    pub(crate) fn scale_params(&self) -> &Params {
        &self.scale
    }

    pub(crate) fn offset_params(&self) -> Option<&Params> {
        self.offset.as_ref()
    }

    #[inline(always)]
    fn q(&self, row: &[u8], c: usize) -> f32 {
        match self.format {
            QFormat::U4 => ((row[c / 2] >> (4 * (c % 2))) & 15) as f32,
            QFormat::I4 => ((((row[c / 2] >> (4 * (c % 2))) & 15) << 4) as i8 >> 4) as f32,
            QFormat::U8 => row[c] as f32,
            QFormat::I8 => row[c] as i8 as f32,
            QFormat::F16 => f16::from_le_bytes([row[2 * c], row[2 * c + 1]]).to_f32(),
        }
    }

    /// Row `r` as f32 into `out[..cols]`.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        let row = self.data_row(r);
        let scale = self.params(&self.scale, r);
        let offset = self.offset.as_ref().map(|p| self.params(p, r));
        let bs = self.block;
        if self.format == QFormat::F16 {
            let halves: &[f16] = bytemuck::cast_slice(row);
            half::slice::HalfFloatSliceExt::convert_to_f32_slice(halves, &mut out[..self.cols]);
            for (b, block) in out[..self.cols].chunks_exact_mut(bs).enumerate() {
                let s = scale.get(b);
                if s != 1.0 {
                    block.iter_mut().for_each(|v| *v *= s);
                }
            }
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if self.format == QFormat::U4 && bs.is_multiple_of(32) && avx512() {
            // SAFETY: AVX-512 was detected; the row holds cols/2 bytes and out cols floats.
            unsafe {
                dequantize_u4_avx512(row, &scale, offset.as_ref(), bs, &mut out[..self.cols])
            };
            return;
        }
        dequantize_blocks(self, row, &scale, offset.as_ref(), &mut out[..self.cols]);
    }

    /// The whole matrix as f32 (for consumers without a quantized kernel).
    pub fn dequantize(&self) -> Vec<f32> {
        let mut out = vec![0.0; self.rows * self.cols];
        for (r, chunk) in out.chunks_exact_mut(self.cols).enumerate() {
            self.dequantize_row(r, chunk);
        }
        out
    }
}

#[cfg(target_arch = "x86_64")]
fn avx512() -> bool {
    crate::simd::has_avx512()
}

crate::simd_dispatch! {
    /// `out[c] = scale_b·(q[c] − offset_b)` over a row, in loops the compiler vectorises for
    /// each schedule.
    fn dequantize_blocks(
        q: &QuantTensor,
        row: &[u8],
        scale: &ParamSlice<'_>,
        offset: Option<&ParamSlice<'_>>,
        out: &mut [f32],
    ) {
        let bs = q.block;
        for (b, block) in out.chunks_exact_mut(bs).enumerate() {
            let s = scale.get(b);
            let o = offset.map_or(0.0, |p| p.get(b));
            let c0 = b * bs;
            match q.format {
                QFormat::U4 | QFormat::I4 if bs.is_multiple_of(2) && c0.is_multiple_of(2) => {
                    // a two's-complement nibble n is (n ^ 8) - 8
                    let flip = if q.format == QFormat::I4 { 8u8 } else { 0 };
                    let bias = f32::from(flip);
                    for (pair, &v) in block.chunks_exact_mut(2).zip(&row[c0 / 2..(c0 + bs) / 2]) {
                        pair[0] = s * ((f32::from((v & 15) ^ flip) - bias) - o);
                        pair[1] = s * ((f32::from((v >> 4) ^ flip) - bias) - o);
                    }
                }
                QFormat::U8 => {
                    for (d, &v) in block.iter_mut().zip(&row[c0..c0 + bs]) {
                        *d = s * (f32::from(v) - o);
                    }
                }
                QFormat::I8 => {
                    for (d, &v) in block.iter_mut().zip(&row[c0..c0 + bs]) {
                        *d = s * (f32::from(v as i8) - o);
                    }
                }
                _ => {
                    for (t, d) in block.iter_mut().enumerate() {
                        *d = s * (q.q(row, c0 + t) - o);
                    }
                }
            }
        }
    }
}

/// `Σ_b scale_b·offset_b·Σx_b` for one prepared activation row's block sums (0 without offsets).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[inline]
fn offset_term(scale: &ParamSlice<'_>, offset: Option<&ParamSlice<'_>>, sums: &[f32]) -> f32 {
    offset.map_or(0.0, |o| {
        sums.iter()
            .enumerate()
            .map(|(b, x)| scale.get(b) * o.get(b) * x)
            .sum()
    })
}

/// `f::<M>` for an activation-row count `m` of 1 to [`GEMV_MAX_ROWS`]: a kernel instantiated
/// for a constant count keeps its M sums in registers.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
macro_rules! by_rows {
    ($f:ident, $m:expr) => {
        match $m {
            1 => $f::<1>,
            2 => $f::<2>,
            3 => $f::<3>,
            4 => $f::<4>,
            5 => $f::<5>,
            6 => $f::<6>,
            7 => $f::<7>,
            _ => $f::<8>,
        }
    };
}

/// Largest activation-row count run as GEMV; more rows run as dequantized tiles + GEMM.
pub const GEMV_MAX_ROWS: usize = 8;
/// Weight rows dequantized per GEMM tile for `m` activation rows of a product with `n` outputs
/// on `threads`: the GEMM packs the activations again for every tile, so many rows take wide
/// tiles, an even share of the outputs per thread up to 512 (an encoder's 1500 rows against
/// 32-row tiles spent a third of the product repacking them).
fn tile_rows(m: usize, n: usize, threads: usize) -> usize {
    if m < 256 {
        return 32;
    }
    n.div_ceil(threads.max(1)).next_multiple_of(32).min(512)
}

/// Floats of scratch [`run`] needs.
pub fn scratch_floats(m: usize, q: &QuantTensor, threads: usize) -> usize {
    if m <= GEMV_MAX_ROWS {
        m * (q.cols + q.blocks_per_row()) + q.cols
    } else {
        threads.max(1) * tile_floats(tile_rows(m, q.rows, threads), q.cols) + m * q.cols
    }
}

/// Scratch of one prefill task: a tile of `width` weight rows as packed panels, and one row.
fn tile_floats(width: usize, k: usize) -> usize {
    packed::panels_len(k, width) + k
}

/// Activation rows prepared for the GEMV: 4-bit formats get each 32-column chunk as 16 even then
/// 16 odd columns (matching the nibbles of a byte); then the per-block sums.
fn prepare(x: &[f32], q: &QuantTensor, out: &mut [f32]) {
    let (k, nb) = (q.cols, q.blocks_per_row());
    let (xs, sums) = out.split_at_mut(k);
    if q.interleaved() {
        for (src, dst) in x.chunks_exact(32).zip(xs.chunks_exact_mut(32)) {
            for i in 0..16 {
                dst[i] = src[2 * i];
                dst[16 + i] = src[2 * i + 1];
            }
        }
    } else {
        xs.copy_from_slice(&x[..k]);
    }
    for (b, s) in sums[..nb].iter_mut().enumerate() {
        *s = x[b * q.block..(b + 1) * q.block].iter().sum();
    }
}

/// `out[m, n] = a[m, k] @ w^T` for a quantized `w[n, k]` (the Matmul's raw product).
pub fn run(mm: &Matmul, q: &QuantTensor, cx: &Cx) {
    let (m, n, k) = (mm.m, mm.n, mm.k);
    let a_ptr = cx.ptr(mm.a);
    let out = SendPtr(cx.ptr(mm.raw) as *mut f32);
    let a_row = |i: usize, dst: &mut [f32]| {
        let off = i * mm.a_rs;
        // SAFETY: `a` holds m rows of stride a_rs with unit column stride (checked at build).
        unsafe {
            match mm.a_elem {
                Elem::F16 => {
                    let s = std::slice::from_raw_parts((a_ptr as *const f16).add(off), k);
                    for (d, v) in dst.iter_mut().zip(s) {
                        *d = v.to_f32();
                    }
                }
                _ => dst.copy_from_slice(std::slice::from_raw_parts(
                    (a_ptr as *const f32).add(off),
                    k,
                )),
            }
        }
    };
    if m <= GEMV_MAX_ROWS && super::int_activations::applies(q) {
        let stride = super::int_activations::row_floats(q);
        let x = cx.scratch_at(m * stride, k);
        for i in 0..m {
            a_row(i, x);
            super::int_activations::prepare(x, q, cx.scratch_at(i * stride, stride));
        }
        let prep = &*cx.scratch_at(0, m * stride);
        let chunks = if cx.threads > 1 && n * k >= 1 << 16 {
            (cx.threads * 4).min(n.div_ceil(16))
        } else {
            1
        };
        let per = n.div_ceil(chunks);
        let rows = super::int_activations::Rows::of(q);
        let four_rows = super::int_activations::rows4_applies(q, m);
        cx.par_for(chunks, &|c| {
            let j0 = c * per;
            let j1 = (j0 + per).min(n);
            let mut j = j0;
            if four_rows {
                const R: usize = super::int_activations::ROWS4;
                while j + R <= j1 {
                    let mut acc = [0.0f32; R];
                    super::int_activations::gemv_rows4(&rows, j, prep, &mut acc);
                    // SAFETY: out is [1, n]; chunks write disjoint columns.
                    unsafe { std::ptr::copy_nonoverlapping(acc.as_ptr(), out.get().add(j), R) };
                    j += R;
                }
            }
            for j in j..j1 {
                let mut acc = [0.0f32; GEMV_MAX_ROWS];
                super::int_activations::gemv_row(&rows, j, prep, stride, m, &mut acc);
                for (i, v) in acc[..m].iter().enumerate() {
                    // SAFETY: out is [m, n]; chunks write disjoint columns.
                    unsafe { *out.get().add(i * n + j) = *v };
                }
            }
        });
    } else if m <= GEMV_MAX_ROWS {
        let stride = k + q.blocks_per_row();
        let x = cx.scratch_at(m * stride, k);
        for i in 0..m {
            a_row(i, x);
            prepare(x, q, cx.scratch_at(i * stride, stride));
        }
        let prep = &*cx.scratch_at(0, m * stride);
        let chunks = if cx.threads > 1 && n * k >= 1 << 16 {
            (cx.threads * 4).min(n.div_ceil(16))
        } else {
            1
        };
        let per = n.div_ceil(chunks);
        cx.par_for(chunks, &|c| {
            let j0 = c * per;
            let j1 = (j0 + per).min(n);
            for j in j0..j1 {
                let mut acc = [0.0f32; GEMV_MAX_ROWS];
                gemv_row(q, j, prep, stride, m, &mut acc);
                for (i, v) in acc[..m].iter().enumerate() {
                    // SAFETY: out is [m, n]; chunks write disjoint columns.
                    unsafe { *out.get().add(i * n + j) = *v };
                }
            }
        });
    } else {
        let x = cx.scratch_at(0, m * k);
        for i in 0..m {
            a_row(i, &mut x[i * k..(i + 1) * k]);
        }
        let x = SendPtr(x.as_mut_ptr());
        let threads = cx.threads.max(1);
        let width = tile_rows(m, n, threads);
        let tiles = n.div_ceil(width);
        let base = m * k;
        let per = tiles.div_ceil(threads);
        let task_floats = tile_floats(width, k);
        cx.par_for(threads.min(tiles), &|t| {
            let buf = cx.scratch_at(base + t * task_floats, task_floats);
            let (panels, row) = buf.split_at_mut(packed::panels_len(k, width));
            for tile in t * per..((t + 1) * per).min(tiles) {
                let j0 = tile * width;
                let cols = width.min(n - j0);
                // the tile's weight rows decoded straight into the packed kernel's panels, which
                // read A in place: nothing else is packed
                for r in 0..cols {
                    q.dequantize_row(j0 + r, row);
                    packed::put_column(panels, k, cols, r, row);
                }
                // SAFETY: x is [m, k]; out columns j0..j0+cols of the [m, n] output belong to
                // this task alone.
                unsafe {
                    packed::gemm_on_panels(x.get(), k, 1, m, panels, k, cols, out.get().add(j0), n)
                };
            }
        });
    }
}

/// `acc[i] = Σ_c w[j, c]·x_i[c]` for the `m` prepared rows.
fn gemv_row(
    q: &QuantTensor,
    j: usize,
    prep: &[f32],
    stride: usize,
    m: usize,
    acc: &mut [f32; GEMV_MAX_ROWS],
) {
    let row = q.data_row(j);
    let scale = q.params(&q.scale, j);
    let offset = q.offset.as_ref().map(|p| q.params(p, j));
    #[cfg(target_arch = "x86_64")]
    if avx512() {
        // SAFETY: AVX-512 was detected; slices are sized by the tensor's geometry.
        unsafe { gemv_row_avx512(q, row, &scale, offset.as_ref(), prep, stride, m, acc) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if crate::simd::has_avx2_fma() {
        // SAFETY: AVX2, FMA and F16C were detected; slices are sized by the tensor's geometry.
        if unsafe { gemv_row_avx2(q, row, &scale, offset.as_ref(), prep, stride, m, acc) } {
            return;
        }
    }
    #[cfg(target_arch = "aarch64")]
    if crate::simd::has_neon()
        && neon::gemv_row(q, row, &scale, offset.as_ref(), prep, stride, m, acc)
    {
        return;
    }
    gemv_row_portable(q, row, &scale, offset.as_ref(), prep, stride, m, acc);
}

/// The GEMV in NEON registers for 4-bit rows in whole chunks and 8-bit rows in blocks of 16k
/// (fp16 rows take the portable path: Rust has no stable fp16 vector type).
#[cfg(target_arch = "aarch64")]
mod neon {
    use super::{offset_term, ParamSlice, QFormat, QuantTensor, GEMV_MAX_ROWS};
    use std::arch::aarch64::*;

    /// False, having done nothing, for other geometries.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn gemv_row(
        q: &QuantTensor,
        row: &[u8],
        scale: &ParamSlice<'_>,
        offset: Option<&ParamSlice<'_>>,
        prep: &[f32],
        stride: usize,
        m: usize,
        acc: &mut [f32; GEMV_MAX_ROWS],
    ) -> bool {
        by_rows!(rows, m)(q, row, scale, offset, prep, stride, acc)
    }

    /// Sixteen signed bytes as four vectors of f32.
    #[inline(always)]
    fn widen_s8(v: int8x16_t) -> [float32x4_t; 4] {
        // SAFETY: NEON is part of the aarch64 baseline.
        unsafe {
            let lo = vmovl_s8(vget_low_s8(v));
            let hi = vmovl_high_s8(v);
            [
                vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))),
                vcvtq_f32_s32(vmovl_high_s16(lo)),
                vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))),
                vcvtq_f32_s32(vmovl_high_s16(hi)),
            ]
        }
    }

    /// Sixteen unsigned bytes as four vectors of f32.
    #[inline(always)]
    fn widen_u8(v: uint8x16_t) -> [float32x4_t; 4] {
        // SAFETY: NEON is part of the aarch64 baseline.
        unsafe {
            let lo = vmovl_u8(vget_low_u8(v));
            let hi = vmovl_high_u8(v);
            [
                vcvtq_f32_u32(vmovl_u16(vget_low_u16(lo))),
                vcvtq_f32_u32(vmovl_high_u16(lo)),
                vcvtq_f32_u32(vmovl_u16(vget_low_u16(hi))),
                vcvtq_f32_u32(vmovl_high_u16(hi)),
            ]
        }
    }

    fn rows<const M: usize>(
        q: &QuantTensor,
        row: &[u8],
        scale: &ParamSlice<'_>,
        offset: Option<&ParamSlice<'_>>,
        prep: &[f32],
        stride: usize,
        acc: &mut [f32; GEMV_MAX_ROWS],
    ) -> bool {
        let (k, bs, nb) = (q.cols, q.block, q.blocks_per_row());
        assert!(M <= GEMV_MAX_ROWS && prep.len() >= (M - 1) * stride + k + nb);
        assert!(row.len() == q.row_bytes());
        let p = prep.as_ptr();
        let rp = row.as_ptr();
        // SAFETY: NEON is part of the aarch64 baseline; every load lies inside `row` (cols
        // values) or inside an activation row of `prep` (k floats), as asserted above.
        unsafe {
            let mut sums = [vdupq_n_f32(0.0); M];
            match q.format {
                QFormat::U4 | QFormat::I4 if q.interleaved() => {
                    let signed = q.format == QFormat::I4;
                    let chunks_per_block = bs / 32;
                    for b in 0..nb {
                        let s = vdupq_n_f32(scale.get(b));
                        for cb in 0..chunks_per_block {
                            let c = b * chunks_per_block + cb;
                            let v = vld1q_u8(rp.add(c * 16));
                            let (lo, hi) = (vandq_u8(v, vdupq_n_u8(15)), vshrq_n_u8::<4>(v));
                            // prepared columns 0..16 are the low nibbles, 16..32 the high ones;
                            // a two's-complement nibble n is (n ^ 8) - 8
                            let (lo, hi) = if signed {
                                let eight = vdupq_n_s8(8);
                                let signed = |n: uint8x16_t| {
                                    vsubq_s8(vreinterpretq_s8_u8(veorq_u8(n, vdupq_n_u8(8))), eight)
                                };
                                (widen_s8(signed(lo)), widen_s8(signed(hi)))
                            } else {
                                (widen_u8(lo), widen_u8(hi))
                            };
                            for (i, sum) in sums.iter_mut().enumerate() {
                                let x = p.add(i * stride + c * 32);
                                for t in 0..4 {
                                    let d = vfmaq_f32(
                                        vmulq_f32(lo[t], vld1q_f32(x.add(4 * t))),
                                        hi[t],
                                        vld1q_f32(x.add(16 + 4 * t)),
                                    );
                                    *sum = vfmaq_f32(*sum, d, s);
                                }
                            }
                        }
                    }
                }
                QFormat::U8 | QFormat::I8 if bs % 16 == 0 => {
                    for b in 0..nb {
                        let s = vdupq_n_f32(scale.get(b));
                        for c in (b * bs..(b + 1) * bs).step_by(16) {
                            let v = vld1q_u8(rp.add(c));
                            let w = if q.format == QFormat::I8 {
                                widen_s8(vreinterpretq_s8_u8(v))
                            } else {
                                widen_u8(v)
                            };
                            for (i, sum) in sums.iter_mut().enumerate() {
                                let x = p.add(i * stride + c);
                                for (t, &wt) in w.iter().enumerate() {
                                    *sum =
                                        vfmaq_f32(*sum, vmulq_f32(wt, s), vld1q_f32(x.add(4 * t)));
                                }
                            }
                        }
                    }
                }
                _ => return false,
            }
            for (i, (a, sum)) in acc[..M].iter_mut().zip(&sums).enumerate() {
                *a = vaddvq_f32(*sum) - offset_term(scale, offset, &prep[i * stride + k..][..nb]);
            }
        }
        true
    }
}

/// [`gemv_row_avx512`] in 256-bit registers for the common geometries (4-bit in whole chunks,
/// 8-bit and fp16 in blocks of 8k); false, having done nothing, for others.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn gemv_row_avx2(
    q: &QuantTensor,
    row: &[u8],
    scale: &ParamSlice<'_>,
    offset: Option<&ParamSlice<'_>>,
    prep: &[f32],
    stride: usize,
    m: usize,
    acc: &mut [f32; GEMV_MAX_ROWS],
) -> bool {
    by_rows!(rows_avx2, m)(q, row, scale, offset, prep, stride, acc)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn rows_avx2<const M: usize>(
    q: &QuantTensor,
    row: &[u8],
    scale: &ParamSlice<'_>,
    offset: Option<&ParamSlice<'_>>,
    prep: &[f32],
    stride: usize,
    acc: &mut [f32; GEMV_MAX_ROWS],
) -> bool {
    use std::arch::x86_64::*;
    let (k, bs, nb) = (q.cols, q.block, q.blocks_per_row());
    assert!(M <= GEMV_MAX_ROWS && prep.len() >= (M - 1) * stride + k + nb);
    assert!(row.len() == q.row_bytes());
    let mut sums = [_mm256_setzero_ps(); M];
    let p = prep.as_ptr();
    let rp = row.as_ptr();
    match q.format {
        QFormat::U4 | QFormat::I4 if q.interleaved() => {
            let signed = q.format == QFormat::I4;
            let fifteen = _mm256_set1_epi32(15);
            let eight = _mm256_set1_epi32(8);
            let chunks_per_block = bs / 32;
            for b in 0..nb {
                let s = _mm256_set1_ps(scale.get(b));
                for cb in 0..chunks_per_block {
                    let c = b * chunks_per_block + cb;
                    // bytes 8h..8h+8 of the chunk: low nibbles are prepared columns 8h.., high
                    // nibbles 16 + 8h..
                    for h in 0..2 {
                        let v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(
                            rp.add(c * 16 + 8 * h) as *const __m128i
                        ));
                        let mut lo = _mm256_and_si256(v, fifteen);
                        let mut hi = _mm256_srli_epi32(v, 4);
                        if signed {
                            lo = _mm256_sub_epi32(_mm256_xor_si256(lo, eight), eight);
                            hi = _mm256_sub_epi32(_mm256_xor_si256(hi, eight), eight);
                        }
                        let lo = _mm256_cvtepi32_ps(lo);
                        let hi = _mm256_cvtepi32_ps(hi);
                        for (i, sum) in sums.iter_mut().enumerate() {
                            let x = p.add(i * stride + c * 32 + 8 * h);
                            let t = _mm256_fmadd_ps(
                                hi,
                                _mm256_loadu_ps(x.add(16)),
                                _mm256_mul_ps(lo, _mm256_loadu_ps(x)),
                            );
                            *sum = _mm256_fmadd_ps(t, s, *sum);
                        }
                    }
                }
            }
        }
        QFormat::F16 if bs % 8 == 0 => {
            for b in 0..nb {
                let mut part = [_mm256_setzero_ps(); M];
                for c in (b * bs..(b + 1) * bs).step_by(8) {
                    let w = _mm256_cvtph_ps(_mm_loadu_si128(rp.add(2 * c) as *const __m128i));
                    for (i, pt) in part.iter_mut().enumerate() {
                        *pt = _mm256_fmadd_ps(w, _mm256_loadu_ps(p.add(i * stride + c)), *pt);
                    }
                }
                let s = _mm256_set1_ps(scale.get(b));
                for (sum, pt) in sums.iter_mut().zip(&part) {
                    *sum = _mm256_fmadd_ps(*pt, s, *sum);
                }
            }
        }
        QFormat::U8 | QFormat::I8 if bs % 8 == 0 => {
            let signed = q.format == QFormat::I8;
            for b in 0..nb {
                let s = _mm256_set1_ps(scale.get(b));
                for c in (b * bs..(b + 1) * bs).step_by(8) {
                    let bytes = _mm_loadl_epi64(rp.add(c) as *const __m128i);
                    let v = if signed {
                        _mm256_cvtepi8_epi32(bytes)
                    } else {
                        _mm256_cvtepu8_epi32(bytes)
                    };
                    let w = _mm256_mul_ps(_mm256_cvtepi32_ps(v), s);
                    for (i, sum) in sums.iter_mut().enumerate() {
                        *sum = _mm256_fmadd_ps(w, _mm256_loadu_ps(p.add(i * stride + c)), *sum);
                    }
                }
            }
        }
        _ => return false,
    }
    for (i, (a, sum)) in acc[..M].iter_mut().zip(&sums).enumerate() {
        let half = _mm_add_ps(_mm256_castps256_ps128(*sum), _mm256_extractf128_ps(*sum, 1));
        let pair = _mm_add_ps(half, _mm_movehl_ps(half, half));
        let one = _mm_add_ss(pair, _mm_shuffle_ps(pair, pair, 1));
        *a = _mm_cvtss_f32(one) - offset_term(scale, offset, &prep[i * stride + k..][..nb]);
    }
    true
}

/// Columns decoded to f32 at a time by the portable GEMV: one 32-column chunk, the unit the
/// 4-bit activation preparation interleaves.
const PIECE: usize = 32;

/// Columns `c0..c0 + w.len()` of a row as their quantized values (before scale and offset), in
/// the order the activations were prepared: a whole 4-bit chunk as its 16 low then 16 high
/// nibbles.
#[inline(always)]
fn decode_piece(q: &QuantTensor, row: &[u8], c0: usize, w: &mut [f32]) {
    let len = w.len();
    match q.format {
        QFormat::U4 | QFormat::I4 if q.interleaved() => {
            // a two's-complement nibble n is (n ^ 8) - 8
            let flip = if q.format == QFormat::I4 { 8u8 } else { 0 };
            let bias = f32::from(flip);
            let bytes = &row[c0 / 2..c0 / 2 + 16];
            let (lo, hi) = w.split_at_mut(16);
            for ((l, h), &b) in lo.iter_mut().zip(hi.iter_mut()).zip(bytes) {
                *l = f32::from((b & 15) ^ flip) - bias;
                *h = f32::from((b >> 4) ^ flip) - bias;
            }
        }
        QFormat::U4 | QFormat::I4 if c0.is_multiple_of(2) && len.is_multiple_of(2) => {
            let flip = if q.format == QFormat::I4 { 8u8 } else { 0 };
            let bias = f32::from(flip);
            for (pair, &b) in w.chunks_exact_mut(2).zip(&row[c0 / 2..(c0 + len) / 2]) {
                pair[0] = f32::from((b & 15) ^ flip) - bias;
                pair[1] = f32::from((b >> 4) ^ flip) - bias;
            }
        }
        QFormat::U8 => {
            for (v, &b) in w.iter_mut().zip(&row[c0..c0 + len]) {
                *v = f32::from(b);
            }
        }
        QFormat::I8 => {
            for (v, &b) in w.iter_mut().zip(&row[c0..c0 + len]) {
                *v = f32::from(b as i8);
            }
        }
        QFormat::F16 => {
            let halves: &[f16] = bytemuck::cast_slice(&row[2 * c0..2 * (c0 + len)]);
            half::slice::HalfFloatSliceExt::convert_to_f32_slice(halves, w);
        }
        _ => {
            for (t, v) in w.iter_mut().enumerate() {
                *v = q.q(row, c0 + t);
            }
        }
    }
}

/// `lanes[l] += Σ_t w[8t + l]·x[8t + l]` (the tail into lane 0): eight independent sums the
/// compiler keeps in vector registers.
#[inline(always)]
fn dot_lanes(w: &[f32], x: &[f32], lanes: &mut [f32; 8]) {
    let (mut wc, mut xc) = (w.chunks_exact(8), x.chunks_exact(8));
    for (a, b) in (&mut wc).zip(&mut xc) {
        for l in 0..8 {
            lanes[l] += a[l] * b[l];
        }
    }
    for (a, b) in wc.remainder().iter().zip(xc.remainder()) {
        lanes[0] += a * b;
    }
}

crate::simd_dispatch! {
    /// The GEMV of one weight row for CPUs without the AVX-512 kernel (AVX2, aarch64, or a
    /// forced portable schedule): 32-column pieces decoded to f32, each dotted with the
    /// activations in eight-lane sums the compiler vectorises.
    fn gemv_row_portable(
        q: &QuantTensor,
        row: &[u8],
        scale: &ParamSlice<'_>,
        offset: Option<&ParamSlice<'_>>,
        prep: &[f32],
        stride: usize,
        m: usize,
        acc: &mut [f32; GEMV_MAX_ROWS],
    ) {
        let (k, bs, nb) = (q.cols, q.block, q.blocks_per_row());
        // One activation row at a time, its sums in locals the compiler keeps in registers (an
        // array indexed by the row would live on the stack, each piece's sums a store-to-load
        // round trip); a row of several activations is decoded once per activation row.
        for (i, out) in acc[..m].iter_mut().enumerate() {
            let x = &prep[i * stride..i * stride + k];
            let mut total = [0.0f32; 8];
            let mut min = 0.0f32;
            for b in 0..nb {
                let mut part = [0.0f32; 8];
                let mut w = [0.0f32; PIECE];
                let mut c0 = b * bs;
                while c0 < (b + 1) * bs {
                    let len = PIECE.min((b + 1) * bs - c0);
                    let w = &mut w[..len];
                    decode_piece(q, row, c0, w);
                    dot_lanes(w, &x[c0..c0 + len], &mut part);
                    c0 += len;
                }
                let s = scale.get(b);
                for l in 0..8 {
                    total[l] += s * part[l];
                }
                if let Some(o) = offset {
                    min += s * o.get(b) * prep[i * stride + k + b];
                }
            }
            *out = total.iter().sum::<f32>() - min;
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,f16c,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn gemv_row_avx512(
    q: &QuantTensor,
    row: &[u8],
    scale: &ParamSlice<'_>,
    offset: Option<&ParamSlice<'_>>,
    prep: &[f32],
    stride: usize,
    m: usize,
    acc: &mut [f32; GEMV_MAX_ROWS],
) {
    use std::arch::x86_64::*;
    let (k, bs, nb) = (q.cols, q.block, q.blocks_per_row());
    let mut sums = [_mm512_setzero_ps(); GEMV_MAX_ROWS];
    let p = prep.as_ptr();
    let rp = row.as_ptr();
    if m == 1 {
        if let Some(total) = gemv1_avx512(q, row, scale, offset, p, p.add(k)) {
            acc[0] = total;
            return;
        }
    }
    let fifteen = _mm512_set1_epi32(15);
    let eight = _mm512_set1_epi32(8);
    match q.format {
        QFormat::U4 | QFormat::I4 if q.interleaved() => {
            let signed = q.format == QFormat::I4;
            let chunks_per_block = bs / 32;
            for b in 0..nb {
                let s = _mm512_set1_ps(scale.get(b));
                for cb in 0..chunks_per_block {
                    let c = b * chunks_per_block + cb;
                    let bytes = _mm_loadu_si128(rp.add(c * 16) as *const __m128i);
                    let v = _mm512_cvtepu8_epi32(bytes);
                    let mut lo = _mm512_and_si512(v, fifteen);
                    let mut hi = _mm512_srli_epi32(v, 4);
                    if signed {
                        lo = _mm512_sub_epi32(_mm512_xor_si512(lo, eight), eight);
                        hi = _mm512_sub_epi32(_mm512_xor_si512(hi, eight), eight);
                    }
                    let lo = _mm512_cvtepi32_ps(lo);
                    let hi = _mm512_cvtepi32_ps(hi);
                    for i in 0..m {
                        let xe = _mm512_loadu_ps(p.add(i * stride + c * 32));
                        let xo = _mm512_loadu_ps(p.add(i * stride + c * 32 + 16));
                        let t = _mm512_fmadd_ps(hi, xo, _mm512_mul_ps(lo, xe));
                        sums[i] = _mm512_fmadd_ps(t, s, sums[i]);
                    }
                }
            }
        }
        QFormat::F16 if bs % 16 == 0 => {
            let hp = rp as *const __m256i;
            for b in 0..nb {
                let mut part = [_mm512_setzero_ps(); GEMV_MAX_ROWS];
                for c in (b * bs..(b + 1) * bs).step_by(16) {
                    let w = _mm512_cvtph_ps(_mm256_loadu_si256(hp.add(c / 16)));
                    for i in 0..m {
                        let x = _mm512_loadu_ps(p.add(i * stride + c));
                        part[i] = _mm512_fmadd_ps(w, x, part[i]);
                    }
                }
                let s = _mm512_set1_ps(scale.get(b));
                for i in 0..m {
                    sums[i] = _mm512_fmadd_ps(part[i], s, sums[i]);
                }
            }
        }
        QFormat::U8 | QFormat::I8 if bs % 16 == 0 => {
            let signed = q.format == QFormat::I8;
            for b in 0..nb {
                let s = _mm512_set1_ps(scale.get(b));
                for c in (b * bs..(b + 1) * bs).step_by(16) {
                    let bytes = _mm_loadu_si128(rp.add(c) as *const __m128i);
                    let v = if signed {
                        _mm512_cvtepi8_epi32(bytes)
                    } else {
                        _mm512_cvtepu8_epi32(bytes)
                    };
                    let w = _mm512_mul_ps(_mm512_cvtepi32_ps(v), s);
                    for i in 0..m {
                        let x = _mm512_loadu_ps(p.add(i * stride + c));
                        sums[i] = _mm512_fmadd_ps(w, x, sums[i]);
                    }
                }
            }
        }
        _ => {
            // unusual geometry: the portable path
            gemv_row_portable(q, row, scale, offset, prep, stride, m, acc);
            return;
        }
    }
    for i in 0..m {
        acc[i] = _mm512_reduce_add_ps(sums[i])
            - offset_term(scale, offset, &prep[i * stride + k..][..nb]);
    }
}

/// One block's raw dot `Σ q·x` as two partial vectors, for 4-bit rows prepared chunk-wise.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,f16c,fma")]
#[inline]
unsafe fn block_dot_u4(
    rp: *const u8,
    x: *const f32,
    first_chunk: usize,
    chunks: usize,
    signed: bool,
) -> (std::arch::x86_64::__m512, std::arch::x86_64::__m512) {
    use std::arch::x86_64::*;
    let fifteen = _mm512_set1_epi32(15);
    let eight = _mm512_set1_epi32(8);
    let (mut d0, mut d1) = (_mm512_setzero_ps(), _mm512_setzero_ps());
    for c in first_chunk..first_chunk + chunks {
        let v = _mm512_cvtepu8_epi32(_mm_loadu_si128(rp.add(c * 16) as *const __m128i));
        let mut lo = _mm512_and_si512(v, fifteen);
        let mut hi = _mm512_srli_epi32(v, 4);
        if signed {
            lo = _mm512_sub_epi32(_mm512_xor_si512(lo, eight), eight);
            hi = _mm512_sub_epi32(_mm512_xor_si512(hi, eight), eight);
        }
        d0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo), _mm512_loadu_ps(x.add(c * 32)), d0);
        d1 = _mm512_fmadd_ps(
            _mm512_cvtepi32_ps(hi),
            _mm512_loadu_ps(x.add(c * 32 + 16)),
            d1,
        );
    }
    (d0, d1)
}

/// One block's raw dot `Σ q·x` as two partial vectors, for 8-bit rows (blocks of 32k columns).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,f16c,fma")]
#[inline]
unsafe fn block_dot_u8(
    rp: *const u8,
    x: *const f32,
    start: usize,
    len: usize,
    signed: bool,
) -> (std::arch::x86_64::__m512, std::arch::x86_64::__m512) {
    use std::arch::x86_64::*;
    let widen = |bytes: __m128i| {
        if signed {
            _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes))
        } else {
            _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(bytes))
        }
    };
    let (mut d0, mut d1) = (_mm512_setzero_ps(), _mm512_setzero_ps());
    for c in (start..start + len).step_by(32) {
        let w0 = widen(_mm_loadu_si128(rp.add(c) as *const __m128i));
        let w1 = widen(_mm_loadu_si128(rp.add(c + 16) as *const __m128i));
        d0 = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x.add(c)), d0);
        d1 = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x.add(c + 16)), d1);
    }
    (d0, d1)
}

/// 16 consecutive per-block parameters from `b` as f32.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,f16c,fma")]
#[inline]
pub(crate) unsafe fn params16(p: &ParamSlice<'_>, b: usize) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    match p {
        ParamSlice::F32(v) => _mm512_loadu_ps(v[b..b + 16].as_ptr()),
        ParamSlice::F16(v) => {
            _mm512_cvtph_ps(_mm256_loadu_si256(v[b..b + 16].as_ptr() as *const __m256i))
        }
    }
}

/// `Σ_b scale_b·(Σ_{c∈b} q·x − offset_b·Σ_{c∈b} x)` of one row for a single activation row
/// (decode), or `None` for a geometry without this path. `xsums` holds the per-block sums of `x`.
/// Blocks go in groups of 16 whose scales and offset terms are converted and applied as vectors;
/// two blocks are in flight on their own accumulators (with one, every block would wait a full
/// FMA latency for the previous block's scaled sum).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,f16c,fma")]
unsafe fn gemv1_avx512(
    q: &QuantTensor,
    row: &[u8],
    scale: &ParamSlice<'_>,
    offset: Option<&ParamSlice<'_>>,
    x: *const f32,
    xsums: *const f32,
) -> Option<f32> {
    use std::arch::x86_64::*;
    let (bs, nb) = (q.block, q.blocks_per_row());
    let rp = row.as_ptr();
    if q.format == QFormat::F16 {
        return (bs % 64 == 0).then(|| half_dot1(rp as *const u16, scale, x, bs, nb));
    }
    let four = match q.format {
        QFormat::U4 | QFormat::I4 if q.interleaved() => true,
        QFormat::U8 | QFormat::I8 if bs % 32 == 0 => false,
        _ => return None,
    };
    let signed = matches!(q.format, QFormat::I4 | QFormat::I8);
    let dot = |b: usize| {
        if four {
            block_dot_u4(rp, x, b * bs / 32, bs / 32, signed)
        } else {
            block_dot_u8(rp, x, b * bs, bs, signed)
        }
    };
    let mut acc = [_mm512_setzero_ps(); 4];
    let mut correction = _mm512_setzero_ps();
    let mut tail_correction = 0.0f32;
    let mut scales = [0.0f32; 16];
    let mut g = 0;
    while g < nb {
        let len = (nb - g).min(16);
        if len == 16 {
            let s = params16(scale, g);
            _mm512_storeu_ps(scales.as_mut_ptr(), s);
            if let Some(o) = offset {
                let so = _mm512_mul_ps(s, params16(o, g));
                correction = _mm512_fmadd_ps(so, _mm512_loadu_ps(xsums.add(g)), correction);
            }
        } else {
            for (j, sj) in scales[..len].iter_mut().enumerate() {
                *sj = scale.get(g + j);
                if let Some(o) = offset {
                    tail_correction += *sj * o.get(g + j) * *xsums.add(g + j);
                }
            }
        }
        let mut j = 0;
        while j + 1 < len {
            let (d0, d1) = dot(g + j);
            let (e0, e1) = dot(g + j + 1);
            let s0 = _mm512_set1_ps(scales[j]);
            let s1 = _mm512_set1_ps(scales[j + 1]);
            acc[0] = _mm512_fmadd_ps(d0, s0, acc[0]);
            acc[1] = _mm512_fmadd_ps(d1, s0, acc[1]);
            acc[2] = _mm512_fmadd_ps(e0, s1, acc[2]);
            acc[3] = _mm512_fmadd_ps(e1, s1, acc[3]);
            j += 2;
        }
        if j < len {
            let (d0, d1) = dot(g + j);
            let s0 = _mm512_set1_ps(scales[j]);
            acc[0] = _mm512_fmadd_ps(d0, s0, acc[0]);
            acc[1] = _mm512_fmadd_ps(d1, s0, acc[1]);
        }
        g += len;
    }
    let sum = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
    Some(_mm512_reduce_add_ps(sum) - _mm512_reduce_add_ps(correction) - tail_correction)
}

/// `Σ_b scale_b·Σ_{c∈b} w_c·x_c` of one fp16 row (blocks of 64k columns) against one activation
/// row, on four accumulators so that consecutive FMAs do not wait on each other.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,f16c,fma")]
unsafe fn half_dot1(
    row: *const u16,
    scale: &ParamSlice<'_>,
    x: *const f32,
    bs: usize,
    nb: usize,
) -> f32 {
    use std::arch::x86_64::*;
    let w = |c: usize| _mm512_cvtph_ps(_mm256_loadu_si256(row.add(c) as *const __m256i));
    let mut total = _mm512_setzero_ps();
    for b in 0..nb {
        let mut acc = [_mm512_setzero_ps(); 4];
        for c in (b * bs..(b + 1) * bs).step_by(64) {
            for (t, a) in acc.iter_mut().enumerate() {
                *a = _mm512_fmadd_ps(w(c + 16 * t), _mm512_loadu_ps(x.add(c + 16 * t)), *a);
            }
        }
        let sum = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
        total = _mm512_fmadd_ps(sum, _mm512_set1_ps(scale.get(b)), total);
    }
    _mm512_reduce_add_ps(total)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,f16c,fma")]
unsafe fn dequantize_u4_avx512(
    row: &[u8],
    scale: &ParamSlice<'_>,
    offset: Option<&ParamSlice<'_>>,
    bs: usize,
    out: &mut [f32],
) {
    use std::arch::x86_64::*;
    let fifteen = _mm512_set1_epi32(15);
    let first = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    let second = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    let rp = row.as_ptr();
    let op = out.as_mut_ptr();
    for b in 0..out.len() / bs {
        let s = _mm512_set1_ps(scale.get(b));
        let o = _mm512_set1_ps(offset.map_or(0.0, |p| p.get(b)));
        for c in (b * bs / 32)..((b + 1) * bs / 32) {
            let v = _mm512_cvtepu8_epi32(_mm_loadu_si128(rp.add(c * 16) as *const __m128i));
            let lo = _mm512_mul_ps(
                _mm512_sub_ps(_mm512_cvtepi32_ps(_mm512_and_si512(v, fifteen)), o),
                s,
            );
            let hi = _mm512_mul_ps(
                _mm512_sub_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4)), o),
                s,
            );
            _mm512_storeu_ps(op.add(c * 32), _mm512_permutex2var_ps(lo, first, hi));
            _mm512_storeu_ps(op.add(c * 32 + 16), _mm512_permutex2var_ps(lo, second, hi));
        }
    }
}

/// `out[i] = w[indices[i]]` (an embedding lookup) for a quantized `w[rows, cols]`.
#[derive(Debug)]
pub struct QuantGather {
    pub q: Arc<QuantTensor>,
    pub indices: crate::plan::Vid,
    pub idx_elem: Elem,
    pub count: usize,
    pub out: crate::plan::Vid,
    pub out_elem: Elem,
}

impl QuantGather {
    pub fn scratch_floats(&self) -> usize {
        self.q.cols
    }

    pub fn run(&self, cx: &Cx) -> Result<(), String> {
        let cols = self.q.cols;
        let ip = cx.ptr(self.indices) as *const u8;
        let out = cx.ptr(self.out);
        for t in 0..self.count {
            // SAFETY: `indices` holds `count` values of `idx_elem`.
            let j = super::gather::wrap(
                unsafe { super::gather::index_at(ip, self.idx_elem, t) },
                self.q.rows,
            )?;
            match self.out_elem {
                Elem::F16 => {
                    let tmp = cx.scratch(cols);
                    self.q.dequantize_row(j, tmp);
                    // SAFETY: out is [count, cols] f16.
                    let dst = unsafe {
                        std::slice::from_raw_parts_mut((out as *mut f16).add(t * cols), cols)
                    };
                    for (d, s) in dst.iter_mut().zip(tmp.iter()) {
                        *d = f16::from_f32(*s);
                    }
                }
                _ => {
                    // SAFETY: out is [count, cols] f32.
                    let dst = unsafe {
                        std::slice::from_raw_parts_mut((out as *mut f32).add(t * cols), cols)
                    };
                    self.q.dequantize_row(j, dst);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 2×64 int8 tensor over a blob holding its data and f32 scales `scales` (4 blocks).
    fn tensor(scales: &[f32]) -> QuantTensor {
        let mut bytes = vec![0u8; 128];
        for s in scales {
            bytes.extend_from_slice(&s.to_le_bytes());
        }
        let storage: Storage = Arc::new(bytes);
        let scale = Params::F32 { off: 128 };
        QuantTensor::new(storage, 0, QFormat::I8, 2, 64, 32, scale, None).unwrap()
    }

    #[test]
    fn exactly_f16_scales_are_narrowed_and_shared() {
        let exact = [0.5f32, -0.0078125, 3.0, 1024.0];
        let mut a = tensor(&exact);
        a.narrow_params();
        let Params::OwnedF16(v) = a.scale_params() else {
            panic!("exact f16 values stay f32: {:?}", a.scale_params());
        };
        let back: Vec<f32> = v.iter().map(|x| x.to_f32()).collect();
        assert_eq!(back, exact);
        // a second plan over the same blob region shares the copy
        let mut b = a.clone();
        b.scale = Params::F32 { off: 128 };
        b.narrow_params();
        match (a.scale_params(), b.scale_params()) {
            (Params::OwnedF16(x), Params::OwnedF16(y)) => assert!(Arc::ptr_eq(x, y)),
            other => panic!("{other:?}"),
        }
        let mut c = tensor(&[0.5, 0.1, 3.0, 1024.0]);
        c.narrow_params();
        assert!(matches!(c.scale_params(), Params::F32 { .. }));
    }
}
