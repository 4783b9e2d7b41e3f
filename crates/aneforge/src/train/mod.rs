//! Training with resident state: one compiled program per step holds forward, backward and the
//! optimizer update, with every parameter and optimizer moment bound output→input by
//! `share_buffer`, so a step feeds only the batch and a few scalars (learning rate, bias
//! corrections, loss scale). Parameters are read back on demand. A host-optimizer mode (the
//! program returns gradients; the update runs on the host) exists for comparison.
//!
//! Program ports of a resident step:
//! - inputs: the graph's own inputs (the batch), `lr`, `bias_correction1`/`bias_correction2`
//!   (Adam, AdamW), `loss_scale` (with loss scaling), every parameter `p`, and every optimizer
//!   state `p__m`, `p__v` (Adam) or `p__momentum` (SGD);
//! - outputs: `loss`, the metrics, `p__next`, `p__m__next` ... , and `grads_finite` (with loss
//!   scaling: 1 when every gradient was finite and the update was applied, 0 when it was skipped).
//!
//! With gradient accumulation over `k` micro-batches, each parameter also has the resident state
//! `p__grad_acc` (the gradients summed so far) and the program the bool input `apply_update`:
//! the first `k − 1` calls of [`Trainer::step`] only add their gradients, the `k`-th updates with
//! the sum and clears it. The loss must be a sum over the micro-batches (weights normalised over
//! all `k`, as transformers does with `num_items_in_batch`).

mod batches;
mod checkpoint;
mod init;
pub mod models;
mod schedule;

pub use batches::{batch_rng, windows};
pub use checkpoint::{Checkpoint, CheckpointError, NamedArray, StateTensor};
pub use init::{fan_in, ParamStore, WeightLayout};
pub use schedule::{LrSchedule, ScheduleError, ScheduleKind};

use crate::autograd::optim::StepScalars;
use crate::autograd::{self, AutogradError, GradOptions, Optimizer, Segment};
use crate::engine::{Engine, HostSlice};
use crate::graph::{input, DType, GraphError, Op, Tensor};
use crate::lower::Target;
use crate::model::{compile_named, CompileOptions, Error as ModelError, Model};
use std::borrow::Cow;
use std::collections::HashSet;
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error(transparent)]
    Graph(#[from] GraphError),
    #[error(transparent)]
    Autograd(#[from] AutogradError),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error("trainer: {0}")]
    Invalid(String),
}

/// Where the optimizer update runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UpdateMode {
    /// Inside the step program, with parameters and moments resident in the engine.
    #[default]
    Resident,
    /// On the host: the program returns gradients, the host keeps parameters and moments.
    Host,
}

/// Dynamic loss scaling for fp16 targets (PyTorch `GradScaler` semantics): the loss gradient is
/// seeded with `scale`; a step whose gradients overflow is skipped and halves the scale, and
/// `growth_interval` finite steps in a row double it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LossScale {
    pub init: f32,
    pub growth_interval: u32,
}

impl Default for LossScale {
    fn default() -> Self {
        LossScale {
            init: 65536.0,
            growth_interval: 2000,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct TrainerOptions {
    pub optimizer: Optimizer,
    /// Clip gradients to this global L2 norm.
    pub clip_grad_norm: Option<f32>,
    pub loss_scale: Option<LossScale>,
    pub mode: UpdateMode,
    pub target: Target,
    pub engine: Engine,
    /// Micro-batches whose gradients are summed into one update (1: none); resident mode only.
    pub accumulation_steps: u32,
    /// Stretches of the forward (e.g. one per decoder layer) recomputed in the backward from
    /// their inputs instead of kept from the forward: less memory for the step's activations,
    /// about one more forward of compute (`autograd::Segment`). Used to compile the step; a
    /// [`Trainer`]'s options no longer hold them (they hold the graph, and with it the
    /// parameters' initial values).
    pub recompute: Vec<Segment>,
}

impl TrainerOptions {
    /// Options for `target`: on an fp16 target (the ANE), Adam's eps is raised to 1e-4 (1e-8 is
    /// zero in fp16) and dynamic loss scaling is on.
    pub fn for_target(optimizer: Optimizer, target: Target, engine: Engine) -> TrainerOptions {
        let half = target.float_dtype() == aneforge_mil::DType::Fp16;
        let optimizer = match optimizer {
            Optimizer::Adam {
                beta1,
                beta2,
                eps,
                weight_decay,
            } if half => Optimizer::Adam {
                beta1,
                beta2,
                eps: eps.max(FP16_ADAM_EPS),
                weight_decay,
            },
            Optimizer::AdamW {
                beta1,
                beta2,
                eps,
                weight_decay,
            } if half => Optimizer::AdamW {
                beta1,
                beta2,
                eps: eps.max(FP16_ADAM_EPS),
                weight_decay,
            },
            other => other,
        };
        TrainerOptions {
            loss_scale: half.then(LossScale::default),
            target,
            engine,
            ..TrainerOptions::new(optimizer)
        }
    }

    pub fn new(optimizer: Optimizer) -> TrainerOptions {
        TrainerOptions {
            optimizer,
            clip_grad_norm: None,
            loss_scale: None,
            mode: UpdateMode::Resident,
            target: Target::Cpu,
            engine: Engine::Cpu,
            accumulation_steps: 1,
            recompute: Vec::new(),
        }
    }
}

/// What one step reports.
#[derive(Clone, Debug, PartialEq)]
pub struct StepStats {
    pub loss: f32,
    /// The metrics, in the order given to [`Trainer::new`].
    pub metrics: Vec<f32>,
    /// With loss scaling: the gradients overflowed and the update was skipped.
    pub skipped: bool,
    /// The parameters were updated (false for a skipped step and for the micro-batches before
    /// the last of an accumulation).
    pub updated: bool,
}

#[derive(Clone, Debug)]
struct Slot {
    name: String,
    shape: Vec<usize>,
}

#[derive(Clone, Debug)]
struct ScaleState {
    scale: f32,
    good_steps: u32,
}

struct HostState {
    params: Vec<Vec<f32>>,
    /// Per parameter, per optimizer state.
    state: Vec<Vec<Vec<f32>>>,
}

/// The smallest Adam eps [`TrainerOptions::for_target`] uses on fp16 targets.
pub const FP16_ADAM_EPS: f32 = 1e-4;

/// Port names of the step program.
pub const LR: &str = "lr";
pub const BIAS_CORRECTION1: &str = "bias_correction1";
pub const BIAS_CORRECTION2: &str = "bias_correction2";
pub const LOSS_SCALE: &str = "loss_scale";
pub const LOSS: &str = "loss";
pub const GRADS_FINITE: &str = "grads_finite";
pub const APPLY_UPDATE: &str = "apply_update";
/// The accumulated-gradient state of a parameter (`p__grad_acc`).
const GRAD_ACC: &str = "grad_acc";

fn next_name(name: &str) -> String {
    format!("{name}__next")
}

fn state_name(param: &str, state: &str) -> String {
    format!("{param}__{state}")
}

fn grad_name(param: &str) -> String {
    format!("{param}__grad")
}

pub struct Trainer {
    model: Model,
    slots: Vec<Slot>,
    metric_names: Vec<String>,
    options: TrainerOptions,
    step: u64,
    /// Micro-batches accumulated since the last update.
    micro: u32,
    scale: Option<ScaleState>,
    host: Option<HostState>,
}

impl std::fmt::Debug for Trainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trainer")
            .field("params", &self.slots.len())
            .field("step", &self.step)
            .field("options", &self.options)
            .finish()
    }
}

/// The parameter leaves `loss` depends on, in topological order.
pub fn parameters_of(loss: &Tensor) -> Vec<Tensor> {
    crate::graph::topo_order(std::slice::from_ref(loss))
        .into_iter()
        .filter(|t| matches!(t.op(), Op::Parameter { .. }))
        .collect()
}

fn param_name(p: &Tensor) -> Result<String, TrainError> {
    match p.op() {
        Op::Parameter { name, .. } if p.dtype() == DType::F32 => Ok(name.clone()),
        _ => Err(TrainError::Invalid(format!(
            "{p:?} is not an f32 parameter leaf; only `parameter` tensors can be trained"
        ))),
    }
}

fn scalar_input(name: &str) -> Result<Tensor, GraphError> {
    input(name, &[], DType::F32)
}

impl Trainer {
    /// Compiles the training step for `loss` over the trainable `params` (parameter leaves);
    /// `metrics` are extra scalar outputs reported each step (e.g. accuracy).
    pub fn new(
        loss: &Tensor,
        params: &[Tensor],
        metrics: &[(&str, &Tensor)],
        mut options: TrainerOptions,
    ) -> Result<Trainer, TrainError> {
        if let Optimizer::Adam { eps, .. } | Optimizer::AdamW { eps, .. } = options.optimizer {
            if options.target.float_dtype() == aneforge_mil::DType::Fp16
                && eps < half::f16::MIN_POSITIVE.to_f32()
            {
                return Err(TrainError::Invalid(format!(
                    "Adam eps {eps} is below fp16's smallest normal value on target {}, so the \
                     update divides by zero where the second moment underflows; use eps >= 1e-4",
                    options.target
                )));
            }
        }
        let accumulate = options.accumulation_steps > 1;
        if options.accumulation_steps == 0
            || (accumulate && (options.mode == UpdateMode::Host || options.loss_scale.is_some()))
        {
            return Err(TrainError::Invalid(format!(
                "gradient accumulation over {} micro-batches: needs at least 1, and more than 1 \
                 is supported in resident mode without loss scaling",
                options.accumulation_steps
            )));
        }
        let mut seen = HashSet::new();
        let mut slots = Vec::with_capacity(params.len());
        for p in params {
            let name = param_name(p)?;
            if !seen.insert(name.clone()) {
                return Err(TrainError::Invalid(format!(
                    "parameter {name:?} is listed twice"
                )));
            }
            slots.push(Slot {
                name,
                shape: p.shape().to_vec(),
            });
        }
        let scale_in = match options.loss_scale {
            Some(_) => Some(scalar_input(LOSS_SCALE)?),
            None => None,
        };
        let raw = autograd::backward_with(
            loss,
            params,
            &GradOptions {
                seed: scale_in.clone(),
                frontier: Vec::new(),
                recompute: std::mem::take(&mut options.recompute),
            },
        )?;
        let mut grads = match &scale_in {
            Some(s) => {
                let inv = s.recip()?;
                raw.iter().map(|g| g.mul(&inv)).collect::<Result<_, _>>()?
            }
            None => raw,
        };
        let finite = match &scale_in {
            Some(_) => Some(all_finite(&grads)?),
            None => None,
        };
        if let Some(max_norm) = options.clip_grad_norm {
            grads = autograd::clip_by_global_norm(&grads, max_norm)?.0;
        }
        let mut outputs: Vec<(String, Tensor)> = vec![(LOSS.to_string(), loss.clone())];
        for (name, m) in metrics {
            if m.len() != 1 {
                return Err(TrainError::Invalid(format!(
                    "metric {name:?} must be a single value, found shape {:?}",
                    m.shape()
                )));
            }
            outputs.push((name.to_string(), (*m).clone()));
        }
        if let Some(ok) = &finite {
            outputs.push((GRADS_FINITE.to_string(), ok.cast(DType::F32)?));
        }
        let opt = options.optimizer;
        match options.mode {
            UpdateMode::Host => {
                for (slot, g) in slots.iter().zip(&grads) {
                    outputs.push((grad_name(&slot.name), g.clone()));
                }
            }
            UpdateMode::Resident => {
                let scalars = StepScalars {
                    lr: scalar_input(LR)?,
                    bias_correction1: opt
                        .uses_bias_correction()
                        .then(|| scalar_input(BIAS_CORRECTION1))
                        .transpose()?,
                    bias_correction2: opt
                        .uses_bias_correction()
                        .then(|| scalar_input(BIAS_CORRECTION2))
                        .transpose()?,
                    second_moment_scale: second_moment_scale(&options),
                    second_moment_max: float_max(&options),
                };
                let apply = if accumulate {
                    Some(
                        scalar_input(APPLY_UPDATE)?
                            .compare_scalar(crate::graph::CompareOp::NotEqual, 0.0)?,
                    )
                } else {
                    None
                };
                for ((slot, p), g) in slots.iter().zip(params).zip(&grads) {
                    let summed;
                    let g = match &apply {
                        Some(apply) => {
                            let acc_name = state_name(&slot.name, GRAD_ACC);
                            let acc = input(&acc_name, &slot.shape, DType::F32)?;
                            summed = acc.add(g)?;
                            let cleared = summed.mul_scalar(0.0)?;
                            outputs.push((next_name(&acc_name), apply.select(&cleared, &summed)?));
                            &summed
                        }
                        None => g,
                    };
                    let state: Vec<Tensor> = opt
                        .state_names()
                        .iter()
                        .map(|s| input(&state_name(&slot.name, s), &slot.shape, DType::F32))
                        .collect::<Result<_, _>>()?;
                    let (mut next, mut next_state) = opt.update(p, g, &state, &scalars)?;
                    if let Some(ok) = finite.as_ref().or(apply.as_ref()) {
                        next = ok.select(&next, p)?;
                        next_state = next_state
                            .iter()
                            .zip(&state)
                            .map(|(n, old)| ok.select(n, old))
                            .collect::<Result<_, _>>()?;
                    }
                    outputs.push((next_name(&slot.name), next));
                    for (s, t) in opt.state_names().iter().zip(next_state) {
                        outputs.push((next_name(&state_name(&slot.name, s)), t));
                    }
                }
            }
        }
        let named: Vec<(&str, &Tensor)> = outputs.iter().map(|(n, t)| (n.as_str(), t)).collect();
        let compile_options = CompileOptions {
            target: options.target.clone(),
            engine: options.engine,
            ..CompileOptions::default()
        };
        let mut model = compile_named(&named, &compile_options)?;
        let host = match options.mode {
            UpdateMode::Resident => {
                for slot in &slots {
                    let zeros = vec![0.0f32; slot.shape.iter().product()];
                    let acc: &[&str] = if accumulate { &[GRAD_ACC] } else { &[] };
                    for s in opt.state_names().iter().chain(acc) {
                        let name = state_name(&slot.name, s);
                        model.set_input(&name, HostSlice::F32(&zeros))?;
                        model.share_buffer(&next_name(&name), &name)?;
                    }
                    model.share_buffer(&next_name(&slot.name), &slot.name)?;
                }
                None
            }
            UpdateMode::Host => {
                let values = params
                    .iter()
                    .map(|p| match p.op() {
                        Op::Parameter { init, .. } => init.as_f32().map(<[f32]>::to_vec),
                        _ => None,
                    })
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| TrainError::Invalid("parameters must be f32".into()))?;
                let state = slots
                    .iter()
                    .map(|s| {
                        let n: usize = s.shape.iter().product();
                        vec![vec![0.0f32; n]; opt.state_names().len()]
                    })
                    .collect();
                Some(HostState {
                    params: values,
                    state,
                })
            }
        };
        // the engine holds the parameters now (resident state, or fed from the host state each
        // step): the artifact's initial values would be a second copy of every parameter
        model.release_parameter_values();
        Ok(Trainer {
            model,
            slots,
            metric_names: metrics.iter().map(|(n, _)| n.to_string()).collect(),
            scale: options.loss_scale.map(|s| ScaleState {
                scale: s.init,
                good_steps: 0,
            }),
            options,
            step: 0,
            micro: 0,
            host,
        })
    }

    /// Optimizer steps applied so far (skipped overflow steps do not count).
    pub fn step_count(&self) -> u64 {
        self.step
    }

    pub fn options(&self) -> &TrainerOptions {
        &self.options
    }

    /// The current loss scale (with loss scaling).
    pub fn loss_scale(&self) -> Option<f32> {
        self.scale.as_ref().map(|s| s.scale)
    }

    /// The compiled step program.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The number of trained values (the elements of every parameter).
    pub fn parameter_count(&self) -> usize {
        self.slots
            .iter()
            .map(|s| s.shape.iter().product::<usize>())
            .sum()
    }

    pub fn param_names(&self) -> Vec<&str> {
        self.slots.iter().map(|s| s.name.as_str()).collect()
    }

    fn slot(&self, name: &str) -> Result<usize, TrainError> {
        self.slots
            .iter()
            .position(|s| s.name == name)
            .ok_or_else(|| {
                TrainError::Invalid(format!(
                    "no trainable parameter named {name:?}; the parameters are {:?}",
                    self.param_names()
                ))
            })
    }

    /// Feeds `batch`, runs one step at learning rate `lr`, and reports the loss and metrics.
    pub fn step(
        &mut self,
        batch: &[(&str, HostSlice<'_>)],
        lr: f32,
    ) -> Result<StepStats, TrainError> {
        let opt = self.options.optimizer;
        let t = self.step + 1;
        if !(lr.is_finite() && lr >= 0.0) {
            return Err(TrainError::Invalid(format!(
                "step {t}: the learning rate must be a finite number >= 0, found {lr}"
            )));
        }
        for (name, data) in batch {
            self.model.set_input(name, *data)?;
        }
        if let Some(s) = &self.scale {
            self.model
                .set_input(LOSS_SCALE, HostSlice::F32(&[s.scale]))?;
        }
        let k = self.options.accumulation_steps;
        let apply = self.micro + 1 >= k;
        if k > 1 {
            let flag = if apply { 1.0 } else { 0.0 };
            self.model
                .set_input(APPLY_UPDATE, HostSlice::F32(&[flag]))?;
        }
        if let Some(host) = &self.host {
            for (slot, values) in self.slots.iter().zip(&host.params) {
                self.model.set_input(&slot.name, HostSlice::F32(values))?;
            }
        } else {
            self.model.set_input(LR, HostSlice::F32(&[lr]))?;
            if opt.uses_bias_correction() {
                let (b1, b2) = opt.bias_corrections(t);
                self.model
                    .set_input(BIAS_CORRECTION1, HostSlice::F32(&[b1]))?;
                self.model
                    .set_input(BIAS_CORRECTION2, HostSlice::F32(&[b2]))?;
            }
        }
        self.model.execute()?;
        let loss = self.read_scalar(LOSS)?;
        let metrics = self
            .metric_names
            .iter()
            .map(|m| self.read_scalar(m))
            .collect::<Result<_, _>>()?;
        let finite = match self.scale {
            Some(_) => self.read_scalar(GRADS_FINITE)? != 0.0,
            None => true,
        };
        // loss scaling skips a step whose gradients overflowed; anything else non-finite is a
        // run gone bad, and the caller must not save what it now holds
        if finite && !loss.is_finite() {
            return Err(TrainError::Invalid(format!(
                "step {t}: the loss is {loss}; training stopped (the parameters may no longer be \
                 finite, so do not save them)"
            )));
        }
        if finite && !apply {
            self.micro += 1;
            return Ok(StepStats {
                loss,
                metrics,
                skipped: false,
                updated: false,
            });
        }
        self.micro = 0;
        if finite {
            if let Some(host) = &mut self.host {
                for (i, slot) in self.slots.iter().enumerate() {
                    let g = self.model.read_output_f32(&grad_name(&slot.name))?;
                    opt.update_host(&mut host.params[i], &g, &mut host.state[i], lr, t);
                }
            }
            self.step = t;
        }
        if let (Some(s), Some(cfg)) = (&mut self.scale, self.options.loss_scale) {
            if finite {
                s.good_steps += 1;
                if s.good_steps >= cfg.growth_interval {
                    s.scale *= 2.0;
                    s.good_steps = 0;
                }
            } else {
                s.scale *= 0.5;
                s.good_steps = 0;
            }
        }
        Ok(StepStats {
            loss,
            metrics,
            skipped: !finite,
            updated: finite,
        })
    }

    fn read_scalar(&self, name: &str) -> Result<f32, TrainError> {
        let v = self.model.read_output_f32(name)?;
        v.first()
            .copied()
            .ok_or_else(|| TrainError::Invalid(format!("output {name:?} is empty")))
    }

    /// The current value of a parameter.
    pub fn read_param(&self, name: &str) -> Result<Vec<f32>, TrainError> {
        let i = self.slot(name)?;
        match &self.host {
            Some(h) => Ok(h.params[i].clone()),
            None => Ok(self.model.read_output_f32(&next_name(name))?),
        }
    }

    /// Every parameter as `(name, shape, values)`, in the trainer's order.
    pub fn read_params(&self) -> Result<Vec<NamedArray>, TrainError> {
        self.slots
            .iter()
            .map(|s| Ok((s.name.clone(), s.shape.clone(), self.read_param(&s.name)?)))
            .collect()
    }

    /// Overwrites a parameter.
    pub fn write_param(&mut self, name: &str, values: &[f32]) -> Result<(), TrainError> {
        let i = self.slot(name)?;
        let n: usize = self.slots[i].shape.iter().product();
        if values.len() != n {
            return Err(TrainError::Invalid(format!(
                "parameter {name:?} has shape {:?} ({n} values) but {} were given",
                self.slots[i].shape,
                values.len()
            )));
        }
        match &mut self.host {
            Some(h) => h.params[i] = values.to_vec(),
            None => self.model.set_input(name, HostSlice::F32(values))?,
        }
        Ok(())
    }

    /// The factor between state `s` as stored in the step program and its PyTorch value.
    fn stored_state_factor(&self, s: usize) -> f32 {
        let k = second_moment_scale(&self.options);
        if self.host.is_none() && self.options.optimizer.state_names()[s] == "v" {
            k * k
        } else {
            1.0
        }
    }

    fn read_state(&self, i: usize, s: usize) -> Result<Vec<f32>, TrainError> {
        match &self.host {
            Some(h) => Ok(h.state[i][s].clone()),
            None => {
                let state = self.options.optimizer.state_names()[s];
                let mut values = self
                    .model
                    .read_output_f32(&next_name(&state_name(&self.slots[i].name, state)))?;
                let factor = self.stored_state_factor(s);
                if factor != 1.0 {
                    values.iter_mut().for_each(|v| *v /= factor);
                }
                Ok(values)
            }
        }
    }

    fn write_state(&mut self, i: usize, s: usize, values: &[f32]) -> Result<(), TrainError> {
        match &mut self.host {
            Some(h) => h.state[i][s] = values.to_vec(),
            None => {
                let state = self.options.optimizer.state_names()[s];
                let name = state_name(&self.slots[i].name, state);
                let factor = self.stored_state_factor(s);
                if factor == 1.0 {
                    self.model.set_input(&name, HostSlice::F32(values))?;
                } else {
                    let max = float_max(&self.options);
                    let stored: Vec<f32> = values.iter().map(|v| (v * factor).min(max)).collect();
                    self.model.set_input(&name, HostSlice::F32(&stored))?;
                }
            }
        }
        Ok(())
    }

    /// A snapshot of parameters, optimizer state, step and loss scale; `data_position` records
    /// where the data stream is, for resuming it.
    pub fn checkpoint(&self, data_position: &str) -> Result<Checkpoint, TrainError> {
        self.between_updates()?;
        let mut state = Vec::new();
        for (i, slot) in self.slots.iter().enumerate() {
            for (s, sname) in self.options.optimizer.state_names().iter().enumerate() {
                state.push(StateTensor {
                    param: slot.name.clone(),
                    state: sname.to_string(),
                    shape: slot.shape.clone(),
                    data: self.read_state(i, s)?,
                });
            }
        }
        Ok(Checkpoint {
            step: self.step,
            optimizer: self.options.optimizer.name().to_string(),
            params: self.read_params()?,
            state,
            loss_scale: self.scale.as_ref().map(|s| (s.scale, s.good_steps)),
            data_position: data_position.to_string(),
            metadata: Default::default(),
        })
    }

    /// Writes [`Trainer::checkpoint`]'s checkpoint to `path` as [`Checkpoint::save`] writes it,
    /// reading one tensor at a time from the engine instead of copying every parameter and
    /// optimizer state first.
    pub fn save_checkpoint(&self, path: &Path, data_position: &str) -> Result<(), TrainError> {
        self.between_updates()?;
        let states = self.options.optimizer.state_names();
        let metadata = Default::default();
        let layout = checkpoint::Layout {
            step: self.step,
            optimizer: self.options.optimizer.name(),
            params: self
                .slots
                .iter()
                .map(|s| (s.name.as_str(), s.shape.as_slice()))
                .collect(),
            state: self
                .slots
                .iter()
                .flat_map(|s| {
                    states
                        .iter()
                        .map(move |state| (s.name.as_str(), *state, s.shape.as_slice()))
                })
                .collect(),
            loss_scale: self.scale.as_ref().map(|s| (s.scale, s.good_steps)),
            data_position,
            metadata: &metadata,
        };
        let n = self.slots.len();
        layout.write(path, |k| {
            let values = match k.checked_sub(n) {
                None => self.read_param(&self.slots[k].name),
                Some(j) => self.read_state(j / states.len(), j % states.len()),
            };
            values.map(Cow::Owned).map_err(std::io::Error::other)
        })?;
        Ok(())
    }

    fn between_updates(&self) -> Result<(), TrainError> {
        if self.micro != 0 {
            return Err(TrainError::Invalid(format!(
                "a checkpoint is taken between updates; {} of {} micro-batches are accumulated",
                self.micro, self.options.accumulation_steps
            )));
        }
        Ok(())
    }

    /// Loads a checkpoint made for the same model and optimizer kind.
    pub fn restore(&mut self, ckpt: &Checkpoint) -> Result<(), TrainError> {
        if ckpt.optimizer != self.options.optimizer.name() {
            return Err(TrainError::Invalid(format!(
                "the checkpoint was made with {} but this trainer uses {}",
                ckpt.optimizer,
                self.options.optimizer.name()
            )));
        }
        for slot in self.slots.clone() {
            let (_, shape, values) = ckpt
                .params
                .iter()
                .find(|(n, _, _)| *n == slot.name)
                .ok_or_else(|| {
                    TrainError::Invalid(format!("the checkpoint has no parameter {:?}", slot.name))
                })?;
            if *shape != slot.shape {
                return Err(TrainError::Invalid(format!(
                    "checkpoint parameter {:?} has shape {shape:?}, the model's is {:?}",
                    slot.name, slot.shape
                )));
            }
            self.write_param(&slot.name, values)?;
        }
        for (i, slot) in self.slots.clone().iter().enumerate() {
            for (s, sname) in self.options.optimizer.state_names().iter().enumerate() {
                let t = ckpt
                    .state
                    .iter()
                    .find(|t| t.param == slot.name && t.state == *sname)
                    .ok_or_else(|| {
                        TrainError::Invalid(format!(
                            "the checkpoint has no {sname} state for {:?}",
                            slot.name
                        ))
                    })?;
                if t.shape != slot.shape {
                    return Err(TrainError::Invalid(format!(
                        "checkpoint state {sname} of {:?} has shape {:?}, expected {:?}",
                        slot.name, t.shape, slot.shape
                    )));
                }
                self.write_state(i, s, &t.data)?;
            }
        }
        self.step = ckpt.step;
        if let (Some(s), Some((scale, good))) = (&mut self.scale, ckpt.loss_scale) {
            s.scale = scale;
            s.good_steps = good;
        }
        Ok(())
    }
}

/// `K` of [`StepScalars::second_moment_scale`]: 2⁸ in fp16 step programs (with clipping to
/// norm 1 every |g| ≤ 1, so `K²·v` stays below fp16's maximum; squares stay normal down to
/// |g| ≈ 1e-3), 1 in fp32.
fn second_moment_scale(options: &TrainerOptions) -> f32 {
    if options.target.float_dtype() == aneforge_mil::DType::Fp16 {
        256.0
    } else {
        1.0
    }
}

/// The largest finite value of the step program's float type.
fn float_max(options: &TrainerOptions) -> f32 {
    if options.target.float_dtype() == aneforge_mil::DType::Fp16 {
        half::f16::MAX.to_f32()
    } else {
        f32::MAX
    }
}

/// A bool scalar: every element of every gradient is finite (`inf·0` and `nan·0` are NaN).
fn all_finite(grads: &[Tensor]) -> Result<Tensor, GraphError> {
    let mut total: Option<Tensor> = None;
    for g in grads {
        let axes: Vec<isize> = (0..g.rank() as isize).collect();
        let z = g.mul_scalar(0.0)?;
        let s = if axes.is_empty() {
            z
        } else {
            z.sum(&axes, false)?
        };
        total = Some(match total {
            None => s,
            Some(t) => t.add(&s)?,
        });
    }
    match total {
        Some(t) => t.compare_scalar(crate::graph::CompareOp::Equal, 0.0),
        None => crate::graph::scalar(0.0).compare_scalar(crate::graph::CompareOp::Equal, 0.0),
    }
}

/// A forward-only program over the same parameters, for validation and sampling: parameters are
/// inputs, loaded from a trainer with [`Evaluator::load_from`].
pub struct Evaluator {
    model: Model,
    params: Vec<String>,
}

impl Evaluator {
    pub fn new(
        outputs: &[(&str, &Tensor)],
        target: Target,
        engine: Engine,
    ) -> Result<Evaluator, TrainError> {
        let model = compile_named(
            outputs,
            &CompileOptions {
                target,
                engine,
                ..CompileOptions::default()
            },
        )?;
        let params = model
            .inputs()
            .iter()
            .filter(|p| matches!(p.kind, crate::lower::PortKind::Parameter(_)))
            .map(|p| p.name.clone())
            .collect();
        Ok(Evaluator { model, params })
    }

    /// Copies the trainer's current parameters into this program.
    pub fn load_from(&mut self, trainer: &Trainer) -> Result<(), TrainError> {
        for name in &self.params {
            if trainer.slots.iter().any(|s| s.name == *name) {
                let v = trainer.read_param(name)?;
                self.model.set_input(name, HostSlice::F32(&v))?;
            }
        }
        Ok(())
    }

    pub fn model(&mut self) -> &mut Model {
        &mut self.model
    }

    /// Feeds `inputs`, runs, and returns every output as f32.
    pub fn run(&mut self, inputs: &[(&str, HostSlice<'_>)]) -> Result<Vec<Vec<f32>>, TrainError> {
        Ok(self.model.run_f32(inputs)?)
    }
}
