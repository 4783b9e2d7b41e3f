//! Peak memory of a full fine-tune (load, compile the AdamW step, two steps) of a random f32
//! Llama-architecture decoder whose parameters dwarf its activations: the resident state is the
//! parameters and AdamW's two moments, each held once (updated in the buffers the next step
//! reads, with no staged copies), plus the parameters' initial values kept by the graph and the
//! step's intermediates. The counting global allocator
//! (`testing::CountingAllocator`) measures the peak of live heap bytes; the binary holds one test.

use aneforge::autograd::Optimizer;
use aneforge::train::{Trainer, TrainerOptions};
use aneforge_models::llm::training::{causal_lm_loss, trainable, TrainBatch};
use aneforge_models::llm::{Llm, LoadOptions, WeightFormat};
use aneforge_models::testing::CountingAllocator;
use safetensors::tensor::{Dtype, TensorView};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

const HIDDEN: usize = 256;
const INTERMEDIATE: usize = 768;
const LAYERS: usize = 2;
const HEADS: usize = 4;
const KV_HEADS: usize = 2;
const HEAD_DIM: usize = 64;
const VOCAB: usize = 8192;
const BATCH: usize = 2;
const SEQ: usize = 16;

fn tiny_llama() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tools/fixtures/llm/out/tiny/llama")
}

/// A Llama directory with the tiny fixture's tokenizer, the sizes above (tied embeddings, as
/// SmolLM2) and f32 weights from a fixed linear congruential sequence; returns the weights' bytes.
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
    let (q, kv) = (HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM);
    for i in 0..LAYERS {
        for (stem, shape) in [
            ("input_layernorm", vec![HIDDEN]),
            ("post_attention_layernorm", vec![HIDDEN]),
            ("self_attn.q_proj", vec![q, HIDDEN]),
            ("self_attn.k_proj", vec![kv, HIDDEN]),
            ("self_attn.v_proj", vec![kv, HIDDEN]),
            ("self_attn.o_proj", vec![HIDDEN, q]),
            ("mlp.gate_proj", vec![INTERMEDIATE, HIDDEN]),
            ("mlp.up_proj", vec![INTERMEDIATE, HIDDEN]),
            ("mlp.down_proj", vec![HIDDEN, INTERMEDIATE]),
        ] {
            shapes.push((format!("model.layers.{i}.{stem}.weight"), shape));
        }
    }
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    let data: Vec<Vec<u8>> = shapes
        .iter()
        .map(|(name, shape)| {
            let n: usize = shape.iter().product();
            if name.ends_with("norm.weight") {
                return 1f32.to_le_bytes().repeat(n);
            }
            (0..n)
                .flat_map(|_| {
                    s = s
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1_442_695_040_888_963_407);
                    let u = (s >> 40) as f32 / (1u64 << 24) as f32;
                    ((2.0 * u - 1.0) * 0.05).to_le_bytes()
                })
                .collect()
        })
        .collect();
    let views: HashMap<String, TensorView<'_>> = shapes
        .iter()
        .zip(&data)
        .map(|((name, shape), d)| {
            let view = TensorView::new(Dtype::F32, shape.clone(), d).unwrap();
            (name.clone(), view)
        })
        .collect();
    safetensors::serialize_to_file(views, None, &dir.join("model.safetensors")).unwrap();
    data.iter().map(Vec::len).sum()
}

#[test]
fn a_full_fine_tune_peaks_near_parameters_and_moments() {
    let dir = tempfile::tempdir().unwrap();
    let weights = write_model(dir.path());
    let (losses, peak) = CountingAllocator::measure(|| {
        let llm = Llm::from_hf_dir(dir.path(), LoadOptions::new(WeightFormat::Dense)).unwrap();
        let cfg = &llm.config;
        let model = trainable(cfg, &llm.weights).unwrap();
        let loss = causal_lm_loss(cfg, &model, BATCH, SEQ).unwrap();
        let optimizer = Optimizer::AdamW {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
        };
        let mut trainer =
            Trainer::new(&loss, &model.params, &[], TrainerOptions::new(optimizer)).unwrap();
        let ids: Vec<u32> = (0..BATCH * SEQ).map(|i| (i * 37 % VOCAB) as u32).collect();
        let labels: Vec<i64> = ids.iter().map(|&i| i64::from(i)).collect();
        let batch = TrainBatch::new(BATCH, SEQ, &ids, &labels, VOCAB).unwrap();
        (0..2)
            .map(|_| trainer.step(&batch.ports(), 1e-3).unwrap().loss)
            .collect::<Vec<f32>>()
    });
    assert!(
        losses.iter().all(|l| l.is_finite()) && losses[1] < losses[0],
        "{losses:?}"
    );
    let ratio = peak as f64 / weights as f64;
    eprintln!(
        "parameters {:.1} MB; peak live heap {:.1} MB ({ratio:.2}x)",
        weights as f64 / 1e6,
        peak as f64 / 1e6
    );
    assert!(
        ratio <= BOUND,
        "peak live heap {peak} bytes is {ratio:.2}x the {weights} bytes of parameters (bound \
         {BOUND}x)"
    );
}

/// The parameters' initial values held by the loaded model, the graph and the compiled program
/// (1x, one shared copy), the resident parameters and two AdamW moments (3x), and the step's
/// intermediates: the gradients and activations, where the tied embedding's gradient is summed
/// from the gather and the head (measured 6.4x in all; 7.7x when every shared state also kept an
/// output buffer and the moments a staged copy).
const BOUND: f64 = 7.0;
