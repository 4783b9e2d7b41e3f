//! The aneforge CPU engine: executes one function of a MIL program.
//!
//! `compile()` validates a function against coremltools' op definitions, resolves static shapes,
//! decodes constants once, fuses patterns and lays out an arena; `Plan::instantiate()` gives an
//! `Instance` that runs it without allocating per execute.

#![allow(clippy::needless_range_loop)]

pub mod codec;
mod compile;
mod error;
mod fuse;
mod instance;
mod kernels;
mod known;
mod ops;
mod plan;
mod port;
mod shared_weights;
#[doc(hidden)]
pub mod simd;
mod team;
mod tensor;

pub use codec::Carried;
pub use compile::{
    compile, compile_dir, memory_limit, parse_bytes, set_memory_limit, Accumulation, Activations,
    CompileOptions, MatmulPrecision, MAX_MEMORY_ENV,
};
pub use error::CpuError;
pub use instance::{
    release_thread_arena, Instance, InstanceMemory, KernelTime, StateBuffer, ValueStats,
};
pub use known::BlobStore;
pub use plan::Plan;
pub use port::{find_port, Direction, Port, PortError};
pub use tensor::{mapped_buffer_bytes, BufferMut, BufferRef, HostSlice, HostTensor};
