//! Values flowing between imported nodes: graph tensors, and constants kept on the host so that
//! shape computations fold before they reach the graph.

use crate::error::{invalid, unsupported, OpResult};
use crate::float_format::FloatFormat;
use crate::proto::{tensor_proto::DataType, TensorProto};
use aneforge::graph::{constant, HostArray, Tensor};
use aneforge::DType;

/// Host data of a constant: floats as f32, every integer type as i64, bools.
#[derive(Clone, Debug, PartialEq)]
pub enum Data {
    F32(Vec<f32>),
    Int(Vec<i64>),
    Bool(Vec<bool>),
}

/// A host constant: `data` holds `shape.iter().product()` elements (1 for a scalar); zero-size
/// dimensions are allowed here (ONNX uses them, e.g. for empty shape lists), not in the graph.
#[derive(Clone, Debug, PartialEq)]
pub struct Const {
    pub shape: Vec<usize>,
    pub data: Data,
    /// The ONNX element type the data came from (0 when computed here): integer data keeps
    /// whether it was, say, uint8 or int8.
    pub elem_type: i32,
}

#[derive(Clone, Debug)]
pub enum Value {
    Const(Const),
    Tensor(Tensor),
}

impl Data {
    pub(crate) fn len(&self) -> usize {
        match self {
            Data::F32(v) => v.len(),
            Data::Int(v) => v.len(),
            Data::Bool(v) => v.len(),
        }
    }

    pub fn dtype(&self) -> DType {
        match self {
            Data::F32(_) => DType::F32,
            Data::Int(_) => DType::I32,
            Data::Bool(_) => DType::Bool,
        }
    }

    pub fn f64_at(&self, i: usize) -> f64 {
        match self {
            Data::F32(v) => f64::from(v[i]),
            Data::Int(v) => v[i] as f64,
            Data::Bool(v) => f64::from(u8::from(v[i])),
        }
    }
}

impl Const {
    pub(crate) fn new(shape: Vec<usize>, data: Data) -> OpResult<Const> {
        let n: usize = shape.iter().product();
        if n != data.len() {
            return invalid(format!("{} values cannot fill shape {shape:?}", data.len()));
        }
        Ok(Const {
            shape,
            data,
            elem_type: 0,
        })
    }

    pub(crate) fn ints(shape: Vec<usize>, v: Vec<i64>) -> OpResult<Const> {
        Const::new(shape, Data::Int(v))
    }

    pub(crate) fn len(&self) -> usize {
        self.data.len()
    }

    /// The values as integers; floats must be whole numbers.
    pub(crate) fn to_i64s(&self) -> OpResult<Vec<i64>> {
        match &self.data {
            Data::Int(v) => Ok(v.clone()),
            Data::Bool(v) => Ok(v.iter().map(|&b| i64::from(b)).collect()),
            Data::F32(v) => v
                .iter()
                .map(|&x| {
                    if x.fract() == 0.0 && x.abs() < 9.0e15 {
                        Ok(x as i64)
                    } else {
                        invalid(format!("{x} is not an integer"))
                    }
                })
                .collect(),
        }
    }

    pub(crate) fn to_f32s(&self) -> Vec<f32> {
        (0..self.len())
            .map(|i| self.data.f64_at(i) as f32)
            .collect()
    }

    /// The graph constant holding this value (integers as i32).
    pub(crate) fn to_tensor(&self) -> OpResult<Tensor> {
        if self.shape.contains(&0) {
            return unsupported(format!(
                "an empty tensor (shape {:?}) cannot enter the graph",
                self.shape
            ));
        }
        let array = match &self.data {
            Data::F32(v) => HostArray::from_f32(&self.shape, v.clone())?,
            Data::Bool(v) => HostArray::from_bool(&self.shape, v.clone())?,
            Data::Int(v) => {
                let narrowed: Result<Vec<i32>, _> = v.iter().map(|&x| i32::try_from(x)).collect();
                match narrowed {
                    Ok(n) => HostArray::from_i32(&self.shape, n)?,
                    Err(_) => return unsupported("an integer constant exceeds the i32 range"),
                }
            }
        };
        Ok(constant(array))
    }
}

impl Value {
    pub fn shape(&self) -> &[usize] {
        match self {
            Value::Const(c) => &c.shape,
            Value::Tensor(t) => t.shape(),
        }
    }

    pub fn rank(&self) -> usize {
        self.shape().len()
    }

    pub fn dtype(&self) -> DType {
        match self {
            Value::Const(c) => c.data.dtype(),
            Value::Tensor(t) => t.dtype(),
        }
    }

    pub fn as_const(&self) -> Option<&Const> {
        match self {
            Value::Const(c) => Some(c),
            Value::Tensor(_) => None,
        }
    }

    pub(crate) fn to_tensor(&self) -> OpResult<Tensor> {
        match self {
            Value::Const(c) => c.to_tensor(),
            Value::Tensor(t) => Ok(t.clone()),
        }
    }
}

/// The name of an ONNX element type, for messages.
pub fn elem_type_name(code: i32) -> String {
    DataType::try_from(code)
        .map(|d| d.as_str_name().to_string())
        .unwrap_or_else(|_| format!("type code {code}"))
}

/// The graph dtype an ONNX element type is imported as, if any. Doubles compute as f32, the
/// graph's float type (as Core ML converters do), and so do the narrow floats (FLOAT16, BFLOAT16,
/// FLOAT8*), whose values are all f32 values (Cast rounds onto them); every integer
/// type up to 32 bits, and the 64-bit ones, as i32 (their values must be i32 values).
pub fn graph_dtype(code: i32) -> Option<DType> {
    use DataType as D;
    if FloatFormat::of(code).is_some() {
        return Some(DType::F32);
    }
    match D::try_from(code).ok()? {
        D::Float | D::Double => Some(DType::F32),
        D::Int4
        | D::Uint4
        | D::Int8
        | D::Uint8
        | D::Int16
        | D::Uint16
        | D::Int32
        | D::Int64
        | D::Uint32
        | D::Uint64 => Some(DType::I32),
        D::Bool => Some(DType::Bool),
        _ => None,
    }
}

/// Decodes an initializer or constant (its external data already loaded).
pub fn const_from_proto(t: &TensorProto) -> Result<Const, String> {
    use DataType as D;
    let shape = t
        .dims
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| format!("negative dimension {d}")))
        .collect::<Result<Vec<usize>, String>>()?;
    let n = shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or("the element count overflows")?;
    let code = t.data_type();
    let dtype = D::try_from(code).map_err(|_| format!("unknown data type code {code}"))?;
    let raw = t.raw_data.as_deref();
    let from_raw = |width: usize| -> Result<Option<Vec<&[u8]>>, String> {
        match raw {
            None => Ok(None),
            Some(bytes) if bytes.len() == n * width => {
                Ok(Some(bytes.chunks_exact(width).collect()))
            }
            Some(bytes) => Err(format!(
                "raw_data holds {} bytes, {n} {} values need {}",
                bytes.len(),
                dtype.as_str_name(),
                n * width
            )),
        }
    };
    let data = match dtype {
        D::Float => Data::F32(match from_raw(4)? {
            Some(c) => c
                .iter()
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            None => t.float_data.clone(),
        }),
        D::Double => Data::F32(match from_raw(8)? {
            Some(c) => c
                .iter()
                .map(|b| f64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8])) as f32)
                .collect(),
            None => t.double_data.iter().map(|&x| x as f32).collect(),
        }),
        D::Float16 | D::Bfloat16 => {
            let bits: Vec<u16> = match from_raw(2)? {
                Some(c) => c.iter().map(|b| u16::from_le_bytes([b[0], b[1]])).collect(),
                None => t.int32_data.iter().map(|&x| x as u16).collect(),
            };
            Data::F32(
                bits.iter()
                    .map(|&b| {
                        if dtype == D::Float16 {
                            half::f16::from_bits(b).to_f32()
                        } else {
                            half::bf16::from_bits(b).to_f32()
                        }
                    })
                    .collect(),
            )
        }
        D::Int64 => Data::Int(match from_raw(8)? {
            Some(c) => c
                .iter()
                .map(|b| i64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8])))
                .collect(),
            None => t.int64_data.clone(),
        }),
        D::Uint64 => Data::Int(match from_raw(8)? {
            Some(c) => c
                .iter()
                .map(|b| u64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8])) as i64)
                .collect(),
            None => t.uint64_data.iter().map(|&x| x as i64).collect(),
        }),
        D::Uint32 => Data::Int(match from_raw(4)? {
            Some(c) => c
                .iter()
                .map(|b| i64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])))
                .collect(),
            None => t.uint64_data.iter().map(|&x| x as i64).collect(),
        }),
        D::Int32 => Data::Int(match from_raw(4)? {
            Some(c) => c
                .iter()
                .map(|b| i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])))
                .collect(),
            None => t.int32_data.iter().map(|&x| i64::from(x)).collect(),
        }),
        D::Int16 | D::Uint16 => Data::Int(match from_raw(2)? {
            Some(c) => c
                .iter()
                .map(|b| {
                    if dtype == D::Int16 {
                        i64::from(i16::from_le_bytes([b[0], b[1]]))
                    } else {
                        i64::from(u16::from_le_bytes([b[0], b[1]]))
                    }
                })
                .collect(),
            None => t.int32_data.iter().map(|&x| i64::from(x)).collect(),
        }),
        D::Int8 | D::Uint8 => Data::Int(match from_raw(1)? {
            Some(c) => c
                .iter()
                .map(|b| {
                    if dtype == D::Int8 {
                        i64::from(b[0] as i8)
                    } else {
                        i64::from(b[0])
                    }
                })
                .collect(),
            None => t.int32_data.iter().map(|&x| i64::from(x)).collect(),
        }),
        D::Float8e4m3fn | D::Float8e4m3fnuz | D::Float8e5m2 | D::Float8e5m2fnuz => {
            let format = FloatFormat::of(code).ok_or("no float8 format")?;
            Data::F32(match from_raw(1)? {
                Some(c) => c.iter().map(|b| format.decode(u32::from(b[0]))).collect(),
                None => t
                    .int32_data
                    .iter()
                    .map(|&x| format.decode(x as u32 & 0xff))
                    .collect(),
            })
        }
        D::Int4 | D::Uint4 => {
            // two values a byte, the first in the low nibble
            let packed: Vec<u8> = match raw {
                Some(bytes) => bytes.to_vec(),
                None => t.int32_data.iter().map(|&x| x as u8).collect(),
            };
            if packed.len() != n.div_ceil(2) {
                return Err(format!(
                    "{} bytes hold {} packed {} values, {n} are needed",
                    packed.len(),
                    packed.len() * 2,
                    dtype.as_str_name()
                ));
            }
            let nibble = |i: usize| u32::from(packed[i / 2] >> (4 * (i % 2)) & 0xf);
            if dtype == D::Int4 {
                Data::Int((0..n).map(|i| (nibble(i) as i64 ^ 8) - 8).collect())
            } else {
                Data::Int((0..n).map(|i| nibble(i) as i64).collect())
            }
        }
        D::Bool => Data::Bool(match from_raw(1)? {
            Some(c) => c.iter().map(|b| b[0] != 0).collect(),
            None => t.int32_data.iter().map(|&x| x != 0).collect(),
        }),
        other => {
            return Err(format!(
                "data type {} is not supported",
                other.as_str_name()
            ))
        }
    };
    if data.len() != n {
        return Err(format!(
            "{} values cannot fill shape {shape:?} ({n} elements)",
            data.len()
        ));
    }
    Ok(Const {
        shape,
        data,
        elem_type: code,
    })
}
