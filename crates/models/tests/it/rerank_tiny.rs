//! Cross-encoders of every head kind against `sentence_transformers.CrossEncoder` on tiny
//! random-weight checkpoints (tools/fixtures/encoders/tiny_models.py): default scores, raw logits
//! and rankings.

use std::path::PathBuf;

use aneforge::{arch::AneArch, Target};
use aneforge_models::encoders::{CrossEncoder, EncoderOptions, ScoreActivation};
use serde::Deserialize;

fn out_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tools/fixtures/encoders/out")
}

#[derive(Deserialize)]
struct RankEntry {
    corpus_id: usize,
    score: f64,
}

#[derive(Deserialize)]
struct Meta {
    num_labels: usize,
    max_length: usize,
    activation: String,
    pairs: Vec<(String, String)>,
    queries: Vec<String>,
    passages: Vec<String>,
    /// `[pairs]` for one label, `[pairs][labels]` otherwise.
    scores: serde_json::Value,
    logits: serde_json::Value,
    rank: Option<Vec<Vec<RankEntry>>>,
}

fn rows(v: &serde_json::Value, labels: usize) -> Vec<Vec<f64>> {
    let list = v.as_array().expect("a list of scores");
    list.iter()
        .map(|x| match x {
            serde_json::Value::Array(row) => row.iter().map(|y| y.as_f64().unwrap()).collect(),
            n => vec![n.as_f64().unwrap(); 1],
        })
        .inspect(|r: &Vec<f64>| assert_eq!(r.len(), labels))
        .collect()
}

fn assert_close(name: &str, what: &str, got: &[Vec<f32>], want: &[Vec<f64>], tol: f64) {
    assert_eq!(got.len(), want.len(), "{name} {what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        for (a, b) in g.iter().zip(w) {
            assert!(
                (f64::from(*a) - b).abs() <= tol,
                "{name} {what} pair {i}: {a} vs {b}"
            );
        }
    }
}

const CROSS_ENCODERS: [&str; 5] = [
    "ce_bert",
    "ce_distilbert",
    "ce_mpnet_identity",
    "ce_roberta",
    "ce_xlmr_3labels",
];

fn check(name: &str, options: EncoderOptions, tol: f64) {
    let text = std::fs::read_to_string(out_dir().join(format!("{name}.json"))).unwrap();
    let meta: Meta = serde_json::from_str(&text).unwrap();
    let ce = CrossEncoder::from_dir(out_dir().join(name), options).unwrap();
    assert_eq!(ce.num_labels(), meta.num_labels, "{name}");
    assert_eq!(ce.max_length(), meta.max_length, "{name}");
    let activation = match meta.activation.as_str() {
        "Sigmoid" => ScoreActivation::Sigmoid,
        "Identity" => ScoreActivation::Identity,
        other => panic!("fixture activation {other}"),
    };
    assert_eq!(ce.activation(), activation, "{name}");
    let pairs: Vec<(&str, &str)> = meta
        .pairs
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    let scores = ce.predict(&pairs).unwrap();
    assert_close(
        name,
        "scores",
        &scores,
        &rows(&meta.scores, meta.num_labels),
        tol,
    );
    let logits = ce.predict_with(&pairs, true, &mut |_| {}).unwrap();
    assert_close(
        name,
        "logits",
        &logits,
        &rows(&meta.logits, meta.num_labels),
        tol,
    );

    let passages: Vec<&str> = meta.passages.iter().map(String::as_str).collect();
    match &meta.rank {
        Some(ranks) => {
            for (query, want) in meta.queries.iter().zip(ranks) {
                let got = ce.rank(query, &passages, None, false, &mut |_| {}).unwrap();
                let got_order: Vec<usize> = got.iter().map(|r| r.corpus_id).collect();
                let want_order: Vec<usize> = want.iter().map(|r| r.corpus_id).collect();
                assert_eq!(got_order, want_order, "{name}: ranking for {query:?}");
                for (g, w) in got.iter().zip(want) {
                    assert!((f64::from(g.score) - w.score).abs() <= tol);
                }
                let top = ce
                    .rank(query, &passages, Some(3), false, &mut |_| {})
                    .unwrap();
                assert_eq!(top, got[..3]);
            }
        }
        None => {
            let err = ce
                .rank(&meta.queries[0], &passages, None, false, &mut |_| {})
                .unwrap_err();
            assert!(err.to_string().contains("single-label"), "{err}");
        }
    }
}

#[test]
fn every_head_matches_sentence_transformers_in_fp32() {
    for name in CROSS_ENCODERS {
        check(name, EncoderOptions::default(), 1e-3);
    }
}

#[test]
fn ane_target_fp16_scores_stay_close() {
    let options = EncoderOptions {
        target: Target::Ane(AneArch::default()),
        ..EncoderOptions::default()
    };
    for name in CROSS_ENCODERS {
        check(name, options.clone(), 2e-2);
    }
}

#[test]
fn a_sentence_model_is_not_a_cross_encoder() {
    let err = CrossEncoder::from_dir(out_dir().join("bert_mean"), EncoderOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("no sequence-classification head") && err.contains("classifier"),
        "{err}"
    );
}

#[test]
fn empty_input_gives_an_empty_result() {
    let ce = CrossEncoder::from_dir(out_dir().join("ce_bert"), EncoderOptions::default()).unwrap();
    assert!(ce.predict(&[]).unwrap().is_empty());
    assert!(ce
        .rank("query", &[], None, false, &mut |_| {})
        .unwrap()
        .is_empty());
}
