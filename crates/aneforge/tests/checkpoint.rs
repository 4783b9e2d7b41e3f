//! Checkpoints: resuming from a saved step reproduces the uninterrupted run exactly (parameters,
//! moments, step count for bias correction, loss scale and data position), files are written
//! atomically, and damaged or mismatched files give errors naming the file.

mod text_support;

use aneforge::autograd;
use aneforge::autograd::Optimizer;
use aneforge::engine::HostSlice;
use aneforge::graph::{input, DType};
use aneforge::train::models::{gpt_training, mlp, GptConfig};
use aneforge::train::{
    batch_rng, Checkpoint, LossScale, ParamStore, Trainer, TrainerOptions, UpdateMode,
};
use rand::RngExt;
use text_support::Text;

const TEXT: &str = "to be, or not to be, that is the question: whether 'tis nobler in the mind \
to suffer the slings and arrows of outrageous fortune, or to take arms against a sea of troubles";

fn gpt_trainer(options: TrainerOptions) -> (Trainer, Text) {
    let data = Text::new(TEXT);
    let cfg = GptConfig {
        vocab: data.vocab,
        context: 8,
        d_model: 16,
        heads: 2,
        layers: 2,
        mlp: 32,
    };
    let mut store = ParamStore::new(4);
    let model = gpt_training(&mut store, &cfg, 3).unwrap();
    let trainer = Trainer::new(&model.loss, store.params(), &[], options).unwrap();
    (trainer, data)
}

/// Runs steps `from..to`; the batch of step `s` depends only on `(seed, s)`.
fn run(trainer: &mut Trainer, data: &Text, from: u64, to: u64) -> Vec<f32> {
    (from..to)
        .map(|s| {
            let (x, y) = data.batch(3, 8, &mut batch_rng(21, 0, s));
            trainer
                .step(
                    &[
                        ("tokens", HostSlice::I32(&x)),
                        ("targets", HostSlice::I32(&y)),
                    ],
                    3e-3,
                )
                .unwrap()
                .loss
        })
        .collect()
}

#[test]
fn resume_reproduces_the_uninterrupted_run() {
    for mode in [UpdateMode::Resident, UpdateMode::Host] {
        let mut options = TrainerOptions::new(Optimizer::adamw(0.1));
        options.mode = mode;
        options.clip_grad_norm = Some(1.0);
        let (mut whole, data) = gpt_trainer(options.clone());
        let want = run(&mut whole, &data, 0, 10);

        let (mut first, _) = gpt_trainer(options.clone());
        let mut losses = run(&mut first, &data, 0, 4);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ckpt.safetensors");
        let mut ckpt = first
            .checkpoint(&format!("step={}", first.step_count()))
            .unwrap();
        ckpt.metadata.insert("seed".into(), "21".into());
        ckpt.save(&path).unwrap();
        // written from the engine one tensor at a time: the same checkpoint, without the metadata
        // added above
        let other = tempfile::tempdir().unwrap();
        let streamed = other.path().join("ckpt.safetensors");
        first.save_checkpoint(&streamed, "step=4").unwrap();
        let mut plain = ckpt.clone();
        plain.metadata.clear();
        assert_eq!(Checkpoint::load(&streamed).unwrap(), plain, "{mode:?}");
        drop(first);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["ckpt.safetensors"], "no temporary files are left");

        let loaded = Checkpoint::load(&path).unwrap();
        assert_eq!(loaded, ckpt);
        assert_eq!(loaded.data_position, "step=4");
        assert_eq!(loaded.metadata["seed"], "21");
        let (mut resumed, _) = gpt_trainer(options);
        resumed.restore(&loaded).unwrap();
        assert_eq!(resumed.step_count(), 4);
        losses.extend(run(&mut resumed, &data, 4, 10));
        assert_eq!(
            losses, want,
            "{mode:?}: the loss curve continues bit for bit"
        );
        for name in whole.param_names() {
            assert_eq!(
                resumed.read_param(name).unwrap(),
                whole.read_param(name).unwrap(),
                "{mode:?}: {name}"
            );
        }
    }
}

#[test]
fn loss_scale_and_sgd_momentum_round_trip() {
    let build = || {
        let mut store = ParamStore::new(2);
        let x = input("x", &[4, 3], DType::F32).unwrap();
        let y = input("y", &[4, 2], DType::F32).unwrap();
        let out = mlp(&mut store, &x, &[5, 2], "l").unwrap();
        let loss = autograd::mse(&out, &y).unwrap();
        let mut options = TrainerOptions::new(Optimizer::sgd(0.9));
        options.loss_scale = Some(LossScale {
            init: 1024.0,
            growth_interval: 2,
        });
        Trainer::new(&loss, store.params(), &[], options).unwrap()
    };
    let batch = |s: u64| {
        let mut rng = batch_rng(1, 0, s);
        let x: Vec<f32> = (0..12).map(|_| rng.random_range(-1.0..1.0)).collect();
        let y: Vec<f32> = (0..8).map(|_| rng.random_range(-1.0..1.0)).collect();
        (x, y)
    };
    let step = |t: &mut Trainer, s: u64| {
        let (x, y) = batch(s);
        t.step(
            &[("x", HostSlice::F32(&x)), ("y", HostSlice::F32(&y))],
            0.05,
        )
        .unwrap()
        .loss
    };
    let mut a = build();
    let want: Vec<f32> = (0..7).map(|s| step(&mut a, s)).collect();
    let mut b = build();
    let mut got: Vec<f32> = (0..3).map(|s| step(&mut b, s)).collect();
    let ckpt = b.checkpoint("3").unwrap();
    assert_eq!(ckpt.loss_scale, Some((2048.0, 1)));
    assert_eq!(ckpt.state.len(), 2 * 2, "one momentum buffer per parameter");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sgd.safetensors");
    ckpt.save(&path).unwrap();
    let mut c = build();
    c.restore(&Checkpoint::load(&path).unwrap()).unwrap();
    assert_eq!(c.loss_scale(), Some(2048.0));
    got.extend((3..7).map(|s| step(&mut c, s)));
    assert_eq!(got, want);
}

#[test]
fn damaged_and_mismatched_checkpoints_are_errors() {
    let (trainer, _) = gpt_trainer(TrainerOptions::new(Optimizer::adam()));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.safetensors");
    trainer.checkpoint("0").unwrap().save(&path).unwrap();
    let bytes = std::fs::read(&path).unwrap();

    let truncated = dir.path().join("truncated.safetensors");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let err = Checkpoint::load(&truncated).unwrap_err().to_string();
    assert!(err.contains("truncated.safetensors"), "{err}");

    let err = Checkpoint::load(&dir.path().join("missing.safetensors"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("missing.safetensors"), "{err}");

    let other = aneforge::train::Checkpoint {
        optimizer: "sgd".into(),
        ..Checkpoint::load(&path).unwrap()
    };
    let (mut t2, _) = gpt_trainer(TrainerOptions::new(Optimizer::adam()));
    let err = t2.restore(&other).unwrap_err().to_string();
    assert!(err.contains("sgd"), "{err}");

    let mut wrong_shape = Checkpoint::load(&path).unwrap();
    wrong_shape.params[0].1 = vec![1, 2, 3];
    let err = t2.restore(&wrong_shape).unwrap_err().to_string();
    assert!(err.contains("shape"), "{err}");

    // NaN or inf in a parameter or in Adam's moments: refused on load, naming the tensor
    for (label, poison) in [("param", f32::NAN), ("optim", f32::INFINITY)] {
        let mut bad = Checkpoint::load(&path).unwrap();
        let tensor = if label == "param" {
            bad.params[0].2[0] = poison;
            format!("param.{}", bad.params[0].0)
        } else {
            bad.state[0].data[0] = poison;
            format!("optim.{}.{}", bad.state[0].param, bad.state[0].state)
        };
        let bad_path = dir.path().join(format!("{label}_nonfinite.safetensors"));
        bad.save(&bad_path).unwrap();
        let err = Checkpoint::load(&bad_path).unwrap_err().to_string();
        assert!(
            err.contains("non-finite")
                && err.contains(&tensor)
                && err.contains(&*bad_path.to_string_lossy()),
            "{err}"
        );
    }

    // a plain safetensors file that is not a checkpoint
    let plain = safetensors::serialize(
        [(
            "w",
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![1], &[0u8; 4])
                .unwrap(),
        )],
        None,
    )
    .unwrap();
    let plain_path = dir.path().join("plain.safetensors");
    std::fs::write(&plain_path, plain).unwrap();
    let err = Checkpoint::load(&plain_path).unwrap_err().to_string();
    assert!(
        err.contains("plain.safetensors") && err.contains("format"),
        "{err}"
    );
}
