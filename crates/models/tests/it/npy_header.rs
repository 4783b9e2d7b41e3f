//! The .npy header read as numpy reads it: a Python dict literal (the last of duplicate keys
//! wins) whose shape is a Python tuple.

use aneforge::engine::HostTensor;
use aneforge_models::npy;

/// A version-1 .npy file with `header` (padded to 64 bytes) followed by `data`.
fn npy_bytes(header: &str, data: &[u8]) -> Vec<u8> {
    let mut h = header.to_string();
    let unpadded = 10 + h.len() + 1;
    h.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
    h.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(h.len() as u16).to_le_bytes());
    out.extend_from_slice(h.as_bytes());
    out.extend_from_slice(data);
    out
}

fn read(header: &str, data: &[u8]) -> Result<(Vec<usize>, HostTensor), String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.npy");
    std::fs::write(&path, npy_bytes(header, data)).unwrap();
    npy::read_tensor(&path).map_err(|e| e.to_string())
}

#[test]
fn duplicate_keys_take_the_last_value_as_numpy_does() {
    let data: Vec<u8> = [1.0f32, 2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    let (shape, tensor) = read(
        "{'descr': '<i4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
        &data,
    )
    .unwrap();
    assert_eq!(shape, [2]);
    assert_eq!(tensor, HostTensor::F32(vec![1.0, 2.0]));
}

#[test]
fn shapes_must_be_python_tuples() {
    let data = vec![0u8; 256 * 4];
    let err = read(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1,,256), }",
        &data,
    )
    .unwrap_err();
    assert!(
        err.contains("x.npy") && err.contains("bad dimension"),
        "{err}"
    );
    for good in ["(1, 256)", "(1, 256,)", "(256,)"] {
        let header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {good}, }}");
        let (shape, _) = read(&header, &data).unwrap();
        assert_eq!(shape.iter().product::<usize>(), 256, "{good}");
    }
    let (shape, _) = read(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (), }",
        &data[..4],
    )
    .unwrap();
    assert!(shape.is_empty());
    let err = read(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (,), }",
        &data[..4],
    )
    .unwrap_err();
    assert!(err.contains("bad dimension"), "{err}");
}
