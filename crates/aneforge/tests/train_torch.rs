//! Training against PyTorch: an MLP, a conv net and a 2-layer transformer built by aneforge's
//! builders start from the same weights as `tools/fixtures/train/torch_train.py`, see the same
//! batches, and must match PyTorch's loss at each of 11 forward passes, every gradient at the first
//! and the eleventh pass, and every parameter after 1 and 10 optimizer steps (Adam, Adam, and AdamW
//! with gradient clipping). Gradients come from `autograd::backward`; updates run resident.

use aneforge::autograd::{self, Optimizer};
use aneforge::engine::HostSlice;
use aneforge::graph::{input, DType, Tensor};
use aneforge::train::models::{gpt_training, image_classifier, mlp, GptConfig};
use aneforge::train::{Evaluator, ParamStore, Trainer, TrainerOptions};
use aneforge::{Engine, Target};
use safetensors::SafeTensors;
use std::collections::HashMap;

struct Fixture {
    f32s: HashMap<String, (Vec<usize>, Vec<f32>)>,
    i32s: HashMap<String, Vec<i32>>,
}

impl Fixture {
    fn load(name: &str) -> Fixture {
        let path = format!(
            "{}/../../tools/fixtures/train/out/{name}.safetensors",
            env!("CARGO_MANIFEST_DIR")
        );
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let st = SafeTensors::deserialize(&bytes).unwrap();
        let mut f32s = HashMap::new();
        let mut i32s = HashMap::new();
        for (k, v) in st.tensors() {
            let words = v.data().chunks_exact(4).map(|c| [c[0], c[1], c[2], c[3]]);
            match v.dtype() {
                safetensors::Dtype::F32 => {
                    f32s.insert(
                        k,
                        (v.shape().to_vec(), words.map(f32::from_le_bytes).collect()),
                    );
                }
                safetensors::Dtype::I32 => {
                    i32s.insert(k, words.map(i32::from_le_bytes).collect());
                }
                d => panic!("{path}: tensor {k} has unexpected dtype {d:?}"),
            }
        }
        Fixture { f32s, i32s }
    }

    fn f32(&self, key: &str) -> &[f32] {
        &self
            .f32s
            .get(key)
            .unwrap_or_else(|| panic!("fixture has no {key}"))
            .1
    }

    fn initial(&self) -> HashMap<String, Vec<f32>> {
        self.f32s
            .iter()
            .filter_map(|(k, (_, v))| k.strip_prefix("init.").map(|n| (n.to_string(), v.clone())))
            .collect()
    }

    /// The feeds of batch `i`, in the order of `names`.
    fn batch(&self, i: usize, names: &[&str]) -> Vec<Feed> {
        names
            .iter()
            .map(|n| {
                let key = format!("batch{i}.{n}");
                if let Some(v) = self.i32s.get(&key) {
                    Feed::I32(v.clone())
                } else {
                    Feed::F32(self.f32(&key).to_vec())
                }
            })
            .collect()
    }
}

enum Feed {
    F32(Vec<f32>),
    I32(Vec<i32>),
}

fn slices<'a>(names: &[&'a str], feeds: &'a [Feed]) -> Vec<(&'a str, HostSlice<'a>)> {
    names
        .iter()
        .zip(feeds)
        .map(|(n, f)| {
            let s = match f {
                Feed::F32(v) => HostSlice::F32(v),
                Feed::I32(v) => HostSlice::I32(v),
            };
            (*n, s)
        })
        .collect()
}

fn close(label: &str, got: &[f32], want: &[f32], atol: f32, rtol: f32) {
    assert_eq!(got.len(), want.len(), "{label}: lengths");
    let scale = want.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= atol * scale.max(1e-3) + rtol * w.abs(),
            "{label}[{i}]: aneforge {g} vs PyTorch {w} (max |PyTorch| {scale})"
        );
    }
}

struct Case<'a> {
    name: &'a str,
    inputs: &'a [&'a str],
    loss: Tensor,
    params: Vec<Tensor>,
    optimizer: Optimizer,
    lr: f32,
    clip: Option<f32>,
}

fn check(case: Case<'_>, fixture: &Fixture) {
    let names: Vec<String> = case
        .params
        .iter()
        .map(|p| match p.op() {
            aneforge::graph::Op::Parameter { name, .. } => name.clone(),
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(
        names.len(),
        fixture.initial().len(),
        "{}: parameter count",
        case.name
    );
    let mut options = TrainerOptions::new(case.optimizer);
    options.clip_grad_norm = case.clip;
    let mut trainer = Trainer::new(&case.loss, &case.params, &[], options).unwrap();
    let grads = autograd::backward(&case.loss, &case.params).unwrap();
    let mut outputs: Vec<(String, &Tensor)> = vec![("loss".into(), &case.loss)];
    outputs.extend(names.iter().map(|n| format!("g_{n}")).zip(&grads));
    let named: Vec<(&str, &Tensor)> = outputs.iter().map(|(n, t)| (n.as_str(), *t)).collect();
    let mut eval = Evaluator::new(&named, Target::Cpu, Engine::Cpu).unwrap();
    let losses = fixture.f32("losses");
    assert_eq!(losses.len(), 11, "{}: fixture losses", case.name);
    for (pass, &want_loss) in losses.iter().enumerate() {
        let feeds = fixture.batch(pass, case.inputs);
        let batch = slices(case.inputs, &feeds);
        if pass == 0 || pass == 10 {
            eval.load_from(&trainer).unwrap();
            let out = eval.run(&batch).unwrap();
            close(
                &format!("{} loss of pass {pass}", case.name),
                &out[0],
                &[want_loss],
                0.0,
                2e-5,
            );
            for (i, n) in names.iter().enumerate() {
                close(
                    &format!("{} gradient of {n} at pass {pass}", case.name),
                    &out[i + 1],
                    fixture.f32(&format!("grad{pass}.{n}")),
                    5e-5,
                    1e-3,
                );
            }
        }
        if pass == 10 {
            break;
        }
        let stats = trainer.step(&batch, case.lr).unwrap();
        close(
            &format!("{} loss of pass {pass}", case.name),
            &[stats.loss],
            &[want_loss],
            0.0,
            2e-5,
        );
        let done = pass + 1;
        if done == 1 || done == 10 {
            for n in &names {
                let label = format!("{} {n} after {done} steps", case.name);
                let got = trainer.read_param(n).unwrap();
                let want = fixture.f32(&format!("param{done}.{n}"));
                // Where the true gradient is exactly zero (attention key biases: softmax ignores a
                // per-row constant), both sides hold rounding noise and Adam normalises it into a
                // step of up to lr; elsewhere the parameters must agree closely.
                let g0 = fixture.f32(&format!("grad0.{n}"));
                let gmax = g0.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                let noise: Vec<bool> = g0.iter().map(|g| g.abs() <= 1e-6 * gmax).collect();
                let (g_kept, w_kept): (Vec<f32>, Vec<f32>) = got
                    .iter()
                    .zip(want)
                    .zip(&noise)
                    .filter(|(_, &z)| !z)
                    .map(|((g, w), _)| (*g, *w))
                    .unzip();
                close(&label, &g_kept, &w_kept, 2e-5, 2e-4);
                for ((g, w), &z) in got.iter().zip(want).zip(&noise) {
                    if z {
                        assert!(
                            (g - w).abs() <= 2.0 * case.lr * done as f32,
                            "{label}: zero-gradient entry moved {g} vs {w}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn mlp_matches_pytorch() {
    let fixture = Fixture::load("mlp");
    let mut store = ParamStore::new(0).with_initial_values(fixture.initial());
    let x = input("x", &[8, 6], DType::F32).unwrap();
    let labels = input("labels", &[8], DType::I32).unwrap();
    let logits = mlp(&mut store, &x, &[16, 4], "fc").unwrap();
    let loss = autograd::softmax_cross_entropy(&logits, &labels).unwrap();
    let case = Case {
        name: "mlp",
        inputs: &["x", "labels"],
        loss,
        params: store.params().to_vec(),
        optimizer: Optimizer::adam(),
        lr: 1e-2,
        clip: None,
    };
    check(case, &fixture);
}

#[test]
fn conv_net_matches_pytorch() {
    let fixture = Fixture::load("cnn");
    let mut store = ParamStore::new(0).with_initial_values(fixture.initial());
    let c = image_classifier(&mut store, 4, 1, 8, &[4, 8], 2, 3).unwrap();
    let case = Case {
        name: "cnn",
        inputs: &["images", "labels"],
        loss: c.loss,
        params: store.params().to_vec(),
        optimizer: Optimizer::adam(),
        lr: 1e-2,
        clip: None,
    };
    check(case, &fixture);
}

#[test]
fn transformer_matches_pytorch() {
    let fixture = Fixture::load("gpt");
    let mut store = ParamStore::new(0).with_initial_values(fixture.initial());
    let cfg = GptConfig {
        vocab: 11,
        context: 8,
        d_model: 16,
        heads: 2,
        layers: 2,
        mlp: 32,
    };
    let model = gpt_training(&mut store, &cfg, 3).unwrap();
    let case = Case {
        name: "gpt",
        inputs: &["tokens", "targets"],
        loss: model.loss,
        params: store.params().to_vec(),
        optimizer: Optimizer::adamw(0.1),
        lr: 3e-3,
        clip: Some(1.0),
    };
    check(case, &fixture);
}
