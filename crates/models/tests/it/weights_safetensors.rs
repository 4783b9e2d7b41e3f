//! The safetensors reader and VarBuilder against files written by the `safetensors` Python package,
//! torch and transformers (fixture: tools/fixtures/safetensors_cases.py).

use std::path::{Path, PathBuf};

use aneforge_models::require_model;
use aneforge_models::weights::{SafeTensorsFiles, TensorSource, VarBuilder, WeightError};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/fixtures/out/safetensors")
}

fn open(name: &str) -> SafeTensorsFiles {
    SafeTensorsFiles::open(fixtures().join(name)).unwrap()
}

fn same_f32(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

#[test]
fn every_float_dtype_converts_like_torch() {
    let stored = open("dtypes.safetensors");
    let expected = open("dtypes_expected.safetensors");
    let mut checked = 0;
    for name in stored.names() {
        let meta = stored.meta(&name).unwrap();
        if !name.starts_with("int.") {
            let got = stored.read_f32(&name).unwrap();
            let want = expected.read_f32(&name).unwrap();
            assert_eq!(got.shape(), want.shape(), "{name}");
            assert!(same_f32(got.data(), want.data()), "{name} ({})", meta.dtype);
            checked += 1;
        }
    }
    assert_eq!(checked, 8);
}

#[test]
fn every_int_dtype_widens_like_torch() {
    let stored = open("dtypes.safetensors");
    let expected = open("dtypes_expected.safetensors");
    for name in ["int.i64", "int.i32", "int.i16", "int.u8", "int.bool"] {
        let got = stored.read_i64(name).unwrap();
        let want = expected.read_i64(name).unwrap();
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn reading_with_the_wrong_kind_is_an_error_naming_tensor_and_file() {
    let stored = open("dtypes.safetensors");
    let err = stored.read_f32("int.i64").unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, WeightError::WrongDtype { .. }), "{msg}");
    assert!(
        msg.contains("int.i64") && msg.contains("dtypes.safetensors") && msg.contains("I64"),
        "{msg}"
    );
    let err = stored.read_i64("float.f16").unwrap_err();
    assert!(err.to_string().contains("F16"), "{err}");
}

#[test]
fn var_builder_prefixes_and_checks_shapes() {
    let vb = VarBuilder::from_dir(fixtures().join("tiny_bert/single")).unwrap();
    let layer = vb.pp("encoder").pp("layer.1");
    assert_eq!(layer.prefix(), "encoder.layer.1");
    let q = layer.pp("attention.self.query");
    let w = q.get(&[16, 16], "weight").unwrap();
    assert_eq!(w.shape(), &[16, 16]);
    assert!(q.contains("bias"));
    assert!(!q.contains("gamma"));

    let err = q.get(&[16, 8], "weight").unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, WeightError::WrongShape { .. }));
    assert!(
        msg.contains("encoder.layer.1.attention.self.query.weight")
            && msg.contains("[16, 8]")
            && msg.contains("[16, 16]")
            && msg.contains("model.safetensors"),
        "{msg}"
    );

    let err = layer.get(&[16], "attention.self.qurey.bias").unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, WeightError::MissingTensor { .. }));
    assert!(
        msg.contains("encoder.layer.1.attention.self.qurey.bias"),
        "{msg}"
    );
    assert!(
        msg.contains("similar names: encoder.layer.1.attention.self.query.bias"),
        "{msg}"
    );
}

#[test]
fn sharded_checkpoint_reads_the_same_tensors_as_the_single_file() {
    let single = open("tiny_bert/single/model.safetensors");
    let sharded =
        SafeTensorsFiles::open(fixtures().join("tiny_bert/sharded/model.safetensors.index.json"))
            .unwrap();
    assert_eq!(single.names(), sharded.names());
    let shard_files: std::collections::BTreeSet<PathBuf> = sharded
        .names()
        .iter()
        .map(|n| sharded.meta(n).unwrap().file)
        .collect();
    assert_eq!(shard_files.len(), 3);
    for name in single.names() {
        assert_eq!(
            single.read_f32(&name).unwrap(),
            sharded.read_f32(&name).unwrap(),
            "{name}"
        );
    }
    let vb = VarBuilder::from_dir(fixtures().join("tiny_bert/sharded")).unwrap();
    assert!(vb.contains("embeddings.word_embeddings.weight"));
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

#[test]
fn broken_shard_indexes_are_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sharded");
    copy_dir(&fixtures().join("tiny_bert/sharded"), &dir);
    let index_path = dir.join("model.safetensors.index.json");
    let index: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&index_path).unwrap()).unwrap();

    // A tensor mapped to a shard that does not hold it.
    let mut wrong = index.clone();
    let map = wrong["weight_map"].as_object_mut().unwrap();
    let (name, shard) = map
        .iter()
        .next()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
        .unwrap();
    let other = map
        .values()
        .map(|v| v.as_str().unwrap().to_string())
        .find(|s| *s != shard)
        .unwrap();
    map.insert(name.clone(), other.into());
    std::fs::write(&index_path, wrong.to_string()).unwrap();
    let msg = SafeTensorsFiles::open(&index_path)
        .err()
        .unwrap()
        .to_string();
    assert!(msg.contains(&name) && msg.contains("index.json"), "{msg}");

    // A missing shard file.
    std::fs::write(&index_path, index.to_string()).unwrap();
    std::fs::remove_file(dir.join(&shard)).unwrap();
    let msg = SafeTensorsFiles::open(&index_path)
        .err()
        .unwrap()
        .to_string();
    assert!(msg.contains(&shard), "{msg}");

    // A shard name that escapes the directory.
    let mut escape = index.clone();
    escape["weight_map"][&name] = "../x.safetensors".into();
    std::fs::write(&index_path, escape.to_string()).unwrap();
    let msg = SafeTensorsFiles::open(&index_path)
        .err()
        .unwrap()
        .to_string();
    assert!(msg.contains("not a plain file name"), "{msg}");
}

#[test]
fn truncated_and_garbage_files_are_errors_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(fixtures().join("dtypes.safetensors")).unwrap();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", Vec::new()),
        ("short", bytes[..5].to_vec()),
        ("header_cut", bytes[..40].to_vec()),
        ("data_cut", bytes[..bytes.len() - 3].to_vec()),
        ("padded", [bytes.as_slice(), &[0u8; 4]].concat()),
        (
            "huge_header",
            [&u64::MAX.to_le_bytes()[..], &bytes[8..]].concat(),
        ),
        ("not_json", [&8u64.to_le_bytes()[..], b"nonsense"].concat()),
    ];
    for (name, data) in cases {
        let path = tmp.path().join(format!("{name}.safetensors"));
        std::fs::write(&path, &data).unwrap();
        let err = SafeTensorsFiles::open(&path)
            .err()
            .unwrap_or_else(|| panic!("{name} opened"));
        let msg = err.to_string();
        assert!(
            matches!(err, WeightError::Malformed { .. }),
            "{name}: {msg}"
        );
        assert!(
            msg.contains(&format!("{name}.safetensors")),
            "{name}: {msg}"
        );
    }
    let err = SafeTensorsFiles::open(tmp.path().join("absent.safetensors"))
        .err()
        .unwrap();
    assert!(matches!(err, WeightError::Io { .. }));
}

#[test]
fn seeded_byte_mutations_never_panic() {
    let bytes = std::fs::read(fixtures().join("tiny_bert/single/model.safetensors")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("mutant.safetensors");
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize + 8;
    for _ in 0..300 {
        let mut m = bytes.clone();
        for _ in 0..1 + next() % 4 {
            // Mostly the header: that is where parsing happens.
            let at = (next() as usize) % if next() % 4 == 0 { m.len() } else { header_len };
            m[at] = next() as u8;
        }
        if next() % 5 == 0 {
            m.truncate((next() as usize) % m.len());
        }
        std::fs::write(&path, &m).unwrap();
        if let Ok(files) = SafeTensorsFiles::open(&path) {
            for name in files.names() {
                let _ = files.read_f32(&name);
                let _ = files.read_i64(&name);
            }
        }
    }
}

#[test]
fn real_minilm_tensors_match_the_python_reader() {
    let model = require_model!("sentence-transformers/all-MiniLM-L6-v2");
    let samples: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("minilm_samples.json")).unwrap(),
    )
    .unwrap();
    let vb = VarBuilder::from_dir(model.dir()).unwrap();
    assert_eq!(
        vb.source().names().len() as u64,
        samples["tensor_count"].as_u64().unwrap()
    );
    for (name, s) in samples["samples"].as_object().unwrap() {
        let shape: Vec<usize> = s["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap() as usize)
            .collect();
        let t = vb.get(&shape, name).unwrap();
        let data = t.data();
        let first: Vec<f64> = s["first"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        let last: Vec<f64> = s["last"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        for (g, w) in data.iter().zip(&first) {
            assert_eq!(*g, *w as f32, "{name}");
        }
        for (g, w) in data[data.len() - last.len()..].iter().zip(&last) {
            assert_eq!(*g, *w as f32, "{name}");
        }
        let sum: f64 = data.iter().map(|&v| v as f64).sum();
        let abs_sum: f64 = data.iter().map(|&v| (v as f64).abs()).sum();
        let tol = 1e-9 * s["abs_sum"].as_f64().unwrap().max(1.0);
        assert!(
            (sum - s["sum"].as_f64().unwrap()).abs() < tol,
            "{name}: {sum}"
        );
        assert!(
            (abs_sum - s["abs_sum"].as_f64().unwrap()).abs() < tol,
            "{name}: {abs_sum}"
        );
    }
}
