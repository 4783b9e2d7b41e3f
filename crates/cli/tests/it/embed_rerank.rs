//! `aneforge embed` and `aneforge rerank` as processes, on the tiny fixture models.

use crate::common;

use std::path::PathBuf;
use std::process::Output;

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tools/fixtures/encoders/out")
        .join(name)
        .display()
        .to_string()
}

fn aneforge(args: &[&str]) -> Output {
    common::run(args)
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

#[test]
fn embed_prints_json_vectors_and_writes_npy() {
    let model = fixture("bert_mean");
    let text = stdout(&aneforge(&["embed", "-m", &model, "the king", "a queen"]));
    let rows: Vec<Vec<f32>> = serde_json::from_str(&text).unwrap();
    assert_eq!((rows.len(), rows[0].len()), (2, 32));

    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("texts.txt");
    std::fs::write(&file, "the king\r\n\na queen\n").unwrap();
    let npy = tmp.path().join("out.npy");
    stdout(&aneforge(&[
        "embed",
        "-m",
        &model,
        "--file",
        file.to_str().unwrap(),
        "--format",
        "npy",
        "-o",
        npy.to_str().unwrap(),
        "--normalize",
    ]));
    let (shape, data) = aneforge_models::npy::read(&npy).unwrap();
    assert_eq!(shape, vec![3, 32]);
    let first: f32 = data[..32].iter().map(|x| x * x).sum();
    assert!((first - 1.0).abs() < 1e-5);
    let norm: f32 = rows[0].iter().map(|x| x * x).sum::<f32>().sqrt();
    for (a, b) in data[..32].iter().zip(&rows[0]) {
        assert!((a - b / norm).abs() < 1e-5, "{a} vs {}", b / norm);
    }
}

#[test]
fn embed_reports_bad_input() {
    let model = fixture("bert_mean");
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("bad.txt");
    std::fs::write(&bad, b"fine\nnot \xff utf-8\n").unwrap();
    let out = aneforge(&["embed", "-m", &model, "--file", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.txt:2") && err.contains("UTF-8"), "{err}");

    let empty = tmp.path().join("empty.txt");
    std::fs::write(&empty, "").unwrap();
    let text = stdout(&aneforge(&[
        "embed",
        "-m",
        &model,
        "--file",
        empty.to_str().unwrap(),
    ]));
    assert_eq!(text.trim(), "[]");

    let out = aneforge(&["embed", "-m", &model, "--format", "npy", "x"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--output"));
    let out = aneforge(&["embed", "-m", &model, "--pooling", "median", "x"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("median"));
}

#[test]
fn rerank_orders_passages_and_honours_top_k() {
    let model = fixture("ce_bert");
    let text = stdout(&aneforge(&[
        "rerank",
        "-m",
        &model,
        "--query",
        "love and death",
        "--top-k",
        "2",
        "--format",
        "json",
        "to be or not to be",
        "the king is dead",
        "a horse",
    ]));
    let entries: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
    assert_eq!(entries.len(), 2);
    let scores: Vec<f64> = entries
        .iter()
        .map(|e| e["score"].as_f64().unwrap())
        .collect();
    assert!(scores[0] >= scores[1]);
    assert!(
        scores.iter().all(|s| (0.0..=1.0).contains(s)),
        "sigmoid scores: {scores:?}"
    );
}
