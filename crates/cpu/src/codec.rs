//! The one conversion between host data and port buffers: a port's elements densely
//! packed in its dtype (native-endian, bools as bytes 0 and 1). f32 and f16 data convert into
//! either float dtype; every other kind must match the port. Integers and bools that a float port
//! carries (ANE programs) convert through [`Carried`].

use crate::port::{Port, PortError};
use crate::tensor::{BufferMut, BufferRef, HostSlice, HostTensor};
use aneforge_mil::DType;
use half::f16;

/// Whether `data` may be written into a port of `dtype`.
pub fn accepts(dtype: DType, data: &HostSlice<'_>) -> bool {
    matches!(
        (dtype, data),
        (
            DType::Fp32 | DType::Fp16,
            HostSlice::F32(_) | HostSlice::F16(_)
        ) | (DType::Int32, HostSlice::I32(_))
            | (DType::Int8, HostSlice::I8(_))
            | (DType::Uint8, HostSlice::U8(_))
            | (DType::Bool, HostSlice::Bool(_))
    )
}

fn cast_mut<'a, T: bytemuck::Pod>(
    port: &Port,
    bytes: &'a mut [u8],
) -> Result<&'a mut [T], PortError> {
    bytemuck::try_cast_slice_mut(bytes).map_err(|e| not_addressable::<T>(port, e))
}

fn cast<'a, T: bytemuck::Pod>(port: &Port, bytes: &'a [u8]) -> Result<&'a [T], PortError> {
    bytemuck::try_cast_slice(bytes).map_err(|e| not_addressable::<T>(port, e))
}

fn not_addressable<T>(port: &Port, e: bytemuck::PodCastError) -> PortError {
    PortError::View {
        port: port.name.clone(),
        message: format!(
            "buffer is not addressable as {}: {e}",
            std::any::type_name::<T>()
        ),
    }
}

fn check_len(port: &Port, bytes: usize) -> Result<(), PortError> {
    if bytes == port.dense_bytes() {
        Ok(())
    } else {
        Err(PortError::Bytes {
            port: port.name.clone(),
            expected: port.dense_bytes(),
            found: bytes,
        })
    }
}

/// Converts host data into `port`'s dense bytes `dst`.
pub fn encode(port: &Port, data: HostSlice<'_>, dst: &mut [u8]) -> Result<(), PortError> {
    if data.len() != port.len() {
        return Err(PortError::Length {
            port: port.name.clone(),
            shape: port.shape.clone(),
            expected: port.len(),
            found: data.len(),
        });
    }
    check_len(port, dst.len())?;
    match (port.dtype, data) {
        (DType::Fp32, HostSlice::F32(v)) => cast_mut::<f32>(port, dst)?.copy_from_slice(v),
        (DType::Fp32, HostSlice::F16(v)) => {
            for (d, x) in cast_mut::<f32>(port, dst)?.iter_mut().zip(v) {
                *d = x.to_f32();
            }
        }
        (DType::Fp16, HostSlice::F16(v)) => cast_mut::<f16>(port, dst)?.copy_from_slice(v),
        (DType::Fp16, HostSlice::F32(v)) => {
            use half::slice::HalfFloatSliceExt;
            cast_mut::<f16>(port, dst)?.convert_from_f32_slice(v)
        }
        (DType::Int32, HostSlice::I32(v)) => cast_mut::<i32>(port, dst)?.copy_from_slice(v),
        (DType::Int8, HostSlice::I8(v)) => cast_mut::<i8>(port, dst)?.copy_from_slice(v),
        (DType::Uint8, HostSlice::U8(v)) => dst.copy_from_slice(v),
        (DType::Bool, HostSlice::Bool(v)) => {
            for (d, &x) in dst.iter_mut().zip(v) {
                *d = u8::from(x);
            }
        }
        (expected, data) => {
            return Err(PortError::Dtype {
                port: port.name.clone(),
                expected,
                found: data.kind(),
            })
        }
    }
    Ok(())
}

/// An owned copy of `port`'s dense bytes `src`, in the port's dtype (any non-zero byte of a bool
/// port reads as true).
pub fn decode(port: &Port, src: &[u8]) -> Result<HostTensor, PortError> {
    check_len(port, src.len())?;
    Ok(match port.dtype {
        DType::Fp32 => HostTensor::F32(cast::<f32>(port, src)?.to_vec()),
        DType::Fp16 => HostTensor::F16(cast::<f16>(port, src)?.to_vec()),
        DType::Int32 => HostTensor::I32(cast::<i32>(port, src)?.to_vec()),
        DType::Int8 => HostTensor::I8(cast::<i8>(port, src)?.to_vec()),
        DType::Uint8 => HostTensor::U8(src.to_vec()),
        _ => HostTensor::Bool(src.iter().map(|&b| b != 0).collect()),
    })
}

/// Copies dense port bytes from a buffer whose bool bytes may be any value into one that must
/// hold 0 or 1.
pub fn copy_dense(port: &Port, src: &[u8], dst: &mut [u8]) -> Result<(), PortError> {
    check_len(port, src.len())?;
    check_len(port, dst.len())?;
    if port.dtype == DType::Bool {
        for (d, &s) in dst.iter_mut().zip(src) {
            *d = u8::from(s != 0);
        }
    } else {
        dst.copy_from_slice(src);
    }
    Ok(())
}

fn no_bool_view(port: &Port) -> PortError {
    PortError::View {
        port: port.name.clone(),
        message: "bool ports have no zero-copy view (the buffer may hold any byte); use \
                  set_input/read_output"
            .to_string(),
    }
}

/// `bytes` of a non-bool `port` typed as a `$view` variant, each slice made by `$cast`.
macro_rules! typed_view {
    ($view:ident, $cast:ident, $port:expr, $bytes:expr) => {{
        check_len($port, $bytes.len())?;
        Ok(match $port.dtype {
            DType::Fp32 => $view::F32($cast($port, $bytes)?),
            DType::Fp16 => $view::F16($cast($port, $bytes)?),
            DType::Int32 => $view::I32($cast($port, $bytes)?),
            DType::Int8 => $view::I8($cast($port, $bytes)?),
            DType::Uint8 => $view::U8($bytes),
            _ => return Err(no_bool_view($port)),
        })
    }};
}

/// A zero-copy view of `port`'s dense bytes. Bool ports have none: their bytes are not known to
/// be valid bools.
pub fn view<'a>(port: &Port, bytes: &'a [u8]) -> Result<BufferRef<'a>, PortError> {
    typed_view!(BufferRef, cast, port, bytes)
}

/// A zero-copy mutable view of `port`'s dense bytes; none for bool ports, as for [`view`].
pub fn view_mut<'a>(port: &Port, bytes: &'a mut [u8]) -> Result<BufferMut<'a>, PortError> {
    typed_view!(BufferMut, cast_mut, port, bytes)
}

/// Values a float port carries for the host: ANE programs compute in fp16 only, so i32 ports
/// hold integers as floats (exact for |v| <= 2048) and bool ports hold 0 and 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Carried {
    I32,
    Bool,
}

impl Carried {
    /// `data` as the floats the port holds; `None` when `data` is not of the carried kind.
    pub fn widen(self, data: &HostSlice<'_>) -> Option<Vec<f32>> {
        match (self, data) {
            (Carried::I32, HostSlice::I32(v)) => Some(v.iter().map(|&x| x as f32).collect()),
            (Carried::Bool, HostSlice::Bool(v)) => {
                Some(v.iter().map(|&b| f32::from(u8::from(b))).collect())
            }
            _ => None,
        }
    }

    /// The carried values of a port read as floats.
    pub fn narrow(self, values: &[f32]) -> HostTensor {
        match self {
            Carried::I32 => HostTensor::I32(values.iter().map(|&x| x.round() as i32).collect()),
            Carried::Bool => HostTensor::Bool(values.iter().map(|&x| x != 0.0).collect()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(dtype: DType, n: usize) -> Port {
        Port {
            name: "x".into(),
            dtype,
            shape: vec![n],
        }
    }

    #[test]
    fn conversions_follow_the_port_dtype() {
        let p = port(DType::Fp16, 3);
        let mut bytes = vec![0u8; 6];
        encode(&p, HostSlice::F32(&[1.0, -2.5, 65504.0]), &mut bytes).unwrap();
        assert_eq!(
            decode(&p, &bytes).unwrap().to_f32(),
            vec![1.0, -2.5, 65504.0]
        );
        let err = encode(&p, HostSlice::I32(&[1, 2, 3]), &mut bytes).unwrap_err();
        assert_eq!(err.to_string(), "port `x` is fp16, host data is i32");
        let err = encode(&p, HostSlice::F32(&[1.0]), &mut bytes).unwrap_err();
        assert_eq!(err.to_string(), "port `x` [3] holds 3 elements, got 1");
    }

    #[test]
    fn bools_are_bytes_and_have_no_view() {
        let p = port(DType::Bool, 3);
        let mut bytes = vec![0u8; 3];
        copy_dense(&p, &[0, 7, 1], &mut bytes).unwrap();
        assert_eq!(bytes, [0, 1, 1]);
        assert_eq!(
            decode(&p, &bytes).unwrap(),
            HostTensor::Bool(vec![false, true, true])
        );
        assert!(view(&p, &bytes).is_err());
    }

    #[test]
    fn carried_values_round_trip_through_floats() {
        let ints = Carried::I32.widen(&HostSlice::I32(&[3, -7])).unwrap();
        assert_eq!(ints, [3.0, -7.0]);
        assert_eq!(
            Carried::I32.narrow(&[2.9, -7.1]),
            HostTensor::I32(vec![3, -7])
        );
        assert!(Carried::Bool.widen(&HostSlice::I32(&[1])).is_none());
        assert_eq!(
            Carried::Bool.narrow(
                &Carried::Bool
                    .widen(&HostSlice::Bool(&[true, false]))
                    .unwrap()
            ),
            HostTensor::Bool(vec![true, false])
        );
    }
}
