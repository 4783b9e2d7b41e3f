//! Fine-tuning the real SmolLM2-135M-Instruct (Q4_1 GGUF dequantised to f32) against
//! transformers + torch.optim.AdamW on the same weights (tools/fixtures/train/finetune_smollm2.py):
//! 10 AdamW steps on one fixed batch of 2 × 32 tokens, full fine-tune and PEFT LoRA: the loss of
//! every step and samples and sums of parameters after the last. Skips when the weights are
//! absent (scripts/fetch-models.sh).

use crate::llm_fixtures;

use aneforge::autograd::Optimizer;
use aneforge::train::{Evaluator, Trainer, TrainerOptions};
use aneforge::{Engine, Target};
use aneforge_models::llm::lora::{load_adapter, lora_model, merge, save_adapter, LoraConfig};
use aneforge_models::llm::training::{causal_lm_loss, checkpoint_tensors, trainable, TrainBatch};
use aneforge_models::llm::{Llm, LoadOptions, WeightFormat};
use aneforge_models::require_model;
use llm_fixtures::{floats, ints, relative_error};
use safetensors::SafeTensors;

const MODEL: &str = "HuggingFaceTB/SmolLM2-135M-Instruct";
const BATCH: usize = 2;
const SEQ: usize = 32;
const SAMPLE: usize = 512;

fn fixture() -> Vec<u8> {
    let p = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tools/fixtures/train/out/finetune_smollm2.safetensors");
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The fixture's strided sample: flat index `i · (numel / 512)`.
fn sample(values: &[f32]) -> Vec<f32> {
    let stride = values.len() / SAMPLE;
    (0..SAMPLE).map(|i| values[i * stride]).collect()
}

fn assert_close(what: &str, got: &[f32], want: &[f32], tol: f64) {
    let err = relative_error(got, want);
    assert!(
        err <= tol,
        "{what}: relative error {err:e} > {tol:e}\n got {:?}\nwant {:?}",
        &got[..got.len().min(8)],
        &want[..want.len().min(8)]
    );
}

/// The fixture's optimizer: torch.optim.AdamW(betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01).
fn adamw() -> Optimizer {
    Optimizer::AdamW {
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 0.01,
    }
}

fn check_losses(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let rel = (f64::from(*g) - f64::from(*w)).abs() / f64::from(*w).abs();
        assert!(
            rel <= 1e-4,
            "loss of step {i}: {g} vs the reference {w} ({rel:e} relative)"
        );
    }
}

/// `{key}.sum` and `{key}.abs_sum` of the fixture against `got`'s, within 1e-4 relative.
fn check_sums(name: &str, got: &[f32], st: &SafeTensors, key: &str) {
    let sum: f64 = got.iter().map(|&v| f64::from(v)).sum();
    let abs_sum: f64 = got.iter().map(|&v| f64::from(v).abs()).sum();
    let scale = abs_sum.max(1e-30);
    for (what, g) in [("sum", sum), ("abs_sum", abs_sum)] {
        let w = f64::from(floats(st, &format!("{key}.{what}"))[0]);
        // a sum of values of both signs is compared relative to the sum of magnitudes
        let rel = (g - w).abs() / scale;
        assert!(rel <= 1e-4, "{name} {what}: {g} vs {w} ({rel:e} relative)");
    }
}

#[test]
fn full_finetune_matches_torch_adamw() {
    let model = require_model!(MODEL);
    let bytes = fixture();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let llm = Llm::from_resolved(&model, LoadOptions::new(WeightFormat::Dense)).unwrap();
    let cfg = &llm.config;
    let ids = ints(&st, "input_ids");
    let labels: Vec<i64> = ids.iter().map(|&i| i64::from(i)).collect();
    let batch = TrainBatch::new(BATCH, SEQ, &ids, &labels, cfg.vocab_size).unwrap();
    let tm = trainable(cfg, &llm.weights).unwrap();
    let loss = causal_lm_loss(cfg, &tm, BATCH, SEQ).unwrap();
    let mut trainer = Trainer::new(&loss, &tm.params, &[], TrainerOptions::new(adamw())).unwrap();
    let tracked: Vec<String> = st
        .names()
        .into_iter()
        .filter_map(|n| n.strip_prefix("full.")?.strip_suffix(".init"))
        .map(str::to_string)
        .collect();
    assert!(!tracked.is_empty());
    let params =
        |trainer: &Trainer| checkpoint_tensors(cfg, trainer.read_params().unwrap()).unwrap();
    let find = |all: &[(String, Vec<usize>, Vec<f32>)], name: &str| -> Vec<f32> {
        all.iter()
            .find(|(n, _, _)| n == name)
            .unwrap_or_else(|| panic!("no parameter {name}"))
            .2
            .clone()
    };
    let before = params(&trainer);
    for name in &tracked {
        let want = floats(&st, &format!("full.{name}.init"));
        assert_close(
            &format!("{name} before training"),
            &sample(&find(&before, name)),
            &want,
            1e-6,
        );
    }
    drop(before);
    let want_losses = floats(&st, "full_losses");
    let mut losses = Vec::new();
    for step in 0..want_losses.len() {
        // the last entry is the loss after 10 steps: learning rate 0 leaves the parameters as
        // they are (AdamW: p·(1 − 0·wd) − 0·update)
        let lr = if step < 10 { 1e-4 } else { 0.0 };
        losses.push(trainer.step(&batch.ports(), lr).unwrap().loss);
    }
    eprintln!("losses {losses:?}\n  want {want_losses:?}");
    check_losses(&losses, &want_losses);
    let after = params(&trainer);
    for name in &tracked {
        let got = find(&after, name);
        let want = floats(&st, &format!("full.{name}.after"));
        assert_close(
            &format!("{name} after 10 steps"),
            &sample(&got),
            &want,
            1e-4,
        );
        let init = floats(&st, &format!("full.{name}.init"));
        let delta = |v: &[f32]| -> Vec<f32> { v.iter().zip(&init).map(|(a, b)| a - b).collect() };
        eprintln!(
            "{name}: update relative error {:e}",
            relative_error(&delta(&sample(&got)), &delta(&want))
        );
        check_sums(name, &got, &st, &format!("full.{name}"));
    }
}

/// LoRA rank 8, alpha 16 on q_proj and v_proj from PEFT's own initial `lora_A` (the fixture's),
/// AdamW lr 1e-3: the losses and the sums of every adapter after 10 steps within 1e-4 relative of
/// PEFT, the matrices of layers 0, 15 and 29 within 1e-3 (Frobenius); then the PEFT-layout files
/// round-trip and the merged weights give the adapted model's loss.
#[test]
fn lora_matches_peft() {
    let model = require_model!(MODEL);
    let bytes = fixture();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let llm = Llm::from_resolved(&model, LoadOptions::new(WeightFormat::Dense)).unwrap();
    let cfg = &llm.config;
    let ids = ints(&st, "input_ids");
    let labels: Vec<i64> = ids.iter().map(|&i| i64::from(i)).collect();
    let batch = TrainBatch::new(BATCH, SEQ, &ids, &labels, cfg.vocab_size).unwrap();
    let lc = LoraConfig {
        rank: 8,
        alpha: 16.0,
        targets: LoraConfig::parse_targets("q_proj,v_proj").unwrap(),
    };
    // the fixture names PEFT's in-memory tensors `...lora_A.default.weight`
    let fixture_name = |name: &str| name.replace(".weight", ".default.weight");
    let tm = lora_model(cfg, &llm.weights, &lc, |name, shape| {
        Ok(if name.contains("lora_A") {
            floats(&st, &format!("lora.{}.init", fixture_name(name)))
        } else {
            vec![0.0; shape.iter().product()]
        })
    })
    .unwrap();
    let loss = causal_lm_loss(cfg, &tm, BATCH, SEQ).unwrap();
    let mut trainer = Trainer::new(&loss, &tm.params, &[], TrainerOptions::new(adamw())).unwrap();
    let want_losses = floats(&st, "lora_losses");
    let mut losses = Vec::new();
    for step in 0..want_losses.len() {
        let lr = if step < 10 { 1e-3 } else { 0.0 };
        losses.push(trainer.step(&batch.ports(), lr).unwrap().loss);
    }
    eprintln!("lora losses {losses:?}\n       want {want_losses:?}");
    check_losses(&losses, &want_losses);
    let adapters = checkpoint_tensors(cfg, trainer.read_params().unwrap()).unwrap();
    // Adam divides each gradient by its own running magnitude, so last-bit differences of the
    // gradients (softmax backward, summation order) become relative differences of the
    // update; measured: 3e-6..4e-5 (Frobenius) for layers 0 and 15 and the v adapters, 2e-4 and
    // 4.8e-4 for layer 29's q_proj A and B
    let mut compared = 0;
    let mut worst = 0f64;
    for (name, _, got) in &adapters {
        let key = format!("lora.{}", fixture_name(name));
        if st.names().contains(&&*format!("{key}.after")) {
            let want = floats(&st, &format!("{key}.after"));
            let norm = |v: &mut dyn Iterator<Item = f64>| v.map(|x| x * x).sum::<f64>().sqrt();
            let diff = norm(
                &mut got
                    .iter()
                    .zip(&want)
                    .map(|(&g, &w)| f64::from(g) - f64::from(w)),
            );
            let norm_rel = diff / norm(&mut want.iter().map(|&w| f64::from(w)));
            eprintln!(
                "{name}: relative error {norm_rel:e} (Frobenius), {:e} (largest element)",
                relative_error(got, &want)
            );
            worst = worst.max(norm_rel);
            assert!(
                norm_rel <= 1e-3,
                "{name} after 10 steps: relative error {norm_rel:e}"
            );
            compared += 1;
        }
        check_sums(name, got, &st, &key);
    }
    assert_eq!(compared, 3 * 4, "layers 0, 15 and 29: q and v, A and B");
    eprintln!("worst adapter relative error (Frobenius): {worst:e}");

    // PEFT's layout round-trips, and the merged weights score the batch as the adapters do
    let dir = tempfile::tempdir().unwrap();
    save_adapter(dir.path(), &lc, &adapters, MODEL).unwrap();
    let adapter = load_adapter(dir.path()).unwrap();
    assert_eq!(adapter.config, lc);
    assert_eq!(adapter.tensors.len(), adapters.len());
    let merged = merge(cfg, &llm.weights, &adapter).unwrap();
    let merged_model = trainable(cfg, &merged).unwrap();
    let loss = causal_lm_loss(cfg, &merged_model, BATCH, SEQ).unwrap();
    let mut eval = Evaluator::new(&[("loss", &loss)], Target::Cpu, Engine::Cpu).unwrap();
    let merged_loss = eval.run(&batch.ports()).unwrap()[0][0];
    let want = want_losses[10];
    let rel = (f64::from(merged_loss) - f64::from(want)).abs() / f64::from(want);
    assert!(
        rel <= 1e-4,
        "merged loss {merged_loss} vs PEFT {want} ({rel:e} relative)"
    );
}
