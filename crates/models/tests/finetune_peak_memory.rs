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

mod random_llama;

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

#[test]
fn a_full_fine_tune_peaks_near_parameters_and_moments() {
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
