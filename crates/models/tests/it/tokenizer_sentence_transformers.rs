//! The tokenizer wrapper against sentence-transformers / transformers on the real
//! all-MiniLM-L6-v2 (fixture: tools/fixtures/tokenizer_minilm.py).

use aneforge_models::{require_model, Padding, TextTokenizer};
use serde_json::Value;

const REPO: &str = "sentence-transformers/all-MiniLM-L6-v2";

fn fixture() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tools/fixtures/out/tokenizer_minilm.json"
    );
    let text = std::fs::read_to_string(path).expect("fixture present in the repo");
    serde_json::from_str(&text).expect("fixture is JSON")
}

fn u32s(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_u64().expect("integer") as u32)
        .collect()
}

fn flat(v: &Value) -> Vec<u32> {
    v.as_array().expect("rows").iter().flat_map(u32s).collect()
}

fn strs(v: &Value) -> Vec<String> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|s| s.as_str().expect("string").to_string())
        .collect()
}

#[test]
fn max_seq_length_comes_from_sentence_bert_config() {
    let model = require_model!(REPO);
    let tok = TextTokenizer::for_sentence_transformer(model.dir()).unwrap();
    assert_eq!(
        tok.max_length(),
        Some(fixture()["max_seq_length"].as_u64().unwrap() as usize)
    );
}

#[test]
fn single_texts_match_sentence_transformers() {
    let model = require_model!(REPO);
    let tok = TextTokenizer::for_sentence_transformer(model.dir()).unwrap();
    let fx = fixture();
    let texts = strs(&fx["texts"]);
    let singles = fx["singles"].as_array().unwrap();
    assert!(texts.len() >= 50);
    let mut truncated = 0;
    for (text, expected) in texts.iter().zip(singles) {
        let got = tok.encode(text).unwrap();
        assert_eq!(got.ids, u32s(&expected["ids"]), "ids of {text:?}");
        assert_eq!(
            got.type_ids,
            u32s(&expected["type_ids"]),
            "type ids of {text:?}"
        );
        assert!(got.attention_mask.iter().all(|&m| m == 1));
        truncated += usize::from(Some(got.ids.len()) == tok.max_length());
    }
    assert!(truncated >= 2, "the corpus must exercise truncation");
}

#[test]
fn padded_batch_matches_sentence_transformers() {
    let model = require_model!(REPO);
    let tok = TextTokenizer::for_sentence_transformer(model.dir()).unwrap();
    let fx = fixture();
    let b = &fx["batch"];
    let texts = strs(&b["texts"]);
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let got = tok.encode_batch(&refs, Padding::Longest).unwrap();
    assert_eq!(got.batch, texts.len());
    assert_eq!(got.ids, flat(&b["ids"]));
    assert_eq!(got.attention_mask, flat(&b["attention_mask"]));
    assert_eq!(got.type_ids, flat(&b["token_type_ids"]));
}

#[test]
fn pairs_match_transformers_longest_first() {
    let model = require_model!(REPO);
    let tok = TextTokenizer::for_sentence_transformer(model.dir()).unwrap();
    let fx = fixture();
    let pairs: Vec<(String, String)> = fx["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let p = strs(p);
            (p[0].clone(), p[1].clone())
        })
        .collect();
    let refs: Vec<(&str, &str)> = pairs
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    let rows = fx["pair_rows"].as_array().unwrap();
    for ((a, b), expected) in refs.iter().zip(rows) {
        let got = tok.encode_pair(a, b).unwrap();
        assert_eq!(got.ids, u32s(&expected["ids"]), "pair ({a:.30?}, {b:.30?})");
        assert_eq!(got.type_ids, u32s(&expected["type_ids"]));
    }
    let batch = tok.encode_pair_batch(&refs, Padding::Longest).unwrap();
    let seq_len = fx["pair_batch"]["seq_len"].as_u64().unwrap() as usize;
    let pad_id = fx["pair_batch"]["pad_id"].as_u64().unwrap() as u32;
    assert_eq!(batch.seq_len, seq_len);
    for (row, expected) in rows.iter().enumerate() {
        let ids = u32s(&expected["ids"]);
        let n = ids.len();
        assert_eq!(&batch.row_ids(row)[..n], ids.as_slice());
        assert!(batch.row_ids(row)[n..].iter().all(|&t| t == pad_id));
        assert_eq!(batch.row_mask(row).iter().filter(|&&m| m == 1).count(), n);
        assert_eq!(
            &batch.row_type_ids(row)[..n],
            u32s(&expected["type_ids"]).as_slice()
        );
    }
}

#[test]
fn fixed_padding_matches_transformers_max_length_padding() {
    let model = require_model!(REPO);
    let tok = TextTokenizer::for_sentence_transformer(model.dir()).unwrap();
    let fx = fixture();
    let texts = strs(&fx["texts"]);
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let got = tok.encode_batch(&refs, Padding::Fixed(16)).unwrap();
    assert_eq!((got.batch, got.seq_len), (texts.len(), 16));
    assert_eq!(got.ids, flat(&fx["fixed16"]["ids"]));
    assert_eq!(got.attention_mask, flat(&fx["fixed16"]["attention_mask"]));
}

/// Legacy sentence-transformers layout with do_lower_case = true over a cased tokenizer
/// (fixture: tools/fixtures/sentence_transformer_tiny.py).
#[test]
fn do_lower_case_and_max_seq_length_match_sentence_transformers() {
    let out = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/fixtures/out");
    let fx: Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{out}/st_tiny_ids.json")).unwrap())
            .unwrap();
    let tok = TextTokenizer::for_sentence_transformer(format!("{out}/st_tiny")).unwrap();
    assert_eq!(
        tok.max_length(),
        Some(fx["max_seq_length"].as_u64().unwrap() as usize)
    );
    let texts = strs(&fx["texts"]);
    let mut truncated = 0;
    for (text, want) in texts.iter().zip(fx["ids"].as_array().unwrap()) {
        let got = tok.encode(text).unwrap();
        assert_eq!(got.ids, u32s(want), "{text:?}");
        truncated += usize::from(Some(got.ids.len()) == tok.max_length());
    }
    assert!(truncated > 5);
    // The same tokenizer without do_lower_case tells cases apart: the lowercasing is what matched.
    let cased = TextTokenizer::from_file(format!("{out}/st_tiny/tokenizer.json")).unwrap();
    let i = texts.iter().position(|t| t == "The King").unwrap();
    assert_ne!(cased.encode("The King").unwrap().ids, u32s(&fx["ids"][i]));
}

/// The Whisper packages' tokenizer.json through our wrapper against the Python binding
/// (fixture: tools/fixtures/tokenizer_whisper.py).
#[test]
fn whisper_tokenizer_json_matches_python_tokenizers() {
    let out = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/fixtures/out");
    let fx: Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{out}/tokenizer_whisper.json")).unwrap(),
    )
    .unwrap();
    let texts = strs(&fx["texts"]);
    for (repo, want) in fx["models"].as_object().unwrap() {
        let model = require_model!(repo);
        let tok =
            TextTokenizer::from_file(model.require_file("ctranslate2/tokenizer.json").unwrap())
                .unwrap();
        assert_eq!(
            tok.vocab_size() as u64,
            want["vocab_size"].as_u64().unwrap(),
            "{repo}"
        );
        for ((text, ids), decoded) in texts
            .iter()
            .zip(want["ids"].as_array().unwrap())
            .zip(want["decoded"].as_array().unwrap())
        {
            let got = tok.encode(text).unwrap();
            assert_eq!(got.ids, u32s(ids), "{repo}: {text:?}");
            assert_eq!(
                tok.decode(&got.ids, false).unwrap(),
                decoded.as_str().unwrap(),
                "{repo}: {text:?}"
            );
        }
    }
}

/// A post-processor template naming a special token its `special_tokens` map lacks used to panic
/// inside the tokenizers crate on the first encode; it is now a load error naming the file.
#[test]
fn template_with_undefined_special_token_is_a_load_error() {
    let out = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/fixtures/out");
    let text = std::fs::read_to_string(format!("{out}/st_tiny/tokenizer.json")).unwrap();
    let mut json: Value = serde_json::from_str(&text).unwrap();
    json["post_processor"]["special_tokens"]
        .as_object_mut()
        .unwrap()
        .remove("[SEP]");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokenizer.json");
    std::fs::write(&path, serde_json::to_string(&json).unwrap()).unwrap();
    let err = TextTokenizer::from_file(&path).unwrap_err().to_string();
    assert!(err.contains("tokenizer.json"), "{err}");
    assert!(err.contains("[SEP]"), "{err}");
}
