//! `aneforge check-fp16` on the tiny Llama fixture: a faithful fp16 program reports every layer
//! and exits 0; a copy with one projection scaled past fp16's range is reported at the op that
//! overflows and exits 1, and `generate` on that model's fp16 program fails instead of printing
//! text sampled from inf/NaN logits.

use crate::common;

use std::path::PathBuf;
use std::process::Output;

fn tiny_llama() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tools/fixtures/llm/out/tiny/llama")
}

fn aneforge(args: &[&str]) -> Output {
    common::run(args)
}

#[test]
fn a_faithful_program_reports_every_layer() {
    let model = tiny_llama();
    let out = aneforge(&[
        "check-fp16",
        "-m",
        model.to_str().unwrap(),
        "-p",
        "hello world",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for probe in ["l0_attn", "l0_mlp", "l0_out", "l1_out"] {
        assert!(text.contains(probe), "{text}");
    }
    assert!(text.contains("no op leaves fp16's range"), "{text}");
    assert!(text.contains("top-1 agrees"), "{text}");

    let out = aneforge(&[
        "check-fp16",
        "-m",
        model.to_str().unwrap(),
        "--format",
        "json",
        "--target",
        "m1",
    ]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["clean"], true, "{v}");
    assert_eq!(v[0]["probes"].as_array().unwrap().len(), 6, "{v}");
}

#[test]
fn an_overflowing_program_is_named_and_refused() {
    let dir = tempfile::tempdir().unwrap();
    aneforge_models::testing::copy_with_scaled_tensor(
        &tiny_llama(),
        dir.path(),
        "model.layers.0.mlp.up_proj.weight",
        1e7,
    )
    .unwrap();
    let model = dir.path().to_str().unwrap();
    let out = aneforge(&["check-fp16", "-m", model]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("first op leaving fp16's range"), "{text}");
    assert!(
        err.contains("the fp16 program overflows: op `") && err.contains("(linear)"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");

    let out = aneforge(&[
        "generate", "-m", model, "--target", "h16", "--temp", "0", "-n", "4", "hello",
    ]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("non-finite logits") && err.contains("check-fp16"),
        "{err}"
    );
}
