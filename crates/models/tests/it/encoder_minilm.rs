//! The real all-MiniLM-L6-v2 against sentence-transformers on a 54-text corpus of mixed length
//! (tools/fixtures/encoders/minilm.py). Skips with a message when the weights are absent.

use aneforge_models::encoders::cosine;
use std::path::{Path, PathBuf};

use aneforge::{arch::AneArch, Target};
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

/// int8 against both references: the engine must reproduce the int8 model itself (the same
/// weights simulated in PyTorch, fp32 compute), and stay at 0.999 of the fp32 model wherever the
/// int8 weights themselves allow it. Degenerate inputs ("", " ", all-[UNK] text) lose more to
/// per-channel int8 (0.9965 in PyTorch too).
#[test]
fn int8_compressed_ane_program_stays_close() {
    let model = require_model!(MODEL);
    let (meta, fp32) = fixture();
    let out = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tools/fixtures/encoders/out");
    let (_, int8_reference) = npy::read(out.join("minilm_int8.npy")).unwrap();
    let options = EncoderOptions {
        target: Target::Ane(AneArch::default()),
        compress: aneforge::Compress::Int8,
        ..EncoderOptions::default()
    };
    let encoder = SentenceEncoder::from_dir(model.dir(), options).unwrap();
    let dense = SentenceEncoder::from_dir(
        model.dir(),
        EncoderOptions {
            target: Target::Ane(AneArch::default()),
            ..EncoderOptions::default()
        },
    )
    .unwrap();
    let texts: Vec<&str> = meta.texts.iter().map(String::as_str).collect();
    let got = encoder.encode(&texts).unwrap();
    assert!(
        encoder.program_weight_bytes() * 10 < dense_bytes(&dense, &texts) * 6,
        "int8 programs must hold well under the fp16 weight bytes"
    );
    let (mut worst_engine, mut worst_fp32, mut limited) = (1.0f64, 1.0f64, 0);
    for (i, text) in texts.iter().enumerate() {
        let row = |v: &[f32]| v[i * meta.dim..(i + 1) * meta.dim].to_vec();
        let ours = got.row(i).unwrap();
        let engine = cosine(ours, &row(&int8_reference));
        let scheme = cosine(&row(&int8_reference), &row(&fp32));
        let total = cosine(ours, &row(&fp32));
        worst_engine = worst_engine.min(engine);
        assert!(
            engine >= 0.9995,
            "text {i} ({text:?}): {engine} against the int8 reference"
        );
        if scheme >= 0.999 {
            worst_fp32 = worst_fp32.min(total);
            assert!(total >= 0.999, "text {i} ({text:?}): {total} against fp32");
        } else {
            limited += 1;
        }
    }
    eprintln!(
        "all-MiniLM-L6-v2 int8 (ANE target): worst cosine {worst_engine:.6} vs the int8 model, \
         {worst_fp32:.6} vs fp32 ({limited} degenerate texts below 0.999 in the int8 model itself)"
    );
    assert!(
        limited <= 8,
        "{limited} texts lose more than 0.001 to int8 itself"
    );
}

fn dense_bytes(encoder: &SentenceEncoder, texts: &[&str]) -> usize {
    encoder.encode(texts).unwrap();
    encoder.program_weight_bytes()
}

/// An int4 request is honoured per weight behind the lowering's accuracy gate; weights the gate
/// declines stay fp16, so the program never grows and the meaning is kept.
#[test]
fn int4_request_is_gated_per_weight() {
    let model = require_model!(MODEL);
    let ane = |compress| EncoderOptions {
        target: Target::Ane(AneArch::default()),
        compress,
        ..EncoderOptions::default()
    };
    let texts = ["A man is eating food.", "A man is riding a horse."];
    let int4 = SentenceEncoder::from_dir(model.dir(), ane(aneforge::Compress::Int4)).unwrap();
    let got = int4.encode(&texts).unwrap();
    let dense = SentenceEncoder::from_dir(model.dir(), ane(aneforge::Compress::None)).unwrap();
    let want = dense.encode(&texts).unwrap();
    let (bytes4, bytes16) = (int4.program_weight_bytes(), dense.program_weight_bytes());
    let worst = (0..texts.len())
        .map(|i| cosine(got.row(i).unwrap(), want.row(i).unwrap()))
        .fold(1.0f64, f64::min);
    eprintln!("int4 request: {bytes4} weight bytes vs {bytes16} fp16; cosine {worst:.6} vs fp16");
    assert!(bytes4 <= bytes16 && worst >= 0.95);
}
