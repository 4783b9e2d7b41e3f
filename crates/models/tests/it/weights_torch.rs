//! The `torch.save` state_dict reader (`tools/fixtures/vision/torch_checkpoints.py`): zip and
//! legacy formats, float32/float16/int64 storages, views and strides; refusals and truncation.

use std::path::{Path, PathBuf};

use aneforge_models::weights::{TensorSource, TorchCheckpoint, WeightError};
use serde_json::Value;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/fixtures/vision/out/torch")
}

#[test]
fn both_formats_read_every_tensor_as_torch_wrote_it() {
    let text = std::fs::read_to_string(dir().join("expected.json")).unwrap();
    let expected: Value = serde_json::from_str(&text).unwrap();
    let expected = expected.as_object().unwrap();
    for file in ["zip.pt", "legacy.pt"] {
        let ckpt = TorchCheckpoint::open(dir().join(file)).unwrap();
        let mut names = ckpt.names();
        names.sort();
        let mut want_names: Vec<String> = expected.keys().cloned().collect();
        want_names.sort();
        assert_eq!(names, want_names, "{file}");
        for (name, e) in expected {
            let shape: Vec<usize> = e["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap() as usize)
                .collect();
            let values: Vec<f64> = e["values"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap())
                .collect();
            assert_eq!(ckpt.meta(name).unwrap().shape, shape, "{file} {name}");
            if e["dtype"] == "int64" {
                let got = ckpt.read_i64(name).unwrap();
                let want: Vec<i64> = values.iter().map(|&v| v as i64).collect();
                assert_eq!(got.data(), want.as_slice(), "{file} {name}");
                assert!(matches!(
                    ckpt.read_f32(name),
                    Err(WeightError::WrongDtype { .. })
                ));
            } else {
                let got = ckpt.read_f32(name).unwrap();
                assert_eq!(got.shape(), shape.as_slice());
                let want: Vec<f32> = values.iter().map(|&v| v as f32).collect();
                assert_eq!(got.data(), want.as_slice(), "{file} {name}");
            }
        }
    }
}

fn open_err(path: &Path) -> String {
    match TorchCheckpoint::open(path) {
        Ok(_) => panic!("{} opened", path.display()),
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.contains(path.to_str().unwrap()), "{msg}");
            msg
        }
    }
}

#[test]
fn pickled_modules_and_other_dtypes_are_refused_by_name() {
    let msg = open_err(&dir().join("module.pt"));
    assert!(
        msg.contains("torch.nn.modules.linear.Linear") && msg.contains("state_dict"),
        "{msg}"
    );
    let msg = open_err(&dir().join("double.pt"));
    assert!(msg.contains("DoubleStorage"), "{msg}");
}

#[test]
fn truncated_and_corrupt_checkpoints_are_errors() {
    let tmp = tempfile::tempdir().unwrap();
    for file in ["zip.pt", "legacy.pt"] {
        let bytes = std::fs::read(dir().join(file)).unwrap();
        for cut in [0, 10, bytes.len() / 3, bytes.len() / 2, bytes.len() - 5] {
            let path = tmp.path().join(format!("cut{cut}-{file}"));
            std::fs::write(&path, &bytes[..cut]).unwrap();
            open_err(&path);
        }
    }
    let path = tmp.path().join("text.pt");
    std::fs::write(&path, "not a checkpoint").unwrap();
    let msg = open_err(&path);
    assert!(msg.contains("PyTorch checkpoint"), "{msg}");
}
