//! The real all-MiniLM-L6-v2 against sentence-transformers on a 54-text corpus of mixed length
//! (tools/fixtures/encoders/minilm.py). Skips with a message when the weights are absent.

use std::path::{Path, PathBuf};

use aneforge::{lower::AneArch, Target};
use aneforge_models::encoders::{EncoderOptions, SentenceEncoder};
use aneforge_models::{npy, require_model};
use serde::Deserialize;

const MODEL: &str = "sentence-transformers/all-MiniLM-L6-v2";

#[derive(Deserialize)]
struct Meta {
    texts: Vec<String>,
    token_counts: Vec<usize>,
    dim: usize,
}

fn fixture() -> (Meta, Vec<f32>) {
    let out = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tools/fixtures/encoders/out");
    let meta: Meta =
        serde_json::from_str(&std::fs::read_to_string(out.join("minilm.json")).unwrap()).unwrap();
    let (shape, data) = npy::read(out.join("minilm.npy")).unwrap();
    assert_eq!(shape, vec![meta.texts.len(), meta.dim]);
    (meta, data)
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum();
    let na: f64 = a.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb)
}

/// The worst cosine similarity over the corpus; fails below `bar`.
fn check(dir: &Path, options: EncoderOptions, bar: f64) -> f64 {
    let (meta, expected) = fixture();
    let encoder = SentenceEncoder::from_dir(dir, options).unwrap();
    assert_eq!(encoder.max_length(), 256);
    assert!(encoder.normalizes());
    for (text, &count) in meta.texts.iter().zip(&meta.token_counts) {
        assert_eq!(encoder.tokenizer().encode(text).unwrap().ids.len(), count);
    }
    let texts: Vec<&str> = meta.texts.iter().map(String::as_str).collect();
    let got = encoder.encode(&texts).unwrap();
    let mut worst = 1.0f64;
    for (i, text) in texts.iter().enumerate() {
        let c = cosine(
            got.row(i).unwrap(),
            &expected[i * meta.dim..(i + 1) * meta.dim],
        );
        worst = worst.min(c);
        assert!(
            c >= bar,
            "text {i} ({:?}): cosine {c} < {bar}",
            &text[..text.len().min(40)]
        );
    }
    worst
}

#[test]
fn cpu_target_fp32_matches_sentence_transformers() {
    let model = require_model!(MODEL);
    let worst = check(model.dir(), EncoderOptions::default(), 0.99999);
    eprintln!("all-MiniLM-L6-v2 fp32: worst cosine {worst:.8}");
}

#[test]
fn ane_target_fp16_on_the_cpu_engine_stays_close() {
    let options = EncoderOptions {
        target: Target::Ane(AneArch::default()),
        ..EncoderOptions::default()
    };
    let model = require_model!(MODEL);
    let worst = check(model.dir(), options, 0.9995);
    eprintln!("all-MiniLM-L6-v2 fp16 (ANE target): worst cosine {worst:.6}");
}
