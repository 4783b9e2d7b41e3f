//! A small CNN image classifier trained from scratch, reporting held-out accuracy: conv blocks
//! (3×3 conv → group norm → ReLU → 2×2 max pool) → global average pool → dense, AdamW.

use crate::images::ImageSet;
use aneforge::autograd::Optimizer;
use aneforge::engine::{Engine, HostSlice};
use aneforge::lower::Target;
use aneforge::train::models::image_classifier;
use aneforge::train::{Evaluator, ParamStore, TrainError, Trainer, TrainerOptions};

#[derive(Clone, Debug, PartialEq)]
pub struct ClassifierConfig {
    pub widths: Vec<usize>,
    pub norm_groups: usize,
    pub batch: usize,
    pub lr: f32,
    pub weight_decay: f32,
    /// Mirror each training image left to right with probability ½ (images whose classes are
    /// mirror-symmetric, as clothes are; not digits).
    pub hflip: bool,
    /// Decay the learning rate from `lr` to 0 along a half cosine over this many epochs
    /// (per step); `None` keeps it constant.
    pub cosine_epochs: Option<u64>,
    pub seed: u64,
}

impl ClassifierConfig {
    /// The 8×8 digits: 1,437 training images.
    pub fn digits() -> ClassifierConfig {
        ClassifierConfig {
            widths: vec![16, 32],
            norm_groups: 4,
            batch: 32,
            lr: 3e-3,
            weight_decay: 1e-4,
            hflip: false,
            cosine_epochs: None,
            seed: 0,
        }
    }

    /// Fashion-MNIST: 60,000 28×28 training images.
    pub fn fashion() -> ClassifierConfig {
        ClassifierConfig {
            widths: vec![32, 64, 128],
            norm_groups: 8,
            batch: 64,
            lr: 2e-3,
            weight_decay: 1e-4,
            hflip: true,
            cosine_epochs: None,
            seed: 0,
        }
    }
}

/// The largest evaluation batch: bounds the activations of one evaluation run.
const EVAL_BATCH: usize = 500;

/// What one epoch reports.
#[derive(Clone, Debug, PartialEq)]
pub struct EpochStats {
    pub epoch: u64,
    pub train_loss: f32,
    pub train_accuracy: f32,
}

pub struct ImageClassifier {
    cfg: ClassifierConfig,
    train: ImageSet,
    test: ImageSet,
    trainer: Trainer,
    /// Evaluators for full batches of `min(EVAL_BATCH, test images)` and for the remainder.
    eval: Vec<(usize, Evaluator)>,
    epoch: u64,
}

impl ImageClassifier {
    pub fn new(
        train: ImageSet,
        test: ImageSet,
        cfg: ClassifierConfig,
        target: Target,
        engine: Engine,
    ) -> Result<ImageClassifier, TrainError> {
        if train.len() < cfg.batch || test.is_empty() {
            return Err(TrainError::Invalid(format!(
                "{} training and {} test images are too few for batches of {}",
                train.len(),
                test.len(),
                cfg.batch
            )));
        }
        if train.side != test.side || train.classes != test.classes {
            return Err(TrainError::Invalid(format!(
                "training images are {0}×{0} in {1} classes but test images {2}×{2} in {3}",
                train.side, train.classes, test.side, test.classes
            )));
        }
        let (side, classes) = (train.side, train.classes);
        let mut store = ParamStore::new(cfg.seed);
        let c = image_classifier(
            &mut store,
            cfg.batch,
            1,
            side,
            &cfg.widths,
            cfg.norm_groups,
            classes,
        )?;
        let options =
            TrainerOptions::for_target(Optimizer::adamw(cfg.weight_decay), target.clone(), engine);
        let trainer = Trainer::new(
            &c.loss,
            store.params(),
            &[("accuracy", &c.accuracy)],
            options,
        )?;
        let full = test.len().min(EVAL_BATCH);
        let mut sizes = vec![full];
        if !test.len().is_multiple_of(full) {
            sizes.push(test.len() % full);
        }
        let mut eval = Vec::new();
        for n in sizes {
            let mut eval_store = ParamStore::new(cfg.seed);
            let e = image_classifier(
                &mut eval_store,
                n,
                1,
                side,
                &cfg.widths,
                cfg.norm_groups,
                classes,
            )?;
            let evaluator = Evaluator::new(&[("accuracy", &e.accuracy)], target.clone(), engine)?;
            eval.push((n, evaluator));
        }
        Ok(ImageClassifier {
            cfg,
            train,
            test,
            trainer,
            eval,
            epoch: 0,
        })
    }

    pub fn train_len(&self) -> usize {
        self.train.len()
    }

    pub fn test_len(&self) -> usize {
        self.test.len()
    }

    pub fn config(&self) -> &ClassifierConfig {
        &self.cfg
    }

    /// One pass over the training images in a seeded order (a last partial batch is dropped).
    pub fn epoch(&mut self) -> Result<EpochStats, TrainError> {
        self.epoch_with(|_, _| {})
    }

    /// [`epoch`](Self::epoch), calling `progress(batches done, batches)` after each step.
    pub fn epoch_with(
        &mut self,
        mut progress: impl FnMut(usize, usize),
    ) -> Result<EpochStats, TrainError> {
        let order = self.train.epoch_order(self.cfg.seed, self.epoch);
        let flips = if self.cfg.hflip {
            self.train.epoch_flips(self.cfg.seed, self.epoch)
        } else {
            vec![false; self.train.len()]
        };
        let batches = order.len() / self.cfg.batch;
        let (mut loss, mut acc, mut n) = (0.0f64, 0.0f64, 0usize);
        for (b, chunk) in order.chunks_exact(self.cfg.batch).enumerate() {
            let flip: Vec<bool> = chunk.iter().map(|&i| flips[i]).collect();
            let (x, y) = self.train.gather_flipped(chunk, &flip);
            let s = self.trainer.step(
                &[
                    ("images", HostSlice::F32(&x)),
                    ("labels", HostSlice::I32(&y)),
                ],
                self.lr_at(self.epoch as f64 + b as f64 / batches as f64),
            )?;
            loss += f64::from(s.loss);
            acc += f64::from(s.metrics[0]);
            n += 1;
            progress(n, batches);
        }
        self.epoch += 1;
        Ok(EpochStats {
            epoch: self.epoch,
            train_loss: (loss / n.max(1) as f64) as f32,
            train_accuracy: (acc / n.max(1) as f64) as f32,
        })
    }

    /// The learning rate at fractional epoch `t`.
    fn lr_at(&self, t: f64) -> f32 {
        match self.cfg.cosine_epochs {
            Some(total) if total > 0 => {
                let x = (t / total as f64).min(1.0);
                (f64::from(self.cfg.lr) * 0.5 * (1.0 + (std::f64::consts::PI * x).cos())) as f32
            }
            _ => self.cfg.lr,
        }
    }

    /// Accuracy on the held-out images.
    pub fn test_accuracy(&mut self) -> Result<f32, TrainError> {
        for (_, eval) in &mut self.eval {
            eval.load_from(&self.trainer)?;
        }
        let mut correct = 0.0f64;
        let mut start = 0;
        while start < self.test.len() {
            let left = self.test.len() - start;
            let (n, eval) = self
                .eval
                .iter_mut()
                .find(|(n, _)| *n <= left)
                .expect("the last evaluator's size divides what is left");
            let idx: Vec<usize> = (start..start + *n).collect();
            let (x, y) = self.test.gather(&idx);
            let out = eval.run(&[
                ("images", HostSlice::F32(&x)),
                ("labels", HostSlice::I32(&y)),
            ])?;
            correct += f64::from(out[0][0]) * *n as f64;
            start += *n;
        }
        Ok((correct / self.test.len() as f64) as f32)
    }
}
