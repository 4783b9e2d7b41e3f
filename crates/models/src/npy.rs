//! NumPy `.npy` files of little-endian float32 in C order: written for embedding output, read for
//! test fixtures.

use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum NpyError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: not a float32 .npy file: {reason}", path.display())]
    Format { path: PathBuf, reason: String },
}

const MAGIC: &[u8] = b"\x93NUMPY";

/// The bytes of a version 1.0 `.npy` file holding `data` with `shape`.
pub fn to_bytes(shape: &[usize], data: &[f32]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape_text = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {shape_text}, }}");
    // magic (6) + version (2) + header length (2) + header, padded with spaces to a multiple of
    // 64 and ended by a newline.
    let unpadded = MAGIC.len() + 4 + header.len() + 1;
    header.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
    header.push('\n');
    let mut out = Vec::with_capacity(MAGIC.len() + 4 + header.len() + data.len() * 4);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    for v in data {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

/// Writes `path` through a temporary file in the same directory, renamed into place.
pub fn write(path: impl AsRef<Path>, shape: &[usize], data: &[f32]) -> Result<(), NpyError> {
    let path = path.as_ref();
    let io = |source| NpyError::Io {
        path: path.to_path_buf(),
        source,
    };
    let tmp = path.with_extension("npy.tmp");
    let mut file = std::fs::File::create(&tmp).map_err(io)?;
    file.write_all(&to_bytes(shape, data)).map_err(io)?;
    file.sync_all().map_err(io)?;
    drop(file);
    std::fs::rename(&tmp, path).map_err(io)
}

/// Reads a float32 C-order `.npy` file: `(shape, data)`.
pub fn read(path: impl AsRef<Path>) -> Result<(Vec<usize>, Vec<f32>), NpyError> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|source| NpyError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse(&bytes).map_err(|reason| NpyError::Format {
        path: path.to_path_buf(),
        reason,
    })
}

fn parse(bytes: &[u8]) -> Result<(Vec<usize>, Vec<f32>), String> {
    if bytes.get(..6) != Some(MAGIC) {
        return Err("missing the \\x93NUMPY magic".into());
    }
    let (header_len, start) = match bytes.get(6) {
        Some(1) => {
            let b = bytes.get(8..10).ok_or("truncated header length")?;
            (u16::from_le_bytes([b[0], b[1]]) as usize, 10)
        }
        Some(2) | Some(3) => {
            let b = bytes.get(8..12).ok_or("truncated header length")?;
            (u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize, 12)
        }
        other => return Err(format!("unsupported version {other:?}")),
    };
    let header = bytes
        .get(start..start + header_len)
        .ok_or("truncated header")?;
    let header = std::str::from_utf8(header).map_err(|_| "header is not UTF-8")?;
    if !header.contains("'descr': '<f4'") {
        return Err(format!("dtype is not little-endian float32: {header}"));
    }
    if !header.contains("'fortran_order': False") {
        return Err("Fortran-order arrays are not supported".into());
    }
    let shape_text = header
        .split("'shape': (")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .ok_or("no shape in header")?;
    let shape = shape_text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<usize>()
                .map_err(|_| format!("bad dimension '{s}'"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let count = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or("element count overflows")?;
    let data = &bytes[start + header_len..];
    if Some(data.len()) != count.checked_mul(4) {
        return Err(format!(
            "shape {shape:?} needs {count} float32 values, the file holds {} bytes of data",
            data.len()
        ));
    }
    Ok((shape, crate::weights::f32_le_to_f32(data)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_alignment() {
        let data: Vec<f32> = (0..6).map(|i| i as f32 * 0.5 - 1.0).collect();
        for shape in [vec![6], vec![2, 3], vec![1, 2, 3]] {
            let bytes = to_bytes(&shape, &data);
            let header_end = 10 + u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
            assert_eq!(header_end % 64, 0);
            assert_eq!(parse(&bytes).unwrap(), (shape, data.clone()));
        }
    }

    #[test]
    fn rejects_bad_files() {
        assert!(parse(b"nope").is_err());
        let mut bytes = to_bytes(&[2, 3], &[0.0; 6]);
        bytes.truncate(bytes.len() - 1);
        assert!(parse(&bytes).unwrap_err().contains("needs 6"));
    }
}
