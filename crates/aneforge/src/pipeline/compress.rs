//! Weight compression of ANE programs: large fp16 weight constants of an emitted program are
//! re-encoded with the MIL encoders (`aneforge_mil::encode`), each behind its accuracy gate.
//!
//! `Compress::Auto` picks only the formats the family streams natively
//! ([`crate::arch::formats`]); an explicit mode is honoured on any family (non-native formats are
//! expanded when the program loads). The compressed program is validated and checked again: the
//! re-encoding must leave a program the family accepts.

use super::{CompileError, Compress};
use crate::arch::{check_program, is_native, native_schemes, AneArch};
use crate::lower::{Artifact, LowerError, Target, BLOB_PATH};
use aneforge_mil as mil;
use mil::encode::{encode_first, Decline, EncodeOptions, Scheme, Weight};
use mil::{Argument, BlobFile, BlobWriter, Literal, Operation};

/// Weights with fewer elements stay fp16 (biases, norms, small tables).
pub const MIN_ELEMENTS: usize = 4096;

/// The accuracy gate: a format is accepted when its largest reconstruction error is at most
/// this fraction of the weight's largest magnitude.
pub const GATE_REL: f64 = 0.08;

/// What happened to one weight.
#[derive(Clone, Debug, PartialEq)]
pub struct WeightChoice {
    pub name: String,
    pub shape: Vec<usize>,
    /// `Fp16` when every tried format was declined.
    pub scheme: Scheme,
    pub native: bool,
    /// Bytes of the fp16 weight and of its stored form (descriptors included).
    pub dense_bytes: u64,
    pub stored_bytes: u64,
    pub max_abs_error: f64,
    pub declines: Vec<Decline>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct CompressionReport {
    pub weights: Vec<WeightChoice>,
}

impl std::fmt::Display for CompressionReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let dense: u64 = self.weights.iter().map(|w| w.dense_bytes).sum();
        let stored: u64 = self.weights.iter().map(|w| w.stored_bytes).sum();
        writeln!(
            f,
            "compression: {} weights, {dense} bytes fp16 -> {stored} bytes",
            self.weights.len()
        )?;
        for w in &self.weights {
            write!(
                f,
                "  {} {:?}: {}{} ({} -> {} bytes, max abs error {:.4})",
                w.name,
                w.shape,
                w.scheme,
                if w.native {
                    ""
                } else {
                    " (not native: expanded at load)"
                },
                w.dense_bytes,
                w.stored_bytes,
                w.max_abs_error
            )?;
            for d in &w.declines {
                write!(f, "; declined {d}")?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

/// Re-encodes the large weights of an ANE artifact according to `mode`.
pub fn compress(
    artifact: Artifact,
    mode: Compress,
) -> Result<(Artifact, CompressionReport), CompileError> {
    compress_from(artifact, mode, MIN_ELEMENTS)
}

/// [`compress`] of every fp16 blob weight of rank ≥ 2 with at least `min_elements` elements.
pub(super) fn compress_from(
    artifact: Artifact,
    mode: Compress,
    min_elements: usize,
) -> Result<(Artifact, CompressionReport), CompileError> {
    if mode == Compress::None {
        return Ok((artifact, CompressionReport::default()));
    }
    let Target::Ane(arch) = artifact.target() else {
        return Err(CompileError::CompressCpu);
    };
    let schemes: Vec<Scheme> = match mode {
        Compress::Auto => native_schemes(arch.family()).to_vec(),
        Compress::Int8 => vec![Scheme::Int8],
        Compress::Int4 => vec![Scheme::Int4Lut],
        Compress::Sparse => vec![Scheme::Sparse],
        Compress::Blockwise => vec![Scheme::Blockwise],
        _ => return Err(CompileError::CompressMode),
    };
    let blob = BlobFile::parse(BLOB_PATH, artifact.weights().clone()).map_err(LowerError::Blob)?;
    let mut writer = BlobWriter::new();
    let mut report = CompressionReport::default();
    let mut program = artifact.program().clone();
    for function in &mut program.functions {
        let ops = std::mem::take(&mut function.body.operations);
        for op in ops {
            match candidate(&op, &blob, min_elements)? {
                Some((name, shape, values)) => {
                    let (ops, choice) = encode_weight(
                        &mut writer,
                        &blob,
                        &op,
                        name,
                        shape,
                        &values,
                        &schemes,
                        *arch,
                    )?;
                    function.body.operations.extend(ops);
                    report.weights.push(choice);
                }
                None => function
                    .body
                    .operations
                    .push(rewrite_blobs(op, &blob, &mut writer)?),
            }
        }
    }
    let compressed = Artifact::new(
        program,
        std::sync::Arc::new(writer.finish()),
        artifact.target().clone(),
        artifact.functions().to_vec(),
    );
    let blobs = compressed.blob_store().map_err(LowerError::Blob)?;
    mil::validate_with_blobs(compressed.program(), &blobs).map_err(CompileError::Invalid)?;
    let violations = check_program(compressed.program(), *arch);
    if !violations.is_empty() {
        return Err(CompileError::Check {
            arch: *arch,
            violations,
        });
    }
    Ok((compressed, report))
}

type Candidate = (String, Vec<usize>, Vec<f32>);

/// A `const` with a large fp16 blob value: (name, shape, values).
fn candidate(
    op: &Operation,
    blob: &BlobFile,
    min_elements: usize,
) -> Result<Option<Candidate>, CompileError> {
    if op.op_type != "const" {
        return Ok(None);
    }
    let Some(Literal::Blob { ty, offset, .. }) = op.attribute("val") else {
        return Ok(None);
    };
    let Some(shape) = ty.static_shape() else {
        return Ok(None);
    };
    let n: usize = shape.iter().product();
    if ty.dtype != mil::DType::Fp16 || shape.len() < 2 || n < min_elements {
        return Ok(None);
    }
    let bytes = blob.payload(*offset, ty)?;
    let values = bytes
        .chunks_exact(2)
        .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
        .collect();
    let name = op
        .outputs
        .first()
        .map_or_else(String::new, |v| v.name.clone());
    Ok(Some((name, shape, values)))
}

#[allow(clippy::too_many_arguments)]
fn encode_weight(
    writer: &mut BlobWriter,
    blob: &BlobFile,
    op: &Operation,
    name: String,
    shape: Vec<usize>,
    values: &[f32],
    schemes: &[Scheme],
    arch: AneArch,
) -> Result<(Vec<Operation>, WeightChoice), CompileError> {
    let max = values.iter().fold(0f64, |m, &v| m.max(f64::from(v).abs()));
    let options = EncodeOptions {
        atol: GATE_REL * max,
        blob_path: BLOB_PATH.to_string(),
    };
    let weight = Weight {
        name: &name,
        shape: &shape,
        values,
    };
    let dense_bytes = (values.len() * 2) as u64;
    let start = writer.len();
    match encode_first(writer, &weight, schemes, &options) {
        Ok((encoded, declines)) => {
            let choice = WeightChoice {
                name,
                shape,
                scheme: encoded.report.scheme,
                native: is_native(encoded.report.scheme, arch.family()),
                dense_bytes,
                stored_bytes: encoded.report.blob_bytes,
                max_abs_error: encoded.report.max_abs,
                declines,
            };
            Ok((encoded.operations, choice))
        }
        Err(mil::encode::EncodeError::Declined { .. }) => {
            let mut declines = Vec::new();
            for &s in schemes {
                let mut scratch = BlobWriter::new();
                if let Err(e) = mil::encode::encode(&mut scratch, &weight, s, &options) {
                    declines.extend(e.decline().cloned());
                }
            }
            let kept = rewrite_blobs(op.clone(), blob, writer)?;
            let choice = WeightChoice {
                name,
                shape,
                scheme: Scheme::Fp16,
                native: true,
                dense_bytes,
                stored_bytes: (writer.len() - start) as u64,
                max_abs_error: 0.0,
                declines,
            };
            Ok((vec![kept], choice))
        }
        Err(e) => Err(e.into()),
    }
}

/// Copies every BLOBFILE payload `op` references into `writer`, pointing the op at the copies.
fn rewrite_blobs(
    mut op: Operation,
    blob: &BlobFile,
    writer: &mut BlobWriter,
) -> Result<Operation, CompileError> {
    fn literal(l: &mut Literal, blob: &BlobFile, w: &mut BlobWriter) -> Result<(), CompileError> {
        match l {
            Literal::Blob { ty, offset, .. } => {
                let bytes = blob.payload(*offset, ty)?;
                let n = ty.num_elements().unwrap_or(0);
                *offset = w.add(ty.dtype, n, bytes)?;
            }
            Literal::Tuple(items) => {
                for item in items {
                    literal(item, blob, w)?;
                }
            }
            Literal::Dict { .. } | Literal::Tensor { .. } => {}
        }
        Ok(())
    }
    fn argument(a: &mut Argument, blob: &BlobFile, w: &mut BlobWriter) -> Result<(), CompileError> {
        match a {
            Argument::Literal(l) => literal(l, blob, w),
            Argument::List(items) => items.iter_mut().try_for_each(|i| argument(i, blob, w)),
            Argument::Name(_) => Ok(()),
        }
    }
    for (_, l) in &mut op.attributes {
        literal(l, blob, writer)?;
    }
    for (_, a) in &mut op.inputs {
        argument(a, blob, writer)?;
    }
    Ok(op)
}
