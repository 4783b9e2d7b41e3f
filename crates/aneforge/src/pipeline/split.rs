//! Segmentation: a program's weights must stay under a ceiling (about 1.6 GB of fp16), so a graph
//! whose constants exceed it is cut, in topological order, into consecutive pieces that each stay
//! under it; activations crossing a cut become outputs of the earlier piece and inputs of the
//! later one.

use crate::arch::{Finding, FindingKind};
use crate::graph::{input, topo_order, HostData, NodeId, Op, Tensor};
use crate::lower::{LowerError, INLINE_MAX_ELEMENTS};
use std::collections::{HashMap, HashSet};

/// Weights per program, in bytes of fp16: the default segment ceiling.
pub const WEIGHT_CEILING: u64 = 1_600_000_000;

fn weight_bytes(t: &Tensor) -> u64 {
    match t.op() {
        Op::Constant(c)
            if matches!(c.data(), HostData::F32(_) | HostData::Deferred(_))
                && c.len() > INLINE_MAX_ELEMENTS =>
        {
            (c.len() * 2) as u64
        }
        _ => 0,
    }
}

/// Cuts the graph into consecutive pieces whose weights stay under `ceiling`; each piece is
/// `(output name, tensor)` pairs over its own inputs. Crossing values are named `seg<p>_v<k>`.
pub(crate) fn split(
    outputs: &[(&str, &Tensor)],
    ceiling: u64,
    findings: &mut Vec<Finding>,
) -> Result<Vec<Vec<(String, Tensor)>>, LowerError> {
    let roots: Vec<Tensor> = outputs.iter().map(|(_, t)| (*t).clone()).collect();
    let order = topo_order(&roots);
    let total: u64 = order.iter().map(weight_bytes).sum();
    if total <= ceiling {
        return Ok(vec![outputs
            .iter()
            .map(|(n, t)| (n.to_string(), (*t).clone()))
            .collect()]);
    }
    let mut seg: HashMap<NodeId, usize> = HashMap::new();
    let mut current = 0usize;
    let mut bytes = 0u64;
    let mut counted: HashSet<NodeId> = HashSet::new();
    let mut has_nodes = false;
    for node in order.iter().filter(|n| !n.op().is_leaf()) {
        let add: u64 = node
            .srcs()
            .iter()
            .filter(|s| !counted.contains(&s.id()))
            .map(weight_bytes)
            .sum();
        if has_nodes && bytes + add > ceiling {
            current += 1;
            bytes = 0;
            counted.clear();
        }
        if add > ceiling {
            findings.push(Finding {
                node: format!("{node:?}"),
                op: node.op().name().to_string(),
                shape: node.shape().to_vec(),
                kind: FindingKind::Note {
                    note: format!(
                        "one op's weights ({add} bytes) exceed the segment ceiling ({ceiling}); it gets a segment of its own"
                    ),
                },
            });
        }
        counted.extend(node.srcs().iter().map(|s| s.id()));
        bytes += add;
        has_nodes = true;
        seg.insert(node.id(), current);
    }
    let count = current + 1;
    let rebuild = |source| LowerError::Rewrite {
        op: "segment",
        source,
    };
    let mut boundary: HashMap<NodeId, String> = HashMap::new();
    let mut pieces: Vec<Vec<(String, Tensor)>> = vec![Vec::new(); count];
    let mut built: Vec<HashMap<NodeId, Tensor>> = vec![HashMap::new(); count];
    let mut fed: Vec<HashMap<NodeId, Tensor>> = vec![HashMap::new(); count];
    for node in order.iter().filter(|n| !n.op().is_leaf()) {
        let s = seg[&node.id()];
        let mut srcs = Vec::with_capacity(node.srcs().len());
        for src in node.srcs() {
            let t = match seg.get(&src.id()).copied() {
                Some(p) if p == s => built[s][&src.id()].clone(),
                Some(p) => match fed[s].get(&src.id()) {
                    Some(t) => t.clone(),
                    None => {
                        let next = boundary.len();
                        let name = boundary
                            .entry(src.id())
                            .or_insert_with(|| format!("seg{p}_v{next}"))
                            .clone();
                        let t = input(&name, src.shape(), src.dtype()).map_err(rebuild)?;
                        fed[s].insert(src.id(), t.clone());
                        t
                    }
                },
                None => src.clone(),
            };
            srcs.push(t);
        }
        let rebuilt = Tensor::from_op(node.op().clone(), srcs).map_err(rebuild)?;
        built[s].insert(node.id(), rebuilt);
    }
    let mut crossing: Vec<(&NodeId, &String)> = boundary.iter().collect();
    crossing.sort_by(|a, b| a.1.cmp(b.1));
    for (id, name) in crossing {
        let p = seg[id];
        pieces[p].push((name.clone(), built[p][id].clone()));
    }
    for (name, t) in outputs {
        let s = seg.get(&t.id()).copied().unwrap_or(count - 1);
        let value = built[s]
            .get(&t.id())
            .cloned()
            .unwrap_or_else(|| (*t).clone());
        pieces[s].push((name.to_string(), value));
    }
    Ok(pieces)
}
