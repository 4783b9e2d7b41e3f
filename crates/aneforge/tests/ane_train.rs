//! Trainer steps on `Engine::Ane` (the e5rt simulator installed as the process-wide ANE engine):
//! the resident training step — parameters and AdamW moments aliased output→input, fp16 with
//! dynamic loss scaling (overflowing steps skipped) and gradient clipping — gives exactly the CPU
//! engine's losses and parameters, step for step, and learns.

mod ane_support;
mod text_support;

use ane_support::suite::Agreement;
use aneforge::autograd::{self, Optimizer};
use aneforge::engine::{Engine, HostSlice};
use aneforge::graph::{input, DType, Tensor};
use aneforge::train::models::{gpt_training, mlp, GptConfig};
use aneforge::train::{batch_rng, ParamStore, Trainer, TrainerOptions};
use aneforge::{AneArch, Target};
use rand::RngExt;
use text_support::Text;

fn options(engine: Engine) -> TrainerOptions {
    let mut options = TrainerOptions::for_target(
        Optimizer::adamw(0.1),
        Target::Ane(AneArch::default()),
        engine,
    );
    options.clip_grad_norm = Some(1.0);
    options
}

/// Runs `steps` through a trainer on each engine and checks that the loss, the metrics, the
/// skip flag and every parameter agree bit for bit after every step. Returns the losses.
fn train_on_both(
    build: impl Fn(Engine) -> Trainer,
    batch: impl Fn(u64) -> Vec<(&'static str, Vec<f32>, Vec<i32>)>,
    steps: u64,
    lr: f32,
) -> Vec<f32> {
    let simulator = ane_support::install_simulator();
    let mut cpu = build(Engine::Cpu);
    let mut ane = build(Engine::Ane);
    let mut losses = Vec::new();
    let mut skipped = 0;
    for step in 0..steps {
        let feeds = batch(step);
        let inputs: Vec<(&str, HostSlice<'_>)> = feeds
            .iter()
            .map(|(name, f, i)| {
                let slice = if f.is_empty() {
                    HostSlice::I32(i)
                } else {
                    HostSlice::F32(f)
                };
                (*name, slice)
            })
            .collect();
        let a = cpu.step(&inputs, lr).unwrap();
        let b = ane.step(&inputs, lr).unwrap();
        assert!(
            simulator.stats().loaded > 0,
            "the step ran outside the simulator"
        );
        assert!(a.loss.is_finite(), "step {step}: loss {}", a.loss);
        assert_eq!(
            a.loss.to_bits(),
            b.loss.to_bits(),
            "loss at step {step}: cpu {} vs ane {}",
            a.loss,
            b.loss
        );
        assert_eq!(a.metrics, b.metrics, "metrics at step {step}");
        assert_eq!(a.skipped, b.skipped, "skip at step {step}");
        assert_eq!(
            cpu.loss_scale(),
            ane.loss_scale(),
            "loss scale at step {step}"
        );
        for name in cpu.param_names() {
            Agreement::Identical.check(
                &format!("{name} after step {step}"),
                &ane.read_param(name).unwrap(),
                &cpu.read_param(name).unwrap(),
            );
        }
        skipped += u64::from(a.skipped);
        losses.push(a.loss);
    }
    assert_eq!(ane.step_count(), steps - skipped);
    assert_eq!(cpu.step_count(), steps - skipped);
    losses
}

fn mlp_trainer(engine: Engine) -> Trainer {
    let mut store = ParamStore::new(21);
    let x = input("x", &[8, 6], DType::F32).unwrap();
    let labels = input("labels", &[8], DType::I32).unwrap();
    let logits: Tensor = mlp(&mut store, &x, &[16, 4], "fc").unwrap();
    let loss = autograd::softmax_cross_entropy(&logits, &labels).unwrap();
    let acc = autograd::accuracy(&logits, &labels).unwrap();
    Trainer::new(
        &loss,
        store.params(),
        &[("accuracy", &acc)],
        options(engine),
    )
    .unwrap()
}

/// `x` [8, 6] and labels from a fixed linear teacher.
fn mlp_batch(step: u64) -> Vec<(&'static str, Vec<f32>, Vec<i32>)> {
    let mut rng = batch_rng(9, 0, step);
    let x: Vec<f32> = (0..48).map(|_| rng.random_range(-1.0..1.0)).collect();
    let labels = x
        .chunks(6)
        .map(|r| i32::from(r[0] - r[2] > 0.0) + 2 * i32::from(r[3] + 0.5 * r[5] > 0.0))
        .collect();
    vec![("x", x, Vec::new()), ("labels", Vec::new(), labels)]
}

#[test]
fn resident_mlp_steps_on_the_ane_engine_equal_the_cpu_engines() {
    let losses = train_on_both(mlp_trainer, mlp_batch, 40, 0.02);
    let first: f32 = losses[..5].iter().sum::<f32>() / 5.0;
    let last: f32 = losses[35..].iter().sum::<f32>() / 5.0;
    assert!(last < 0.8 * first, "loss {first} -> {last}");
}

#[test]
fn resident_transformer_steps_on_the_ane_engine_equal_the_cpu_engines() {
    let text = "to be, or not to be, that is the question. ".repeat(20);
    let data = Text::new(&text);
    let cfg = GptConfig {
        vocab: data.vocab,
        context: 16,
        d_model: 32,
        heads: 2,
        layers: 2,
        mlp: 64,
    };
    let build = |engine| {
        let mut store = ParamStore::new(4);
        let model = gpt_training(&mut store, &cfg, 4).unwrap();
        Trainer::new(&model.loss, store.params(), &[], options(engine)).unwrap()
    };
    let batch = |step| {
        let (x, y) = data.batch(4, 16, &mut batch_rng(6, 0, step));
        vec![("tokens", Vec::new(), x), ("targets", Vec::new(), y)]
    };
    let losses = train_on_both(build, batch, 8, 3e-3);
    assert!(
        losses[7] < losses[0],
        "the transformer's loss went from {} to {}",
        losses[0],
        losses[7]
    );
}
