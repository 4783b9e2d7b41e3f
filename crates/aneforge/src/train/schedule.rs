//! Learning-rate schedules with linear warmup, as transformers defines them
//! (`get_constant_schedule_with_warmup`, `get_linear_schedule_with_warmup`,
//! `get_cosine_schedule_with_warmup` with half a cosine cycle): update `k` (counted from 0) runs
//! at `base · factor(k)`, where `factor(k) = k / warmup` while `k < warmup`, then 1 (constant),
//! `(total − k) / (total − warmup)` (linear) or `½ (1 + cos(π · (k − warmup) / (total − warmup)))`
//! (cosine). Update 0 of a warmup therefore does not move the parameters, as in transformers.

/// The shape of the schedule after warmup.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ScheduleKind {
    #[default]
    Constant,
    Linear,
    Cosine,
}

impl std::str::FromStr for ScheduleKind {
    type Err = ScheduleError;

    fn from_str(s: &str) -> Result<ScheduleKind, ScheduleError> {
        match s {
            "constant" => Ok(ScheduleKind::Constant),
            "linear" => Ok(ScheduleKind::Linear),
            "cosine" => Ok(ScheduleKind::Cosine),
            other => Err(ScheduleError::UnknownKind(other.to_string())),
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ScheduleError {
    #[error("unknown learning-rate schedule {0:?}; valid: constant, linear, cosine")]
    UnknownKind(String),
    #[error("{warmup} warmup steps are more than the {total} training steps")]
    WarmupTooLong { warmup: u64, total: u64 },
}

/// A schedule over `total` updates, the first `warmup` of them warming up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LrSchedule {
    kind: ScheduleKind,
    warmup: u64,
    total: u64,
}

impl LrSchedule {
    /// Errors when `warmup > total`.
    pub fn new(kind: ScheduleKind, warmup: u64, total: u64) -> Result<LrSchedule, ScheduleError> {
        if warmup > total {
            return Err(ScheduleError::WarmupTooLong { warmup, total });
        }
        Ok(LrSchedule {
            kind,
            warmup,
            total,
        })
    }

    /// The multiplier of the base learning rate at update `step` (from 0), computed in f64 in
    /// transformers' order of operations.
    pub fn factor(&self, step: u64) -> f64 {
        if step < self.warmup {
            return step as f64 / self.warmup.max(1) as f64;
        }
        let after = self.total.saturating_sub(self.warmup).max(1) as f64;
        match self.kind {
            ScheduleKind::Constant => 1.0,
            ScheduleKind::Linear => (0.0f64).max((self.total as f64 - step as f64) / after),
            ScheduleKind::Cosine => {
                let progress = (step - self.warmup) as f64 / after;
                let cycles = 0.5f64;
                (0.0f64).max(0.5 * (1.0 + (std::f64::consts::PI * cycles * 2.0 * progress).cos()))
            }
        }
    }

    /// The learning rate of update `step` for base rate `base`.
    pub fn lr(&self, base: f64, step: u64) -> f64 {
        base * self.factor(step)
    }
}
