//! Peak memory of loading an f32 safetensors decoder, compiling it for the CPU engine and running
//! one decode step: the compiled program's weights blob holds the only copy (matrices are read from
//! the file when the program is compiled, and the engine's plans read the blob in place instead of
//! decoding and preparing copies). The counting global allocator (`testing::CountingAllocator`)
//! measures the peak of live heap and engine buffer bytes; the binary holds one test. Mapped file
//! pages are not heap and are not counted.

use std::sync::Arc;

use aneforge_models::llm::{Llm, LoadOptions, Runner, RunnerOptions};
use aneforge_models::testing::CountingAllocator;

mod random_llama;

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

const HIDDEN: usize = 512;
const INTERMEDIATE: usize = 1536;
const LAYERS: usize = 2;
const HEADS: usize = 8;
const KV_HEADS: usize = 4;
const HEAD_DIM: usize = 64;
const VOCAB: usize = 8192;

#[test]
fn an_f32_safetensors_model_peaks_near_its_weights() {
    let dir = tempfile::tempdir().unwrap();
    let weights = random_llama::write(
        dir.path(),
        &random_llama::Sizes {
            hidden: HIDDEN,
            intermediate: INTERMEDIATE,
            layers: LAYERS,
            heads: HEADS,
            kv_heads: KV_HEADS,
            head_dim: HEAD_DIM,
            vocab: VOCAB,
        },
    );
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
        "weights {:.1} MB; peak held {:.1} MB ({ratio:.2}x)",
        weights as f64 / 1e6,
        peak as f64 / 1e6
    );
    assert!(
        ratio <= BOUND,
        "peak held {peak} bytes is {ratio:.2}x the {weights} bytes of weights (bound {BOUND}x)"
    );
}

const BOUND: f64 = 1.5;
