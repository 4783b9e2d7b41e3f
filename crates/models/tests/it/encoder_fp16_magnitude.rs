//! Tiny sentence encoders and cross-encoders of every family whose LayerNorm inputs reach realistic
//! magnitudes (an outlier channel peaking at ≥ 1e4 before layer 0's output LayerNorm, as BERT-family
//! checkpoints have; fixtures from tools/fixtures/encoders/tiny_models_large.py) against
//! sentence-transformers: the fp32 CPU target, and fp16 ANE-target programs for `h16` run on the
//! CPU engine.
//!
//! Criteria: fp32 embeddings and cross-encoder logits within 1e-4 of the largest expected
//! |value|, embeddings at cosine ≥ 0.99999 per text; fp16 embeddings at cosine ≥ 0.999 per text,
//! fp16 cross-encoder logits within 2% of the largest expected |logit|. Every model is checked
//! before a test fails, so a failure lists all models' numbers.

use aneforge_models::encoders::cosine;
use std::collections::BTreeMap;
use std::path::PathBuf;

use aneforge::{AneArch, Target};
use aneforge_models::encoders::{CrossEncoder, EncoderOptions, SentenceEncoder};
use aneforge_models::npy;
use serde::Deserialize;

const SENTENCE_MODELS: [&str; 5] = [
    "large_bert_mean",
    "large_distilbert_cls",
    "large_mpnet_mean_norm",
    "large_roberta_mean",
    "large_xlmr_mean_norm",
];
const CROSS_ENCODERS: [&str; 5] = [
    "large_ce_bert",
    "large_ce_distilbert",
    "large_ce_mpnet",
    "large_ce_roberta",
    "large_ce_xlmr_3labels",
];

/// The LayerNorm input magnitude the fixtures must reach for these tests to mean anything.
const MIN_PEAK: f64 = 1e4;
const FP32_RELATIVE: f64 = 1e-4;
const FP32_COSINE: f64 = 0.99999;
const FP16_COSINE: f64 = 0.999;
const FP16_RELATIVE: f64 = 2e-2;

fn out_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tools/fixtures/encoders/out")
}

#[derive(Deserialize)]
struct Peaks {
    layernorm_input_peaks: BTreeMap<String, f64>,
    hidden_peak: f64,
}

#[derive(Deserialize)]
struct SentenceMeta {
    texts: Vec<String>,
    dim: usize,
    token_counts: Vec<usize>,
}

#[derive(Deserialize)]
struct CrossMeta {
    num_labels: usize,
    pairs: Vec<(String, String)>,
    /// `[pairs]` for one label, `[pairs][labels]` otherwise.
    logits: serde_json::Value,
}

fn read<T: for<'a> Deserialize<'a>>(name: &str) -> T {
    let text = std::fs::read_to_string(out_dir().join(format!("{name}.json"))).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// max |got − want| / max |want|; infinite when `got` holds a non-finite value.
fn relative_error(got: &[f64], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(0f64, |m, w| m.max(w.abs()));
    let diff = got.iter().zip(want).fold(0f64, |m, (g, w)| {
        let d = (g - w).abs();
        if d.is_finite() {
            m.max(d)
        } else {
            f64::INFINITY
        }
    });
    diff / scale
}

fn ane(arch: &str) -> EncoderOptions {
    EncoderOptions {
        target: Target::Ane(AneArch::new(arch).unwrap()),
        ..EncoderOptions::default()
    }
}

#[test]
fn fixtures_reach_realistic_magnitudes() {
    for name in SENTENCE_MODELS.iter().chain(&CROSS_ENCODERS) {
        let p: Peaks = read(name);
        let peak = p
            .layernorm_input_peaks
            .values()
            .fold(0f64, |a, &b| a.max(b));
        assert_eq!(peak, p.hidden_peak, "{name}");
        assert!(
            p.hidden_peak >= MIN_PEAK,
            "{name}: LayerNorm input peak {} below {MIN_PEAK}: the fixture lost its point",
            p.hidden_peak
        );
        eprintln!("{name}: LayerNorm input peak {:.0}", p.hidden_peak);
    }
}

/// One sentence model; returns the failures.
fn sentence(name: &str, options: EncoderOptions, cosine_bar: f64, rel_bar: f64) -> Vec<String> {
    let meta: SentenceMeta = read(name);
    let (shape, expected) = npy::read(out_dir().join(format!("{name}.npy"))).unwrap();
    assert_eq!(shape, vec![meta.texts.len(), meta.dim]);
    let what = format!("{name} {:?}", options.target);
    let encoder = SentenceEncoder::from_dir(out_dir().join(name), options).unwrap();
    for (text, &count) in meta.texts.iter().zip(&meta.token_counts) {
        let ids = encoder.tokenizer().encode(text).unwrap().ids;
        assert_eq!(ids.len(), count, "{name}: token count of {text:?}");
    }
    let texts: Vec<&str> = meta.texts.iter().map(String::as_str).collect();
    let got = encoder.encode(&texts).unwrap();
    assert_eq!((got.rows, got.dim), (texts.len(), meta.dim));
    let (mut worst, mut worst_text) = (f64::INFINITY, 0);
    for i in 0..texts.len() {
        let c = cosine(got.row(i).unwrap(), &expected[i * meta.dim..][..meta.dim]);
        // a NaN cosine is the worst
        let c = if c.is_nan() { f64::NEG_INFINITY } else { c };
        if c < worst {
            (worst, worst_text) = (c, i);
        }
    }
    let wide = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<f64>>();
    let rel = relative_error(&wide(&got.data), &wide(&expected));
    eprintln!("{what}: worst cosine {worst:.7} (text {worst_text}), relative error {rel:.2e}");
    let mut failures = Vec::new();
    if worst < cosine_bar {
        failures.push(format!(
            "{what}: cosine {worst} < {cosine_bar} on text {worst_text}"
        ));
    }
    if rel.is_nan() || rel > rel_bar {
        failures.push(format!("{what}: relative error {rel:e} > {rel_bar:e}"));
    }
    failures
}

fn flatten(v: &serde_json::Value, labels: usize) -> Vec<f64> {
    let mut out = Vec::new();
    for x in v.as_array().expect("a list of logits") {
        match x {
            serde_json::Value::Array(row) => {
                assert_eq!(row.len(), labels);
                out.extend(row.iter().map(|y| y.as_f64().unwrap()));
            }
            n => out.push(n.as_f64().unwrap()),
        }
    }
    out
}

/// One cross-encoder; returns the failures.
fn cross(name: &str, options: EncoderOptions, rel_bar: f64) -> Vec<String> {
    let meta: CrossMeta = read(name);
    let what = format!("{name} {:?}", options.target);
    let ce = CrossEncoder::from_dir(out_dir().join(name), options).unwrap();
    assert_eq!(ce.num_labels(), meta.num_labels, "{name}");
    let pairs: Vec<(&str, &str)> = meta
        .pairs
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    let got: Vec<f64> = ce
        .predict_with(&pairs, true, &mut |_| {})
        .unwrap()
        .into_iter()
        .flatten()
        .map(f64::from)
        .collect();
    let want = flatten(&meta.logits, meta.num_labels);
    let rel = relative_error(&got, &want);
    eprintln!("{what}: logits relative error {rel:.2e}");
    if !rel.is_nan() && rel <= rel_bar {
        Vec::new()
    } else {
        vec![format!(
            "{what}: logits relative error {rel:e} > {rel_bar:e}"
        )]
    }
}

#[test]
fn cpu_target_fp32_matches_sentence_transformers() {
    let mut failures = Vec::new();
    for name in SENTENCE_MODELS {
        failures.extend(sentence(
            name,
            EncoderOptions::default(),
            FP32_COSINE,
            FP32_RELATIVE,
        ));
    }
    for name in CROSS_ENCODERS {
        failures.extend(cross(name, EncoderOptions::default(), FP32_RELATIVE));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn h16_fp16_programs_stay_close() {
    let mut failures = Vec::new();
    for name in SENTENCE_MODELS {
        failures.extend(sentence(name, ane("h16"), FP16_COSINE, f64::INFINITY));
    }
    for name in CROSS_ENCODERS {
        failures.extend(cross(name, ane("h16"), FP16_RELATIVE));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
