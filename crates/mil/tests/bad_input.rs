//! Corrupted weights.bin files: each gives an error naming the file and the place, never a panic.

use aneforge_mil::blob::BlobError;
use aneforge_mil::*;

const FILE: &str = "prog/weights/weight.bin";

/// Two blobs: descriptor at 64 (payload 128..144), descriptor at 192 (payload 256..264).
fn valid() -> Vec<u8> {
    let mut w = BlobWriter::new();
    assert_eq!(w.add_f16(&[half::f16::ONE; 8]), 64);
    assert_eq!(w.add_f32(&[1.0, 2.0]), 192);
    w.finish()
}

fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn parse_err(bytes: Vec<u8>) -> BlobError {
    let e = BlobFile::from_vec(FILE, bytes).unwrap_err();
    assert!(e.to_string().starts_with(FILE), "{e}");
    e
}

#[test]
fn the_valid_file_parses() {
    let f = BlobFile::from_vec(FILE, valid()).unwrap();
    assert_eq!(f.entries().count(), 2);
    assert_eq!(
        f.payload(192, &TensorType::new(DType::Fp32, &[2]))
            .unwrap()
            .len(),
        8
    );
}

#[test]
fn truncated_header() {
    let e = parse_err(valid()[..10].to_vec());
    assert_eq!(
        e,
        BlobError::TruncatedHeader {
            file: FILE.into(),
            len: 10
        }
    );
}

#[test]
fn wrong_version() {
    let mut b = valid();
    put_u32(&mut b, 4, 1);
    assert_eq!(
        parse_err(b),
        BlobError::BadVersion {
            file: FILE.into(),
            found: 1
        }
    );
}

#[test]
fn wrong_magic() {
    let mut b = valid();
    put_u32(&mut b, 192, 0xCAFEBABE);
    let e = parse_err(b);
    assert_eq!(
        e,
        BlobError::BadMagic {
            file: FILE.into(),
            offset: 192,
            found: 0xCAFEBABE
        }
    );
    assert!(
        e.to_string()
            .contains("descriptor at offset 192 has magic 0xcafebabe"),
        "{e}"
    );
}

#[test]
fn unknown_dtype_code() {
    let mut b = valid();
    put_u32(&mut b, 64 + 4, 99);
    assert_eq!(
        parse_err(b),
        BlobError::UnknownDtype {
            file: FILE.into(),
            offset: 64,
            code: 99
        }
    );
}

#[test]
fn payload_past_the_end() {
    let mut b = valid();
    put_u64(&mut b, 192 + 16, 1 << 40);
    assert!(matches!(
        parse_err(b),
        BlobError::OutOfBounds { offset: 192, .. }
    ));
    let mut b = valid();
    put_u64(&mut b, 64 + 8, u64::MAX);
    assert!(matches!(
        parse_err(b),
        BlobError::OutOfBounds { offset: 64, .. }
    ));
}

#[test]
fn truncated_payload() {
    let b = valid();
    let e = parse_err(b[..260].to_vec());
    assert!(
        matches!(
            e,
            BlobError::OutOfBounds {
                offset: 192,
                end: 264,
                len: 260,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn count_mismatch() {
    let mut b = valid();
    put_u32(&mut b, 0, 3);
    assert_eq!(
        parse_err(b),
        BlobError::CountMismatch {
            file: FILE.into(),
            count: 3,
            found: 2
        }
    );
}

#[test]
fn overlapping_payload() {
    let mut b = valid();
    // The second descriptor points its payload back into the first blob's region.
    put_u64(&mut b, 192 + 16, 128);
    assert!(matches!(
        parse_err(b),
        BlobError::Overlap { offset: 192, .. }
    ));
}

#[test]
fn misaligned_payload() {
    let mut b = valid();
    put_u64(&mut b, 64 + 16, 130);
    assert_eq!(
        parse_err(b),
        BlobError::Misaligned {
            file: FILE.into(),
            offset: 130
        }
    );
}

#[test]
fn lookups_that_do_not_match_the_file() {
    let f = BlobFile::from_vec(FILE, valid()).unwrap();
    assert!(matches!(
        f.payload(100, &TensorType::new(DType::Fp16, &[8])),
        Err(BlobError::NoBlobAt { offset: 100, .. })
    ));
    assert!(matches!(
        f.payload(64, &TensorType::new(DType::Int8, &[16])),
        Err(BlobError::DtypeMismatch { .. })
    ));
    assert!(matches!(
        f.payload(64, &TensorType::new(DType::Fp16, &[9])),
        Err(BlobError::SizeMismatch { .. })
    ));
    // Element counts that overflow are a size mismatch, not a panic.
    let huge = TensorType::new(DType::Fp16, &[usize::MAX, 4]);
    assert!(matches!(
        f.payload(64, &huge),
        Err(BlobError::SizeMismatch { .. })
    ));
}
