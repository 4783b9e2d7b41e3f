//! Activation recomputation: a [`Segment`] of the forward graph is computed again in the backward
//! from its inputs, and the VJPs inside it read the recomputed values, so none of its
//! intermediates has to live from the forward to the backward.
//!
//! One compiled program holds both passes, and programs run their statements in topological
//! order, so nothing but data dependencies keeps the recomputation out of the forward. Two
//! `barrier` ordering edges supply them:
//! - the recomputation reads the segment's inputs through a barrier that waits for the
//!   cotangents reaching the segment's outputs, so it runs when the backward gets there;
//! - the cotangent leaving through a segment input is passed on through a barrier that waits for
//!   every gradient the segment's VJPs sent elsewhere (its parameters' gradients), so the
//!   segment's backward completes before the next segment's begins and its recomputed values
//!   die with it. Without that edge a program that computes each parameter's update in turn
//!   computes a weight gradient only when that parameter's update is reached, keeping the
//!   recomputed values it reads alive across the whole backward.

use crate::graph::{NodeId, Tensor};
use std::collections::{HashMap, HashSet};

/// A stretch of the forward graph to recompute in the backward: every node that depends on one
/// of `inputs` and that one of `outputs` depends on. Values the segment reads that do not depend
/// on its inputs (parameters, constants, shared intermediates) are read as they are; a value
/// computed inside the segment may be used outside it only if it is one of `outputs`.
#[derive(Clone, Debug, PartialEq)]
pub struct Segment {
    pub inputs: Vec<Tensor>,
    pub outputs: Vec<Tensor>,
}

impl Segment {
    pub fn new(inputs: Vec<Tensor>, outputs: Vec<Tensor>) -> Segment {
        Segment { inputs, outputs }
    }
}

/// What makes a segment unusable.
#[derive(Debug, thiserror::Error)]
pub enum SegmentProblem {
    #[error("it has no {0}")]
    Empty(&'static str),
    #[error("{role} {node} is not part of the graph the gradients are computed from")]
    NotInGraph { role: &'static str, node: String },
    #[error("{node} is both an input and an output")]
    InputIsOutput { node: String },
    #[error("output {node} does not depend on any of the segment's inputs")]
    OutputIndependent { node: String },
    #[error("input {node} is not used by any of the segment's outputs")]
    InputUnused { node: String },
    #[error("{node} lies inside segment {other} as well")]
    Overlap { node: String, other: usize },
    #[error(
        "{node} is computed inside the segment and used outside it (by {user}), but is not one \
         of its outputs"
    )]
    Escapes { node: String, user: String },
}

struct Resolved {
    inputs: Vec<Tensor>,
    input_ids: HashSet<NodeId>,
    outputs: HashSet<NodeId>,
    /// The nodes recomputed, in topological order.
    interior: Vec<Tensor>,
    /// Final cotangents of the outputs the backward walk has passed.
    arrived: Vec<Tensor>,
    /// Gradients the segment's VJPs sent to values outside it, other than its inputs.
    sent: Vec<Tensor>,
    /// Original node → recomputed node, built on first use.
    clones: Option<HashMap<NodeId, Tensor>>,
}

/// The segments of one backward walk, checked against its graph.
pub(super) struct Recompute {
    segments: Vec<Resolved>,
    /// Interior node → its segment.
    owner: HashMap<NodeId, usize>,
    /// Segment input → the segments reading it as an input.
    input_of: HashMap<NodeId, Vec<usize>>,
}

pub(super) type Fail = (usize, SegmentProblem);

impl Recompute {
    /// Checks `segments` against the graph `order` (topological, every node the walk visits) whose
    /// `roots` the gradients are taken of.
    pub fn new(segments: &[Segment], order: &[Tensor], roots: &[Tensor]) -> Result<Self, Fail> {
        let in_graph: HashSet<NodeId> = order.iter().map(Tensor::id).collect();
        let mut owner: HashMap<NodeId, usize> = HashMap::new();
        let mut input_of: HashMap<NodeId, Vec<usize>> = HashMap::new();
        let mut resolved = Vec::with_capacity(segments.len());
        for (k, seg) in segments.iter().enumerate() {
            let r = resolve(seg, order, &in_graph).map_err(|p| (k, p))?;
            for t in &r.interior {
                if let Some(&other) = owner.get(&t.id()) {
                    return Err((
                        k,
                        SegmentProblem::Overlap {
                            node: format!("{t:?}"),
                            other,
                        },
                    ));
                }
                owner.insert(t.id(), k);
            }
            for id in &r.input_ids {
                input_of.entry(*id).or_default().push(k);
            }
            resolved.push(r);
        }
        // cotangents may enter a segment only through its outputs
        let escape = |k: usize, node: &Tensor, user: String| {
            (
                k,
                SegmentProblem::Escapes {
                    node: format!("{node:?}"),
                    user,
                },
            )
        };
        for user in order {
            let inside = owner.get(&user.id()).copied();
            for s in user.srcs() {
                let Some(&k) = owner.get(&s.id()) else {
                    continue;
                };
                if inside != Some(k) && !resolved[k].outputs.contains(&s.id()) {
                    return Err(escape(k, s, format!("{user:?}")));
                }
            }
        }
        for root in roots {
            if let Some(&k) = owner.get(&root.id()) {
                if !resolved[k].outputs.contains(&root.id()) {
                    return Err(escape(k, root, "the gradient's root".into()));
                }
            }
        }
        Ok(Recompute {
            segments: resolved,
            owner,
            input_of,
        })
    }

    /// The segment `node` is recomputed in, if any.
    pub fn owner(&self, node: &Tensor) -> Option<usize> {
        self.owner.get(&node.id()).copied()
    }

    /// The final cotangent `g` of `node`, held back (when `node` is a segment input) until the
    /// backward of the segments reading it has sent all its other gradients.
    pub fn leaving(&self, node: &Tensor, g: Tensor) -> Result<Tensor, crate::graph::GraphError> {
        let Some(ks) = self.input_of.get(&node.id()) else {
            return Ok(g);
        };
        let after: Vec<Tensor> = ks
            .iter()
            .flat_map(|&k| self.segments[k].sent.iter().cloned())
            .collect();
        if after.is_empty() {
            return Ok(g);
        }
        g.barrier(&after)
    }

    /// Notes the final cotangent `g` of `node` if `node` is a segment output: the recomputation
    /// waits for it.
    pub fn arrive(&mut self, node: &Tensor, g: &Tensor) {
        if let Some(&k) = self.owner.get(&node.id()) {
            let seg = &mut self.segments[k];
            if seg.outputs.contains(&node.id()) {
                seg.arrived.push(g.clone());
            }
        }
    }

    /// The node whose VJP stands for interior node `node` of segment `k`: its recomputed copy,
    /// built (for the whole segment) once a cotangent has reached the segment's outputs.
    pub fn recomputed(
        &mut self,
        k: usize,
        node: &Tensor,
    ) -> Result<Tensor, crate::graph::GraphError> {
        let seg = &mut self.segments[k];
        if seg.clones.is_none() {
            let mut map: HashMap<NodeId, Tensor> = HashMap::new();
            for x in &seg.inputs {
                map.insert(x.id(), x.barrier(&seg.arrived)?);
            }
            for t in &seg.interior {
                let srcs: Vec<Tensor> = t
                    .srcs()
                    .iter()
                    .map(|s| map.get(&s.id()).cloned().unwrap_or_else(|| s.clone()))
                    .collect();
                map.insert(t.id(), Tensor::from_op(t.op().clone(), srcs)?);
            }
            seg.clones = Some(map);
        }
        Ok(seg
            .clones
            .as_ref()
            .and_then(|m| m.get(&node.id()))
            .cloned()
            .unwrap_or_else(|| node.clone()))
    }

    /// Records a gradient that segment `k`'s VJPs sent to `src`.
    pub fn sent(&mut self, k: usize, src: &Tensor, grad: &Tensor) {
        let inside = self.owner.get(&src.id()) == Some(&k);
        let seg = &mut self.segments[k];
        if !inside && !seg.input_ids.contains(&src.id()) {
            seg.sent.push(grad.clone());
        }
    }
}

fn resolve(
    seg: &Segment,
    order: &[Tensor],
    in_graph: &HashSet<NodeId>,
) -> Result<Resolved, SegmentProblem> {
    if seg.inputs.is_empty() {
        return Err(SegmentProblem::Empty("inputs"));
    }
    if seg.outputs.is_empty() {
        return Err(SegmentProblem::Empty("outputs"));
    }
    let input_ids: HashSet<NodeId> = seg.inputs.iter().map(Tensor::id).collect();
    let outputs: HashSet<NodeId> = seg.outputs.iter().map(Tensor::id).collect();
    for (role, list) in [("input", &seg.inputs), ("output", &seg.outputs)] {
        if let Some(t) = list.iter().find(|t| !in_graph.contains(&t.id())) {
            return Err(SegmentProblem::NotInGraph {
                role,
                node: format!("{t:?}"),
            });
        }
    }
    if let Some(t) = seg.outputs.iter().find(|t| input_ids.contains(&t.id())) {
        return Err(SegmentProblem::InputIsOutput {
            node: format!("{t:?}"),
        });
    }
    // nodes that depend on an input (the inputs themselves are the boundary)
    let mut below: HashSet<NodeId> = HashSet::new();
    for t in order {
        if !input_ids.contains(&t.id())
            && t.srcs()
                .iter()
                .any(|s| input_ids.contains(&s.id()) || below.contains(&s.id()))
        {
            below.insert(t.id());
        }
    }
    if let Some(t) = seg.outputs.iter().find(|t| !below.contains(&t.id())) {
        return Err(SegmentProblem::OutputIndependent {
            node: format!("{t:?}"),
        });
    }
    // of those, the ones an output depends on; `above` also collects the inputs they read
    let mut above: HashSet<NodeId> = outputs.clone();
    let mut interior = Vec::new();
    for t in order.iter().rev() {
        if above.contains(&t.id()) && below.contains(&t.id()) {
            interior.push(t.clone());
            above.extend(t.srcs().iter().map(Tensor::id));
        }
    }
    interior.reverse();
    if let Some(t) = seg.inputs.iter().find(|t| !above.contains(&t.id())) {
        return Err(SegmentProblem::InputUnused {
            node: format!("{t:?}"),
        });
    }
    Ok(Resolved {
        inputs: seg.inputs.clone(),
        input_ids,
        outputs,
        interior,
        arrived: Vec::new(),
        sent: Vec::new(),
        clones: None,
    })
}
