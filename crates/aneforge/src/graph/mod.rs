//! The lazy tensor graph: immutable nodes behind cheap [`Tensor`] handles, one [`Op`] enum with a
//! shape rule per variant, builders for single ops and compositions for higher-level layers.

mod builders;
mod dtype;
mod einsum;
mod error;
mod host;
pub mod nn;
pub mod op;
mod order;
mod quant;
mod rewrite;
pub mod shape;
mod tensor;

pub use builders::{concat, select};
pub use dtype::DType;
pub use einsum::einsum;
pub use error::GraphError;
pub use host::{
    power_of_two, read_concatenated, read_picked, scaled_half_rows, DeferredF32, HalfStorage,
    HostArray, HostData, PICKED_SPAN,
};
pub use nn::{
    causal_additive_mask, mha, sdpa, AttentionWeights, Conv1dParams, Conv2dParams,
    ConvTranspose2dParams, Pool2dParams,
};
pub use op::{
    BinaryOp, CompareOp, ConvAttrs, Op, OpFamily, PadMode, PoolAttrs, PoolKind, ReduceOp, UnaryOp,
    UpsampleMode,
};
pub use order::topo_order;
pub use quant::{BlockParams, BlockQuantized, DeferredBytes, QuantFormat};
pub use rewrite::rewrite_graph;
pub(crate) use tensor::is_identifier;
pub use tensor::{constant, full, input, parameter, scalar, NodeId, Tensor};

/// The largest rank a tensor may have (the ANE's dimension model).
pub const MAX_RANK: usize = 5;
