//! NumPy `.npy` files in any dtype a program port exchanges with the host: float32, float16,
//! int32 (int64 accepted and range-checked on reading), int8, uint8 and bool, C order,
//! little-endian. Used for `aneforge run` ports, embedding output and test fixtures. Writes go
//! through a temporary file renamed into place.

use std::path::{Path, PathBuf};

use aneforge::engine::HostTensor;
use half::f16;

#[derive(Debug, thiserror::Error)]
pub enum NpyError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: not a usable .npy file: {reason}", path.display())]
    Format { path: PathBuf, reason: String },
    #[error("{}: holds {found} data, expected float32", path.display())]
    NotF32 { path: PathBuf, found: &'static str },
}

const MAGIC: &[u8] = b"\x93NUMPY";

/// A NumPy dtype code of the header's `descr`.
fn descr(tensor: &HostTensor) -> &'static str {
    match tensor {
        HostTensor::F32(_) => "<f4",
        HostTensor::F16(_) => "<f2",
        HostTensor::I32(_) => "<i4",
        HostTensor::I8(_) => "|i1",
        HostTensor::U8(_) => "|u1",
        HostTensor::Bool(_) => "|b1",
    }
}

/// The bytes of a version 1.0 `.npy` file holding `tensor` with `shape`.
pub fn tensor_to_bytes(shape: &[usize], tensor: &HostTensor) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
    let shape_text = match dims.as_slice() {
        [one] => format!("({one},)"),
        _ => format!("({})", dims.join(", ")),
    };
    let mut header = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {shape_text}, }}",
        descr(tensor)
    );
    // magic, version and header length take 10 bytes; the header is padded with spaces so the
    // data starts at a multiple of 64, and ends with a newline
    let unpadded = MAGIC.len() + 4 + header.len() + 1;
    header.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
    header.push('\n');
    let mut out = Vec::with_capacity(MAGIC.len() + 4 + header.len() + tensor.len() * 4);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    match tensor {
        HostTensor::F32(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
        HostTensor::F16(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
        HostTensor::I32(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
        HostTensor::I8(v) => v.iter().for_each(|x| out.extend(x.to_le_bytes())),
        HostTensor::U8(v) => out.extend_from_slice(v),
        HostTensor::Bool(v) => v.iter().for_each(|&x| out.push(u8::from(x))),
    }
    out
}

/// The bytes of a version 1.0 float32 `.npy` file.
pub fn to_bytes(shape: &[usize], data: &[f32]) -> Vec<u8> {
    tensor_to_bytes(shape, &HostTensor::F32(data.to_vec()))
}

/// Writes `path` with [`aneforge::output::write_output`]: atomically when it is a regular file.
pub fn write_tensor(
    path: impl AsRef<Path>,
    shape: &[usize],
    tensor: &HostTensor,
) -> Result<(), NpyError> {
    let path = path.as_ref();
    aneforge::output::write_output(path, &tensor_to_bytes(shape, tensor)).map_err(|source| {
        NpyError::Io {
            path: path.to_path_buf(),
            source,
        }
    })
}

/// Writes a float32 `.npy` file atomically.
pub fn write(path: impl AsRef<Path>, shape: &[usize], data: &[f32]) -> Result<(), NpyError> {
    write_tensor(path, shape, &HostTensor::F32(data.to_vec()))
}

/// The largest `.npy` file read; a FIFO or device is refused past it, or at once when it does not
/// start with the `.npy` magic number.
pub const MAX_NPY_BYTES: u64 = 16 << 30;

/// A `.npy` file's bytes, bounded ([`MAX_NPY_BYTES`], the magic checked first on streams).
pub fn read_bytes(path: &Path) -> Result<Vec<u8>, NpyError> {
    aneforge_mil::bounded::read_file(path, MAX_NPY_BYTES, "a .npy file", |b| {
        if b.starts_with(MAGIC) || b.len() < MAGIC.len() {
            Ok(())
        } else {
            Err("not a .npy file (no \\x93NUMPY magic)".into())
        }
    })
    .map_err(|source| NpyError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Reads a C-order `.npy` file of any supported dtype: its shape and data.
pub fn read_tensor(path: impl AsRef<Path>) -> Result<(Vec<usize>, HostTensor), NpyError> {
    let path = path.as_ref();
    let bytes = read_bytes(path)?;
    parse(&bytes).map_err(|reason| NpyError::Format {
        path: path.to_path_buf(),
        reason,
    })
}

/// Reads a float32 C-order `.npy` file: `(shape, data)`; other dtypes are an error.
pub fn read(path: impl AsRef<Path>) -> Result<(Vec<usize>, Vec<f32>), NpyError> {
    let path = path.as_ref();
    match read_tensor(path)? {
        (shape, HostTensor::F32(data)) => Ok((shape, data)),
        (_, other) => Err(NpyError::NotF32 {
            path: path.to_path_buf(),
            found: other.numpy_dtype(),
        }),
    }
}

/// Parses a `.npy` file's bytes (what [`read_tensor`] reads): its shape and data, or why not.
pub fn parse(bytes: &[u8]) -> Result<(Vec<usize>, HostTensor), String> {
    if bytes.get(..6) != Some(MAGIC) {
        return Err("missing the \\x93NUMPY magic".into());
    }
    let (header_len, start) = match bytes.get(6) {
        Some(1) => match bytes.get(8..10) {
            Some(&[a, b]) => (u16::from_le_bytes([a, b]) as usize, 10),
            _ => return Err("truncated header length".into()),
        },
        Some(2 | 3) => match bytes.get(8..12) {
            Some(&[a, b, c, d]) => (u32::from_le_bytes([a, b, c, d]) as usize, 12),
            _ => return Err("truncated header length".into()),
        },
        other => return Err(format!("unsupported format version {other:?}")),
    };
    let header = bytes
        .get(start..start + header_len)
        .ok_or("truncated header")?;
    let header = std::str::from_utf8(header).map_err(|_| "the header is not UTF-8")?;
    // the header is a Python dict literal: of duplicate keys, the last wins (as in numpy)
    let field = |key: &str| -> Result<&str, String> {
        let (_, rest) = header
            .rsplit_once(&format!("'{key}':"))
            .ok_or_else(|| format!("no '{key}' in the header {header:?}"))?;
        Ok(rest.trim_start())
    };
    if field("fortran_order")?.starts_with("True") {
        return Err("Fortran-order arrays are not supported (save a C-order copy)".into());
    }
    let code = field("descr")?
        .strip_prefix('\'')
        .and_then(|r| r.split('\'').next())
        .ok_or("the header's descr is not a quoted string")?;
    let shape_text = field("shape")?
        .strip_prefix('(')
        .and_then(|r| r.split(')').next())
        .ok_or("the header's shape is not a tuple")?;
    // a Python tuple: `()`, `(n,)`, `(a, b)` or `(a, b,)`; only one trailing comma may be empty
    let mut dims: Vec<&str> = shape_text.split(',').map(str::trim).collect();
    if dims.last() == Some(&"") {
        dims.pop();
    }
    let shape = dims
        .iter()
        .map(|s| {
            s.parse::<usize>()
                .map_err(|_| format!("bad dimension {s:?} in the shape ({shape_text})"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let count = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or("the element count overflows")?;
    let data = &bytes[start + header_len..];
    let width = match code {
        "<f4" | "<i4" => 4,
        "<f2" => 2,
        "<i8" => 8,
        "|i1" | "|u1" | "|b1" => 1,
        other => {
            return Err(format!(
                "dtype {other:?} is not supported: use float32, float16, int32, int64, int8, \
                 uint8 or bool, little-endian"
            ))
        }
    };
    if Some(data.len()) != count.checked_mul(width) {
        return Err(format!(
            "shape {shape:?} of {code} needs {} bytes of data, the file holds {}",
            count.saturating_mul(width),
            data.len()
        ));
    }
    let words = |n: usize| data.chunks_exact(n);
    let tensor = match code {
        "<f4" => HostTensor::F32(crate::weights::f32_le_to_f32(data)),
        "<f2" => HostTensor::F16(words(2).map(|w| f16::from_le_bytes([w[0], w[1]])).collect()),
        "<i4" => HostTensor::I32(
            words(4)
                .map(|w| i32::from_le_bytes([w[0], w[1], w[2], w[3]]))
                .collect(),
        ),
        "<i8" => HostTensor::I32(
            words(8)
                .enumerate()
                .map(|(i, w)| {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(w);
                    let v = i64::from_le_bytes(b);
                    i32::try_from(v)
                        .map_err(|_| format!("int64 element {i} ({v}) does not fit int32"))
                })
                .collect::<Result<Vec<_>, _>>()?,
        ),
        "|i1" => HostTensor::I8(data.iter().map(|&b| b as i8).collect()),
        "|u1" => HostTensor::U8(data.to_vec()),
        _ => HostTensor::Bool(
            data.iter()
                .enumerate()
                .map(|(i, &b)| match b {
                    0 => Ok(false),
                    1 => Ok(true),
                    other => Err(format!("bool element {i} is the byte {other}, not 0 or 1")),
                })
                .collect::<Result<Vec<_>, _>>()?,
        ),
    };
    Ok((shape, tensor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dtype_round_trips_with_aligned_data() {
        let cases = [
            HostTensor::F32(vec![0.5, -1.25, 3.0, 7.5, -0.0, 1e-3]),
            HostTensor::F16(
                [0.5f32, -2.0, 3.0, 65504.0, 0.0, 1.5]
                    .map(f16::from_f32)
                    .to_vec(),
            ),
            HostTensor::I32(vec![1, -2, 3, i32::MAX, i32::MIN, 0]),
            HostTensor::I8(vec![1, -2, 3, 127, -128, 0]),
            HostTensor::U8(vec![1, 2, 3, 255, 0, 9]),
            HostTensor::Bool(vec![true, false, true, true, false, false]),
        ];
        for tensor in cases {
            for shape in [vec![6], vec![2, 3], vec![1, 2, 3]] {
                let bytes = tensor_to_bytes(&shape, &tensor);
                let header_end = 10 + u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
                assert_eq!(header_end % 64, 0);
                assert_eq!(parse(&bytes).unwrap(), (shape, tensor.clone()));
            }
        }
    }

    #[test]
    fn scalars_int64_and_bad_files() {
        let bytes = to_bytes(&[], &[2.5]);
        assert_eq!(parse(&bytes).unwrap(), (vec![], HostTensor::F32(vec![2.5])));

        let mut i64_file = to_bytes(&[2], &[0.0; 4]);
        let at = i64_file.windows(3).position(|w| w == b"<f4").unwrap();
        i64_file[at..at + 3].copy_from_slice(b"<i8");
        let n = i64_file.len();
        i64_file[n - 16..n - 8].copy_from_slice(&7i64.to_le_bytes());
        i64_file[n - 8..].copy_from_slice(&(-3i64).to_le_bytes());
        assert_eq!(parse(&i64_file).unwrap().1, HostTensor::I32(vec![7, -3]));
        i64_file[n - 8..].copy_from_slice(&(1i64 << 40).to_le_bytes());
        assert!(parse(&i64_file).unwrap_err().contains("does not fit int32"));

        assert!(parse(b"nope").is_err());
        let mut short = to_bytes(&[2, 3], &[0.0; 6]);
        short.pop();
        assert!(parse(&short).unwrap_err().contains("needs 24 bytes"));
    }

    #[test]
    fn files_are_written_whole_and_typed_reads_check_the_dtype() {
        let dir = std::env::temp_dir().join(format!("aneforge-npy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ids.npy");
        write_tensor(&path, &[3], &HostTensor::I32(vec![4, 5, 6])).unwrap();
        assert_eq!(
            read_tensor(&path).unwrap(),
            (vec![3], HostTensor::I32(vec![4, 5, 6]))
        );
        let err = read(&path).unwrap_err().to_string();
        assert!(err.contains("ids.npy") && err.contains("int32"), "{err}");
        let leftovers: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name())
            .filter(|n| n != "ids.npy")
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
