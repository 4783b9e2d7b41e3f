//! Bad models and bad input: clear errors naming the file, field or tensor; empty input gives an
//! empty result; overlong text is truncated as sentence-transformers truncates it.

use std::path::{Path, PathBuf};

use aneforge_models::encoders::{EncodeOptions, EncoderOptions, Pooling, SentenceEncoder};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tools/fixtures/encoders/out")
        .join(name)
}

/// A copy of a fixture model directory (files only, one level of subdirectories).
fn copy_model(name: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    fn copy_dir(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let path = entry.unwrap().path();
            let dest = to.join(path.file_name().unwrap());
            if path.is_dir() {
                copy_dir(&path, &dest);
            } else {
                std::fs::copy(&path, &dest).unwrap();
            }
        }
    }
    copy_dir(&fixture(name), tmp.path());
    tmp
}

fn edit_config(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = dir.join("config.json");
    let mut value: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut value);
    std::fs::write(&path, serde_json::to_string_pretty(&value).unwrap()).unwrap();
}

fn load_err(dir: &Path) -> String {
    SentenceEncoder::from_dir(dir, EncoderOptions::default())
        .unwrap_err()
        .to_string()
}

#[test]
fn an_unknown_model_type_is_named_with_the_supported_ones() {
    let tmp = copy_model("bert_mean");
    edit_config(tmp.path(), |v| v["model_type"] = "gpt2".into());
    let err = load_err(tmp.path());
    for needle in [
        "gpt2",
        "bert",
        "roberta",
        "xlm-roberta",
        "camembert",
        "mpnet",
        "distilbert",
    ] {
        assert!(err.contains(needle), "{needle} missing from: {err}");
    }
    assert!(err.contains("config.json"), "{err}");
}

#[test]
fn weights_of_the_wrong_shape_name_the_tensor() {
    let tmp = copy_model("bert_mean");
    edit_config(tmp.path(), |v| v["intermediate_size"] = 80.into());
    let err = load_err(tmp.path());
    assert!(
        err.contains("encoder.layer.0.intermediate.dense.weight")
            && err.contains("[80, 32]")
            && err.contains("[64, 32]"),
        "{err}"
    );
}

#[test]
fn missing_weights_name_the_tensor() {
    let tmp = copy_model("bert_mean");
    edit_config(tmp.path(), |v| v["num_hidden_layers"] = 3.into());
    let err = load_err(tmp.path());
    assert!(err.contains("encoder.layer.2."), "{err}");
}

/// A layer count of 2^40 used to reserve memory for every layer before any tensor was checked,
/// aborting the process; it is now the missing-tensor error of the first absent layer.
#[test]
fn a_huge_layer_count_is_checked_against_the_tensors() {
    let tmp = copy_model("bert_mean");
    edit_config(tmp.path(), |v| v["num_hidden_layers"] = (1u64 << 40).into());
    let err = load_err(tmp.path());
    assert!(err.contains("encoder.layer.2."), "{err}");
}

#[test]
fn a_config_that_cannot_hold_its_heads_names_the_field() {
    let tmp = copy_model("bert_mean");
    edit_config(tmp.path(), |v| v["num_attention_heads"] = 5.into());
    let err = load_err(tmp.path());
    assert!(
        err.contains("num_attention_heads") && err.contains("5 heads"),
        "{err}"
    );
}

#[test]
fn an_unsupported_activation_names_the_field() {
    let tmp = copy_model("bert_mean");
    edit_config(tmp.path(), |v| v["hidden_act"] = "mish".into());
    let err = load_err(tmp.path());
    assert!(err.contains("hidden_act") && err.contains("mish"), "{err}");
}

#[test]
fn a_directory_without_weights_is_an_error() {
    let tmp = copy_model("bert_mean");
    std::fs::remove_file(tmp.path().join("model.safetensors")).unwrap();
    let err = load_err(tmp.path());
    assert!(err.contains("safetensors"), "{err}");
}

#[test]
fn a_missing_model_lists_the_places_tried_and_how_to_fetch() {
    let err = SentenceEncoder::load("no-such-org/no-such-model", EncoderOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("no-such-org/no-such-model") && err.contains("fetch-models.sh"),
        "{err}"
    );
}

#[test]
fn empty_input_gives_an_empty_result() {
    let encoder =
        SentenceEncoder::from_dir(fixture("bert_mean"), EncoderOptions::default()).unwrap();
    let out = encoder.encode(&[]).unwrap();
    assert_eq!((out.rows, out.dim), (0, 32));
    assert!(out.data.is_empty());
    assert_eq!(encoder.cached_programs(), 0);
}

#[test]
fn overlong_text_keeps_its_first_max_length_tokens() {
    let encoder =
        SentenceEncoder::from_dir(fixture("bert_mean"), EncoderOptions::default()).unwrap();
    let long = "word ".repeat(500);
    let longer = "word ".repeat(900);
    let ids = encoder.tokenizer().encode(&long).unwrap().ids;
    assert_eq!(ids.len(), encoder.max_length());
    let out = encoder.encode(&[&long, &longer]).unwrap();
    assert_eq!(out.row(0), out.row(1));
}

#[test]
fn bad_per_call_options_are_errors() {
    let encoder = SentenceEncoder::from_dir(fixture("e5_like"), EncoderOptions::default()).unwrap();
    let err = encoder
        .encode_with(
            &["x"],
            &EncodeOptions {
                prompt_name: Some("nope".into()),
                ..EncodeOptions::default()
            },
            &mut |_| {},
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("nope") && err.contains("query"), "{err}");
    let err = encoder
        .encode_with(
            &["x"],
            &EncodeOptions {
                pooling: Some(Vec::new()),
                ..EncodeOptions::default()
            },
            &mut |_| {},
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("pooling"), "{err}");
    let zero_batch = SentenceEncoder::from_dir(
        fixture("e5_like"),
        EncoderOptions {
            batch_size: 0,
            ..EncoderOptions::default()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(zero_batch.contains("batch size"), "{zero_batch}");
}

#[test]
fn pooling_can_be_overridden_per_call() {
    let encoder =
        SentenceEncoder::from_dir(fixture("bert_mean"), EncoderOptions::default()).unwrap();
    let out = encoder
        .encode_with(
            &["the king", "a much longer line of verse about the king"],
            &EncodeOptions {
                pooling: Some(vec![Pooling::Cls, Pooling::Max]),
                ..EncodeOptions::default()
            },
            &mut |_| {},
        )
        .unwrap();
    assert_eq!(out.dim, 64);
}

#[test]
fn a_pooling_dimension_that_does_not_match_the_model_is_named() {
    let tmp = copy_model("bert_mean");
    let path = tmp.path().join("1_Pooling/config.json");
    let mut value: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    value["word_embedding_dimension"] = 48.into();
    std::fs::write(&path, value.to_string()).unwrap();
    let err = load_err(tmp.path());
    assert!(
        err.contains("1_Pooling/config.json")
            && err.contains("word_embedding_dimension is 48")
            && err.contains("hidden size is 32"),
        "{err}"
    );
}
