//! Constants: conversion to the program's float type, inline literals for small values, blob
//! entries for large ones, and deduplication by content.

use super::{LowerError, ReadyFunction};
use crate::graph::{topo_order, HalfStorage, HostArray, HostData, Op, Tensor};
use aneforge_mil as mil;
use half::f16;
use mil::{BlobWriter, Literal, TensorType};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Float constants with more elements than this go to the weights blob.
pub const INLINE_MAX_ELEMENTS: usize = 16;

/// Where BLOBFILE literals point, relative to the program directory.
pub const BLOB_PATH: &str = aneforge_mil::WEIGHTS_PATH;

/// A constant's blob payload: encoded bytes, or f32 values that are their own little-endian
/// encoding.
enum Encoded {
    Bytes(Vec<u8>),
    F32(Arc<[f32]>),
}

impl Encoded {
    fn bytes(&self) -> &[u8] {
        match self {
            Encoded::Bytes(b) => b,
            Encoded::F32(v) => bytemuck::cast_slice(v),
        }
    }
}

pub(crate) enum Interned {
    Existing(String),
    New { key: [u8; 32], literal: Literal },
}

pub(crate) struct ConstTable {
    float: mil::DType,
    blob: BlobWriter,
    /// Value names of the constants of the function being emitted.
    by_key: HashMap<[u8; 32], String>,
    /// Blob offsets by content, shared by every function of the program.
    blob_offsets: HashMap<[u8; 32], u64>,
    /// Content keys of constants already hashed, by the address of their data: the same weights
    /// appear in every function of a program and are hashed once.
    keys_by_address: HashMap<(usize, usize, mil::DType, Vec<usize>), [u8; 32]>,
    /// Value names of block-quantized constants of the function being emitted.
    quant_names: HashMap<[usize; 3], String>,
    /// The content key of every blob entry, in blob order: with the program text they identify
    /// the blob's bytes, so the artifact's hash need not read them again.
    entry_keys: Vec<[u8; 32]>,
}

/// fp16 conversion saturates finite values to the largest finite half (±65504) instead of
/// overflowing to infinity, so large finite constants (mask fills, clip bounds) stay finite.
pub fn to_f16(v: f32) -> f16 {
    if v.is_finite() {
        f16::from_f32(v.clamp(-65504.0, 65504.0))
    } else {
        f16::from_f32(v)
    }
}

/// Weight blobs expected to reach this size are reserved whole and backed by transparent huge
/// pages (Linux).
#[cfg(target_os = "linux")]
const HUGE_PAGE_BLOB: usize = 8 << 20;

/// An empty buffer with room for `capacity` bytes. From 8 MiB on (Linux), its 2 MiB-aligned
/// interior is marked for transparent huge pages before anything is written, so the pages are
/// huge from their first touch (no copy, unlike collapsing them afterwards). An LLM decode step
/// streams every weight once: with 4 KiB pages the hardware prefetcher stops at each page
/// boundary and every page costs a TLB miss (SmolLM2-135M Q8_0 decode took ~20% more CPU time).
/// Kernels without THP ignore the advice.
fn blob_buffer(capacity: usize) -> Vec<u8> {
    let bytes = Vec::with_capacity(capacity);
    #[cfg(target_os = "linux")]
    if capacity >= HUGE_PAGE_BLOB {
        const HUGE: usize = 2 << 20;
        let base = bytes.as_ptr() as usize;
        let start = base.next_multiple_of(HUGE);
        let end = (base + capacity) / HUGE * HUGE;
        if end > start {
            // SAFETY: the range lies inside the buffer's allocation, and the advice changes
            // neither its contents nor its mapping's lifetime.
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
        }
    }
    bytes
}

/// An upper estimate of the weights blob of `functions`: the file header, and the payloads,
/// descriptors and alignment of their large constants, each distinct datum once. Constants the
/// emitter derives on the way are not counted; the blob grows past the estimate when they need
/// room.
pub fn blob_bytes_hint(functions: &[ReadyFunction], float: mil::DType) -> usize {
    /// A descriptor and the alignment padding after a payload, at most; also the header's size.
    const ENTRY: usize = 128;
    let width = float_width(float);
    let mut seen = HashSet::new();
    let mut total = ENTRY;
    for f in functions {
        let outputs: Vec<Tensor> = f.outputs.iter().map(|(_, t)| t.clone()).collect();
        for node in topo_order(&outputs) {
            let Op::Constant(value) = node.op() else {
                continue;
            };
            let (key, bytes) = match value.data() {
                HostData::F32(v) if v.len() > INLINE_MAX_ELEMENTS => {
                    (v.as_ptr() as usize, v.len() * width + ENTRY)
                }
                HostData::Deferred(d) if d.len() > INLINE_MAX_ELEMENTS => {
                    let bytes = match kept_as_f16(value, float) {
                        Some(HalfStorage::Exact) => d.len() * 2,
                        // one f32 scale per row in an entry of its own
                        Some(HalfStorage::Scaled(e)) => d.len() * 2 + e.len() * 4 + ENTRY,
                        None => d.len() * width,
                    };
                    (Arc::as_ptr(d) as *const u8 as usize, bytes + ENTRY)
                }
                HostData::BlockQuantized(q) => {
                    let blocks = q.rows() * q.blocks_per_row();
                    let params = if q.has_offset() { 2 } else { 1 };
                    (
                        q.data_key(),
                        q.rows() * q.row_bytes() + params * (blocks * width + ENTRY) + ENTRY,
                    )
                }
                _ => continue,
            };
            if seen.insert(key) {
                total += bytes;
            }
        }
    }
    total
}

/// Bytes per value of a program float type (fp16 or fp32).
pub(crate) fn float_width(float: mil::DType) -> usize {
    if float == mil::DType::Fp16 {
        2
    } else {
        4
    }
}

/// How an fp32 program keeps `value` in fp16 without rounding any value: a large deferred
/// matrix whose source stores fp16 ([`HalfStorage::Exact`]: a `constexpr_cast` of an fp16 blob
/// entry) or bf16 whose rows fit fp16 once scaled ([`HalfStorage::Scaled`]: a
/// `constexpr_blockwise_shift_scale` of one, one power-of-two scale per row). `None` keeps it in
/// the program's float type.
pub(crate) fn kept_as_f16(value: &HostArray, float: mil::DType) -> Option<HalfStorage> {
    let HostData::Deferred(d) = value.data() else {
        return None;
    };
    let &[_, cols] = value.shape() else {
        return None;
    };
    if float != mil::DType::Fp32 || value.len() <= INLINE_MAX_ELEMENTS {
        return None;
    }
    d.half_storage(cols)
}

/// Fills `out` with the values `read(start, chunk)` gives, encoded as `float`, a chunk at a time:
/// a large payload is written in place without a second full copy of its values.
pub(crate) fn encode_chunks(
    float: mil::DType,
    out: &mut [u8],
    mut read: impl FnMut(usize, &mut [f32]) -> Result<(), LowerError>,
) -> Result<(), LowerError> {
    const CHUNK: usize = 1 << 14;
    let width = float_width(float);
    let mut values = vec![0.0f32; CHUNK.min(out.len() / width)];
    for (i, bytes) in out.chunks_mut(CHUNK * width).enumerate() {
        let v = &mut values[..bytes.len() / width];
        read(i * CHUNK, v)?;
        for (b, &x) in bytes.chunks_exact_mut(width).zip(v.iter()) {
            match float {
                mil::DType::Fp16 => b.copy_from_slice(&to_f16(x).to_le_bytes()),
                _ => b.copy_from_slice(&x.to_le_bytes()),
            }
        }
    }
    Ok(())
}

/// The reader [`encode_chunks`] takes, over deferred values.
pub(crate) fn deferred_reader(
    d: &dyn crate::graph::DeferredF32,
) -> impl FnMut(usize, &mut [f32]) -> Result<(), LowerError> + '_ {
    |start, out| {
        d.read(start, out)
            .map_err(|e| LowerError::ConstantData(crate::graph::GraphError::ConstantData(e)))
    }
}

impl ConstTable {
    pub fn new(float: mil::DType) -> ConstTable {
        Self::with_capacity(float, 0)
    }

    /// A table whose blob has room for `blob_bytes` (see [`blob_bytes_hint`]) from the start.
    pub fn with_capacity(float: mil::DType, blob_bytes: usize) -> ConstTable {
        ConstTable {
            float,
            blob: BlobWriter::with_buffer(blob_buffer(blob_bytes)),
            by_key: HashMap::new(),
            blob_offsets: HashMap::new(),
            keys_by_address: HashMap::new(),
            quant_names: HashMap::new(),
            entry_keys: Vec::new(),
        }
    }

    /// Starts the constants of another function: value names are per function, blob entries are
    /// shared.
    pub fn begin_function(&mut self) {
        self.by_key.clear();
        self.quant_names.clear();
    }

    /// The value name of a block-quantized constant already emitted in this function, keyed by
    /// the addresses of its data, scales and offsets.
    pub fn quant_name(&self, key: &[usize; 3]) -> Option<&str> {
        self.quant_names.get(key).map(String::as_str)
    }

    pub fn remember_quant(&mut self, key: [usize; 3], name: &str) {
        self.quant_names.insert(key, name.to_string());
    }

    /// A blob entry of `elements` values of `dtype` packed in `len` bytes that `fill` writes,
    /// stored once per content. `source` is the address of graph-owned data the payload encodes
    /// (alive for the whole lowering), so repeated uses skip encoding and hashing. The payload is
    /// written in place in the blob (a large weight is never held twice) and removed again when
    /// its content is already stored.
    pub fn blob_entry(
        &mut self,
        dtype: mil::DType,
        elements: usize,
        source: usize,
        len: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<(), LowerError>,
    ) -> Result<u64, LowerError> {
        let address = (source, elements, dtype, Vec::new());
        if let Some(offset) = self
            .keys_by_address
            .get(&address)
            .and_then(|k| self.blob_offsets.get(k))
        {
            return Ok(*offset);
        }
        let (offset, payload) = self.blob.add_in_place(dtype, elements, len)?;
        if let Err(e) = fill(payload) {
            self.blob.remove_last(offset);
            return Err(e);
        }
        let mut h = blake3::Hasher::new();
        h.update(dtype.name().as_bytes());
        h.update(&(elements as u64).to_le_bytes());
        h.update(payload);
        let key: [u8; 32] = h.finalize().into();
        self.keys_by_address.insert(address, key);
        if let Some(&existing) = self.blob_offsets.get(&key) {
            self.blob.remove_last(offset);
            return Ok(existing);
        }
        self.blob_offsets.insert(key, offset);
        self.entry_keys.push(key);
        Ok(offset)
    }

    /// `v` as the program's float type holds it, widened.
    pub fn float_value(&self, v: f32) -> f64 {
        match self.float {
            mil::DType::Fp16 => to_f16(v).to_f64(),
            _ => f64::from(v),
        }
    }

    pub fn intern(&mut self, value: &HostArray) -> Result<Interned, LowerError> {
        let shape = value.shape();
        let mut hasher = blake3::Hasher::new();
        for d in shape {
            hasher.update(&(*d as u64).to_le_bytes());
        }
        hasher.update(&[shape.len() as u8]);
        let literal_of = |ty: TensorType, data: mil::TensorData| Literal::Tensor { ty, data };
        let (key, literal) =
            match value.data() {
                // a large deferred constant is read straight into its blob entry, a chunk at a
                // time: its values are never held twice
                HostData::Deferred(d) if d.len() > INLINE_MAX_ELEMENTS => {
                    let source = Arc::as_ptr(d) as *const u8 as usize;
                    let address = (source, d.len(), self.float, shape.to_vec());
                    let known = self.keys_by_address.get(&address).copied();
                    if let Some(name) = known.and_then(|k| self.by_key.get(&k)) {
                        return Ok(Interned::Existing(name.clone()));
                    }
                    let float = self.float;
                    let bytes = d.len() * float_width(float);
                    let offset = self.blob_entry(float, d.len(), source, bytes, |out| {
                        encode_chunks(float, out, deferred_reader(d.as_ref()))
                    })?;
                    // equal contents share one blob entry, so its offset stands for them
                    hasher.update(float.name().as_bytes());
                    hasher.update(b"blob");
                    hasher.update(&offset.to_le_bytes());
                    let key: [u8; 32] = hasher.finalize().into();
                    self.keys_by_address.insert(address, key);
                    let ty = TensorType::new(float, shape);
                    let literal = Literal::Blob {
                        ty,
                        path: BLOB_PATH.to_string(),
                        offset,
                    };
                    (key, literal)
                }
                HostData::F32(_) | HostData::Deferred(_) => {
                    let ty = TensorType::new(self.float, shape);
                    let len = value.len();
                    // held data by its address, deferred data by its source's: both are owned by
                    // the graph, alive for the whole lowering
                    let source = match value.data() {
                        HostData::Deferred(d) => Arc::as_ptr(d) as *const u8 as usize,
                        HostData::F32(v) => v.as_ptr() as usize,
                        _ => 0,
                    };
                    let address = (source, len, self.float, shape.to_vec());
                    let known = self.keys_by_address.get(&address).copied();
                    if let Some(name) = known.and_then(|k| self.by_key.get(&k)) {
                        return Ok(Interned::Existing(name.clone()));
                    }
                    // deferred values are read here, once per program, and dropped once encoded
                    let load = || -> Result<Arc<[f32]>, LowerError> {
                        Ok(value
                            .data()
                            .values_f32()
                            .map_err(LowerError::ConstantData)?
                            .unwrap_or_default())
                    };
                    let float = self.float;
                    // f32 on a little-endian host is its own encoding: no second copy
                    let encode = |v: Arc<[f32]>| -> Encoded {
                        match float {
                            mil::DType::Fp16 => Encoded::Bytes(
                                v.iter().flat_map(|&x| to_f16(x).to_le_bytes()).collect(),
                            ),
                            _ if cfg!(target_endian = "little") => Encoded::F32(v),
                            _ => Encoded::Bytes(v.iter().flat_map(|x| x.to_le_bytes()).collect()),
                        }
                    };
                    let (key, bytes, held) = match known {
                        // a large constant another function already stored: no need to re-encode it
                        Some(k) if self.blob_offsets.contains_key(&k) => {
                            (k, Encoded::Bytes(Vec::new()), None)
                        }
                        Some(k) => {
                            let v = load()?;
                            (k, encode(v.clone()), Some(v))
                        }
                        None => {
                            let v = load()?;
                            let bytes = encode(v.clone());
                            hasher.update(self.float.name().as_bytes());
                            hasher.update(bytes.bytes());
                            let k: [u8; 32] = hasher.finalize().into();
                            self.keys_by_address.insert(address, k);
                            (k, bytes, Some(v))
                        }
                    };
                    if let Some(name) = self.by_key.get(&key) {
                        return Ok(Interned::Existing(name.clone()));
                    }
                    let literal = if len <= INLINE_MAX_ELEMENTS {
                        let v = match held {
                            Some(v) => v,
                            None => load()?,
                        };
                        let data = v.iter().map(|&x| self.float_value(x)).collect();
                        literal_of(ty, mil::TensorData::Float(data))
                    } else {
                        let offset = match self.blob_offsets.get(&key) {
                            Some(&offset) => offset,
                            None => {
                                let offset = self.blob.add(self.float, len, bytes.bytes())?;
                                self.blob_offsets.insert(key, offset);
                                self.entry_keys.push(key);
                                offset
                            }
                        };
                        Literal::Blob {
                            ty,
                            path: BLOB_PATH.to_string(),
                            offset,
                        }
                    };
                    (key, literal)
                }
                HostData::I32(v) => {
                    hasher.update(b"int32");
                    v.iter().for_each(|x| {
                        hasher.update(&x.to_le_bytes());
                    });
                    let ty = TensorType::new(mil::DType::Int32, shape);
                    let data = mil::TensorData::Int(v.iter().map(|&x| i64::from(x)).collect());
                    (hasher.finalize().into(), literal_of(ty, data))
                }
                HostData::BlockQuantized(_) => return Err(LowerError::Unsupported {
                    target: self.float.name().to_string(),
                    op: "constant",
                    shapes: vec![shape.to_vec()],
                    reason:
                        "block-quantized constants are emitted as constexpr_blockwise_shift_scale"
                            .into(),
                }),
                HostData::Bool(v) => {
                    hasher.update(b"bool");
                    v.iter().for_each(|&x| {
                        hasher.update(&[u8::from(x)]);
                    });
                    let ty = TensorType::new(mil::DType::Bool, shape);
                    (
                        hasher.finalize().into(),
                        literal_of(ty, mil::TensorData::Bool(v.to_vec())),
                    )
                }
            };
        if let Some(name) = self.by_key.get(&key) {
            return Ok(Interned::Existing(name.clone()));
        }
        Ok(Interned::New { key, literal })
    }

    pub fn remember(&mut self, key: [u8; 32], name: &str) {
        self.by_key.insert(key, name.to_string());
    }

    /// The blob's bytes and a digest of its entries' content keys.
    pub fn finish(self) -> (Vec<u8>, [u8; 32]) {
        let mut h = blake3::Hasher::new();
        h.update(&(self.entry_keys.len() as u64).to_le_bytes());
        for k in &self.entry_keys {
            h.update(k);
        }
        (self.blob.finish(), h.finalize().into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{constant, input, DType, DeferredF32};
    use crate::{compile_named, CompileOptions};

    /// Values a source stores as fp16.
    #[derive(Debug)]
    struct Halves(Arc<[f32]>);

    impl DeferredF32 for Halves {
        fn len(&self) -> usize {
            self.0.len()
        }

        fn read(&self, start: usize, out: &mut [f32]) -> Result<(), String> {
            out.copy_from_slice(&self.0[start..start + out.len()]);
            Ok(())
        }

        fn half_storage(&self, _cols: usize) -> Option<crate::graph::HalfStorage> {
            Some(crate::graph::HalfStorage::Exact)
        }
    }

    /// The estimate covers the emitted blob and overshoots it by at most an entry's descriptor
    /// and padding per constant: held f32, fp16-stored deferred (kept as fp16 in an fp32
    /// program) and shared constants counted once.
    #[test]
    fn the_blob_estimate_covers_the_emitted_blob() {
        let (rows, cols) = (64, 96);
        let values = |k: usize| -> Arc<[f32]> {
            (0..rows * cols)
                .map(|i| half::f16::from_f32(((i * k % 53) as f32 - 26.0) / 17.0).to_f32())
                .collect()
        };
        let held = constant(HostArray::from_f32(&[rows, cols], values(7)).unwrap());
        let halves = Arc::new(Halves(values(11)));
        let half = constant(HostArray::from_deferred(&[rows, cols], halves).unwrap());
        let ids = input("ids", &[3], DType::I32).unwrap();
        let a = held.gather(&ids, 0).unwrap();
        let b = half.gather(&ids, 0).unwrap();
        let c = held.gather(&ids, 0).unwrap().add(&b).unwrap();
        let model = compile_named(
            &[("a", &a), ("b", &b), ("c", &c)],
            &CompileOptions::default(),
        )
        .unwrap();
        let ready = ReadyFunction {
            name: "main".into(),
            outputs: vec![("a".into(), a), ("b".into(), b), ("c".into(), c)],
            retyped: Vec::new(),
            tiled: Vec::new(),
        };
        let hint = blob_bytes_hint(&[ready], mil::DType::Fp32);
        let len = model.weights().len();
        assert!(
            len <= hint && hint <= len + 3 * 128,
            "estimate {hint} for a blob of {len} bytes"
        );
    }
}
