//! Sentence encoders of every family against sentence-transformers, on tiny random-weight models
//! (tools/fixtures/encoders/tiny_models.py): fp32 CPU-target programs and fp16 ANE-target
//! programs, both run on the CPU engine.

use aneforge_models::encoders::cosine;
use std::path::PathBuf;

use aneforge::{arch::AneArch, Target};
use aneforge_models::encoders::{EncodeOptions, EncoderOptions, SentenceEncoder};
use aneforge_models::npy;
use serde::Deserialize;

fn out_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tools/fixtures/encoders/out")
}

#[derive(Deserialize)]
struct Meta {
    texts: Vec<String>,
    runs: Vec<String>,
    dim: usize,
    max_seq_length: usize,
    token_counts: Vec<usize>,
}

fn meta(name: &str) -> Meta {
    let text = std::fs::read_to_string(out_dir().join(format!("{name}.json"))).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn run_options(run: &str) -> EncodeOptions {
    match run {
        "default" => EncodeOptions::default(),
        "normalized" => EncodeOptions {
            normalize: true,
            ..EncodeOptions::default()
        },
        other => EncodeOptions {
            prompt_name: Some(
                other
                    .strip_prefix("prompt_")
                    .expect("run names are default, normalized or prompt_NAME")
                    .to_string(),
            ),
            ..EncodeOptions::default()
        },
    }
}

/// Every run of `name`'s fixture; returns the worst cosine similarity seen.
fn check(name: &str, options: EncoderOptions, bar: f64) -> f64 {
    let meta = meta(name);
    let (shape, expected) = npy::read(out_dir().join(format!("{name}.npy"))).unwrap();
    assert_eq!(shape, vec![meta.runs.len(), meta.texts.len(), meta.dim]);
    let encoder = SentenceEncoder::from_dir(out_dir().join(name), options).unwrap();
    assert_eq!(encoder.max_length(), meta.max_seq_length, "{name}");
    assert_eq!(encoder.dimension(), meta.dim, "{name}");
    for (text, &count) in meta.texts.iter().zip(&meta.token_counts) {
        let ids = encoder.tokenizer().encode(text).unwrap().ids;
        assert_eq!(ids.len(), count, "{name}: token count of {text:?}");
    }
    let texts: Vec<&str> = meta.texts.iter().map(String::as_str).collect();
    let mut worst = 1.0f64;
    for (r, run) in meta.runs.iter().enumerate() {
        let got = encoder
            .encode_with(&texts, &run_options(run), &mut |_| {})
            .unwrap();
        assert_eq!((got.rows, got.dim), (texts.len(), meta.dim));
        for (i, text) in texts.iter().enumerate() {
            let want = &expected[(r * texts.len() + i) * meta.dim..][..meta.dim];
            let cos = cosine(got.row(i).unwrap(), want);
            worst = worst.min(cos);
            assert!(
                cos >= bar,
                "{name} run {run} text {i} ({:?}): cosine {cos} < {bar}",
                &text[..text.len().min(40)]
            );
        }
    }
    worst
}

const SENTENCE_MODELS: [&str; 10] = [
    "bert_mean",
    "bge_like",
    "camembert_cls",
    "distilbert_cls_mean_max",
    "e5_like",
    "gte_like",
    "mean_sqrt_weighted",
    "mpnet_mean_norm",
    "roberta_max",
    "xlmr_mean_norm",
];

#[test]
fn every_family_matches_sentence_transformers_in_fp32() {
    for name in SENTENCE_MODELS {
        let worst = check(name, EncoderOptions::default(), 0.99999);
        eprintln!("{name}: fp32 worst cosine {worst:.8}");
    }
}

#[test]
fn embeddings_looked_up_in_the_program_match_too() {
    let options = EncoderOptions {
        embeddings_in_program: true,
        ..EncoderOptions::default()
    };
    for name in SENTENCE_MODELS {
        check(name, options.clone(), 0.99999);
    }
}

#[test]
fn ane_target_fp16_programs_stay_close() {
    let options = EncoderOptions {
        target: Target::Ane(AneArch::default()),
        ..EncoderOptions::default()
    };
    for name in SENTENCE_MODELS {
        let worst = check(name, options.clone(), 0.9995);
        eprintln!("{name}: fp16 worst cosine {worst:.6}");
    }
}

#[test]
fn batch_size_and_bucketing_do_not_change_results() {
    let meta = meta("bert_mean");
    let texts: Vec<&str> = meta.texts.iter().map(String::as_str).collect();
    let one = SentenceEncoder::from_dir(
        out_dir().join("bert_mean"),
        EncoderOptions {
            batch_size: 1,
            ..EncoderOptions::default()
        },
    )
    .unwrap()
    .encode(&texts)
    .unwrap();
    let many = SentenceEncoder::from_dir(
        out_dir().join("bert_mean"),
        EncoderOptions {
            batch_size: 5,
            ..EncoderOptions::default()
        },
    )
    .unwrap()
    .encode(&texts)
    .unwrap();
    for i in 0..texts.len() {
        let c = cosine(one.row(i).unwrap(), many.row(i).unwrap());
        assert!(c > 0.999999, "text {i}: {c}");
    }
}

#[test]
fn mpnet_relative_buckets_match_transformers() {
    #[derive(Deserialize)]
    struct Buckets {
        relative_positions: Vec<i64>,
        buckets: Vec<usize>,
    }
    let text = std::fs::read_to_string(out_dir().join("mpnet_buckets.json")).unwrap();
    let want: Buckets = serde_json::from_str(&text).unwrap();
    for (&rel, &bucket) in want.relative_positions.iter().zip(&want.buckets) {
        assert_eq!(
            aneforge_models::encoders::graph::relative_position_bucket(rel, 32, 128),
            bucket,
            "relative position {rel}"
        );
    }
}

/// Encoding the same texts again compiles nothing new, even when one call visits more bucket
/// programs than the default cache held before (eight): least-recently-used eviction of a cache
/// smaller than the buckets a call cycles through would recompile every batch of every call.
#[test]
fn a_repeated_call_reuses_every_bucket_program() {
    let meta = meta("bert_mean");
    // Texts of 1 to 24 words, so that at batch 2 the batches fall into many (batch, length,
    // packed tokens) buckets.
    let words: Vec<&str> = meta.texts.iter().flat_map(|t| t.split(' ')).collect();
    let texts: Vec<String> = (1..=24)
        .map(|n| {
            words
                .iter()
                .cycle()
                .take(n)
                .copied()
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    let encoder = SentenceEncoder::from_dir(
        out_dir().join("bert_mean"),
        EncoderOptions {
            batch_size: 2,
            ..EncoderOptions::default()
        },
    )
    .unwrap();
    let first = encoder.encode(&texts).unwrap();
    let compiled = encoder.compiled_programs();
    assert!(compiled > 8, "only {compiled} buckets visited");
    assert_eq!(encoder.cached_programs(), compiled);
    let again = encoder.encode(&texts).unwrap();
    assert_eq!(encoder.compiled_programs(), compiled);
    for i in 0..texts.len() {
        assert_eq!(first.row(i).unwrap(), again.row(i).unwrap(), "text {i}");
    }
}
