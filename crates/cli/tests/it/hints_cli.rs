//! Errors that say what to do: a model of the wrong kind names the command that takes it, a bare
//! model name is matched against the Hugging Face cache, `run` converts float64 `.npy` inputs
//! with a warning, and `mil check` catches declared types that `run` would reject.

use crate::common;

use std::path::Path;
use std::process::Output;

fn aneforge(args: &[&str], env: &[(&str, &Path)]) -> Output {
    common::run_with(args, env)
}

fn failure(args: &[&str], env: &[(&str, &Path)]) -> String {
    let out = aneforge(args, env);
    assert_eq!(out.status.code(), Some(1), "{args:?}");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!err.contains("panicked"), "{err}");
    err
}

#[test]
fn a_model_of_the_wrong_kind_names_the_right_command() {
    let llama = common::repo("tools/fixtures/llm/out/tiny/llama");
    let err = failure(&["embed", "-m", &llama, "hello"], &[]);
    assert!(
        err.contains("is a decoder LLM") && err.contains(&format!("aneforge generate -m {llama}")),
        "{err}"
    );
    let err = failure(&["rerank", "-m", &llama, "--query", "q", "a"], &[]);
    assert!(err.contains("is a decoder LLM"), "{err}");

    let encoder = common::repo("tools/fixtures/out/st_tiny");
    let err = failure(&["generate", "-m", &encoder, "hello"], &[]);
    assert!(
        err.contains("is a text encoder") && err.contains("aneforge embed -m"),
        "{err}"
    );

    let err = failure(&["run", &llama], &[]);
    assert!(
        err.contains("is a model, not a program directory") && err.contains("aneforge generate"),
        "{err}"
    );
    let err = failure(&["run", &encoder], &[]);
    assert!(err.contains("aneforge embed"), "{err}");
    let hub = tempfile::tempdir().unwrap();
    let err = failure(
        &["run", "HuggingFaceTB/SmolLM2-135M-Instruct"],
        &[("HF_HUB_CACHE", hub.path())],
    );
    assert!(
        err.contains("no such program directory")
            && err.contains("aneforge generate -m HuggingFaceTB/SmolLM2-135M-Instruct"),
        "{err}"
    );
}

#[test]
fn a_bare_name_is_matched_against_the_hub_cache() {
    let hub = tempfile::tempdir().unwrap();
    for id in ["acme--tiny-encoder", "other--unrelated"] {
        let repo_dir = hub.path().join(format!("models--{id}"));
        std::fs::create_dir_all(repo_dir.join("snapshots/abc")).unwrap();
        std::fs::create_dir_all(repo_dir.join("refs")).unwrap();
        std::fs::write(repo_dir.join("refs/main"), "abc").unwrap();
    }
    let env: [(&str, &Path); 1] = [("HF_HUB_CACHE", hub.path())];
    let err = failure(&["embed", "-m", "tiny-encoder", "x"], &env);
    assert!(
        err.contains("did you mean acme/tiny-encoder? (-m acme/tiny-encoder)"),
        "{err}"
    );
    let err = failure(&["generate", "-m", "Tiny-Encoder", "x"], &env);
    assert!(err.contains("did you mean acme/tiny-encoder"), "{err}");
    let err = failure(&["embed", "-m", "nothing-like-it", "x"], &env);
    assert!(
        !err.contains("did you mean") && err.contains("nothing-like-it"),
        "{err}"
    );
}

const ADD_PROGRAM: &str = r#"program(1.3)
{
    func main<ios18>(tensor<fp32, [2, 3]> x, tensor<fp32, [2, 3]> y) {
        tensor<fp32, [2, 3]> z = add(x = x, y = y)[name = string("z")];
    } -> (z);
}
"#;

/// A float64 `.npy` file, as NumPy writes `np.array(..., dtype=np.float64)`.
fn write_f64_npy(path: &Path, shape: &[usize], data: &[f64]) {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let mut header = format!(
        "{{'descr': '<f8', 'fortran_order': False, 'shape': ({}), }}",
        dims.join(", ") + if shape.len() == 1 { "," } else { "" }
    );
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend((header.len() as u16).to_le_bytes());
    bytes.extend(header.as_bytes());
    for v in data {
        bytes.extend(v.to_le_bytes());
    }
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn run_converts_float64_inputs_with_a_warning() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("add");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("model.mil"), ADD_PROGRAM).unwrap();
    let (x, y) = (tmp.path().join("x.npy"), tmp.path().join("y.npy"));
    write_f64_npy(&x, &[2, 3], &[0.5, 1.0, 1.5, 2.0, 2.5, 3.0]);
    aneforge_models::npy::write(&y, &[2, 3], &[1.0; 6]).unwrap();
    let out_dir = tmp.path().join("out");
    let out = aneforge(
        &[
            "run",
            dir.to_str().unwrap(),
            "-i",
            &format!("x={}", x.display()),
            "-i",
            &format!("y={}", y.display()),
            "-o",
            out_dir.to_str().unwrap(),
        ],
        &[],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("warning:") && err.contains("float64") && err.contains("float32"),
        "{err}"
    );
    let (shape, z) = aneforge_models::npy::read(out_dir.join("z.npy")).unwrap();
    assert_eq!(shape, vec![2, 3]);
    assert_eq!(z, vec![1.5, 2.0, 2.5, 3.0, 3.5, 4.0]);
}

#[test]
fn mil_check_rejects_declared_shapes_and_types_the_ops_do_not_produce() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("add");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("model.mil"), ADD_PROGRAM).unwrap();
    let ok = aneforge(&["mil", "check", dir.to_str().unwrap()], &[]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let (x, y) = (tmp.path().join("x.npy"), tmp.path().join("y.npy"));
    for p in [&x, &y] {
        aneforge_models::npy::write(p, &[2, 3], &[1.0; 6]).unwrap();
    }
    let xi = format!("x={}", x.display());
    let yi = format!("y={}", y.display());

    for (bad, needle) in [
        (
            "tensor<fp32, [2, 3]> z = add",
            "tensor<fp32, [3, 2]> z = add",
        ),
        (
            "tensor<fp32, [2, 3]> z = add",
            "tensor<fp16, [2, 3]> z = add",
        ),
    ] {
        std::fs::write(dir.join("model.mil"), ADD_PROGRAM.replace(bad, needle)).unwrap();
        let check = failure(&["mil", "check", dir.to_str().unwrap()], &[]);
        assert!(check.contains("output `z` is declared"), "{check}");
        // `run --ports` reads the signature alone; running the program plans it and rejects it
        let run = failure(&["run", dir.to_str().unwrap(), "-i", &xi, "-i", &yi], &[]);
        assert!(run.contains("output `z` is declared"), "{run}");
    }
}
