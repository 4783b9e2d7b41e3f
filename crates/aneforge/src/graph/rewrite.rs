//! Graph-to-graph rewriting: the walk every canonicalisation and legalisation pass runs.

use super::order::topo_order;
use super::{GraphError, NodeId, Tensor};
use std::collections::HashMap;

/// Rebuilds the graph reachable from `outputs` bottom-up, visiting each node once. For each node,
/// `rule` sees the node and its already-rewritten sources and returns a replacement, or `None` to
/// keep the node (rebuilt over the new sources only if one changed; a failed rebuild goes through
/// `rebuild_error`). Returns the rewritten outputs, in order.
pub fn rewrite_graph<E>(
    outputs: &[Tensor],
    mut rule: impl FnMut(&Tensor, &[Tensor]) -> Result<Option<Tensor>, E>,
    rebuild_error: impl Fn(&Tensor, GraphError) -> E,
) -> Result<Vec<Tensor>, E> {
    let mut map: HashMap<NodeId, Tensor> = HashMap::new();
    for node in topo_order(outputs) {
        let srcs: Vec<Tensor> = node
            .srcs()
            .iter()
            .map(|s| map.get(&s.id()).cloned().unwrap_or_else(|| s.clone()))
            .collect();
        let rewritten = match rule(&node, &srcs)? {
            Some(t) => t,
            None if srcs.iter().zip(node.srcs()).all(|(a, b)| a == b) => node.clone(),
            None => {
                Tensor::from_op(node.op().clone(), srcs).map_err(|e| rebuild_error(&node, e))?
            }
        };
        map.insert(node.id(), rewritten);
    }
    Ok(outputs
        .iter()
        .map(|o| map.get(&o.id()).cloned().unwrap_or_else(|| o.clone()))
        .collect())
}
