//! Topological order of the nodes reachable from a set of outputs (unreachable nodes are dropped).

use super::{NodeId, Tensor};
use std::collections::HashSet;

/// Every node reachable from `outputs`, each after all its sources; deterministic for a given
/// graph shape (depth-first, sources in order, outputs in order). Iterative, so deep graphs are fine.
pub fn topo_order(outputs: &[Tensor]) -> Vec<Tensor> {
    let mut order = Vec::new();
    let mut done: HashSet<NodeId> = HashSet::new();
    let mut stack: Vec<(Tensor, usize)> = Vec::new();
    for out in outputs {
        if done.contains(&out.id()) {
            continue;
        }
        stack.push((out.clone(), 0));
        while let Some((node, next)) = stack.pop() {
            if let Some(src) = node.srcs().get(next).cloned() {
                stack.push((node, next + 1));
                if !done.contains(&src.id()) {
                    stack.push((src, 0));
                }
            } else if done.insert(node.id()) {
                order.push(node);
            }
        }
    }
    order
}
