//! The GGUF reader and dequantisers against gguf-py (fixture: tools/fixtures/gguf_cases.py).

use std::path::{Path, PathBuf};

use aneforge_models::gguf::{
    BlockQ4_0, BlockQ4_1, BlockQ8_0, GgmlType, GgufError, GgufFile, MetaArray, MetaValue,
    QuantBlock,
};
use aneforge_models::weights::{SafeTensorsFiles, TensorSource, VarBuilder};
use serde_json::Value;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/fixtures/out/gguf")
}

fn json(name: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir().join(name)).unwrap()).unwrap()
}

fn bits_equal(a: &[f32], b: &[f32]) -> Option<usize> {
    if a.len() != b.len() {
        return Some(usize::MAX);
    }
    a.iter()
        .zip(b)
        .position(|(x, y)| x.to_bits() != y.to_bits() && !(x.is_nan() && y.is_nan()))
}

#[test]
fn every_dequantiser_matches_gguf_py_bit_for_bit() {
    let file = GgufFile::open(dir().join("quants.gguf")).unwrap();
    let expected = SafeTensorsFiles::open(dir().join("quants_expected.safetensors")).unwrap();
    let mut seen = Vec::new();
    for name in expected.names() {
        let want = expected.read_f32(&name).unwrap();
        let got = file.dequantize(&name).unwrap();
        assert_eq!(got.shape(), want.shape(), "{name}");
        if let Some(i) = bits_equal(got.data(), want.data()) {
            panic!(
                "{name}: element {i}: {} vs {}",
                got.data()[i],
                want.data()[i]
            );
        }
        seen.push(file.tensor(&name).unwrap().ggml_type);
    }
    use GgmlType::*;
    for ty in [
        F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, IQ4_NL,
        IQ4_XS,
    ] {
        assert!(seen.contains(&ty), "no fixture for {ty}");
    }
}

#[test]
fn raw_blocks_are_zero_copy_views_that_dequantize_the_same() {
    fn check<B: QuantBlock>(file: &GgufFile, name: &str) {
        let blocks = file.blocks::<B>(name).unwrap();
        let info = file.tensor(name).unwrap();
        assert_eq!(blocks.len() * B::ELEMENTS, info.n_elements);
        let bytes = file.tensor_bytes(info);
        assert_eq!(
            blocks.as_ptr() as *const u8,
            bytes.as_ptr(),
            "a view, not a copy"
        );
        let mut out = vec![0.0; info.n_elements];
        for (b, o) in blocks.iter().zip(out.chunks_exact_mut(B::ELEMENTS)) {
            b.dequantize_into(o);
        }
        assert!(
            bits_equal(&out, file.dequantize(name).unwrap().data()).is_none(),
            "{name}"
        );
    }
    let file = GgufFile::open(dir().join("quants.gguf")).unwrap();
    check::<BlockQ4_0>(&file, "q.Q4_0");
    check::<BlockQ4_1>(&file, "q.Q4_1");
    check::<BlockQ8_0>(&file, "q.Q8_0");
    let msg = file.blocks::<BlockQ4_0>("q.Q8_0").unwrap_err().to_string();
    assert!(
        msg.contains("q.Q8_0") && msg.contains("Q8_0") && msg.contains("Q4_0"),
        "{msg}"
    );
}

fn f64_of(v: &Value) -> f64 {
    let hex = v["f64"].as_str().expect("hex float");
    parse_hex_float(hex)
}

/// Python's float.hex() format: [-]0x1.<hex>p<exp>.
fn parse_hex_float(s: &str) -> f64 {
    let (neg, s) = s.strip_prefix('-').map_or((false, s), |r| (true, r));
    let s = s.strip_prefix("0x").unwrap();
    let (mant, exp) = s.split_once('p').unwrap();
    let (int, frac) = mant.split_once('.').unwrap_or((mant, ""));
    let mut value = u64::from_str_radix(int, 16).unwrap() as f64;
    let mut scale = 1.0 / 16.0;
    for c in frac.chars() {
        value += c.to_digit(16).unwrap() as f64 * scale;
        scale /= 16.0;
    }
    let v = value * 2f64.powi(exp.parse().unwrap());
    if neg {
        -v
    } else {
        v
    }
}

#[test]
fn metadata_of_every_value_type_matches_gguf_py() {
    let fx = json("metadata_expected.json");
    let file = GgufFile::open(dir().join("metadata.gguf")).unwrap();
    assert_eq!(file.version(), 3);
    assert_eq!(file.alignment(), fx["alignment"].as_u64().unwrap());
    assert_eq!(
        file.data_offset() as u64,
        fx["data_offset"].as_u64().unwrap()
    );
    let fields = fx["fields"].as_object().unwrap();
    assert_eq!(file.metadata().len(), fields.len());
    for (key, want) in fields {
        let got = file.get(key).unwrap_or_else(|| panic!("{key} missing"));
        if let Some(written) = want.get("written") {
            let MetaValue::Array(MetaArray::Array(inner)) = got else {
                panic!("{key}: not nested")
            };
            let lens: Vec<usize> = written
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_array().unwrap().len())
                .collect();
            assert_eq!(
                inner.iter().map(MetaArray::len).collect::<Vec<_>>(),
                lens,
                "{key}"
            );
        }
        let types: Vec<u64> = want["types"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_u64().unwrap())
            .collect();
        check_value(key, got, &types, &want["value"]);
    }
    for (name, want) in fx["tensors"].as_object().unwrap() {
        let info = file.tensor(name).unwrap();
        assert_eq!(
            info.ggml_type.to_string(),
            want["type"].as_str().unwrap(),
            "{name}"
        );
        let dims: Vec<u64> = want["dims"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap())
            .collect();
        assert_eq!(info.dims, dims, "{name}");
        let values = want["values"].as_array().unwrap();
        if info.ggml_type.is_integer() {
            let got = file.read_ints(name).unwrap();
            let want: Vec<i64> = values.iter().map(|v| v.as_i64().unwrap()).collect();
            assert_eq!(got.data(), want.as_slice(), "{name}");
        } else {
            let got = file.dequantize(name).unwrap();
            let want: Vec<f32> = values.iter().map(|v| f64_of(v) as f32).collect();
            assert_eq!(got.data(), want.as_slice(), "{name}");
        }
    }
}

fn check_value(key: &str, got: &MetaValue, types: &[u64], want: &Value) {
    assert_eq!(got.value_type() as u64, value_type_id(got), "{key}");
    assert_eq!(value_type_id(got), types[0], "{key}: type");
    match got {
        MetaValue::String(s) => assert_eq!(s, want.as_str().unwrap(), "{key}"),
        MetaValue::Bool(b) => assert_eq!(*b, want.as_bool().unwrap(), "{key}"),
        MetaValue::F32(v) => assert_eq!(*v as f64, f64_of(want), "{key}"),
        MetaValue::F64(v) => assert_eq!(*v, f64_of(want), "{key}"),
        MetaValue::U64(v) => assert_eq!(*v, want.as_u64().unwrap(), "{key}"),
        MetaValue::Array(MetaArray::Array(inner)) => {
            // gguf-py flattens nested arrays: compare the flattened values and the structure.
            let flat: Vec<i64> = inner.iter().flat_map(|a| a.to_i64s().unwrap()).collect();
            let want_flat: Vec<i64> = want
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_i64().unwrap())
                .collect();
            assert_eq!(flat, want_flat, "{key}");
            assert_eq!(
                inner.iter().map(array_type_id).collect::<Vec<_>>(),
                vec![types[2]; inner.len()]
            );
        }
        MetaValue::Array(a) => check_array(key, a, &types[1..], want),
        other => assert_eq!(other.as_i64().unwrap(), want.as_i64().unwrap(), "{key}"),
    }
}

fn check_array(key: &str, a: &MetaArray, types: &[u64], want: &Value) {
    let want = want.as_array().unwrap();
    assert_eq!(a.len(), want.len(), "{key}");
    assert_eq!(array_type_id(a), types[0], "{key}: element type");
    match a {
        MetaArray::String(v) => {
            let w: Vec<&str> = want.iter().map(|x| x.as_str().unwrap()).collect();
            assert_eq!(v.iter().map(String::as_str).collect::<Vec<_>>(), w, "{key}");
        }
        MetaArray::Bool(v) => {
            let w: Vec<bool> = want.iter().map(|x| x.as_bool().unwrap()).collect();
            assert_eq!(v, &w, "{key}");
        }
        MetaArray::F32(v) => {
            let w: Vec<f32> = want.iter().map(|x| f64_of(x) as f32).collect();
            assert_eq!(v, &w, "{key}");
        }
        other => {
            let w: Vec<i64> = want.iter().map(|x| x.as_i64().unwrap()).collect();
            assert_eq!(other.to_i64s().unwrap(), w, "{key}");
        }
    }
}

fn value_type_id(v: &MetaValue) -> u64 {
    use aneforge_models::gguf::ValueType as T;
    match v.value_type() {
        T::U8 => 0,
        T::I8 => 1,
        T::U16 => 2,
        T::I16 => 3,
        T::U32 => 4,
        T::I32 => 5,
        T::F32 => 6,
        T::Bool => 7,
        T::String => 8,
        T::Array => 9,
        T::U64 => 10,
        T::I64 => 11,
        T::F64 => 12,
    }
}

fn array_type_id(a: &MetaArray) -> u64 {
    match a {
        MetaArray::U8(_) => 0,
        MetaArray::I8(_) => 1,
        MetaArray::U16(_) => 2,
        MetaArray::I16(_) => 3,
        MetaArray::U32(_) => 4,
        MetaArray::I32(_) => 5,
        MetaArray::F32(_) => 6,
        MetaArray::Bool(_) => 7,
        MetaArray::String(_) => 8,
        MetaArray::Array(_) => 9,
        MetaArray::U64(_) => 10,
        MetaArray::I64(_) => 11,
        MetaArray::F64(_) => 12,
    }
}

#[test]
fn var_builder_over_gguf_uses_row_major_shapes() {
    let file = GgufFile::open(dir().join("quants.gguf")).unwrap();
    let info = file.tensor("q.Q4_K").unwrap().clone();
    let vb = VarBuilder::new(std::sync::Arc::new(file)).pp("q");
    let shape: Vec<usize> = info.dims.iter().rev().map(|&d| d as usize).collect();
    assert_eq!(vb.get(&shape, "Q4_K").unwrap().shape(), shape.as_slice());
    assert_eq!(vb.meta("Q4_K").unwrap().dtype, "Q4_K");
    let msg = vb.get(&[1], "Q4_K").unwrap_err().to_string();
    assert!(
        msg.contains("q.Q4_K") && msg.contains("quants.gguf"),
        "{msg}"
    );
    let msg = vb.get_any("Q4_KK").unwrap_err().to_string();
    assert!(msg.contains("q.Q4_KK"), "{msg}");
}

fn bytes(name: &str) -> Vec<u8> {
    std::fs::read(dir().join(name)).unwrap()
}

fn parse(data: Vec<u8>) -> Result<GgufFile, GgufError> {
    GgufFile::from_bytes("mutant.gguf", data)
}

#[test]
fn version_2_reads_and_other_versions_are_refused() {
    let mut data = bytes("metadata.gguf");
    data[4..8].copy_from_slice(&2u32.to_le_bytes());
    assert_eq!(parse(data.clone()).unwrap().version(), 2);
    data[4..8].copy_from_slice(&1u32.to_le_bytes());
    let msg = parse(data.clone()).unwrap_err().to_string();
    assert!(
        msg.contains("version 1") && msg.contains("mutant.gguf"),
        "{msg}"
    );
    data[4..8].copy_from_slice(&3u32.to_be_bytes());
    assert!(parse(data.clone())
        .unwrap_err()
        .to_string()
        .contains("big-endian"));
    data[0] = b'X';
    assert!(parse(data)
        .unwrap_err()
        .to_string()
        .contains("not a GGUF file"));
}

#[test]
fn every_truncation_is_an_error() {
    let data = bytes("metadata.gguf");
    let full = parse(data.clone()).unwrap();
    let last_needed = full
        .tensors()
        .iter()
        .map(|t| full.data_offset() + t.offset as usize + t.n_bytes)
        .max()
        .unwrap();
    for len in 0..last_needed {
        let err = parse(data[..len].to_vec())
            .err()
            .unwrap_or_else(|| panic!("prefix {len} parsed"));
        let msg = err.to_string();
        assert!(msg.contains("mutant.gguf"), "{len}: {msg}");
    }
    let msg = parse(data[..last_needed - 1].to_vec())
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("runs past the end") && msg.contains("tensor '"),
        "{msg}"
    );
}

/// Byte position of the first tensor info (right after the metadata).
fn tensor_info_start(file: &GgufFile, data: &[u8]) -> usize {
    let name = &file.tensors()[0].name;
    let needle: Vec<u8> = [&(name.len() as u64).to_le_bytes()[..], name.as_bytes()].concat();
    data.windows(needle.len())
        .rposition(|w| w == needle.as_slice())
        .unwrap()
}

#[test]
fn impossible_fields_are_named() {
    let data = bytes("metadata.gguf");
    let file = parse(data.clone()).unwrap();
    let start = tensor_info_start(&file, &data);
    let first = &file.tensors()[0];
    let after_name = start + 8 + first.name.len();
    let dims_end = after_name + 4 + 8 * first.dims.len();

    let mut m = data.clone();
    m[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    let msg = parse(m).unwrap_err().to_string();
    assert!(
        msg.contains("tensor_count") && msg.contains("cannot fit"),
        "{msg}"
    );

    let mut m = data.clone();
    m[16..24].copy_from_slice(&(1u64 << 40).to_le_bytes());
    assert!(parse(m)
        .unwrap_err()
        .to_string()
        .contains("metadata_kv_count"));

    let mut m = data.clone();
    m[dims_end..dims_end + 4].copy_from_slice(&99u32.to_le_bytes());
    let err = parse(m).unwrap_err();
    assert!(
        matches!(err, GgufError::UnknownTensorType { type_id: 99, .. }),
        "{err}"
    );
    assert!(err.to_string().contains(&first.name));

    let mut m = data.clone();
    m[after_name..after_name + 4].copy_from_slice(&7u32.to_le_bytes());
    assert!(parse(m).unwrap_err().to_string().contains("n_dims"));

    let mut m = data.clone();
    m[dims_end + 4..dims_end + 12].copy_from_slice(&(1u64 << 60).to_le_bytes());
    let msg = parse(m).unwrap_err().to_string();
    assert!(msg.contains(&first.name) && msg.contains("offset"), "{msg}");

    let mut m = data.clone();
    m[dims_end + 4..dims_end + 12].copy_from_slice(&(first.offset + 1).to_le_bytes());
    assert!(parse(m).unwrap_err().to_string().contains("alignment"));

    let mut m = data.clone();
    m[after_name + 4..after_name + 12].copy_from_slice(&u64::MAX.to_le_bytes());
    let msg = parse(m).unwrap_err().to_string();
    assert!(msg.contains(&first.name), "{msg}");

    // general.alignment = 3 (not a power of two)
    let key = b"general.alignment";
    let at = data.windows(key.len()).position(|w| w == key).unwrap() + key.len() + 4;
    let mut m = data.clone();
    m[at..at + 4].copy_from_slice(&3u32.to_le_bytes());
    assert!(parse(m)
        .unwrap_err()
        .to_string()
        .contains("general.alignment"));
}

#[test]
fn quantised_rows_must_hold_whole_blocks() {
    let data = bytes("quants.gguf");
    let file = parse(data.clone()).unwrap();
    let start = tensor_info_start(&file, &data);
    let first = &file.tensors()[0];
    assert!(first.ggml_type.block_elements() > 1);
    let dim0 = start + 8 + first.name.len() + 4;
    let mut m = data;
    m[dim0..dim0 + 8].copy_from_slice(&(first.dims[0] + 1).to_le_bytes());
    let msg = parse(m).unwrap_err().to_string();
    assert!(
        msg.contains("block size") && msg.contains(&first.name),
        "{msg}"
    );
}

#[test]
fn seeded_mutations_never_panic() {
    let originals = [
        bytes("metadata.gguf"),
        bytes("quants.gguf"),
        bytes("tok_gpt2.gguf"),
    ];
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    let mut runs = 0;
    let mut parsed = 0;
    while std::time::Instant::now() < deadline && runs < 20_000 {
        runs += 1;
        let original = &originals[(next() % 3) as usize];
        let mut m = original.clone();
        let header = m.len().min(1 << 12);
        for _ in 0..1 + next() % 6 {
            let at = (next() as usize) % if next() % 4 == 0 { m.len() } else { header };
            match next() % 3 {
                0 => m[at] = next() as u8,
                1 => m[at] ^= 1 << (next() % 8),
                _ => {
                    let v = [0u8, 0xFF, 0x7F, 0x80][(next() % 4) as usize];
                    m[at] = v;
                }
            }
        }
        if next() % 6 == 0 {
            m.truncate((next() as usize) % m.len());
        }
        if let Ok(file) = parse(m) {
            parsed += 1;
            for t in file.tensors() {
                let _ = file.dequantize(&t.name);
            }
            let _ = aneforge_models::gguf::GgufTokenizer::from_gguf(&file);
            let _ = aneforge_models::llm::LlmConfig::from_gguf(&file);
        }
    }
    assert!(runs > 100 && parsed > 0, "{runs} runs, {parsed} parsed");
}

#[test]
fn real_smollm2_tensors_match_gguf_py() {
    use sha2::{Digest, Sha256};
    let model = aneforge_models::require_model!("HuggingFaceTB/SmolLM2-135M-Instruct");
    let fx = json("smollm2_tensors.json");
    let file = GgufFile::open(model.gguf_file().unwrap()).unwrap();
    assert_eq!(file.version(), 3);
    assert_eq!(
        file.tensors().len() as u64,
        fx["tensor_count"].as_u64().unwrap()
    );
    for (name, want) in fx["tensors"].as_object().unwrap() {
        let got = file.dequantize(name).unwrap();
        assert_eq!(
            file.tensor(name).unwrap().ggml_type.to_string(),
            want["type"].as_str().unwrap()
        );
        let shape: Vec<usize> = want["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap() as usize)
            .collect();
        assert_eq!(got.shape(), shape.as_slice(), "{name}");
        let mut hash = Sha256::new();
        for v in got.data() {
            hash.update(v.to_le_bytes());
        }
        let hex: String = hash.finalize().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            want["sha256_f32le"].as_str().unwrap(),
            "{name}: f32 bytes differ from gguf-py"
        );
    }
}
