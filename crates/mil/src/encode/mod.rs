//! Weight encoders: a dense f32 weight becomes the MIL `const` / `constexpr_*` operation that
//! reconstructs it, its payloads appended to a [`BlobWriter`], and a report of the measured error.
//!
//! Schemes (argument names, dtypes and shapes as in coremltools' op definitions):
//! - [`Scheme::Fp16`]: `const` with an fp16 blob;
//! - [`Scheme::Int8`]: iOS16 `constexpr_affine_dequantize`, int8 symmetric per output channel
//!   (axis 0), `scale = max|row| / 127` stored fp16, `zero_point = int8(0)`;
//! - [`Scheme::Int4Lut`]: iOS18 `constexpr_lut_to_dense`, uint4 indices of the weight's shape and
//!   one 16-entry fp16 LUT of shape `[1, …, 1, 16, 1]` found by deterministic 1-D k-means;
//! - [`Scheme::Sparse`]: iOS18 `constexpr_sparse_to_dense`, uint1 mask of the weight's shape plus
//!   fp16 nonzero values, offered only when at least half the weight is exactly zero;
//! - [`Scheme::Blockwise`]: iOS18 `constexpr_blockwise_shift_scale`, symmetric int4 data with one
//!   fp16 scale per block of 32 along the input axis (see `blockwise.rs`).
//!
//! Accuracy gate: the decoded weight `d` is what the op defines, computed from the stored
//! parameters and rounded to the fp16 output (`fp16(scale·q)`, `lut[i]`, `fp16(w)` or 0). With `w`
//! the f32 input, an encoding is accepted iff `max_i |d_i − w_i| ≤ atol` (f64 arithmetic; a
//! non-finite `d_i` counts as an infinite error). The gate is absolute, so `atol` must be chosen
//! relative to the weight's scale. Otherwise the encoder returns [`EncodeError::Declined`] and
//! leaves the blob writer untouched.

mod affine;
mod blockwise;
mod lut;
mod sparse;

use crate::ast::{DType, Literal, NamedValue, Operation, TensorType};
use crate::blob::{BlobError, BlobWriter};
use half::f16;
use std::fmt;

/// Where encoded payloads live, as a BLOBFILE path (`@model_path` is the program directory).
pub const WEIGHT_BLOB_PATH: &str = crate::program_dir::WEIGHTS_PATH;

/// Default `atol` of the accuracy gate (max abs error, see the module docs).
pub const DEFAULT_ATOL: f64 = 0.05;

/// Minimum fraction of exact zeros for [`Scheme::Sparse`].
pub const SPARSE_MIN_ZERO_FRACTION: f64 = 0.5;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scheme {
    Fp16,
    Int8,
    Int4Lut,
    Sparse,
    Blockwise,
}

impl Scheme {
    pub const ALL: [Scheme; 5] = [
        Scheme::Fp16,
        Scheme::Int8,
        Scheme::Int4Lut,
        Scheme::Sparse,
        Scheme::Blockwise,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scheme::Fp16 => "fp16",
            Scheme::Int8 => "int8",
            Scheme::Int4Lut => "int4",
            Scheme::Sparse => "sparse",
            Scheme::Blockwise => "blockwise",
        }
    }

    /// The MIL op the scheme emits.
    pub fn op_type(self) -> &'static str {
        match self {
            Scheme::Fp16 => "const",
            Scheme::Int8 => "constexpr_affine_dequantize",
            Scheme::Int4Lut => "constexpr_lut_to_dense",
            Scheme::Sparse => "constexpr_sparse_to_dense",
            Scheme::Blockwise => "constexpr_blockwise_shift_scale",
        }
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct EncodeOptions {
    /// Accuracy gate on the max abs reconstruction error.
    pub atol: f64,
    /// BLOBFILE path written into the emitted literals.
    pub blob_path: String,
}

impl Default for EncodeOptions {
    fn default() -> Self {
        EncodeOptions {
            atol: DEFAULT_ATOL,
            blob_path: WEIGHT_BLOB_PATH.to_string(),
        }
    }
}

/// A dense weight in row-major order.
#[derive(Clone, Copy, Debug)]
pub struct Weight<'a> {
    /// The MIL value name (and op name) of the decoded weight.
    pub name: &'a str,
    pub shape: &'a [usize],
    pub values: &'a [f32],
}

/// Measured reconstruction error of an encoding.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Report {
    pub scheme: Scheme,
    /// `‖d − w‖₂ / ‖w‖₂` in f64 (0 when both norms are 0).
    pub rel_l2: f64,
    /// `max |d − w|`.
    pub max_abs: f64,
    /// Bytes appended to the blob writer (descriptors and alignment included).
    pub blob_bytes: u64,
}

/// The operation(s) producing the decoded weight; the last one's output is [`Encoded::output`].
#[derive(Clone, Debug, PartialEq)]
pub struct Encoded {
    pub operations: Vec<Operation>,
    pub output: NamedValue,
    pub report: Report,
}

/// Why a scheme refused a weight.
#[derive(Clone, Debug, PartialEq)]
pub enum DeclineReason {
    Inaccurate {
        max_abs: f64,
        atol: f64,
    },
    TooDense {
        zero_fraction: f64,
    },
    /// An all-zero weight has no nonzero payload to store.
    AllZero,
    NeedsRank1,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Decline {
    pub scheme: Scheme,
    pub reason: DeclineReason,
}

impl fmt::Display for Decline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.reason {
            DeclineReason::Inaccurate { max_abs, atol } => {
                write!(
                    f,
                    "{}: max abs error {max_abs:.3} > atol {atol}",
                    self.scheme
                )
            }
            DeclineReason::TooDense { zero_fraction } => write!(
                f,
                "{}: only {:.0}% zeros, needs ≥{:.0}%",
                self.scheme,
                zero_fraction * 100.0,
                SPARSE_MIN_ZERO_FRACTION * 100.0
            ),
            DeclineReason::AllZero => {
                write!(
                    f,
                    "{}: the weight is all zeros, nothing to store",
                    self.scheme
                )
            }
            DeclineReason::NeedsRank1 => {
                write!(
                    f,
                    "{}: needs a tensor of rank ≥ 1, got a scalar",
                    self.scheme
                )
            }
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum EncodeError {
    #[error(
        "weight {name}: shape {shape:?} has {expected} elements but {found} values were given"
    )]
    ShapeMismatch {
        name: String,
        shape: Vec<usize>,
        expected: usize,
        found: usize,
    },
    #[error("weight {name}: shape {shape:?} has no elements")]
    Empty { name: String, shape: Vec<usize> },
    #[error("weight {name}: value {value} at flat index {index} is not finite")]
    NonFinite {
        name: String,
        index: usize,
        value: f32,
    },
    #[error("weight {name}: {decline}")]
    Declined { name: String, decline: Decline },
    #[error(transparent)]
    Blob(#[from] BlobError),
}

impl EncodeError {
    pub fn decline(&self) -> Option<&Decline> {
        match self {
            EncodeError::Declined { decline, .. } => Some(decline),
            _ => None,
        }
    }
}

/// Encodes `weight` with `scheme`, appending payloads to `writer` only when the gate passes.
pub fn encode(
    writer: &mut BlobWriter,
    weight: &Weight<'_>,
    scheme: Scheme,
    options: &EncodeOptions,
) -> Result<Encoded, EncodeError> {
    check_weight(weight)?;
    let plan = match scheme {
        Scheme::Fp16 => Ok(fp16_plan(weight)),
        Scheme::Int8 => affine::plan(weight),
        Scheme::Int4Lut => lut::plan(weight),
        Scheme::Sparse => sparse::plan(weight),
        Scheme::Blockwise => blockwise::plan(weight),
    }
    .map_err(|reason| declined(weight, scheme, reason))?;
    let (rel_l2, max_abs) = error_figures(weight.values, &plan.decoded);
    if max_abs.is_nan() || max_abs > options.atol {
        return Err(declined(
            weight,
            scheme,
            DeclineReason::Inaccurate {
                max_abs,
                atol: options.atol,
            },
        ));
    }
    let start = writer.len() as u64;
    let mut operation = Operation::new(scheme.op_type());
    let mut params = Vec::with_capacity(plan.payloads.len());
    for payload in &plan.payloads {
        let literal = match &payload.data {
            PayloadData::Blob(bytes) => {
                let offset = writer.add(payload.ty.dtype, elements(&payload.ty), bytes)?;
                Literal::Blob {
                    ty: payload.ty.clone(),
                    path: options.blob_path.clone(),
                    offset,
                }
            }
            PayloadData::Inline(literal) => literal.clone(),
        };
        params.push((payload.param, literal));
    }
    let output_ty = TensorType::new(DType::Fp16, weight.shape);
    operation = operation
        .with_output(weight.name, output_ty.clone())
        .with_attribute("name", Literal::string(weight.name));
    for (param, literal) in params {
        operation = match plan.placement {
            Placement::Attributes => operation.with_attribute(param, literal),
            Placement::Inputs => {
                operation.with_input(param, crate::ast::Argument::Literal(literal))
            }
        };
    }
    Ok(Encoded {
        operations: vec![operation],
        output: NamedValue::new(weight.name, output_ty),
        report: Report {
            scheme,
            rel_l2,
            max_abs,
            blob_bytes: writer.len() as u64 - start,
        },
    })
}

/// Tries `schemes` in order; returns the first accepted encoding and the declines before it.
/// Errors other than declines stop the search. With every scheme declined, the last decline.
pub fn encode_first(
    writer: &mut BlobWriter,
    weight: &Weight<'_>,
    schemes: &[Scheme],
    options: &EncodeOptions,
) -> Result<(Encoded, Vec<Decline>), EncodeError> {
    let mut declines = Vec::new();
    let mut last = None;
    for &scheme in schemes {
        match encode(writer, weight, scheme, options) {
            Ok(encoded) => return Ok((encoded, declines)),
            Err(EncodeError::Declined { name, decline }) => {
                declines.push(decline.clone());
                last = Some(EncodeError::Declined { name, decline });
            }
            Err(other) => return Err(other),
        }
    }
    Err(last.unwrap_or_else(|| EncodeError::Empty {
        name: weight.name.to_string(),
        shape: weight.shape.to_vec(),
    }))
}

/// What one scheme computed before anything is written.
pub(crate) struct Encoding {
    /// The op's parameters in coremltools' definition order.
    pub payloads: Vec<Payload>,
    pub placement: Placement,
    /// The decoded weight, as f64.
    pub decoded: Vec<f64>,
}

/// iOS16 constexpr ops take their parameters as attributes, iOS18 ones as inputs (coremltools'
/// milproto exporter does the same).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placement {
    Attributes,
    Inputs,
}

pub(crate) struct Payload {
    pub param: &'static str,
    pub ty: TensorType,
    pub data: PayloadData,
}

pub(crate) enum PayloadData {
    /// Packed payload bytes for the blob file.
    Blob(Vec<u8>),
    Inline(Literal),
}

fn fp16_plan(weight: &Weight<'_>) -> Encoding {
    let halves: Vec<f16> = weight.values.iter().map(|&v| f16::from_f32(v)).collect();
    let decoded = halves.iter().map(|h| h.to_f64()).collect();
    Encoding {
        payloads: vec![Payload {
            param: "val",
            ty: TensorType::new(DType::Fp16, weight.shape),
            data: PayloadData::Blob(f16_bytes(&halves)),
        }],
        placement: Placement::Attributes,
        decoded,
    }
}

pub(crate) fn f16_bytes(values: &[f16]) -> Vec<u8> {
    bytemuck::cast_slice(values).to_vec()
}

fn elements(ty: &TensorType) -> usize {
    ty.num_elements().unwrap_or(0)
}

fn declined(weight: &Weight<'_>, scheme: Scheme, reason: DeclineReason) -> EncodeError {
    EncodeError::Declined {
        name: weight.name.to_string(),
        decline: Decline { scheme, reason },
    }
}

fn check_weight(weight: &Weight<'_>) -> Result<(), EncodeError> {
    let expected = weight
        .shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .unwrap_or(usize::MAX);
    if expected != weight.values.len() {
        return Err(EncodeError::ShapeMismatch {
            name: weight.name.to_string(),
            shape: weight.shape.to_vec(),
            expected,
            found: weight.values.len(),
        });
    }
    if expected == 0 {
        return Err(EncodeError::Empty {
            name: weight.name.to_string(),
            shape: weight.shape.to_vec(),
        });
    }
    if let Some((index, &value)) = weight
        .values
        .iter()
        .enumerate()
        .find(|(_, v)| !v.is_finite())
    {
        return Err(EncodeError::NonFinite {
            name: weight.name.to_string(),
            index,
            value,
        });
    }
    Ok(())
}

/// `(relative L2, max abs)` of `decoded` against `original`, in f64; non-finite decoded values
/// count as infinite error.
pub fn error_figures(original: &[f32], decoded: &[f64]) -> (f64, f64) {
    let mut err_sq = 0.0f64;
    let mut ref_sq = 0.0f64;
    let mut max_abs = 0.0f64;
    for (&w, &d) in original.iter().zip(decoded) {
        let w = w as f64;
        let e = if d.is_finite() {
            (d - w).abs()
        } else {
            f64::INFINITY
        };
        err_sq += e * e;
        ref_sq += w * w;
        max_abs = max_abs.max(e);
    }
    let rel_l2 = if err_sq == 0.0 {
        0.0
    } else if ref_sq == 0.0 {
        f64::INFINITY
    } else {
        (err_sq / ref_sq).sqrt()
    };
    (rel_l2, max_abs)
}
