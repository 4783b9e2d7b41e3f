//! Reverse-mode differentiation as a graph-to-graph transform, losses and optimizers.
//!
//! [`backward`] walks the graph from a scalar loss back to the requested tensors and returns new
//! graph nodes holding their gradients; nothing runs until the result is compiled, so a training
//! step (forward, backward and optimizer update) compiles into one program. Every differentiable
//! [`Op`] has a vector-Jacobian product in `rules`; gradients stop at `stop_gradient` nodes, at
//! integer and bool values, and at an optional frontier of tensors treated as constants.
//! [`Segment`]s of the forward may be recomputed in the backward instead of kept (`segment`).

mod loss;
pub mod optim;
mod rules;
mod segment;
mod util;

pub use loss::{accuracy, mse, softmax_cross_entropy, weighted_cross_entropy};
pub use optim::{clip_by_global_norm, Optimizer};
pub use segment::{Segment, SegmentProblem};
pub use util::{one_hot, sum_to};

use crate::graph::topo_order;
use crate::graph::{constant, DType, GraphError, HostArray, NodeId, Op, Tensor};
use std::collections::{HashMap, HashSet};

#[derive(Debug, thiserror::Error)]
pub enum AutogradError {
    #[error(transparent)]
    Graph(#[from] GraphError),
    #[error("backward: the loss must be a single f32 value, found {dtype} {shape:?}")]
    LossNotScalar { shape: Vec<usize>, dtype: DType },
    #[error("backward: cannot differentiate with respect to {what}, which is {dtype}")]
    NotFloat { what: String, dtype: DType },
    #[error("vjp: the cotangent of {op} {shape:?} has shape {given:?}")]
    CotangentShape {
        op: &'static str,
        shape: Vec<usize>,
        given: Vec<usize>,
    },
    #[error("vjp of {op}: produced a gradient of shape {got:?} for an operand of shape {want:?} (an autograd bug)")]
    RuleShape {
        op: &'static str,
        got: Vec<usize>,
        want: Vec<usize>,
    },
    #[error("recompute segment {index}: {problem}")]
    Segment {
        index: usize,
        problem: SegmentProblem,
    },
}

/// Options for [`backward_with`].
#[derive(Clone, Debug, Default)]
pub struct GradOptions {
    /// The cotangent of the loss (default: 1). A runtime scalar here implements loss scaling.
    pub seed: Option<Tensor>,
    /// Tensors treated as constants: no gradient flows through them to their sources.
    pub frontier: Vec<Tensor>,
    /// Stretches of the forward recomputed in the backward from their inputs instead of kept
    /// from the forward (no two may share a node).
    pub recompute: Vec<Segment>,
}

/// Gradients of a single-valued f32 `loss` with respect to each of `wrt` (parameters, inputs or
/// intermediate values), as graph nodes. A tensor the loss does not depend on gets zeros.
pub fn backward(loss: &Tensor, wrt: &[Tensor]) -> Result<Vec<Tensor>, AutogradError> {
    backward_with(loss, wrt, &GradOptions::default())
}

/// [`backward`] with a custom seed, a stop-gradient frontier and recomputed segments.
pub fn backward_with(
    loss: &Tensor,
    wrt: &[Tensor],
    options: &GradOptions,
) -> Result<Vec<Tensor>, AutogradError> {
    if loss.len() != 1 || loss.dtype() != DType::F32 {
        return Err(AutogradError::LossNotScalar {
            shape: loss.shape().to_vec(),
            dtype: loss.dtype(),
        });
    }
    let seed = match &options.seed {
        Some(s) if s.len() == 1 => s.reshape(&shape_isize(loss.shape()))?,
        Some(s) => {
            return Err(AutogradError::CotangentShape {
                op: loss.op().name(),
                shape: loss.shape().to_vec(),
                given: s.shape().to_vec(),
            })
        }
        None => constant(HostArray::from_f32(loss.shape(), vec![1.0f32])?),
    };
    vjp_recomputing(
        &[(loss.clone(), seed)],
        wrt,
        &options.frontier,
        &options.recompute,
    )
}

/// Vector-Jacobian product: given `(output, cotangent)` pairs, the sum over outputs of
/// `cotangentᵀ · ∂output/∂w` for each `w` in `wrt`.
pub fn vjp(
    outputs: &[(Tensor, Tensor)],
    wrt: &[Tensor],
    frontier: &[Tensor],
) -> Result<Vec<Tensor>, AutogradError> {
    vjp_recomputing(outputs, wrt, frontier, &[])
}

/// [`vjp`] with the VJPs inside each of `segments` reading values recomputed from the segment's
/// inputs (see [`Segment`]).
pub fn vjp_recomputing(
    outputs: &[(Tensor, Tensor)],
    wrt: &[Tensor],
    frontier: &[Tensor],
    segments: &[Segment],
) -> Result<Vec<Tensor>, AutogradError> {
    for w in wrt {
        if w.dtype() != DType::F32 {
            return Err(AutogradError::NotFloat {
                what: format!("{w:?}"),
                dtype: w.dtype(),
            });
        }
    }
    for (y, g) in outputs {
        if y.shape() != g.shape() {
            return Err(AutogradError::CotangentShape {
                op: y.op().name(),
                shape: y.shape().to_vec(),
                given: g.shape().to_vec(),
            });
        }
    }
    let roots: Vec<Tensor> = outputs.iter().map(|(y, _)| y.clone()).collect();
    let order = topo_order(&roots);
    let targets: HashSet<NodeId> = wrt.iter().map(|t| t.id()).collect();
    let blocked: HashSet<NodeId> = frontier.iter().map(|t| t.id()).collect();
    let mut recompute = segment::Recompute::new(segments, &order, &roots)
        .map_err(|(index, problem)| AutogradError::Segment { index, problem })?;

    // Nodes through which a target reaches the outputs.
    let mut reach: HashSet<NodeId> = HashSet::new();
    for node in &order {
        let id = node.id();
        let through = !blocked.contains(&id)
            && node.dtype() == DType::F32
            && rules::passes_gradient(node.op())
            && node.srcs().iter().any(|s| reach.contains(&s.id()));
        if targets.contains(&id) || through {
            reach.insert(id);
        }
    }

    let mut cot: HashMap<NodeId, Tensor> = HashMap::new();
    for (y, g) in outputs {
        if reach.contains(&y.id()) {
            accumulate(&mut cot, y, g.clone())?;
        }
    }
    let mut found: HashMap<NodeId, Tensor> = HashMap::new();
    for node in order.iter().rev() {
        let id = node.id();
        let Some(g) = cot.remove(&id) else { continue };
        let g = recompute.leaving(node, g)?;
        recompute.arrive(node, &g);
        if targets.contains(&id) {
            found.insert(id, g.clone());
        }
        if blocked.contains(&id) || node.op().is_leaf() {
            continue;
        }
        let wants: Vec<bool> = node
            .srcs()
            .iter()
            .map(|s| reach.contains(&s.id()) && s.dtype() == DType::F32)
            .collect();
        if !wants.iter().any(|&w| w) {
            continue;
        }
        let segment = recompute.owner(node);
        let grads = match segment {
            Some(k) => rules::vjp(&recompute.recomputed(k, node)?, &g, &wants)?,
            None => rules::vjp(node, &g, &wants)?,
        };
        for ((src, grad), want) in node.srcs().iter().zip(grads).zip(&wants) {
            let Some(grad) = grad.filter(|_| *want) else {
                continue;
            };
            if let Some(k) = segment {
                recompute.sent(k, src, &grad);
            }
            if grad.shape() != src.shape() {
                return Err(AutogradError::RuleShape {
                    op: node.op().name(),
                    got: grad.shape().to_vec(),
                    want: src.shape().to_vec(),
                });
            }
            accumulate(&mut cot, src, grad)?;
        }
    }
    wrt.iter()
        .map(|w| match found.get(&w.id()) {
            Some(g) => Ok(g.clone()),
            None => Ok(util::zeros(w.shape())?),
        })
        .collect()
}

fn accumulate(
    cot: &mut HashMap<NodeId, Tensor>,
    node: &Tensor,
    g: Tensor,
) -> Result<(), GraphError> {
    let next = match cot.remove(&node.id()) {
        Some(prev) => prev.add(&g)?,
        None => g,
    };
    cot.insert(node.id(), next);
    Ok(())
}

/// Whether `op` is a node gradients flow through at all (to at least one float source).
pub fn is_differentiable(op: &Op) -> bool {
    rules::passes_gradient(op)
}

pub(crate) fn shape_isize(shape: &[usize]) -> Vec<isize> {
    shape.iter().map(|&d| d as isize).collect()
}
