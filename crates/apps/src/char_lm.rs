//! A character-level language model trained from scratch: the GPT decoder over a
//! [`CharDataset`], a resident AdamW trainer, a held-out validation loss, checkpoints that resume
//! the same run, and sampling. `aneforge demo` drives this.

use crate::data::{CharDataset, DataError, Split};
use aneforge::autograd::Optimizer;
use aneforge::engine::{Engine, HostSlice};
use aneforge::lower::Target;
use aneforge::train::models::{gpt, gpt_training, GptConfig};
use aneforge::train::{
    batch_rng, Checkpoint, Evaluator, ParamStore, StepStats, TrainError, Trainer, TrainerOptions,
};
use rand::RngExt;
use std::path::Path;

/// Batch streams: each step's batch and the validation batches come from their own seeds.
const TRAIN_STREAM: u64 = 0;
const VAL_STREAM: u64 = 1;

#[derive(Clone, Debug, PartialEq)]
pub struct CharLmConfig {
    pub context: usize,
    pub d_model: usize,
    pub heads: usize,
    pub layers: usize,
    pub mlp: usize,
    pub batch: usize,
    pub lr: f32,
    /// Linear warm-up of the learning rate over this many steps.
    pub warmup: u64,
    pub weight_decay: f32,
    pub clip_grad_norm: f32,
    /// The fraction of the text (its end) held out for validation.
    pub val_fraction: f64,
    pub seed: u64,
}

impl Default for CharLmConfig {
    /// The demo configuration: 4 layers, d_model 128, 4 heads, MLP 512, context 128, batch 32,
    /// AdamW 3e-4.
    fn default() -> Self {
        CharLmConfig {
            context: 128,
            d_model: 128,
            heads: 4,
            layers: 4,
            mlp: 512,
            batch: 32,
            lr: 3e-4,
            warmup: 20,
            weight_decay: 0.1,
            clip_grad_norm: 1.0,
            val_fraction: 0.1,
            seed: 1337,
        }
    }
}

impl CharLmConfig {
    pub fn gpt(&self, vocab: usize) -> GptConfig {
        GptConfig {
            vocab,
            context: self.context,
            d_model: self.d_model,
            heads: self.heads,
            layers: self.layers,
            mlp: self.mlp,
        }
    }

    /// The learning rate of step `step` (1-based).
    pub fn lr_at(&self, step: u64) -> f32 {
        if self.warmup == 0 || step >= self.warmup {
            self.lr
        } else {
            self.lr * step as f32 / self.warmup as f32
        }
    }

    /// A description stored in checkpoints, so a resume can check it continues the same run.
    pub fn fingerprint(&self, vocab: usize) -> String {
        format!(
            "vocab={vocab} context={} d_model={} heads={} layers={} mlp={} batch={} lr={} \
             warmup={} weight_decay={} clip={} val_fraction={} seed={}",
            self.context,
            self.d_model,
            self.heads,
            self.layers,
            self.mlp,
            self.batch,
            self.lr,
            self.warmup,
            self.weight_decay,
            self.clip_grad_norm,
            self.val_fraction,
            self.seed
        )
    }
}

pub struct CharLm {
    cfg: CharLmConfig,
    data: CharDataset,
    trainer: Trainer,
    val: Evaluator,
    sampler: Option<Evaluator>,
    target: Target,
    engine: Engine,
}

impl CharLm {
    pub fn new(
        data: CharDataset,
        cfg: CharLmConfig,
        target: Target,
        engine: Engine,
    ) -> Result<CharLm, TrainError> {
        let gcfg = cfg.gpt(data.vocab_size());
        let mut store = ParamStore::new(cfg.seed);
        let model = gpt_training(&mut store, &gcfg, cfg.batch)?;
        let mut options =
            TrainerOptions::for_target(Optimizer::adamw(cfg.weight_decay), target.clone(), engine);
        options.clip_grad_norm = Some(cfg.clip_grad_norm);
        let trainer = Trainer::new(&model.loss, store.params(), &[], options)?;
        let val = Evaluator::new(&[("loss", &model.loss)], target.clone(), engine)?;
        Ok(CharLm {
            cfg,
            data,
            trainer,
            val,
            sampler: None,
            target,
            engine,
        })
    }

    pub fn config(&self) -> &CharLmConfig {
        &self.cfg
    }

    pub fn data(&self) -> &CharDataset {
        &self.data
    }

    pub fn trainer(&self) -> &Trainer {
        &self.trainer
    }

    /// Steps taken so far.
    pub fn step_count(&self) -> u64 {
        self.trainer.step_count()
    }

    /// Trainable parameter count.
    pub fn param_count(&self) -> usize {
        self.cfg.gpt(self.data.vocab_size()).params()
    }

    /// Characters per step.
    pub fn tokens_per_step(&self) -> usize {
        self.cfg.batch * self.cfg.context
    }

    fn batch(
        &self,
        split: Split,
        stream: u64,
        index: u64,
    ) -> Result<(Vec<i32>, Vec<i32>), DataError> {
        let mut rng = batch_rng(self.cfg.seed, stream, index);
        self.data
            .batch(split, self.cfg.batch, self.cfg.context, &mut rng)
    }

    /// One training step on the next batch (a function of the seed and the step number).
    pub fn step(&mut self) -> Result<StepStats, TrainError> {
        let next = self.trainer.step_count() + 1;
        let (x, y) = self
            .batch(Split::Train, TRAIN_STREAM, next)
            .map_err(|e| TrainError::Invalid(e.to_string()))?;
        let lr = self.cfg.lr_at(next);
        self.trainer.step(
            &[
                ("tokens", HostSlice::I32(&x)),
                ("targets", HostSlice::I32(&y)),
            ],
            lr,
        )
    }

    /// The `index`-th fixed held-out batch: tokens and next-character targets, each
    /// `batch × context` ids.
    pub fn validation_batch(&self, index: u64) -> Result<(Vec<i32>, Vec<i32>), TrainError> {
        self.batch(Split::Validation, VAL_STREAM, index)
            .map_err(|e| TrainError::Invalid(e.to_string()))
    }

    /// The mean loss over the first `batches` fixed held-out batches.
    pub fn val_loss(&mut self, batches: u64) -> Result<f32, TrainError> {
        if batches == 0 {
            return Err(TrainError::Invalid(
                "the validation loss needs at least 1 validation batch, found 0".into(),
            ));
        }
        self.val.load_from(&self.trainer)?;
        let mut total = 0.0f64;
        for i in 0..batches {
            let (x, y) = self.validation_batch(i)?;
            let out = self.val.run(&[
                ("tokens", HostSlice::I32(&x)),
                ("targets", HostSlice::I32(&y)),
            ])?;
            total += f64::from(out[0][0]);
        }
        Ok((total / batches as f64) as f32)
    }

    /// Saves parameters, AdamW state, the step (which is also the data position) and the
    /// configuration.
    pub fn save(&self, path: &Path) -> Result<(), TrainError> {
        let mut ckpt = self
            .trainer
            .checkpoint(&format!("train_batch={}", self.trainer.step_count()))?;
        ckpt.metadata.insert(
            "config".into(),
            self.cfg.fingerprint(self.data.vocab_size()),
        );
        ckpt.metadata
            .insert("vocab".into(), self.data.vocab().iter().collect());
        ckpt.save(path)?;
        Ok(())
    }

    /// Continues from a checkpoint saved by [`CharLm::save`] with the same configuration.
    pub fn resume(&mut self, path: &Path) -> Result<(), TrainError> {
        let ckpt = Checkpoint::load(path)?;
        let want = self.cfg.fingerprint(self.data.vocab_size());
        match ckpt.metadata.get("config") {
            Some(c) if *c == want => {}
            Some(c) => {
                return Err(TrainError::Invalid(format!(
                    "{} was made with a different configuration ({c}); this run is {want}",
                    path.display()
                )))
            }
            None => {
                return Err(TrainError::Invalid(format!(
                    "{} has no configuration record",
                    path.display()
                )))
            }
        }
        self.trainer.restore(&ckpt)
    }

    /// A sampling temperature [`CharLm::sample`] accepts: finite and >= 0.
    pub fn check_temperature(temperature: f32) -> Result<(), TrainError> {
        if temperature.is_finite() && temperature >= 0.0 {
            return Ok(());
        }
        Err(TrainError::Invalid(format!(
            "temperature must be a finite number >= 0, found {temperature}"
        )))
    }

    /// Continues `prompt` by `chars` characters sampled at `temperature` (0 is greedy).
    pub fn sample(
        &mut self,
        prompt: &str,
        chars: usize,
        temperature: f32,
        seed: u64,
    ) -> Result<String, TrainError> {
        Self::check_temperature(temperature)?;
        let t = self.cfg.context;
        let v = self.data.vocab_size();
        if self.sampler.is_none() {
            let mut store = ParamStore::new(0);
            let g = gpt(&mut store, &self.cfg.gpt(v), 1)?;
            self.sampler = Some(Evaluator::new(
                &[("logits", &g.logits)],
                self.target.clone(),
                self.engine,
            )?);
        }
        let sampler = self
            .sampler
            .as_mut()
            .ok_or_else(|| TrainError::Invalid("the sampling program is missing".into()))?;
        sampler.load_from(&self.trainer)?;
        let mut ids = self
            .data
            .encode(prompt)
            .map_err(|e| TrainError::Invalid(e.to_string()))?;
        if ids.is_empty() {
            ids.push(0);
        }
        let mut rng = batch_rng(seed, 2, 0);
        let mut out = Vec::with_capacity(chars);
        let mut window = vec![0i32; t];
        for _ in 0..chars {
            let start = ids.len().saturating_sub(t);
            let ctx = &ids[start..];
            window[..ctx.len()].copy_from_slice(ctx);
            let logits = sampler.run(&[("tokens", HostSlice::I32(&window))])?;
            let row = &logits[0][(ctx.len() - 1) * v..ctx.len() * v];
            let next = pick(row, temperature, &mut rng).ok_or_else(|| {
                TrainError::Invalid(
                    "the model's logits are not finite; it cannot be sampled".into(),
                )
            })?;
            ids.push(next as i32);
            out.push(next as i32);
        }
        Ok(self.data.decode(&out))
    }
}

/// The next id; `None` when the logits give no finite distribution.
fn pick(logits: &[f32], temperature: f32, rng: &mut rand::rngs::StdRng) -> Option<usize> {
    let best =
        logits.iter().enumerate().fold(
            (0, f32::NEG_INFINITY),
            |b, (i, &x)| if x > b.1 { (i, x) } else { b },
        );
    if logits.iter().any(|x| !x.is_finite()) {
        return None;
    }
    if temperature <= 0.0 {
        return Some(best.0);
    }
    let weights: Vec<f64> = logits
        .iter()
        .map(|&x| (f64::from(x - best.1) / f64::from(temperature)).exp())
        .collect();
    let total: f64 = weights.iter().sum();
    if !(total.is_finite() && total > 0.0) {
        return None;
    }
    let mut r = rng.random_range(0.0..total);
    for (i, w) in weights.iter().enumerate() {
        if r < *w {
            return Some(i);
        }
        r -= w;
    }
    Some(best.0)
}
