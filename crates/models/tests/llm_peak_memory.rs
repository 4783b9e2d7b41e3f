//! Peak memory of loading an f32 safetensors decoder, compiling it for the CPU engine and running
//! one decode step: the compiled program's weights blob holds the only copy (matrices are read
//! from the file when the program is compiled, and the engine's plans read the blob in place
//! instead of decoding and preparing copies). The counting global allocator
//! (`testing::CountingAllocator`) measures the peak of live heap bytes; the binary holds one
//! test. Mapped file pages are not heap and are not counted.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use aneforge_models::llm::{Llm, LoadOptions, Runner, RunnerOptions};
use aneforge_models::testing::CountingAllocator;
use safetensors::tensor::{Dtype, TensorView};

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

const HIDDEN: usize = 512;
const INTERMEDIATE: usize = 1536;
const LAYERS: usize = 2;
const HEADS: usize = 8;
const KV_HEADS: usize = 4;
const HEAD_DIM: usize = 64;
const VOCAB: usize = 8192;

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

/// A Llama-architecture directory with random f32 weights (tied embeddings, as SmolLM2): the
/// tiny fixture's tokenizer, a config of the sizes above. Returns the weights' bytes.
fn write_model(dir: &Path) -> usize {
    for f in ["tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(tiny_llama().join(f), dir.join(f)).unwrap();
    }
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(tiny_llama().join("config.json")).unwrap()).unwrap();
    for (key, value) in [
        ("hidden_size", HIDDEN),
        ("intermediate_size", INTERMEDIATE),
        ("num_hidden_layers", LAYERS),
        ("num_attention_heads", HEADS),
        ("num_key_value_heads", KV_HEADS),
        ("head_dim", HEAD_DIM),
        ("vocab_size", VOCAB),
    ] {
        config[key] = value.into();
    }
    config["tie_word_embeddings"] = true.into();
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();

    let mut shapes: Vec<(String, Vec<usize>)> = vec![
        ("model.embed_tokens.weight".into(), vec![VOCAB, HIDDEN]),
        ("model.norm.weight".into(), vec![HIDDEN]),
    ];
    for i in 0..LAYERS {
        let p = format!("model.layers.{i}");
        shapes.extend([
            (format!("{p}.input_layernorm.weight"), vec![HIDDEN]),
            (format!("{p}.post_attention_layernorm.weight"), vec![HIDDEN]),
            (
                format!("{p}.self_attn.q_proj.weight"),
                vec![HEADS * HEAD_DIM, HIDDEN],
            ),
            (
                format!("{p}.self_attn.k_proj.weight"),
                vec![KV_HEADS * HEAD_DIM, HIDDEN],
            ),
            (
                format!("{p}.self_attn.v_proj.weight"),
                vec![KV_HEADS * HEAD_DIM, HIDDEN],
            ),
            (
                format!("{p}.self_attn.o_proj.weight"),
                vec![HIDDEN, HEADS * HEAD_DIM],
            ),
            (
                format!("{p}.mlp.gate_proj.weight"),
                vec![INTERMEDIATE, HIDDEN],
            ),
            (
                format!("{p}.mlp.up_proj.weight"),
                vec![INTERMEDIATE, HIDDEN],
            ),
            (
                format!("{p}.mlp.down_proj.weight"),
                vec![HIDDEN, INTERMEDIATE],
            ),
        ]);
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
            (
                name.clone(),
                TensorView::new(Dtype::F32, shape.clone(), d).unwrap(),
            )
        })
        .collect();
    safetensors::serialize_to_file(views, None, &dir.join("model.safetensors")).unwrap();
    bytes
}

#[test]
fn an_f32_safetensors_model_peaks_near_its_weights() {
    let dir = tempfile::tempdir().unwrap();
    let weights = write_model(dir.path());
    let (_, peak) = CountingAllocator::measure(|| {
        let llm = Arc::new(Llm::from_hf_dir(dir.path(), LoadOptions::default()).unwrap());
        let opts = RunnerOptions {
            max_context: 32,
            min_context: 32,
            prefill_chunks: Vec::new(),
            ..RunnerOptions::default()
        };
        let mut runner = Runner::new(llm, opts).unwrap();
        let logits = runner.feed(&[1]).unwrap();
        assert_eq!(logits.len(), VOCAB);
        assert!(logits.iter().all(|v| v.is_finite()));
    });
    let ratio = peak as f64 / weights as f64;
    eprintln!(
        "weights {:.1} MB; peak live heap {:.1} MB ({ratio:.2}x)",
        weights as f64 / 1e6,
        peak as f64 / 1e6
    );
    assert!(
        ratio <= BOUND,
        "peak live heap {peak} bytes is {ratio:.2}x the {weights} bytes of weights (bound {BOUND}x)"
    );
}

const BOUND: f64 = 1.5;
