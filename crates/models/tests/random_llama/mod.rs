//! A Llama-architecture safetensors directory with random f32 weights, for the peak-memory tests
//! (each a binary of its own, for its counting global allocator).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use safetensors::tensor::{Dtype, TensorView};

/// The model's sizes; the embeddings are tied, as SmolLM2's.
pub struct Sizes {
    pub hidden: usize,
    pub intermediate: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub vocab: usize,
}

fn tiny_llama() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tools/fixtures/llm/out/tiny/llama")
}

/// Uniform values in ±`scale` from a fixed linear congruential sequence.
fn random(n: usize, seed: u64, scale: f32) -> Vec<u8> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(n * 4);
    for _ in 0..n {
        s = s
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let u = (s >> 40) as f32 / (1u64 << 24) as f32;
        out.extend_from_slice(&((2.0 * u - 1.0) * scale).to_le_bytes());
    }
    out
}

/// Writes the tiny fixture's tokenizer, a config of `s` and random weights (norms at 1) into
/// `dir`; returns the weights' bytes.
pub fn write(dir: &Path, s: &Sizes) -> usize {
    for f in ["tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(tiny_llama().join(f), dir.join(f)).unwrap();
    }
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(tiny_llama().join("config.json")).unwrap()).unwrap();
    for (key, value) in [
        ("hidden_size", s.hidden),
        ("intermediate_size", s.intermediate),
        ("num_hidden_layers", s.layers),
        ("num_attention_heads", s.heads),
        ("num_key_value_heads", s.kv_heads),
        ("head_dim", s.head_dim),
        ("vocab_size", s.vocab),
    ] {
        config[key] = value.into();
    }
    config["tie_word_embeddings"] = true.into();
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();

    let mut shapes: Vec<(String, Vec<usize>)> = vec![
        ("model.embed_tokens.weight".into(), vec![s.vocab, s.hidden]),
        ("model.norm.weight".into(), vec![s.hidden]),
    ];
    let (q, kv) = (s.heads * s.head_dim, s.kv_heads * s.head_dim);
    for i in 0..s.layers {
        for (stem, shape) in [
            ("input_layernorm", vec![s.hidden]),
            ("post_attention_layernorm", vec![s.hidden]),
            ("self_attn.q_proj", vec![q, s.hidden]),
            ("self_attn.k_proj", vec![kv, s.hidden]),
            ("self_attn.v_proj", vec![kv, s.hidden]),
            ("self_attn.o_proj", vec![s.hidden, q]),
            ("mlp.gate_proj", vec![s.intermediate, s.hidden]),
            ("mlp.up_proj", vec![s.intermediate, s.hidden]),
            ("mlp.down_proj", vec![s.hidden, s.intermediate]),
        ] {
            shapes.push((format!("model.layers.{i}.{stem}.weight"), shape));
        }
    }
    let data: Vec<Vec<u8>> = shapes
        .iter()
        .enumerate()
        .map(|(i, (name, shape))| {
            let n = shape.iter().product();
            if name.ends_with("norm.weight") {
                1f32.to_le_bytes().repeat(n)
            } else {
                random(n, i as u64, 0.05)
            }
        })
        .collect();
    let bytes = data.iter().map(Vec::len).sum();
    let views: HashMap<String, TensorView<'_>> = shapes
        .iter()
        .zip(&data)
        .map(|((name, shape), d)| {
            let view = TensorView::new(Dtype::F32, shape.clone(), d).unwrap();
            (name.clone(), view)
        })
        .collect();
    safetensors::serialize_to_file(views, None, &dir.join("model.safetensors")).unwrap();
    bytes
}
