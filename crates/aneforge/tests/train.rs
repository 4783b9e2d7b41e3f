//! The trainer: resident training (parameters and moments aliased output→input in one step
//! program) against the host-optimizer mode step for step, loss scaling with skipped overflow
//! steps, gradient clipping, and learning on a small problem.

mod text_support;

use aneforge::autograd::Optimizer;
use aneforge::engine::HostSlice;
use aneforge::graph::{input, DType};
use aneforge::train::batch_rng;
use aneforge::train::models::{image_classifier, mlp};
use aneforge::train::{ParamStore, Trainer, TrainerOptions, UpdateMode};
use aneforge::{autograd, AneArch, Target};
use rand::RngExt;
use text_support::Text;

/// A classification batch for the MLP: `x` [8, 6] and labels from a fixed linear teacher.
fn mlp_batch(step: u64) -> (Vec<f32>, Vec<i32>) {
    let mut rng = batch_rng(5, 0, step);
    let x: Vec<f32> = (0..48).map(|_| rng.random_range(-1.0..1.0)).collect();
    let labels = x
        .chunks(6)
        .map(|r| {
            let a = r[0] + 0.5 * r[1] - r[2];
            let b = r[3] - r[4] + 0.25 * r[5];
            i32::from(a > 0.0) + 2 * i32::from(b > 0.0)
        })
        .collect();
    (x, labels)
}

fn mlp_trainer(options: TrainerOptions) -> Trainer {
    let mut store = ParamStore::new(11);
    let x = input("x", &[8, 6], DType::F32).unwrap();
    let labels = input("labels", &[8], DType::I32).unwrap();
    let logits = mlp(&mut store, &x, &[16, 4], "fc").unwrap();
    let loss = autograd::softmax_cross_entropy(&logits, &labels).unwrap();
    let acc = autograd::accuracy(&logits, &labels).unwrap();
    Trainer::new(&loss, store.params(), &[("accuracy", &acc)], options).unwrap()
}

fn close(label: &str, a: &[f32], b: &[f32], tol: f32) {
    assert_eq!(a.len(), b.len(), "{label}: lengths");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= tol * (1.0 + y.abs()),
            "{label}[{i}]: {x} vs {y}"
        );
    }
}

#[test]
fn resident_training_equals_host_optimizer_training() {
    let optimizers = [
        Optimizer::adam(),
        Optimizer::adamw(0.1),
        Optimizer::sgd(0.9),
        Optimizer::Sgd {
            momentum: 0.8,
            weight_decay: 0.01,
            nesterov: true,
        },
        Optimizer::Adam {
            beta1: 0.8,
            beta2: 0.99,
            eps: 1e-6,
            weight_decay: 0.05,
        },
    ];
    for opt in optimizers {
        let mut options = TrainerOptions::new(opt);
        options.clip_grad_norm = Some(1.5);
        let mut resident = mlp_trainer(options.clone());
        options.mode = UpdateMode::Host;
        let mut host = mlp_trainer(options);
        for step in 0..12u64 {
            let (x, y) = mlp_batch(step);
            let batch = [("x", HostSlice::F32(&x)), ("labels", HostSlice::I32(&y))];
            let lr = 0.05 / (1.0 + step as f32);
            let a = resident.step(&batch, lr).unwrap();
            let b = host.step(&batch, lr).unwrap();
            close(
                &format!("{} loss at step {step}", opt.name()),
                &[a.loss],
                &[b.loss],
                1e-5,
            );
            assert_eq!(a.metrics, b.metrics);
            for name in resident.param_names() {
                close(
                    &format!("{} {name} after step {step}", opt.name()),
                    &resident.read_param(name).unwrap(),
                    &host.read_param(name).unwrap(),
                    1e-5,
                );
            }
        }
        assert_eq!(resident.step_count(), 12);
    }
}

#[test]
fn a_non_finite_learning_rate_or_loss_stops_training() {
    for mode in [UpdateMode::Resident, UpdateMode::Host] {
        let mut options = TrainerOptions::new(Optimizer::adam());
        options.mode = mode;
        let mut trainer = mlp_trainer(options);
        let (x, labels) = mlp_batch(1);
        let batch = [
            ("x", HostSlice::F32(&x)),
            ("labels", HostSlice::I32(&labels)),
        ];
        for lr in [f32::NAN, f32::INFINITY, -1e-3] {
            let err = trainer.step(&batch, lr).unwrap_err().to_string();
            assert!(
                err.contains("learning rate") && err.contains(&lr.to_string()),
                "{err}"
            );
        }
        assert_eq!(trainer.step_count(), 0);
        trainer.step(&batch, 1e-3).unwrap();

        // relu maps a NaN input to 0, but sums that overflow to ±inf give NaN logits
        let poisoned: Vec<f32> = x.iter().map(|v| v.signum() * f32::MAX).collect();
        let batch = [
            ("x", HostSlice::F32(&poisoned)),
            ("labels", HostSlice::I32(&labels)),
        ];
        let err = trainer.step(&batch, 1e-3).unwrap_err().to_string();
        assert!(
            err.contains("step 2") && err.contains("NaN"),
            "{mode:?}: {err}"
        );
        assert_eq!(trainer.step_count(), 1);
    }
}

#[test]
fn a_step_feeds_only_the_batch_and_scalars() {
    let trainer = mlp_trainer(TrainerOptions::new(Optimizer::adam()));
    let mut fed: Vec<&str> = trainer
        .model()
        .inputs()
        .iter()
        .filter(|p| p.kind == aneforge::lower::PortKind::Input)
        .map(|p| p.name.as_str())
        .filter(|n| !n.contains("__"))
        .collect();
    fed.sort();
    assert_eq!(
        fed,
        ["bias_correction1", "bias_correction2", "labels", "lr", "x"]
    );
}

/// The step program holds every parameter and Adam moment once, in its port buffers: the
/// artifact lets go of the parameters' initial values once the engine has them, no shared state
/// is staged in a second buffer, and the other ports are the batch, the scalars and the loss.
#[test]
fn the_step_holds_each_parameter_and_moment_once() {
    use aneforge::lower::PortKind;
    let mut trainer = mlp_trainer(TrainerOptions::new(Optimizer::adam()));
    let params = 4 * trainer.parameter_count();
    let model = trainer.model();
    let other_inputs: usize = model
        .inputs()
        .iter()
        .filter(|p| p.kind == PortKind::Input && !p.name.contains("__"))
        .map(|p| 4 * p.len())
        .sum();
    // loss and accuracy; the `__next` outputs live in their inputs' buffers
    let other_outputs: usize = model
        .outputs()
        .iter()
        .filter(|p| !p.name.ends_with("__next"))
        .map(|p| 4 * p.len())
        .sum();
    let initial = trainer.model().memory();
    assert_eq!(initial.parameter_values, 0, "{initial:?}");
    let (x, labels) = mlp_batch(0);
    let batch = [
        ("x", HostSlice::F32(&x)),
        ("labels", HostSlice::I32(&labels)),
    ];
    let before = trainer.read_params().unwrap();
    trainer.step(&batch, 1e-2).unwrap();
    assert_ne!(trainer.read_params().unwrap(), before, "the step trained");
    let m = trainer.model().memory();
    let engine = m.engine.expect("the CPU engine reports its buffers");
    assert_eq!(m.parameter_values, 0, "{m:?}");
    assert_eq!(engine.staging, 0, "{m:?}");
    assert_eq!(
        engine.ports,
        3 * params + other_inputs + other_outputs,
        "parameters and two moments of {params} bytes each: {m:?}"
    );
}

/// Once the step is compiled and the caller drops its graph, nothing holds the parameters'
/// initial values any more: not the trainer, its program, nor the segments it recomputes.
#[test]
fn a_trainer_keeps_no_reference_to_the_graph() {
    use aneforge::graph::{HostData, Op};
    for recompute in [false, true] {
        let mut store = ParamStore::new(11);
        let x = input("x", &[8, 6], DType::F32).unwrap();
        let labels = input("labels", &[8], DType::I32).unwrap();
        let h = mlp(&mut store, &x, &[16], "a").unwrap().relu().unwrap();
        let out = mlp(&mut store, &h, &[16], "b").unwrap().relu().unwrap();
        let logits = mlp(&mut store, &out, &[4], "c").unwrap();
        let loss = autograd::softmax_cross_entropy(&logits, &labels).unwrap();
        let mut options = TrainerOptions::new(Optimizer::adam());
        // the second layer's weight: read by the segment's output
        let segment = autograd::Segment::new(vec![h], vec![out]);
        if recompute {
            options.recompute = vec![segment];
        } else {
            drop(segment);
        }
        let Op::Parameter { init, .. } = store.params()[2].op() else {
            panic!("a parameter leaf")
        };
        let HostData::F32(values) = init.data().clone() else {
            panic!("f32 values")
        };
        let mut trainer = Trainer::new(&loss, store.params(), &[], options).unwrap();
        drop((store, loss, logits));
        assert_eq!(
            std::sync::Arc::strong_count(&values),
            1,
            "recompute {recompute}: the initial values are still held"
        );
        let (xs, ys) = mlp_batch(0);
        let stats = trainer
            .step(
                &[("x", HostSlice::F32(&xs)), ("labels", HostSlice::I32(&ys))],
                1e-2,
            )
            .unwrap();
        assert!(stats.loss.is_finite() && stats.updated);
    }
}

#[test]
fn mlp_learns_its_teacher() {
    let mut trainer = mlp_trainer(TrainerOptions::new(Optimizer::adam()));
    let mut first = 0.0;
    let mut last = 0.0;
    for step in 0..300u64 {
        let (x, y) = mlp_batch(step);
        let s = trainer
            .step(
                &[("x", HostSlice::F32(&x)), ("labels", HostSlice::I32(&y))],
                0.02,
            )
            .unwrap();
        if step == 0 {
            first = s.loss;
        }
        last = s.loss;
    }
    assert!(last < 0.35 * first, "loss {first} -> {last}");
}

#[test]
fn loss_scaling_skips_overflowing_steps_on_fp16() {
    // eps 1e-4: PyTorch's 1e-8 is zero in fp16 (the trainer rejects it for fp16 targets)
    let adam = Optimizer::Adam {
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-4,
        weight_decay: 0.0,
    };
    let mut options = TrainerOptions::new(adam);
    options.target = Target::Ane(AneArch::default());
    options.loss_scale = Some(aneforge::train::LossScale {
        init: 1.0e9,
        growth_interval: 3,
    });
    let mut trainer = mlp_trainer(options);
    let mut skipped = 0;
    let mut applied = 0;
    for step in 0..30u64 {
        let (x, y) = mlp_batch(step);
        let before = trainer.read_params().unwrap();
        let scale = trainer.loss_scale().unwrap();
        let s = trainer
            .step(
                &[("x", HostSlice::F32(&x)), ("labels", HostSlice::I32(&y))],
                0.01,
            )
            .unwrap();
        let after = trainer.read_params().unwrap();
        if s.skipped {
            skipped += 1;
            assert_eq!(before, after, "a skipped step must not change parameters");
            assert_eq!(trainer.loss_scale().unwrap(), scale * 0.5);
        } else {
            applied += 1;
            assert_ne!(before, after);
        }
    }
    assert!(
        skipped >= 10,
        "1e9 overflows fp16 for at least 15 halvings: {skipped}"
    );
    assert!(applied >= 5, "{applied} steps applied");
    assert_eq!(trainer.step_count(), applied);
    // growth: after `growth_interval` finite steps the scale doubles, so it oscillates near the
    // largest value that does not overflow
    assert!(trainer.loss_scale().unwrap() < 65504.0);
}

#[test]
fn adam_eps_that_vanishes_in_fp16_is_rejected() {
    let mut options = TrainerOptions::new(Optimizer::adam());
    options.target = Target::Ane(AneArch::default());
    let mut store = ParamStore::new(1);
    let x = input("x", &[2, 3], DType::F32).unwrap();
    let w = store.ones("w", &[3]).unwrap();
    let loss = x.mul(&w).unwrap().sum(&[0, 1], false).unwrap();
    let err = Trainer::new(&loss, store.params(), &[], options).unwrap_err();
    assert!(err.to_string().contains("eps"), "{err}");
}

#[test]
fn conv_net_trains_resident_and_host_alike() {
    let build = |mode| {
        let mut store = ParamStore::new(3);
        let c = image_classifier(&mut store, 4, 1, 8, &[4, 8], 2, 3).unwrap();
        let mut options = TrainerOptions::new(Optimizer::adamw(0.01));
        options.mode = mode;
        Trainer::new(
            &c.loss,
            store.params(),
            &[("accuracy", &c.accuracy)],
            options,
        )
        .unwrap()
    };
    let (mut a, mut b) = (build(UpdateMode::Resident), build(UpdateMode::Host));
    for step in 0..5u64 {
        let mut rng = batch_rng(9, 1, step);
        let x: Vec<f32> = (0..4 * 64).map(|_| rng.random_range(0.0..1.0)).collect();
        let y: Vec<i32> = (0..4).map(|_| rng.random_range(0..3)).collect();
        let batch = [
            ("images", HostSlice::F32(&x)),
            ("labels", HostSlice::I32(&y)),
        ];
        let sa = a.step(&batch, 0.01).unwrap();
        let sb = b.step(&batch, 0.01).unwrap();
        close("conv net loss", &[sa.loss], &[sb.loss], 1e-5);
    }
    for name in a.param_names() {
        close(
            name,
            &a.read_param(name).unwrap(),
            &b.read_param(name).unwrap(),
            1e-4,
        );
    }
}

#[test]
fn bad_parameters_and_metrics_are_rejected() {
    let x = input("x", &[2, 3], DType::F32).unwrap();
    let loss = x.sum(&[0, 1], false).unwrap();
    let err = Trainer::new(
        &loss,
        std::slice::from_ref(&x),
        &[],
        TrainerOptions::new(Optimizer::adam()),
    )
    .unwrap_err();
    assert!(err.to_string().contains("not an f32 parameter"), "{err}");
    let mut store = ParamStore::new(1);
    let w = store.ones("w", &[3]).unwrap();
    let loss = x.mul(&w).unwrap().sum(&[0, 1], false).unwrap();
    let err = Trainer::new(
        &loss,
        &[w.clone(), w.clone()],
        &[],
        TrainerOptions::new(Optimizer::adam()),
    )
    .unwrap_err();
    assert!(err.to_string().contains("listed twice"), "{err}");
    let err = Trainer::new(
        &loss,
        std::slice::from_ref(&w),
        &[("wide", &x)],
        TrainerOptions::new(Optimizer::adam()),
    )
    .unwrap_err();
    assert!(err.to_string().contains("single value"), "{err}");
    let mut t = Trainer::new(&loss, &[w], &[], TrainerOptions::new(Optimizer::adam())).unwrap();
    let err = t.write_param("w", &[1.0; 2]).unwrap_err();
    assert!(err.to_string().contains("shape [3]"), "{err}");
    let err = t.read_param("nope").unwrap_err();
    assert!(err.to_string().contains("\"w\""), "{err}");
}

/// The transformer's training step lowers for the ANE target (fp16, with the target's
/// legalisation) and trains there with loss scaling, run on the CPU engine's fp16 semantics.
#[test]
fn transformer_trains_on_the_fp16_ane_target() {
    use aneforge::train::models::{gpt_training, GptConfig};
    let text = "the quick brown fox jumps over the lazy dog. ".repeat(20);
    let data = Text::new(&text);
    let cfg = GptConfig {
        vocab: data.vocab,
        context: 16,
        d_model: 32,
        heads: 2,
        layers: 2,
        mlp: 64,
    };
    let mut store = ParamStore::new(8);
    let model = gpt_training(&mut store, &cfg, 4).unwrap();
    let mut options = TrainerOptions::new(Optimizer::Adam {
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-4,
        weight_decay: 0.0,
    });
    options.target = Target::Ane(AneArch::default());
    options.loss_scale = Some(aneforge::train::LossScale {
        init: 1024.0,
        growth_interval: 1000,
    });
    let mut trainer = Trainer::new(&model.loss, store.params(), &[], options).unwrap();
    let mut losses = Vec::new();
    for step in 0..60u64 {
        let (x, y) = data.batch(4, 16, &mut batch_rng(3, 0, step));
        let s = trainer
            .step(
                &[
                    ("tokens", HostSlice::I32(&x)),
                    ("targets", HostSlice::I32(&y)),
                ],
                3e-3,
            )
            .unwrap();
        assert!(s.loss.is_finite(), "step {step}: loss {}", s.loss);
        losses.push(s.loss);
    }
    let first: f32 = losses[..5].iter().sum::<f32>() / 5.0;
    let last: f32 = losses[55..].iter().sum::<f32>() / 5.0;
    assert!(last < 0.6 * first, "fp16 training: loss {first} -> {last}");
}

/// fp16 resident AdamW keeps the second moments of small gradients (stored scaled, so their
/// squares do not underflow) and tracks fp32 AdamW; the moments read back unscaled.
#[test]
fn fp16_adamw_keeps_the_second_moments_of_small_gradients() {
    let optimizer = Optimizer::AdamW {
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-4,
        weight_decay: 0.1,
    };
    let build = |target: Target| {
        let mut store = ParamStore::new(11);
        let x = input("x", &[8, 6], DType::F32).unwrap();
        let labels = input("labels", &[8], DType::I32).unwrap();
        let logits = mlp(&mut store, &x, &[16, 4], "fc").unwrap();
        // gradients of order 1e-3: (1 − β₂)·g² is below fp16's smallest subnormal
        let loss = autograd::softmax_cross_entropy(&logits, &labels)
            .unwrap()
            .mul_scalar(0.02)
            .unwrap();
        let mut options = TrainerOptions::for_target(optimizer, target, Default::default());
        options.clip_grad_norm = Some(1.0);
        Trainer::new(&loss, store.params(), &[], options).unwrap()
    };
    let mut full = build(Target::Cpu);
    let mut half = build(Target::Ane(AneArch::default()));
    for step in 0..10u64 {
        let (x, y) = mlp_batch(step);
        let batch = [("x", HostSlice::F32(&x)), ("labels", HostSlice::I32(&y))];
        // an overflowing step is skipped with a smaller loss scale: retry the batch
        let mut tries = 0;
        while half.step(&batch, 0.01).unwrap().skipped {
            tries += 1;
            assert!(tries < 20, "step {step} keeps overflowing");
        }
        full.step(&batch, 0.01).unwrap();
    }
    assert_eq!(half.step_count(), 10);
    let a = full.checkpoint("").unwrap();
    let b = half.checkpoint("").unwrap();
    let mut tracked = 0;
    for (sa, sb) in a.state.iter().zip(&b.state) {
        assert_eq!((&sa.param, &sa.state), (&sb.param, &sb.state));
        if sa.state != "v" {
            continue;
        }
        for (i, (va, vb)) in sa.data.iter().zip(&sb.data).enumerate() {
            if *va > 1e-9 {
                tracked += 1;
                assert!(
                    (va - vb).abs() <= 0.05 * va,
                    "v of {}[{i}]: fp32 {va}, fp16 {vb}",
                    sa.param
                );
            }
        }
    }
    assert!(tracked > 100, "{tracked} second moments compared");
    // the stored scaling round-trips through a checkpoint exactly
    let mut resumed = build(Target::Ane(AneArch::default()));
    resumed.restore(&b).unwrap();
    let c = resumed.checkpoint("").unwrap();
    for (sb, sc) in b.state.iter().zip(&c.state) {
        assert_eq!(sb.data, sc.data, "{} {}", sb.param, sb.state);
    }
    for name in full.param_names() {
        close(
            &format!("{name} after 10 fp16 steps"),
            &half.read_param(name).unwrap(),
            &full.read_param(name).unwrap(),
            1e-2,
        );
    }
}
