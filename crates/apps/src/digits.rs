//! A small CNN trained on the 8×8 handwritten digits, reporting held-out accuracy.
//! `aneforge train-digits` drives this.

use crate::data::Digits;
use aneforge::autograd::Optimizer;
use aneforge::engine::{Engine, HostSlice};
use aneforge::lower::Target;
use aneforge::train::models::image_classifier;
use aneforge::train::{Evaluator, ParamStore, TrainError, Trainer, TrainerOptions};

#[derive(Clone, Debug, PartialEq)]
pub struct DigitsConfig {
    pub widths: Vec<usize>,
    pub norm_groups: usize,
    pub batch: usize,
    pub lr: f32,
    pub weight_decay: f32,
    pub test_fraction: f64,
    pub seed: u64,
}

impl Default for DigitsConfig {
    fn default() -> Self {
        DigitsConfig {
            widths: vec![16, 32],
            norm_groups: 4,
            batch: 32,
            lr: 3e-3,
            weight_decay: 1e-4,
            test_fraction: 0.2,
            seed: 0,
        }
    }
}

/// What one epoch reports.
#[derive(Clone, Debug, PartialEq)]
pub struct EpochStats {
    pub epoch: u64,
    pub train_loss: f32,
    pub train_accuracy: f32,
}

pub struct DigitsClassifier {
    cfg: DigitsConfig,
    train: Digits,
    test: Digits,
    trainer: Trainer,
    eval: Evaluator,
    epoch: u64,
}

impl DigitsClassifier {
    pub fn new(
        data: &Digits,
        cfg: DigitsConfig,
        target: Target,
        engine: Engine,
    ) -> Result<DigitsClassifier, TrainError> {
        let (train, test) = data.split(cfg.test_fraction, cfg.seed);
        if train.len() < cfg.batch || test.is_empty() {
            return Err(TrainError::Invalid(format!(
                "{} training and {} test images are too few for batches of {}",
                train.len(),
                test.len(),
                cfg.batch
            )));
        }
        let side = Digits::SIDE;
        let mut store = ParamStore::new(cfg.seed);
        let c = image_classifier(
            &mut store,
            cfg.batch,
            1,
            side,
            &cfg.widths,
            cfg.norm_groups,
            10,
        )?;
        let options =
            TrainerOptions::for_target(Optimizer::adamw(cfg.weight_decay), target.clone(), engine);
        let trainer = Trainer::new(
            &c.loss,
            store.params(),
            &[("accuracy", &c.accuracy)],
            options,
        )?;
        let mut eval_store = ParamStore::new(cfg.seed);
        let e = image_classifier(
            &mut eval_store,
            test.len(),
            1,
            side,
            &cfg.widths,
            cfg.norm_groups,
            10,
        )?;
        let eval = Evaluator::new(&[("accuracy", &e.accuracy)], target, engine)?;
        Ok(DigitsClassifier {
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

    /// One pass over the training images in a seeded order (a last partial batch is dropped).
    pub fn epoch(&mut self) -> Result<EpochStats, TrainError> {
        let order = self.train.epoch_order(self.cfg.seed, self.epoch);
        let (mut loss, mut acc, mut n) = (0.0f64, 0.0f64, 0usize);
        for chunk in order.chunks_exact(self.cfg.batch) {
            let (x, y) = self.train.gather(chunk);
            let s = self.trainer.step(
                &[
                    ("images", HostSlice::F32(&x)),
                    ("labels", HostSlice::I32(&y)),
                ],
                self.cfg.lr,
            )?;
            loss += f64::from(s.loss);
            acc += f64::from(s.metrics[0]);
            n += 1;
        }
        self.epoch += 1;
        Ok(EpochStats {
            epoch: self.epoch,
            train_loss: (loss / n.max(1) as f64) as f32,
            train_accuracy: (acc / n.max(1) as f64) as f32,
        })
    }

    /// Accuracy on the held-out images.
    pub fn test_accuracy(&mut self) -> Result<f32, TrainError> {
        self.eval.load_from(&self.trainer)?;
        let all: Vec<usize> = (0..self.test.len()).collect();
        let (x, y) = self.test.gather(&all);
        let out = self.eval.run(&[
            ("images", HostSlice::F32(&x)),
            ("labels", HostSlice::I32(&y)),
        ])?;
        Ok(out[0][0])
    }
}
