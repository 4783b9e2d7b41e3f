//! Learning-rate schedules against transformers' (tools/fixtures/train/export_check.py): the rate
//! of every step of `get_{constant,linear,cosine}_schedule_with_warmup` for several step and
//! warmup counts, the losses of a tiny model trained under a linear warmup, and the errors for
//! bad settings.

use std::path::PathBuf;

use crate::llm_fixtures::{floats, ints, tiny};

use aneforge::autograd::Optimizer;
use aneforge::train::{LrSchedule, ScheduleKind, Trainer, TrainerOptions};
use aneforge_models::llm::training::{causal_lm_loss, trainable, TrainBatch};
use aneforge_models::llm::{Llm, LoadOptions, WeightFormat};
use safetensors::SafeTensors;

fn outputs() -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tools/fixtures/train/out/export_check.safetensors");
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn f64s(st: &SafeTensors, name: &str) -> Vec<f64> {
    st.tensor(name)
        .unwrap()
        .data()
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn learning_rates_match_transformers_schedules() {
    let bytes = outputs();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut checked = 0;
    for name in st.names() {
        let Some(setting) = name.strip_prefix("lr.") else {
            continue;
        };
        let parts: Vec<&str> = setting.split('_').collect();
        let [kind, steps, warmup] = parts[..] else {
            panic!("schedule fixture {name}");
        };
        let (steps, warmup): (u64, u64) = (steps.parse().unwrap(), warmup.parse().unwrap());
        let schedule = LrSchedule::new(kind.parse().unwrap(), warmup, steps).unwrap();
        let want = f64s(&st, name);
        assert_eq!(want.len() as u64, steps, "{name}");
        for (step, &w) in want.iter().enumerate() {
            let got = schedule.lr(1e-3, step as u64);
            assert!(
                (got - w).abs() <= 1e-15 * 1e-3,
                "{name} step {step}: {got} vs transformers {w}"
            );
        }
        checked += 1;
    }
    assert_eq!(checked, 8, "schedule settings in the fixture");
}

#[test]
fn bad_schedules_get_clear_errors() {
    let e = "cosine_with_restarts".parse::<ScheduleKind>().unwrap_err();
    assert_eq!(
        e.to_string(),
        "unknown learning-rate schedule \"cosine_with_restarts\"; valid: constant, linear, cosine"
    );
    let e = LrSchedule::new(ScheduleKind::Linear, 11, 10).unwrap_err();
    assert_eq!(
        e.to_string(),
        "11 warmup steps are more than the 10 training steps"
    );
}

/// The tiny llama trained on its prompt for 5 AdamW steps under a linear schedule with 2 warmup
/// steps: the loss before each step and after the last, as transformers' run has them (the first
/// step, at rate 0, leaves the loss unchanged).
#[test]
fn warmup_losses_match_transformers() {
    let bytes = outputs();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let want = floats(&st, "warmup.losses");
    let ids = ints(&st, "warmup.ids");
    let llm = Llm::from_hf_dir(&tiny("llama"), LoadOptions::new(WeightFormat::Dense)).unwrap();
    let cfg = &llm.config;
    let labels: Vec<i64> = ids.iter().map(|&i| i64::from(i)).collect();
    let b = TrainBatch::new(1, ids.len(), &ids, &labels, cfg.vocab_size).unwrap();
    let model = trainable(cfg, &llm.weights).unwrap();
    let loss = causal_lm_loss(cfg, &model, 1, ids.len()).unwrap();
    let options = TrainerOptions::new(Optimizer::AdamW {
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 0.01,
    });
    let mut trainer = Trainer::new(&loss, &model.params, &[], options).unwrap();
    let schedule = LrSchedule::new(ScheduleKind::Linear, 2, 5).unwrap();
    let got: Vec<f32> = (0..6)
        .map(|step| {
            let lr = if step < 5 {
                schedule.lr(1e-2, step)
            } else {
                0.0
            };
            trainer.step(&b.ports(), lr as f32).unwrap().loss
        })
        .collect();
    eprintln!("losses {got:?}\ntransformers {want:?}");
    assert_eq!(got[0], got[1], "update 0 of the warmup runs at rate 0");
    for (step, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-4 * w,
            "step {step}: loss {g} vs transformers {w}"
        );
    }
}
