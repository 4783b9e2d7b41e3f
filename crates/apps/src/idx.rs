//! The IDX format of MNIST and Fashion-MNIST (LeCun's layout), raw or gzip-compressed: a
//! big-endian magic `0x0000_08DD` (`08` = unsigned bytes, `DD` = rank), `rank` big-endian u32
//! dimensions, then the row-major bytes.
//!
//! The dimensions come from the file, so their product is checked against the bytes that exist
//! before anything is allocated for it; a gzip stream is read only as far as the header says,
//! plus one byte to detect trailing data.

use std::io::Read;
use std::path::Path;

use crate::data::DataError;

/// An IDX array of unsigned bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdxArray {
    pub dims: Vec<usize>,
    pub data: Vec<u8>,
}

/// gzip's two magic bytes.
const GZIP: [u8; 2] = [0x1f, 0x8b];
/// IDX's element-type byte for unsigned bytes, the only type MNIST-style datasets use.
const UBYTE: u8 = 0x08;
const MAX_RANK: usize = 4;

fn invalid(path: &Path, message: impl Into<String>) -> DataError {
    DataError::Invalid {
        what: path.display().to_string(),
        message: message.into(),
    }
}

fn io(path: &Path, source: std::io::Error) -> DataError {
    DataError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Reads an IDX file of unsigned bytes (`.gz` or raw, told apart by content, not name).
pub fn read_idx(path: &Path) -> Result<IdxArray, DataError> {
    let mut file = std::fs::File::open(path).map_err(|e| io(path, e))?;
    let file_len = file.metadata().map_err(|e| io(path, e))?.len();
    let mut magic = [0u8; 2];
    file.read_exact(&mut magic).map_err(|_| {
        invalid(
            path,
            format!("{file_len} bytes is too short for an IDX file"),
        )
    })?;
    let file = std::fs::File::open(path).map_err(|e| io(path, e))?;
    if magic == GZIP {
        // A deflate stream expands at most ~1032:1, which bounds what a header may claim.
        parse(
            path,
            flate2::read::GzDecoder::new(file),
            file_len.saturating_mul(1032),
        )
    } else {
        parse(path, std::io::BufReader::new(file), file_len)
    }
}

fn parse(path: &Path, mut r: impl Read, max_bytes: u64) -> Result<IdxArray, DataError> {
    let read_err = |e: std::io::Error| -> DataError {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            invalid(
                path,
                "truncated: the data ends before the header's dimensions are filled",
            )
        } else {
            invalid(path, format!("not readable as IDX ({e})"))
        }
    };
    let mut head = [0u8; 4];
    r.read_exact(&mut head).map_err(read_err)?;
    if head[0] != 0 || head[1] != 0 {
        return Err(invalid(
            path,
            format!(
                "magic {:02x}{:02x}{:02x}{:02x} is not IDX (expected 0000 then type and rank)",
                head[0], head[1], head[2], head[3]
            ),
        ));
    }
    if head[2] != UBYTE {
        return Err(invalid(
            path,
            format!(
                "element type 0x{:02x} is not supported (expected 0x08, unsigned bytes)",
                head[2]
            ),
        ));
    }
    let rank = usize::from(head[3]);
    if rank == 0 || rank > MAX_RANK {
        return Err(invalid(path, format!("rank {rank} is not 1 to {MAX_RANK}")));
    }
    let mut dims = Vec::with_capacity(rank);
    for _ in 0..rank {
        let mut d = [0u8; 4];
        r.read_exact(&mut d).map_err(read_err)?;
        dims.push(u32::from_be_bytes(d) as usize);
    }
    let count = dims
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d as u64))
        .filter(|&n| n <= max_bytes)
        .ok_or_else(|| {
            invalid(
                path,
                format!("dimensions {dims:?} need more bytes than the file can hold"),
            )
        })? as usize;
    let mut data = vec![0u8; count];
    r.read_exact(&mut data).map_err(read_err)?;
    let mut extra = [0u8; 1];
    match r.read(&mut extra) {
        Ok(0) => {}
        Ok(_) => {
            return Err(invalid(
                path,
                format!("trailing data after the {count} bytes that dimensions {dims:?} hold"),
            ))
        }
        Err(e) => return Err(read_err(e)),
    }
    Ok(IdxArray { dims, data })
}
