//! The real all-MiniLM-L6-v2 and all-mpnet-base-v2 against sentence-transformers on a fixed
//! 200-text corpus (edge cases, Shakespeare, 60 long passages; at least 30 texts reach 256 tokens;
//! tools/fixtures/encoders/fp16_corpus.py): fp32 CPU-target programs, and fp16 ANE-target programs
//! run on the CPU engine, for `h16` and `m1` with MiniLM and for `h16` alone with MPNet. MiniLM embeds
//! the whole corpus; MPNet embeds every text under 256 tokens and every fourth longer one (its 49
//! long passages hold 72% of the corpus's tokens, and a full pass takes minutes in the test build).
//! Skips a model (with a message) when its weights are absent.
//!
//! Every text must clear the bar; a failure names the worst text and how many fall short.

use aneforge_models::encoders::cosine;
use std::path::PathBuf;
use std::time::Instant;

use aneforge::engine::MatmulPrecision;
use aneforge::{arch::AneArch, Target};
use aneforge_models::encoders::{EncoderOptions, SentenceEncoder};
use aneforge_models::{npy, require_model};
use serde::Deserialize;

#[derive(Deserialize)]
struct ModelMeta {
    id: String,
    npy: String,
    dim: usize,
    max_seq_length: usize,
    normalize: bool,
    token_counts: Vec<usize>,
}

#[derive(Deserialize)]
struct Meta {
    texts: Vec<String>,
    untruncated_token_counts_minilm: Vec<usize>,
    models: std::collections::BTreeMap<String, ModelMeta>,
}

fn out_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tools/fixtures/encoders/out")
}

fn meta() -> Meta {
    let text = std::fs::read_to_string(out_dir().join("fp16_corpus.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The corpus the fixture promises: 200 distinct texts, at least 30 of 256+ tokens.
#[test]
fn corpus_is_the_promised_one() {
    let meta = meta();
    assert_eq!(meta.texts.len(), 200);
    let distinct: std::collections::BTreeSet<&String> = meta.texts.iter().collect();
    assert_eq!(distinct.len(), 200);
    let long = meta
        .untruncated_token_counts_minilm
        .iter()
        .filter(|&&n| n >= 256)
        .count();
    assert!(long >= 30, "{long} texts of 256+ tokens");
    assert_eq!(
        meta.models.keys().collect::<Vec<_>>(),
        ["minilm", "mpnet"],
        "fixture models"
    );
}

/// Embeds the corpus with `key`'s model compiled for `target` (every text under 256 tokens, and
/// every `long_stride`-th longer one); fails unless every text's cosine similarity to
/// sentence-transformers is at least `bar`.
fn check(key: &str, target: Target, bar: f64, long_stride: usize) {
    check_with(key, target, MatmulPrecision::F32, bar, long_stride)
}

/// [`check`] with the CPU engine's products at `matmul`.
fn check_with(key: &str, target: Target, matmul: MatmulPrecision, bar: f64, long_stride: usize) {
    let meta = meta();
    let m = &meta.models[key];
    let model = require_model!(&m.id);
    let (shape, expected) = npy::read(out_dir().join(&m.npy)).unwrap();
    assert_eq!(shape, vec![meta.texts.len(), m.dim]);
    let options = EncoderOptions {
        target: target.clone(),
        matmul,
        ..EncoderOptions::default()
    };
    let encoder = SentenceEncoder::from_dir(model.dir(), options).unwrap();
    assert_eq!(encoder.max_length(), m.max_seq_length, "{key}");
    assert_eq!(encoder.dimension(), m.dim, "{key}");
    assert_eq!(encoder.normalizes(), m.normalize, "{key}");
    for (text, &count) in meta.texts.iter().zip(&m.token_counts) {
        let ids = encoder.tokenizer().encode(text).unwrap().ids;
        assert_eq!(ids.len(), count, "{key}: token count of {text:?}");
    }
    let mut long_seen = 0;
    let chosen: Vec<usize> = (0..meta.texts.len())
        .filter(|&i| {
            if m.token_counts[i] < 256 {
                return true;
            }
            long_seen += 1;
            (long_seen - 1) % long_stride == 0
        })
        .collect();
    let texts: Vec<&str> = chosen.iter().map(|&i| meta.texts[i].as_str()).collect();
    let start = Instant::now();
    let got = encoder.encode(&texts).unwrap();
    let seconds = start.elapsed().as_secs_f64();
    assert_eq!((got.rows, got.dim), (texts.len(), m.dim));
    let cosines: Vec<f64> = chosen
        .iter()
        .enumerate()
        .map(|(row, &i)| cosine(got.row(row).unwrap(), &expected[i * m.dim..][..m.dim]))
        .collect();
    // a NaN cosine ranks as the worst and fails every bar
    let rank = |c: f64| if c.is_nan() { f64::NEG_INFINITY } else { c };
    let worst_row = (0..cosines.len())
        .min_by(|&a, &b| rank(cosines[a]).total_cmp(&rank(cosines[b])))
        .unwrap();
    let worst = chosen[worst_row];
    let below = cosines.iter().filter(|c| c.is_nan() || **c < bar).count();
    let text = texts[worst_row];
    eprintln!(
        "{key} {target:?} {matmul:?}: worst cosine {:.7} (text {worst}, {} tokens), {below}/{} below {bar}; \
         {seconds:.1} s for {} texts",
        cosines[worst_row],
        m.token_counts[worst],
        texts.len(),
        texts.len()
    );
    assert_eq!(
        below,
        0,
        "{key} {target:?}: {below} texts below cosine {bar}; worst {} on text {worst} ({} tokens): {:?}",
        cosines[worst_row],
        m.token_counts[worst],
        &text[..text.char_indices().nth(60).map_or(text.len(), |(i, _)| i)]
    );
}

fn ane(arch: &str) -> Target {
    Target::Ane(AneArch::new(arch).unwrap())
}

#[test]
fn minilm_cpu_target_fp32_matches_sentence_transformers() {
    check("minilm", Target::Cpu, 0.99999, 1);
}

/// bf16 products (both operands rounded, f32 sums; AMX tiles where the CPU has them).
#[test]
fn minilm_bf16_products_stay_close() {
    check_with("minilm", Target::Cpu, MatmulPrecision::Bf16, 0.9999, 1);
}

#[test]
fn minilm_h16_fp16_stays_close() {
    check("minilm", ane("h16"), 0.9995, 1);
}

#[test]
fn minilm_m1_fp16_stays_close() {
    check("minilm", ane("m1"), 0.9995, 1);
}

#[test]
fn mpnet_cpu_target_fp32_matches_sentence_transformers() {
    check("mpnet", Target::Cpu, 0.99999, 4);
}

#[test]
fn mpnet_h16_fp16_stays_close() {
    check("mpnet", ane("h16"), 0.9995, 4);
}
