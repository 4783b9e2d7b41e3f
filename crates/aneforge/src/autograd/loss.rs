//! Losses and metrics as graph compositions; each returns a scalar (rank 0) f32 tensor.

use super::util::one_hot;
use crate::graph::{DType, GraphError, Tensor};

fn all_axes(t: &Tensor) -> Vec<isize> {
    (0..t.rank() as isize).collect()
}

fn mean_all(t: &Tensor) -> Result<Tensor, GraphError> {
    if t.rank() == 0 {
        return Ok(t.clone());
    }
    t.mean(&all_axes(t), false)
}

/// Mean squared error over every element.
pub fn mse(prediction: &Tensor, target: &Tensor) -> Result<Tensor, GraphError> {
    if prediction.shape() != target.shape() {
        return Err(GraphError::shape(
            "mse",
            &[prediction.shape(), target.shape()],
            "prediction and target must have one shape",
        ));
    }
    mean_all(&prediction.sub(target)?.square()?)
}

fn check_targets(op: &'static str, logits: &Tensor, targets: &Tensor) -> Result<(), GraphError> {
    let ok = logits.rank() >= 2
        && targets.dtype() == DType::I32
        && targets.shape() == &logits.shape()[..logits.rank() - 1];
    if !ok {
        return Err(GraphError::shape(
            op,
            &[logits.shape(), targets.shape()],
            "expected logits [..., classes] and i32 class indices [...]",
        ));
    }
    Ok(())
}

/// Mean over rows of `−log softmax(logits)[target]`: logits `[..., classes]`, i32 targets `[...]`.
/// Stable for large logits (the row maximum is subtracted before `exp`).
pub fn softmax_cross_entropy(logits: &Tensor, targets: &Tensor) -> Result<Tensor, GraphError> {
    check_targets("softmax_cross_entropy", logits, targets)?;
    let classes = logits.shape()[logits.rank() - 1];
    let log_probs = logits.log_softmax(-1)?;
    let picked = log_probs
        .mul(&one_hot(targets, classes)?)?
        .sum(&[-1], false)?;
    mean_all(&picked)?.neg()
}

/// `−Σ weights[i] · log softmax(logits)[i, targets[i]]`: logits `[..., classes]`, i32 targets
/// and f32 weights `[...]`. With weights `1/n` on `n` counted rows and 0 elsewhere it is the mean
/// cross-entropy over the counted rows (PyTorch's `ignore_index`); the target of a row of weight
/// 0 must still be a valid class.
pub fn weighted_cross_entropy(
    logits: &Tensor,
    targets: &Tensor,
    weights: &Tensor,
) -> Result<Tensor, GraphError> {
    check_targets("weighted_cross_entropy", logits, targets)?;
    if weights.shape() != targets.shape() || weights.dtype() != DType::F32 {
        return Err(GraphError::shape(
            "weighted_cross_entropy",
            &[targets.shape(), weights.shape()],
            "expected f32 weights shaped like the targets",
        ));
    }
    let classes = logits.shape()[logits.rank() - 1];
    let picked = logits
        .log_softmax(-1)?
        .mul(&one_hot(targets, classes)?)?
        .sum(&[-1], false)?;
    let axes = all_axes(&picked);
    picked.mul(weights)?.sum(&axes, false)?.neg()
}

/// The fraction of rows whose largest logit is the target class.
pub fn accuracy(logits: &Tensor, targets: &Tensor) -> Result<Tensor, GraphError> {
    check_targets("accuracy", logits, targets)?;
    mean_all(&logits.argmax(-1, false)?.eq(targets)?.cast(DType::F32)?)
}
