//! Graph-to-graph rewriting: the engine of canonicalisation and target legalisation passes.

use super::order::topo_order;
use super::LowerError;
use crate::graph::{GraphError, NodeId, Tensor};
use std::collections::HashMap;

/// Rebuilds the graph reachable from `outputs` bottom-up. For each node, `rule` sees the node and
/// its already-rewritten sources and returns a replacement, or `None` to keep the node (rebuilt
/// only if a source changed). Returns the rewritten outputs, in order.
pub fn rewrite_graph(
    outputs: &[Tensor],
    mut rule: impl FnMut(&Tensor, &[Tensor]) -> Result<Option<Tensor>, GraphError>,
) -> Result<Vec<Tensor>, LowerError> {
    let mut map: HashMap<NodeId, Tensor> = HashMap::new();
    for node in topo_order(outputs) {
        let srcs: Vec<Tensor> = node
            .srcs()
            .iter()
            .map(|s| map.get(&s.id()).cloned().unwrap_or_else(|| s.clone()))
            .collect();
        let fail = |source| LowerError::Rewrite {
            op: node.op().name(),
            source,
        };
        let rewritten = match rule(&node, &srcs).map_err(fail)? {
            Some(t) => t,
            None if srcs.iter().zip(node.srcs()).all(|(a, b)| a == b) => node.clone(),
            None => Tensor::from_op(node.op().clone(), srcs).map_err(fail)?,
        };
        map.insert(node.id(), rewritten);
    }
    Ok(outputs
        .iter()
        .map(|o| map.get(&o.id()).cloned().unwrap_or_else(|| o.clone()))
        .collect())
}
