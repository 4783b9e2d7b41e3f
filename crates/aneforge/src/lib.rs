//! aneforge: graph, autograd, targets, lowering and engines (issues 3-6).

pub mod engine;
