//! Optimizers as graph updates (so a training step compiles into one program) and the same
//! arithmetic on the host, step for step, for the host-optimizer mode and for checking.
//!
//! Formulas follow PyTorch's `torch.optim` single-tensor implementations: SGD with momentum
//! (buffer starting at zero, optional Nesterov), Adam (L2 weight decay added to the gradient) and
//! AdamW (decoupled decay `p·(1 − lr·wd)` before the step), both with bias correction supplied as
//! runtime scalars `1 − β₁ᵗ` and `1 − β₂ᵗ` computed in f64 on the host.

use crate::graph::{GraphError, Tensor};

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Optimizer {
    Sgd {
        momentum: f32,
        weight_decay: f32,
        nesterov: bool,
    },
    Adam {
        beta1: f32,
        beta2: f32,
        eps: f32,
        weight_decay: f32,
    },
    AdamW {
        beta1: f32,
        beta2: f32,
        eps: f32,
        weight_decay: f32,
    },
}

/// The runtime scalars of one step, as graph values (program inputs in a training program).
#[derive(Clone, Debug)]
pub struct StepScalars {
    pub lr: Tensor,
    /// `1 − β₁ᵗ` (Adam and AdamW only).
    pub bias_correction1: Option<Tensor>,
    /// `1 − β₂ᵗ` (Adam and AdamW only).
    pub bias_correction2: Option<Tensor>,
    /// Adam's second moment is kept as `K²·v` with this `K` (a power of two, so exact), and
    /// clamped to `v_max`: in fp16, `(1 − β₂)·g²` underflows to zero for |g| < 7.7e-3 and the
    /// update degenerates to `m / eps`. 1 keeps PyTorch's representation (fp32 programs).
    pub second_moment_scale: f32,
    /// The largest value the stored second moment may take (the float type's finite maximum), so
    /// a gradient too large for the scaled square saturates instead of freezing the parameter at
    /// an infinite moment.
    pub second_moment_max: f32,
}

impl Optimizer {
    /// SGD with momentum (PyTorch defaults otherwise).
    pub fn sgd(momentum: f32) -> Optimizer {
        Optimizer::Sgd {
            momentum,
            weight_decay: 0.0,
            nesterov: false,
        }
    }

    /// Adam with PyTorch's defaults (β = (0.9, 0.999), ε = 1e-8, no weight decay).
    pub fn adam() -> Optimizer {
        Optimizer::Adam {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
        }
    }

    /// AdamW with PyTorch's defaults and the given decoupled weight decay.
    pub fn adamw(weight_decay: f32) -> Optimizer {
        Optimizer::AdamW {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Optimizer::Sgd { .. } => "sgd",
            Optimizer::Adam { .. } => "adam",
            Optimizer::AdamW { .. } => "adamw",
        }
    }

    /// Names of the per-parameter state tensors (each shaped like the parameter).
    pub fn state_names(&self) -> &'static [&'static str] {
        match self {
            Optimizer::Sgd { momentum, .. } if *momentum == 0.0 => &[],
            Optimizer::Sgd { .. } => &["momentum"],
            Optimizer::Adam { .. } | Optimizer::AdamW { .. } => &["m", "v"],
        }
    }

    pub fn uses_bias_correction(&self) -> bool {
        !matches!(self, Optimizer::Sgd { .. })
    }

    /// `(1 − β₁ᵗ, 1 − β₂ᵗ)` for step `t` (1-based), computed in f64.
    pub fn bias_corrections(&self, step: u64) -> (f32, f32) {
        match self {
            Optimizer::Adam { beta1, beta2, .. } | Optimizer::AdamW { beta1, beta2, .. } => {
                let t = step.min(i32::MAX as u64) as i32;
                (
                    (1.0 - f64::from(*beta1).powi(t)) as f32,
                    (1.0 - f64::from(*beta2).powi(t)) as f32,
                )
            }
            Optimizer::Sgd { .. } => (1.0, 1.0),
        }
    }

    /// The updated parameter and state for one step, as graph values.
    pub fn update(
        &self,
        p: &Tensor,
        g: &Tensor,
        state: &[Tensor],
        h: &StepScalars,
    ) -> Result<(Tensor, Vec<Tensor>), GraphError> {
        let missing = |what: &str| {
            GraphError::attribute(
                "optimizer",
                format!("{} needs the runtime scalar {what}", self.name()),
            )
        };
        match *self {
            Optimizer::Sgd {
                momentum,
                weight_decay,
                nesterov,
            } => {
                let d = if weight_decay != 0.0 {
                    g.add(&p.mul_scalar(weight_decay)?)?
                } else {
                    g.clone()
                };
                if momentum == 0.0 {
                    return Ok((p.sub(&d.mul(&h.lr)?)?, Vec::new()));
                }
                let buf = state[0].mul_scalar(momentum)?.add(&d)?;
                let dir = if nesterov {
                    d.add(&buf.mul_scalar(momentum)?)?
                } else {
                    buf.clone()
                };
                Ok((p.sub(&dir.mul(&h.lr)?)?, vec![buf]))
            }
            Optimizer::Adam {
                beta1,
                beta2,
                eps,
                weight_decay,
            }
            | Optimizer::AdamW {
                beta1,
                beta2,
                eps,
                weight_decay,
            } => {
                let decoupled = matches!(self, Optimizer::AdamW { .. });
                let bc1 = h
                    .bias_correction1
                    .as_ref()
                    .ok_or_else(|| missing("bias_correction1"))?;
                let bc2 = h
                    .bias_correction2
                    .as_ref()
                    .ok_or_else(|| missing("bias_correction2"))?;
                let (p, g) = if weight_decay == 0.0 {
                    (p.clone(), g.clone())
                } else if decoupled {
                    let keep = h.lr.mul_scalar(-weight_decay)?.add_scalar(1.0)?;
                    (p.mul(&keep)?, g.clone())
                } else {
                    (p.clone(), g.add(&p.mul_scalar(weight_decay)?)?)
                };
                let m = state[0]
                    .mul_scalar(beta1)?
                    .add(&g.mul_scalar(1.0 - beta1)?)?;
                let k = h.second_moment_scale;
                if k == 1.0 {
                    let v = state[1]
                        .mul_scalar(beta2)?
                        .add(&g.square()?.mul_scalar(1.0 - beta2)?)?;
                    let step_size = h.lr.div(bc1)?;
                    let denom = v.sqrt()?.div(&bc2.sqrt()?)?.add_scalar(eps)?;
                    let next = p.sub(&m.div(&denom)?.mul(&step_size)?)?;
                    return Ok((next, vec![m, v]));
                }
                // v' = K²·v: the update m / (√v̂ + eps) is m·K / (√(v'/bc2) + K·eps)
                let v = state[1]
                    .mul_scalar(beta2)?
                    .add(&g.mul_scalar(k * (1.0 - beta2).sqrt())?.square()?)?
                    .clip(0.0, h.second_moment_max)?;
                let step_size = h.lr.div(bc1)?.mul_scalar(k)?;
                let denom = v.sqrt()?.div(&bc2.sqrt()?)?.add_scalar(k * eps)?;
                let next = p.sub(&m.div(&denom)?.mul(&step_size)?)?;
                Ok((next, vec![m, v]))
            }
        }
    }

    /// The same update on host data, in place, with f32 arithmetic in the graph's order.
    pub fn update_host(
        &self,
        p: &mut [f32],
        g: &[f32],
        state: &mut [Vec<f32>],
        lr: f32,
        step: u64,
    ) {
        match *self {
            Optimizer::Sgd {
                momentum,
                weight_decay,
                nesterov,
            } => {
                for i in 0..p.len() {
                    let d = if weight_decay != 0.0 {
                        g[i] + p[i] * weight_decay
                    } else {
                        g[i]
                    };
                    let dir = if momentum == 0.0 {
                        d
                    } else {
                        let buf = state[0][i] * momentum + d;
                        state[0][i] = buf;
                        if nesterov {
                            d + buf * momentum
                        } else {
                            buf
                        }
                    };
                    p[i] -= dir * lr;
                }
            }
            Optimizer::Adam {
                beta1,
                beta2,
                eps,
                weight_decay,
            }
            | Optimizer::AdamW {
                beta1,
                beta2,
                eps,
                weight_decay,
            } => {
                let decoupled = matches!(self, Optimizer::AdamW { .. });
                let (bc1, bc2) = self.bias_corrections(step);
                let step_size = lr / bc1;
                let bc2_sqrt = bc2.sqrt();
                let keep = lr * -weight_decay + 1.0;
                let (ms, vs) = state.split_at_mut(1);
                let (ms, vs) = (&mut ms[0], &mut vs[0]);
                for i in 0..p.len() {
                    let (mut pi, mut gi) = (p[i], g[i]);
                    if weight_decay != 0.0 {
                        if decoupled {
                            pi *= keep;
                        } else {
                            gi += pi * weight_decay;
                        }
                    }
                    let m = ms[i] * beta1 + gi * (1.0 - beta1);
                    let v = vs[i] * beta2 + gi * gi * (1.0 - beta2);
                    ms[i] = m;
                    vs[i] = v;
                    let denom = v.sqrt() / bc2_sqrt + eps;
                    p[i] = pi - m / denom * step_size;
                }
            }
        }
    }
}

/// Scales `grads` so that their joint L2 norm is at most `max_norm` (PyTorch
/// `clip_grad_norm_`: factor `min(1, max_norm / (norm + 1e-6))`). Returns the clipped gradients and
/// the norm before clipping.
pub fn clip_by_global_norm(
    grads: &[Tensor],
    max_norm: f32,
) -> Result<(Vec<Tensor>, Tensor), GraphError> {
    let mut total: Option<Tensor> = None;
    for g in grads {
        let axes: Vec<isize> = (0..g.rank() as isize).collect();
        let sq = if axes.is_empty() {
            g.square()?
        } else {
            g.square()?.sum(&axes, false)?
        };
        total = Some(match total {
            None => sq,
            Some(t) => t.add(&sq)?,
        });
    }
    let norm = match total {
        Some(t) => t.sqrt()?,
        None => crate::graph::scalar(0.0),
    };
    let factor = norm
        .add_scalar(1e-6)?
        .recip()?
        .mul_scalar(max_norm)?
        .minimum_scalar(1.0)?;
    let clipped = grads
        .iter()
        .map(|g| g.mul(&factor))
        .collect::<Result<_, _>>()?;
    Ok((clipped, norm))
}
