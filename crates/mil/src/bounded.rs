//! Whole-file reads with a ceiling. A regular file's length is known before reading; a FIFO, a
//! character device (`/dev/zero`), a socket or stdin is not, and an endless one would be read
//! until memory runs out, so those are read in chunks, the first of which `check_start` may
//! reject (a wrong magic number), and refused past `limit` bytes.

use std::io::{self, Read};
use std::path::Path;

const CHUNK: usize = 64 * 1024;

/// The contents of `path`, at most `limit` bytes (`what` names the kind of file in the error).
pub fn read_file(
    path: &Path,
    limit: u64,
    what: &str,
    check_start: impl FnOnce(&[u8]) -> Result<(), String>,
) -> io::Result<Vec<u8>> {
    let file = std::fs::File::open(path)?;
    let meta = file.metadata()?;
    if meta.is_file() {
        if meta.len() > limit {
            return Err(too_long(limit, what));
        }
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        file.take(limit + 1).read_to_end(&mut bytes)?;
        if bytes.len() as u64 > limit {
            return Err(too_long(limit, what));
        }
        return Ok(bytes);
    }
    read_stream(file, limit, what, check_start)
}

/// Everything `reader` yields, at most `limit` bytes.
pub fn read_stream(
    reader: impl Read,
    limit: u64,
    what: &str,
    check_start: impl FnOnce(&[u8]) -> Result<(), String>,
) -> io::Result<Vec<u8>> {
    let mut reader = reader.take(limit + 1);
    let mut bytes = Vec::new();
    let mut check = Some(check_start);
    let mut chunk = vec![0u8; CHUNK];
    loop {
        let n = match reader.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        bytes.extend_from_slice(&chunk[..n]);
        if bytes.len() >= CHUNK {
            if let Some(check) = check.take() {
                check(&bytes)
                    .map_err(|reason| io::Error::new(io::ErrorKind::InvalidData, reason))?;
            }
        }
        if bytes.len() as u64 > limit {
            return Err(too_long(limit, what));
        }
    }
    if let Some(check) = check.take() {
        check(&bytes).map_err(|reason| io::Error::new(io::ErrorKind::InvalidData, reason))?;
    }
    Ok(bytes)
}

fn too_long(limit: u64, what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("longer than {limit} bytes, the limit for {what}"),
    )
}

/// No check of the first bytes.
pub fn any_start(_: &[u8]) -> Result<(), String> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endless_streams_stop_at_the_limit_or_the_start_check() {
        let zeros = io::repeat(0);
        let err = read_stream(zeros, 1 << 20, "a test", any_start).unwrap_err();
        assert!(err
            .to_string()
            .contains("longer than 1048576 bytes, the limit for a test"));
        let err = read_stream(io::repeat(0), u64::MAX - 1, "a test", |b| {
            if b.starts_with(b"MAGIC") {
                Ok(())
            } else {
                Err("not MAGIC".into())
            }
        })
        .unwrap_err();
        assert_eq!(err.to_string(), "not MAGIC");
        let got = read_stream(&b"short"[..], 5, "a test", any_start).unwrap();
        assert_eq!(got, b"short");
        assert!(read_stream(&b"longer"[..], 5, "a test", any_start).is_err());
    }
}
