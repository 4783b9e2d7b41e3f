//! Tokenizers built from GGUF metadata against transformers' GGUF import, and the Llama config
//! (fixture: tools/fixtures/gguf_cases.py).

use std::path::{Path, PathBuf};

use aneforge_models::gguf::{GgufFile, GgufTokenizer, TokenizerModelKind};
use aneforge_models::llm::config::{Family, NormKind, Positions, RopeScaling};
use aneforge_models::llm::LlmConfig;
use aneforge_models::require_model;
use serde_json::Value;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/fixtures/out/gguf")
}

fn json(name: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir().join(name)).unwrap()).unwrap()
}

fn check_against(file: &GgufFile, fx: &Value) -> GgufTokenizer {
    let tok = GgufTokenizer::from_gguf(file).unwrap();
    let name = |t: &Option<(u32, String)>| {
        t.as_ref()
            .map(|(_, s)| Value::from(s.as_str()))
            .unwrap_or(Value::Null)
    };
    assert_eq!(name(&tok.bos), fx["bos"]);
    assert_eq!(name(&tok.eos), fx["eos"]);
    assert_eq!(name(&tok.pad), fx["pad"]);
    let texts = fx["texts"].as_array().unwrap();
    let ids = fx["ids"].as_array().unwrap();
    let decoded = fx["decoded"].as_array().unwrap();
    assert!(texts.len() > 200);
    let mut mismatches = Vec::new();
    for ((text, want), want_text) in texts.iter().zip(ids).zip(decoded) {
        let text = text.as_str().unwrap();
        let want: Vec<u32> = want
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        let got = tok.tokenizer.encode(text).unwrap().ids;
        if got != want {
            mismatches.push(format!("{text:?}:\n  got  {got:?}\n  want {want:?}"));
            continue;
        }
        let back = tok.tokenizer.decode(&got, false).unwrap();
        assert_eq!(back, want_text.as_str().unwrap(), "decode of {text:?}");
    }
    assert!(
        mismatches.is_empty(),
        "{} of {} differ:\n{}",
        mismatches.len(),
        texts.len(),
        mismatches.join("\n")
    );
    let pair: Vec<u32> = fx["pair"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    let got = tok
        .tokenizer
        .encode_pair("first part", "second part")
        .unwrap();
    assert_eq!(got.ids, pair);
    tok
}

/// The synthetic vocabulary `file` against its entry `key` of the transformers fixture.
fn synthetic(file: &str, key: &str) -> GgufTokenizer {
    let fx = json("tokenizer_gguf_synthetic.json");
    check_against(&GgufFile::open(dir().join(file)).unwrap(), &fx[key])
}

#[test]
fn sentencepiece_vocabulary_without_merges_matches_transformers() {
    let tok = synthetic("tok_llama.gguf", "llama");
    assert_eq!(tok.kind, TokenizerModelKind::SentencePieceBpe);
    assert!(tok.add_bos && !tok.add_eos);
    assert_eq!(
        tok.chat_template.as_deref(),
        Some("{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}")
    );
}

/// Scores tied in runs of 200: merges of equal score rank by the pieces' lengths, then by the
/// merged piece's position; one merge possible at overlapping places is taken leftmost first.
#[test]
fn sentencepiece_vocabulary_with_tied_scores_matches_transformers() {
    let tok = synthetic("tok_llama_ties.gguf", "llama_ties");
    assert_eq!(tok.kind, TokenizerModelKind::SentencePieceBpe);
}

#[test]
fn byte_level_vocabulary_with_split_regex_and_bos_eos_matches_transformers() {
    let tok = synthetic("tok_gpt2.gguf", "gpt2");
    assert_eq!(tok.kind, TokenizerModelKind::ByteLevelBpe);
    assert!(tok.add_bos && tok.add_eos);
    let fx = json("tokenizer_gguf_synthetic.json");
    assert_eq!(
        tok.tokenizer.pad_token().map(|(_, t)| t.to_string()),
        fx["gpt2"]["pad"].as_str().map(str::to_string)
    );
}

#[test]
fn smollm2_tokenizer_matches_transformers() {
    let model = require_model!("HuggingFaceTB/SmolLM2-135M-Instruct");
    let fx = json("tokenizer_smollm2.json");
    let file = GgufFile::open(model.gguf_file().unwrap()).unwrap();
    let tok = check_against(&file, &fx);
    assert_eq!(tok.kind, TokenizerModelKind::ByteLevelBpe);
    let template = file.chat_template().unwrap().unwrap();
    assert!(template.contains("<|im_start|>"));
    assert_eq!(tok.chat_template.as_deref(), Some(template));
}

#[test]
fn smollm2_config_from_metadata() {
    let model = require_model!("HuggingFaceTB/SmolLM2-135M-Instruct");
    let fx = json("smollm2_tensors.json");
    let llama = &fx["llama"];
    let file = GgufFile::open(model.gguf_file().unwrap()).unwrap();
    let c = LlmConfig::from_gguf(&file).unwrap();
    let u = |k: &str| llama[k].as_u64().unwrap() as usize;
    let f = |k: &str| {
        let hex = llama[k]["f64"].as_str().unwrap();
        f64::from_bits(hex_f64_bits(hex))
    };
    assert_eq!(c.family, Family::Llama);
    assert_eq!(c.n_layers, u("llama.block_count"));
    assert_eq!(c.hidden_size, u("llama.embedding_length"));
    assert_eq!(c.intermediate_size, u("llama.feed_forward_length"));
    assert_eq!(c.n_heads, u("llama.attention.head_count"));
    assert_eq!(c.n_kv_heads, u("llama.attention.head_count_kv"));
    assert_eq!(
        c.head_dim,
        u("llama.embedding_length") / u("llama.attention.head_count")
    );
    let Positions::Rope(rope) = &c.positions else {
        panic!("SmolLM2 uses RoPE, got {:?}", c.positions)
    };
    assert_eq!(rope.dims, u("llama.rope.dimension_count"));
    assert_eq!(rope.theta, f("llama.rope.freq_base"));
    assert_eq!(rope.scaling, RopeScaling::None);
    assert_eq!(c.max_positions, u("llama.context_length"));
    assert_eq!(c.vocab_size, u("llama.vocab_size"));
    let NormKind::Rms { eps, .. } = c.norm else {
        panic!("SmolLM2 uses RMSNorm, got {:?}", c.norm)
    };
    assert_eq!(eps, f("llama.attention.layer_norm_rms_epsilon") as f32);
    assert_eq!(
        c.tied_embeddings,
        !fx["has_output_weight"].as_bool().unwrap()
    );
}

/// Bits of a Python float.hex() string ("0x1.86a0000000000p+16").
fn hex_f64_bits(s: &str) -> u64 {
    let s = s.strip_prefix("0x").unwrap();
    let (mant, exp) = s.split_once('p').unwrap();
    let frac = mant.strip_prefix("1.").unwrap();
    let frac = u64::from_str_radix(&format!("{frac:0<13}"), 16).unwrap();
    let exp: i64 = exp.parse().unwrap();
    (((exp + 1023) as u64) << 52) | frac
}

#[test]
fn config_errors_name_the_key() {
    let file = GgufFile::open(dir().join("tok_llama.gguf")).unwrap();
    let msg = LlmConfig::from_gguf(&file).unwrap_err().to_string();
    assert!(
        msg.contains("'llama.") && msg.contains("missing") && msg.contains("tok_llama.gguf"),
        "{msg}"
    );
    let file = GgufFile::open(dir().join("quants.gguf")).unwrap();
    let msg = GgufTokenizer::from_gguf(&file).unwrap_err().to_string();
    assert!(msg.contains("tokenizer.ggml.model"), "{msg}");
}
