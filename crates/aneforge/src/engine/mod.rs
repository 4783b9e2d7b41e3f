//! Engines run compiled programs. Every engine implements [`Executable`], the runtime contract:
//! typed [`Port`]s, `set_input` / `execute` / `read_output`, zero-copy views, and `share_buffer`
//! for state that stays resident across executes. The CPU engine's `aneforge_cpu::Instance` and
//! the ANE engine's [`AneProgram`] implement it; [`load_program`] loads either from a program
//! directory. Ports, the host data codec and [`PortError`] are the CPU crate's, shared by both
//! engines and the e5rt simulator.

pub mod ane;
mod ane_ffi;
mod ane_layout;
pub mod ane_select;
mod cache;
mod cpu;
mod load;

pub use ane::{AneEngine, AneError, AneOptions, AneProgram, AneStats};
pub use ane_select::{select, select_matmul, EngineKind, SelectError, Selection, UnknownEngine};
pub use aneforge_cpu::{
    codec, find_port, mapped_buffer_bytes, release_thread_arena, Accumulation, Activations,
    BufferMut, BufferRef, Carried, Direction, HostSlice, HostTensor, InstanceMemory,
    MatmulPrecision, Port, PortError, ValueStats,
};
pub use cache::{cache_stats, compile_count, CacheStats};
pub use load::{content_hash, load, load_function, load_function_with, load_program};

use aneforge_mil as mil;

/// Which engine runs a compiled program.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Engine {
    /// aneforge's own CPU engine: runs any target's program (fp16 programs with fp16 storage).
    #[default]
    Cpu,
    /// The Neural Engine through Apple's e5rt runtime ([`AneEngine::global`]); on other machines,
    /// the e5rt implementation `ANEFORGE_E5RT_LIB` names (such as the simulator).
    Ane,
}

impl Engine {
    /// The ANE where its runtime can be loaded, the CPU otherwise.
    pub fn auto() -> Engine {
        if AneEngine::global().is_ok() {
            Engine::Ane
        } else {
            Engine::Cpu
        }
    }
}

/// Numerical choices of an engine that the program leaves open.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct EngineOptions {
    /// CPU engine: the activations of few-row products against block-quantized weights, f32
    /// or quantized per 32 columns (`aneforge_cpu::Activations`). The ANE ignores it.
    pub activations: Activations,
    /// CPU engine: the width of running sums in fp16 programs (`aneforge_cpu::Accumulation`).
    pub accumulation: Accumulation,
    /// CPU engine: f32 or bf16 operands in fp32 programs' many-row products against constant
    /// weights (`aneforge_cpu::MatmulPrecision`). The ANE ignores it (its programs are fp16).
    pub matmul: MatmulPrecision,
    /// CPU engine: every MIL op runs as its own kernel (no fusion), so
    /// [`Executable::execute_inspected`] sees each op's result as the program stores it.
    pub inspect: bool,
}

/// Errors of loading and running programs. Port misuse is [`EngineError::Port`] on every engine.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Port(#[from] PortError),
    #[error("cpu engine: {0}")]
    Cpu(aneforge_cpu::CpuError),
    #[error("ane engine: {0}")]
    Ane(AneError),
    #[error("program directory: {0}")]
    ProgramDir(#[from] mil::ProgramDirError),
    #[error("the program has no function {name:?}; its functions are {available:?}")]
    UnknownFunction {
        name: String,
        available: Vec<String>,
    },
    #[error("this engine cannot report values inside a program; inspection needs the CPU engine")]
    NoInspection,
}

impl From<aneforge_cpu::CpuError> for EngineError {
    fn from(e: aneforge_cpu::CpuError) -> EngineError {
        match e {
            aneforge_cpu::CpuError::Port(p) => EngineError::Port(p),
            e => EngineError::Cpu(e),
        }
    }
}

impl From<AneError> for EngineError {
    fn from(e: AneError) -> EngineError {
        match e {
            AneError::Port(p) => EngineError::Port(p),
            e => EngineError::Ane(e),
        }
    }
}

/// The runtime contract every engine implements.
pub trait Executable: Send {
    fn inputs(&self) -> &[Port];
    fn outputs(&self) -> &[Port];
    /// Copies (and converts, see [`codec`]) host data into an input port; the length must equal
    /// the port's element count.
    fn set_input(&mut self, name: &str, data: HostSlice<'_>) -> Result<(), EngineError>;
    fn execute(&mut self) -> Result<(), EngineError>;
    /// An owned copy of an output in the port's dtype.
    fn read_output(&self, name: &str) -> Result<HostTensor, EngineError>;
    /// An output converted to f32.
    fn read_output_f32(&self, name: &str) -> Result<Vec<f32>, EngineError> {
        Ok(self.read_output(name)?.to_f32())
    }
    /// The input port's buffer, for writing in place.
    fn input_view_mut(&mut self, name: &str) -> Result<BufferMut<'_>, EngineError>;
    /// The output port's buffer, valid until the next execute.
    fn output_view(&self, name: &str) -> Result<BufferRef<'_>, EngineError>;
    /// Before the first execute: binds `input` to `output`'s buffer (same dtype and shape), so
    /// each execute reads the previous value and the new one lands when it returns.
    fn share_buffer(&mut self, output: &str, input: &str) -> Result<(), EngineError>;
    /// Takes input `input`'s buffer with its contents (resident state such as a KV cache), to
    /// become the same input's buffer of another program ([`Executable::put_state`]) without a
    /// copy; executing fails until a buffer is put back. `None` on engines that cannot hand
    /// buffers between programs (copy the state instead).
    fn take_state(
        &mut self,
        input: &str,
    ) -> Result<Option<aneforge_cpu::StateBuffer>, EngineError> {
        let _ = input;
        Ok(None)
    }
    /// Makes `state` (taken from an input of the same dtype and shape) input `input`'s buffer.
    fn put_state(
        &mut self,
        input: &str,
        state: aneforge_cpu::StateBuffer,
    ) -> Result<(), EngineError> {
        drop(state);
        Err(EngineError::Port(PortError::View {
            port: input.to_string(),
            message: "this engine does not take state buffers".into(),
        }))
    }
    /// Executes, returning the magnitude and inf/NaN count of every value each op wrote, in
    /// order (the CPU engine only: other engines cannot look inside a program).
    fn execute_inspected(&mut self) -> Result<Vec<aneforge_cpu::ValueStats>, EngineError> {
        Err(EngineError::NoInspection)
    }
    /// Executes, timing every kernel in schedule order (the CPU engine only).
    fn execute_profiled(&mut self) -> Result<Vec<aneforge_cpu::KernelTime>, EngineError> {
        Err(EngineError::NoInspection)
    }
    /// The CPU engine's buffers by what holds them; `None` for engines whose buffers this
    /// process does not see.
    fn memory(&self) -> Option<InstanceMemory> {
        None
    }
    /// Frees the engine's resources now (dropping does the same).
    fn release(self: Box<Self>) {}
}
