//! Host data exchange types of the engine API: the CPU engine's, so both engines share one API.

pub use aneforge_cpu::{BufferMut, BufferRef, HostSlice, HostTensor, PortInfo};
