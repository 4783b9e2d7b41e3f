//! A weight matrix `[rows, cols]` as a model stores it: dense f32, or GGUF blocks kept quantized.
//!
//! GGUF's block types map onto MIL's blockwise shift-scale form `w = scale·(q − offset)` (one
//! scale and offset per block of columns) without expanding to f32. Each takes the narrowest
//! storage whose integers hold the block's own integers unchanged; the scale is the f32 value
//! gguf-py multiplies by (`d`, or its `d·sc` product, computed the same way):
//!
//! | ggml | gguf-py's value | stored | bits/weight (+ f32 params) |
//! |---|---|---|---|
//! | Q4_0 | `d·(q − 8)` | int4 `q − 8`, block 32 | 4 + 1 |
//! | Q4_1 | `d·q + m` | uint4 `q`, offset `−m/d`, block 32 | 4 + 2 |
//! | Q5_0 | `d·(q − 16)` | int8 `q − 16`, block 32 | 8 + 1 |
//! | Q5_1 | `d·q + m` | uint8 `q`, offset `−m/d`, block 32 | 8 + 2 |
//! | Q8_0 | `d·q` | int8 `q`, block 32 | 8 + 1 |
//! | Q2_K | `(d·sc)·q − dmin·m` | uint4 `q`, offset `dmin·m/(d·sc)`, block 16 | 4 + 4 |
//! | Q3_K | `(d·s)·q` | int4 `q`, block 16 | 4 + 2 |
//! | Q4_K | `(d·sc)·q − dmin·m` | uint4 `q`, offset `dmin·m/(d·sc)`, block 32 | 4 + 2 |
//! | Q5_K | `(d·sc)·q − dmin·m` | uint8 `q`, offset `dmin·m/(d·sc)`, block 32 | 8 + 2 |
//! | Q6_K | `(d·sc)·(q − 32)` | int8 `q − 32`, block 16 | 8 + 2 |
//! | IQ4_NL | `d·v[q]` | int8 codebook value `v[q]`, block 32 | 8 + 1 |
//! | IQ4_XS | `(d·(s − 32))·v[q]` | int8 `v[q]`, block 32 | 8 + 1 |
//!
//! Exactness: without an offset, `scale·q` is gguf-py's own f32 product, bit for bit. With one
//! (the affine types `a·q + b`), the offset `−b/a` is rounded to f32, so `scale·(q − offset)`
//! may differ from gguf-py's `a·q + b` by a few f32 roundings of the terms: at most
//! `2⁻²²·(|a·q| + |b|)` (three roundings of relative size 2⁻²⁴ each, one of which gguf-py
//! also makes), checked against gguf-py in crates/models/tests/it/gguf_blocks_kept.rs. A block
//! with `a = 0` (or `b/a` not finite) holds `b` everywhere: `q = 1`, scale `b`, offset 0, exact.
//! Programs for ANE targets carry scales and offsets in fp16 (the program's float type), which
//! rounds `d·sc` products and offsets there; the CPU target keeps them f32.
//!
//! 4-bit integers are packed in MIL's order (byte `i` holds elements `2i` and `2i + 1`, the even
//! one in the low nibble), not ggml's.

use std::ops::Range;
use std::sync::Arc;

use aneforge::graph::{
    self, BlockParams, BlockQuantized, DeferredBytes, DeferredF32, HalfStorage, HostArray,
    HostData, QuantFormat, Tensor,
};

use super::LlmError;
use crate::gguf::{
    k_scale_min, BlockIq4Nl, BlockIq4Xs, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ4_0, BlockQ4_1,
    BlockQ5K, BlockQ5_0, BlockQ5_1, BlockQ6K, BlockQ8_0, GgmlType, GgufFile, QuantBlock,
};

/// A weight matrix. Dense values may be deferred ([`DeferredF32`]: read from the model's file
/// when a program is compiled), so the compiled program's blob holds the only copy.
#[derive(Clone, Debug)]
pub enum Matrix {
    Dense(HostArray),
    Quant(BlockQuantized),
}

/// The f32 values of a dense array, read if deferred.
fn values(a: &HostArray) -> Result<Arc<[f32]>, LlmError> {
    a.data()
        .values_f32()?
        .ok_or_else(|| LlmError::Internal(format!("a {:?} weight is not float", a.dtype())))
}

/// Deferred matrices stacked by rows, read part by part.
#[derive(Debug)]
struct DeferredRows {
    parts: Vec<Arc<dyn DeferredF32>>,
}

impl DeferredF32 for DeferredRows {
    fn len(&self) -> usize {
        self.parts.iter().map(|p| p.len()).sum()
    }

    fn read(&self, start: usize, out: &mut [f32]) -> Result<(), String> {
        let done = aneforge::graph::read_concatenated(
            &self.parts,
            |p| p.len(),
            |p, at, o| p.read(at, o),
            start,
            out,
        )?;
        if done != out.len() {
            return Err(format!(
                "values {start}..{} of {} stacked rows lie past their {} values",
                start + out.len(),
                self.parts.len(),
                self.len()
            ));
        }
        Ok(())
    }

    /// Exact when every part is; else every part's rows with their own scales (an exact part's
    /// at 2^0).
    fn half_storage(&self, cols: usize) -> Option<HalfStorage> {
        let parts: Vec<HalfStorage> = self
            .parts
            .iter()
            .map(|p| p.half_storage(cols))
            .collect::<Option<_>>()?;
        if parts.iter().all(|p| *p == HalfStorage::Exact) {
            return Some(HalfStorage::Exact);
        }
        let mut rows = Vec::with_capacity(self.len() / cols);
        for (part, storage) in self.parts.iter().zip(&parts) {
            match storage {
                HalfStorage::Exact => rows.extend(std::iter::repeat_n(0, part.len() / cols)),
                HalfStorage::Scaled(e) => rows.extend_from_slice(e),
            }
        }
        Some(HalfStorage::Scaled(rows.into()))
    }
}

/// A deferred matrix with its rows reordered: row `i` is the source's row `perm[i]`.
#[derive(Debug)]
struct DeferredPermutedRows {
    source: Arc<dyn DeferredF32>,
    perm: Vec<usize>,
    cols: usize,
}

impl DeferredF32 for DeferredPermutedRows {
    fn len(&self) -> usize {
        self.perm.len() * self.cols
    }

    fn read(&self, start: usize, out: &mut [f32]) -> Result<(), String> {
        let source = |at: usize, o: &mut [f32]| self.source.read(at, o);
        aneforge::graph::read_picked(&self.perm, self.cols, source, start, out)
    }

    fn half_storage(&self, cols: usize) -> Option<HalfStorage> {
        match self.source.half_storage(cols)? {
            HalfStorage::Exact => Some(HalfStorage::Exact),
            HalfStorage::Scaled(e) if cols == self.cols => Some(HalfStorage::Scaled(
                self.perm.iter().map(|&r| e[r]).collect(),
            )),
            HalfStorage::Scaled(_) => None,
        }
    }
}

/// Blocks appended in row-major order in MIL's storage of `format`.
struct Packer {
    format: QuantFormat,
    block: usize,
    keep_data: bool,
    data: Vec<u8>,
    scale: Vec<f32>,
    offset: Option<Vec<f32>>,
}

impl Packer {
    /// Without `data`, only the scales and offsets are kept.
    fn new(
        format: QuantFormat,
        block: usize,
        elements: usize,
        offsets: bool,
        data: bool,
    ) -> Packer {
        let blocks = elements / block;
        Packer {
            format,
            block,
            keep_data: data,
            data: Vec::with_capacity(if data {
                elements * format.bits() / 8
            } else {
                0
            }),
            scale: Vec::with_capacity(blocks),
            offset: offsets.then(|| Vec::with_capacity(blocks)),
        }
    }

    /// One block `scale·q[i]`, `q` in the format's range.
    fn push(&mut self, q: &[i32], scale: f32) {
        self.push_shifted(q, scale, 0.0);
    }

    /// One block `scale·(q[i] − offset)`; a packer without offsets takes only `offset = 0`.
    fn push_shifted(&mut self, q: &[i32], scale: f32, offset: f32) {
        debug_assert_eq!(q.len(), self.block);
        debug_assert!(self.offset.is_some() || offset == 0.0);
        if self.keep_data && self.format.bits() == 4 {
            self.data.extend(
                q.chunks_exact(2)
                    .map(|p| ((p[0] & 15) | ((p[1] & 15) << 4)) as u8),
            );
        } else if self.keep_data {
            self.data.extend(q.iter().map(|&v| v as u8));
        }
        self.scale.push(scale);
        if let Some(o) = &mut self.offset {
            o.push(offset);
        }
    }

    /// One block `a·q[i] + b` (see the module's exactness note).
    fn push_affine(&mut self, q: &[i32], a: f32, b: f32) {
        let offset = -b / a;
        if a == 0.0 || !offset.is_finite() {
            let ones = [1; 32];
            self.push_shifted(&ones[..self.block], b, 0.0);
        } else {
            self.push_shifted(q, a, offset);
        }
    }

    fn finish(self, rows: usize, cols: usize) -> Result<BlockQuantized, aneforge::GraphError> {
        BlockQuantized::new(
            self.format,
            rows,
            cols,
            self.block,
            self.data,
            self.scale,
            self.offset.map(Into::into),
        )
    }
}

/// GGUF blocks `range` of tensor `name`.
fn blocks_in<'a, B: QuantBlock>(
    file: &'a GgufFile,
    name: &str,
    range: &Range<usize>,
) -> Result<&'a [B], LlmError> {
    let all = file.blocks::<B>(name)?;
    all.get(range.clone()).ok_or_else(|| {
        LlmError::Invalid(format!(
            "{}: tensor '{name}': blocks {range:?} of {}",
            file.path().display(),
            all.len()
        ))
    })
}

/// GGUF blocks `range` of tensor `name` (of type `ty`) in MIL's storage, or `None` for a type
/// not kept quantized.
fn pack_blocks(
    file: &GgufFile,
    name: &str,
    ty: GgmlType,
    range: Range<usize>,
    data: bool,
) -> Result<Option<Packer>, LlmError> {
    use QuantFormat::{I4, I8, U4, U8};
    // a block's integers, unpacked only when the data is wanted (not for its scales alone)
    macro_rules! quants {
        ($b:expr) => {
            if data {
                $b.quants()
            } else {
                [0; _]
            }
        };
    }
    let n = range.len() * ty.block_elements();
    let mut p;
    match ty {
        GgmlType::Q4_0 => {
            p = Packer::new(I4, 32, n, false, data);
            for b in blocks_in::<BlockQ4_0>(file, name, &range)? {
                let q = quants!(b).map(|q| q as i32 - 8);
                p.push(&q, b.d.to_f32());
            }
        }
        GgmlType::Q4_1 => {
            p = Packer::new(U4, 32, n, true, data);
            for b in blocks_in::<BlockQ4_1>(file, name, &range)? {
                let q = quants!(b).map(i32::from);
                p.push_affine(&q, b.d.to_f32(), b.m.to_f32());
            }
        }
        GgmlType::Q5_0 => {
            p = Packer::new(I8, 32, n, false, data);
            for b in blocks_in::<BlockQ5_0>(file, name, &range)? {
                let q = quants!(b).map(|q| q as i32 - 16);
                p.push(&q, b.d.to_f32());
            }
        }
        GgmlType::Q5_1 => {
            p = Packer::new(U8, 32, n, true, data);
            for b in blocks_in::<BlockQ5_1>(file, name, &range)? {
                let q = quants!(b).map(i32::from);
                p.push_affine(&q, b.d.to_f32(), b.m.to_f32());
            }
        }
        GgmlType::Q8_0 => {
            p = Packer::new(I8, 32, n, false, data);
            for b in blocks_in::<BlockQ8_0>(file, name, &range)? {
                p.push(&b.qs.map(i32::from), b.d.to_f32());
            }
        }
        GgmlType::Q2_K => {
            p = Packer::new(U4, 16, n, true, data);
            for b in blocks_in::<BlockQ2K>(file, name, &range)? {
                let (d, dmin) = (b.d.to_f32(), b.dmin.to_f32());
                for (q, &sc) in groups(&quants!(b), 16).zip(&b.scales) {
                    let a = d * (sc & 0x0F) as f32;
                    let m = dmin * (sc >> 4) as f32;
                    p.push_affine(&q[..16], a, -m);
                }
            }
        }
        GgmlType::Q3_K => {
            p = Packer::new(I4, 16, n, false, data);
            for b in blocks_in::<BlockQ3K>(file, name, &range)? {
                let d = b.d.to_f32();
                for (q, s) in groups(&quants!(b), 16).zip(b.group_scales()) {
                    p.push(&q[..16], d * s as f32);
                }
            }
        }
        GgmlType::Q4_K => {
            p = Packer::new(U4, 32, n, true, data);
            for b in blocks_in::<BlockQ4K>(file, name, &range)? {
                let (d, dmin) = (b.d.to_f32(), b.dmin.to_f32());
                let (sc, m) = k_scale_min(&b.scales);
                for (g, q) in groups(&quants!(b), 32).enumerate() {
                    p.push_affine(&q, d * sc[g] as f32, -(dmin * m[g] as f32));
                }
            }
        }
        GgmlType::Q5_K => {
            p = Packer::new(U8, 32, n, true, data);
            for b in blocks_in::<BlockQ5K>(file, name, &range)? {
                let (d, dmin) = (b.d.to_f32(), b.dmin.to_f32());
                let (sc, m) = k_scale_min(&b.scales);
                for (g, q) in groups(&quants!(b), 32).enumerate() {
                    p.push_affine(&q, d * sc[g] as f32, -(dmin * m[g] as f32));
                }
            }
        }
        GgmlType::Q6_K => {
            p = Packer::new(I8, 16, n, false, data);
            for b in blocks_in::<BlockQ6K>(file, name, &range)? {
                let d = b.d.to_f32();
                for (q, &s) in groups(&quants!(b), 16).zip(&b.scales) {
                    p.push(&q[..16], d * s as f32);
                }
            }
        }
        GgmlType::IQ4_NL => {
            p = Packer::new(I8, 32, n, false, data);
            for b in blocks_in::<BlockIq4Nl>(file, name, &range)? {
                p.push(&quants!(b).map(i32::from), b.d.to_f32());
            }
        }
        GgmlType::IQ4_XS => {
            p = Packer::new(I8, 32, n, false, data);
            for b in blocks_in::<BlockIq4Xs>(file, name, &range)? {
                let d = b.d.to_f32();
                for (q, s) in groups(&quants!(b), 32).zip(b.group_scales()) {
                    p.push(&q, d * s as f32);
                }
            }
        }
        _ => return Ok(None),
    }
    Ok(Some(p))
}

/// A GGUF tensor's integers in MIL's storage, converted from the mapped file when read.
#[derive(Debug)]
struct GgufPacked {
    file: Arc<GgufFile>,
    name: String,
    ty: GgmlType,
    rows: usize,
    /// Bytes of one converted row.
    row_bytes: usize,
    /// Scales (and offsets) of one converted row.
    row_params: usize,
    /// GGUF blocks per row.
    per_row: usize,
}

/// The scales (or offsets) of a [`GgufPacked`] tensor, converted from the mapped file when read.
#[derive(Debug)]
struct GgufParams {
    packed: Arc<GgufPacked>,
    offsets: bool,
}

/// Converted bytes produced per step of a long read.
const PACK_STEP: usize = 1 << 20;

impl GgufPacked {
    /// Values `start..start + out.len()` of what `part` picks from the converted rows (`per_row`
    /// values each), converted a step of rows at a time.
    fn convert<T: Copy>(
        &self,
        start: usize,
        out: &mut [T],
        per_row: usize,
        data: bool,
        part: impl Fn(&Packer) -> &[T],
    ) -> Result<(), String> {
        let end = start + out.len();
        if end > self.rows * per_row {
            return Err(format!(
                "{}: tensor '{}': values {start}..{end} of {}",
                self.file.path().display(),
                self.name,
                self.rows * per_row
            ));
        }
        let step = (PACK_STEP / self.row_bytes).max(1);
        let mut r = start / per_row;
        while r * per_row < end {
            let r1 = (r + step).min(end.div_ceil(per_row));
            let p = pack_blocks(
                &self.file,
                &self.name,
                self.ty,
                r * self.per_row..r1 * self.per_row,
                data,
            )
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("tensor '{}': {} is not kept quantized", self.name, self.ty))?;
            let values = part(&p);
            let (lo, hi) = ((r * per_row).max(start), (r1 * per_row).min(end));
            out[lo - start..hi - start]
                .copy_from_slice(&values[lo - r * per_row..hi - r * per_row]);
            // what was converted is what the reader keeps (a program's blob): the file's pages
            // need not stay resident next to it, not even until the whole tensor is read
            if let Some(info) = self.file.tensor(&self.name) {
                let bytes = self.per_row * self.ty.block_bytes();
                self.file.release_tensor_range(info, r * bytes..r1 * bytes);
            }
            r = r1;
        }
        // a fault maps the file's pages around the one it needs (a large page-cache folio, say),
        // so pages released a step ago may be mapped again: the whole tensor, once more
        if let Some(info) = self.file.tensor(&self.name) {
            self.file.release_tensor_pages(info);
        }
        Ok(())
    }
}

impl DeferredBytes for GgufPacked {
    fn len(&self) -> usize {
        self.rows * self.row_bytes
    }

    fn read(&self, start: usize, out: &mut [u8]) -> Result<(), String> {
        self.convert(start, out, self.row_bytes, true, |p| &p.data)
    }
}

impl DeferredF32 for GgufParams {
    fn len(&self) -> usize {
        self.packed.rows * self.packed.row_params
    }

    fn read(&self, start: usize, out: &mut [f32]) -> Result<(), String> {
        let per_row = self.packed.row_params;
        if self.offsets {
            self.packed.convert(start, out, per_row, false, |p| {
                p.offset.as_deref().unwrap_or(&[])
            })
        } else {
            self.packed
                .convert(start, out, per_row, false, |p| &p.scale)
        }
    }
}

/// The consecutive groups of `len` (≤ 32) integers of `q`, each in the first `len` slots.
fn groups<T: Copy + Into<i32>>(q: &[T], len: usize) -> impl Iterator<Item = [i32; 32]> + '_ {
    q.chunks_exact(len).map(move |g| {
        let mut out = [0i32; 32];
        for (o, &v) in out.iter_mut().zip(g) {
            *o = v.into();
        }
        out
    })
}

impl Matrix {
    pub fn rows(&self) -> usize {
        match self {
            Matrix::Dense(a) => a.shape().first().copied().unwrap_or(0),
            Matrix::Quant(q) => q.rows(),
        }
    }

    pub fn cols(&self) -> usize {
        match self {
            Matrix::Dense(a) => a.shape().get(1).copied().unwrap_or(0),
            Matrix::Quant(q) => q.cols(),
        }
    }

    /// Bytes a program stores for this matrix.
    pub fn stored_bytes(&self) -> usize {
        match self {
            Matrix::Dense(a) => a.len() * 4,
            Matrix::Quant(q) => q.stored_bytes(),
        }
    }

    /// The quantized form of a GGUF tensor of `shape` as a matrix of its last dimension's
    /// columns (a stack of experts `[E, rows, cols]` becomes `[E·rows, cols]`), or `None` when
    /// its type is not kept quantized or its shape differs. Nothing is held: the integers,
    /// scales and offsets are converted again from the mapped file when read
    /// ([`BlockQuantized::deferred`], [`BlockParams::Deferred`]), so a compiled program's blob
    /// holds their only copy.
    pub fn from_gguf_blocks(
        file: &Arc<GgufFile>,
        name: &str,
        shape: &[usize],
    ) -> Result<Option<Matrix>, LlmError> {
        let info = file.require_tensor(name)?;
        let ty = info.ggml_type;
        let Some((&cols, lead)) = shape.split_last() else {
            return Ok(None);
        };
        let rows: usize = lead.iter().product();
        if info.shape() != shape || rows == 0 || !cols.is_multiple_of(ty.block_elements()) {
            return Ok(None);
        }
        let per_row = cols / ty.block_elements();
        // the first row names the storage (and checks the tensor's length in the file)
        let Some(p) = pack_blocks(file, name, ty, 0..per_row, false)? else {
            return Ok(None);
        };
        let packed = Arc::new(GgufPacked {
            file: file.clone(),
            name: name.to_string(),
            ty,
            rows,
            row_bytes: cols * p.format.bits() / 8,
            row_params: cols / p.block,
            per_row,
        });
        let params = |offsets: bool| -> BlockParams {
            let source: Arc<dyn DeferredF32> = Arc::new(GgufParams {
                packed: packed.clone(),
                offsets,
            });
            BlockParams::Deferred(source)
        };
        let q = BlockQuantized::deferred(
            p.format,
            rows,
            cols,
            p.block,
            packed.clone(),
            params(false),
            p.offset.is_some().then(|| params(true)),
        )
        .map_err(|e| {
            LlmError::Invalid(format!("{}: tensor '{name}': {e}", file.path().display()))
        })?;
        Ok(Some(Matrix::Quant(q)))
    }

    /// Symmetric block quantization (blocks of 32, one scale each, as ggml's Q8_0 and Q4_0):
    /// `d = max|x| / 127` for int8; for int4 `d = x_max / −8` with `x_max` the value of largest
    /// magnitude, `q = round(x / d)` (half to even) clamped to the format's range. Rows that do not split into
    /// blocks of 32 stay as they are.
    pub fn quantize(&self, format: QuantFormat) -> Result<Matrix, LlmError> {
        let (rows, cols) = (self.rows(), self.cols());
        if !cols.is_multiple_of(32)
            || format.bits() == 4 && format != QuantFormat::I4
            || format == QuantFormat::U8
        {
            return Ok(self.clone());
        }
        let dense: Arc<[f32]> = match self {
            Matrix::Dense(a) => values(a)?,
            Matrix::Quant(q) => q.dequantize()?.into(),
        };
        let (lo, hi) = format.range();
        let mut q = Vec::with_capacity(rows * cols);
        let mut scale = Vec::with_capacity(rows * cols / 32);
        for block in dense.chunks_exact(32) {
            let extreme = block
                .iter()
                .copied()
                .fold(0.0f32, |m, x| if x.abs() > m.abs() { x } else { m });
            let d = if format == QuantFormat::I8 {
                extreme.abs() / 127.0
            } else {
                extreme / -8.0
            };
            let inv = if d != 0.0 { 1.0 / d } else { 0.0 };
            q.extend(
                block
                    .iter()
                    .map(|&x| ((x * inv).round_ties_even() as i32).clamp(lo, hi)),
            );
            scale.push(d);
        }
        let data: Vec<u8> = match format {
            QuantFormat::I4 => q
                .chunks_exact(2)
                .map(|p| ((p[0] & 15) | ((p[1] & 15) << 4)) as u8)
                .collect(),
            _ => q.iter().map(|&v| v as i8 as u8).collect(),
        };
        let bad = |e: aneforge::GraphError| {
            LlmError::Internal(format!("quantizing a {rows}x{cols} matrix: {e}"))
        };
        Ok(Matrix::Quant(
            BlockQuantized::new(format, rows, cols, 32, data, scale, None).map_err(bad)?,
        ))
    }

    /// The graph constant holding this matrix.
    pub fn constant(&self) -> Result<Tensor, LlmError> {
        match self {
            Matrix::Dense(a) => Ok(graph::constant(a.clone())),
            Matrix::Quant(q) => Ok(graph::constant(HostArray::from_block_quantized(q.clone())?)),
        }
    }

    /// Rows of all parts, in order (their column counts must agree).
    pub fn concat_rows(parts: &[Matrix]) -> Result<Matrix, LlmError> {
        let cols = parts.first().map_or(0, Matrix::cols);
        if parts.iter().any(|p| p.cols() != cols) {
            return Err(LlmError::Internal(format!(
                "concatenating matrices with column counts {:?}",
                parts.iter().map(Matrix::cols).collect::<Vec<_>>()
            )));
        }
        let quant: Vec<&BlockQuantized> = parts
            .iter()
            .filter_map(|p| match p {
                Matrix::Quant(q) => Some(q),
                Matrix::Dense(_) => None,
            })
            .collect();
        if quant.len() == parts.len() {
            if let Some((format, block, offsets)) = common_form(&quant) {
                let same: Vec<BlockQuantized> = quant
                    .iter()
                    .map(|q| widened(q, format, block, offsets))
                    .collect::<Result<_, _>>()?;
                let refs: Vec<&BlockQuantized> = same.iter().collect();
                return Ok(Matrix::Quant(BlockQuantized::concat_rows(&refs)?));
            }
        }
        let rows: usize = parts.iter().map(Matrix::rows).sum();
        let deferred: Vec<Arc<dyn DeferredF32>> = parts
            .iter()
            .filter_map(|p| match p {
                Matrix::Dense(a) => match a.data() {
                    HostData::Deferred(d) => Some(d.clone()),
                    _ => None,
                },
                Matrix::Quant(_) => None,
            })
            .collect();
        if deferred.len() == parts.len() {
            let stacked = DeferredRows { parts: deferred };
            return Ok(Matrix::Dense(HostArray::from_deferred(
                &[rows, cols],
                Arc::new(stacked),
            )?));
        }
        // dense and quantized parts, or integers no one format holds: everything dense
        let mut data = Vec::with_capacity(rows * cols);
        for p in parts {
            match p {
                Matrix::Dense(a) => data.extend_from_slice(&values(a)?),
                Matrix::Quant(q) => data.extend(q.dequantize()?),
            }
        }
        Ok(Matrix::Dense(HostArray::from_f32(&[rows, cols], data)?))
    }

    /// `[rows, cols]` viewed as `[rows / k, k·cols]`: each row of the result is `k` consecutive
    /// rows (storage is row-major, and a row holds whole blocks, so nothing moves).
    pub fn merge_rows(&self, k: usize) -> Result<Matrix, LlmError> {
        let (rows, cols) = (self.rows(), self.cols());
        if k == 0 || !rows.is_multiple_of(k) {
            return Err(LlmError::Internal(format!(
                "merging {rows} rows in groups of {k}"
            )));
        }
        match self {
            Matrix::Dense(a) => Ok(Matrix::Dense(HostArray::new(
                &[rows / k, k * cols],
                a.data().clone(),
            )?)),
            Matrix::Quant(q) => Ok(Matrix::Quant(q.reshaped(rows / k, k * cols)?)),
        }
    }

    /// Row `r` of the result is row `perm[r]` of `self`.
    pub fn permute_rows(&self, perm: &[usize]) -> Result<Matrix, LlmError> {
        let (rows, cols) = (self.rows(), self.cols());
        if perm.len() != rows || perm.iter().any(|&p| p >= rows) {
            return Err(LlmError::Internal(format!(
                "row permutation of {} rows for {rows}",
                perm.len()
            )));
        }
        match self {
            Matrix::Dense(a) => {
                if let HostData::Deferred(d) = a.data() {
                    let permuted = DeferredPermutedRows {
                        source: d.clone(),
                        perm: perm.to_vec(),
                        cols,
                    };
                    return Ok(Matrix::Dense(HostArray::from_deferred(
                        &[rows, cols],
                        Arc::new(permuted),
                    )?));
                }
                let v = values(a)?;
                let mut out = Vec::with_capacity(rows * cols);
                for &p in perm {
                    out.extend_from_slice(&v[p * cols..(p + 1) * cols]);
                }
                Ok(Matrix::Dense(HostArray::from_f32(&[rows, cols], out)?))
            }
            Matrix::Quant(q) => Ok(Matrix::Quant(q.permute_rows(perm)?)),
        }
    }

    /// Row `r` as f32 (an embedding lookup on the host).
    pub fn row_f32(&self, r: usize, out: &mut [f32]) -> Result<(), LlmError> {
        let cols = self.cols();
        if r >= self.rows() || out.len() != cols {
            return Err(LlmError::TokenOutOfRange {
                id: r as u64,
                vocab: self.rows(),
            });
        }
        match self {
            Matrix::Dense(a) => match a.data() {
                HostData::Deferred(d) => d
                    .read(r * cols, out)
                    .map_err(|e| LlmError::Graph(aneforge::GraphError::ConstantData(e)))?,
                _ => out.copy_from_slice(&values(a)?[r * cols..(r + 1) * cols]),
            },
            Matrix::Quant(q) => q.dequantize_row(r, out)?,
        }
        Ok(())
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The one storage every part converts to without changing a value, or `None`: the parts' own
/// format when they share it, else 8 bits (int8 when some part is signed, uint8 otherwise; uint8
/// and signed parts together have none); blocks of the parts' common divisor; offsets when any
/// part has them (0 for the others).
fn common_form(parts: &[&BlockQuantized]) -> Option<(QuantFormat, usize, bool)> {
    let first = parts.first()?.format();
    let block = parts.iter().fold(0, |g, q| gcd(g, q.block()));
    let offsets = parts.iter().any(|q| q.has_offset());
    let has = |f: &[QuantFormat]| parts.iter().any(|q| f.contains(&q.format()));
    let format = if parts.iter().all(|q| q.format() == first) {
        first
    } else if has(&[QuantFormat::I4, QuantFormat::I8]) {
        if has(&[QuantFormat::U8]) {
            return None;
        }
        QuantFormat::I8
    } else {
        QuantFormat::U8
    };
    Some((format, block, offsets))
}

/// `q` in `format` with blocks of `block` (a divisor of its own) and offsets when `offsets`:
/// the same integers, each new block with the scale and offset of the block it lies in.
fn widened(
    q: &BlockQuantized,
    format: QuantFormat,
    block: usize,
    offsets: bool,
) -> Result<BlockQuantized, LlmError> {
    if q.format() == format && q.block() == block && q.has_offset() == offsets {
        return Ok(q.clone());
    }
    let (rows, cols, nb) = (q.rows(), q.cols(), q.blocks_per_row());
    let mut p = Packer::new(format, block, rows * cols, offsets, true);
    let mut ints = vec![0i32; block];
    let (scale, offset) = (q.scale()?, q.offset()?);
    let mut row = vec![0u8; q.row_bytes()];
    for r in 0..rows {
        q.read_rows(r, &mut row)?;
        for c0 in (0..cols).step_by(block) {
            for (i, v) in ints.iter_mut().enumerate() {
                *v = q.q_in(&row, c0 + i);
            }
            let b = r * nb + c0 / q.block();
            let offset = offset.as_ref().map_or(0.0, |o| o[b]);
            p.push_shifted(&ints, scale[b], offset);
        }
    }
    p.finish(rows, cols)
        .map_err(|e| LlmError::Internal(format!("widening a {rows}x{cols} matrix: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Row-merging a block-quantized matrix keeps every value where the dense merge puts it.
    #[test]
    fn merged_rows_keep_their_values() {
        let (rows, cols) = (6, 64);
        let values: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
            .collect();
        let dense = Matrix::Dense(HostArray::from_f32(&[rows, cols], values).unwrap());
        for format in [QuantFormat::I8, QuantFormat::I4] {
            let Matrix::Quant(q) = dense.quantize(format).unwrap() else {
                panic!("quantize gives blocks");
            };
            let Matrix::Quant(merged) = Matrix::Quant(q.clone()).merge_rows(3).unwrap() else {
                panic!("merging blocks keeps blocks");
            };
            assert_eq!((merged.rows(), merged.cols()), (2, 3 * cols));
            assert_eq!(
                merged.dequantize().unwrap(),
                q.dequantize().unwrap(),
                "{format:?}"
            );
        }
        assert!(dense.merge_rows(4).is_err());
    }
}
