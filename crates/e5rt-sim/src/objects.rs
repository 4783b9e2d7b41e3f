//! The objects behind handles, and the ordering rules of the runtime: ports are bound while the
//! operation is ready for encoding, an operation is encoded once per stream (again only after a
//! stream reset and `prepare_op_for_encode`), and a stream executes only what it has encoded.

use crate::backend::Executable;
use crate::error::{Code, Result, SimError};
use crate::memory::Memory;
use crate::program::{elem, CompiledFunction, CompiledProgram, Layout};
// the function's port, as opposed to the e5rt port object `Port` below
use crate::{config, program};
use aneforge_cpu::Port as PortSpec;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn state_error(message: impl Into<String>) -> SimError {
    SimError::new(Code::InvalidState, message)
}

#[derive(Default)]
pub struct CompilerConfig {
    pub cache_dir: Mutex<Option<PathBuf>>,
}

pub struct Compiler {
    pub cache_dir: Option<PathBuf>,
}

#[derive(Clone, Debug, Default)]
pub struct CompileSettings {
    pub device_mask: Option<u64>,
    pub force_recompilation: bool,
    pub segmenter: Option<String>,
}

#[derive(Default)]
pub struct CompilerOptions {
    pub settings: Mutex<CompileSettings>,
}

/// Known compute device bits: CPU (BNNS), GPU (MPSGraph), ANE.
pub const DEVICE_BITS: u64 = 0x7;

impl Compiler {
    /// Compiles `model.mil` at `path` with `settings`.
    pub fn compile(&self, path: &str, settings: &CompileSettings) -> Result<Library> {
        let mask = settings.device_mask.ok_or_else(|| {
            SimError::new(
                Code::InvalidArgument,
                "compute device types mask was not set on the compiler options",
            )
        })?;
        if mask == 0 || mask & !DEVICE_BITS != 0 {
            return Err(SimError::new(
                Code::InvalidArgument,
                format!("compute device types mask {mask:#x} is not a non-empty subset of 0x7"),
            ));
        }
        if let Some(dir) = &self.cache_dir {
            std::fs::create_dir_all(dir).map_err(|e| {
                SimError::new(
                    Code::CompileFailed,
                    format!("cache bundle location {}: {e}", dir.display()),
                )
            })?;
        }
        config::count_compile();
        let program = program::compile(std::path::Path::new(path))?;
        Ok(Library { program })
    }
}

pub struct Library {
    pub program: CompiledProgram,
}

pub struct Function {
    /// Keeps the program alive while the function is referenced.
    pub _library: Arc<Library>,
    pub compiled: Arc<CompiledFunction>,
}

#[derive(Clone, Debug, Default)]
pub struct OpSettings {
    pub operation_name: Option<String>,
    pub allocate_intermediate_buffers: bool,
}

pub struct OpOptions {
    pub function: Arc<Function>,
    pub settings: Mutex<OpSettings>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Ports and events may be bound; may be encoded.
    Ready,
    /// Encoded into a stream; bindings are frozen.
    Encoded,
    /// Its stream was reset or released; `prepare_op_for_encode` makes it ready again.
    Detached,
}

pub struct PortSlot {
    pub spec: PortSpec,
    pub layout: Layout,
    pub bound: Option<Arc<Buffer>>,
}

pub struct OpState {
    /// Inputs, then outputs.
    pub slots: Vec<PortSlot>,
    pub n_inputs: usize,
    pub completion: Option<Arc<Event>>,
    pub phase: Phase,
    pub executable: Box<dyn Executable>,
}

pub struct Operation {
    /// Keeps the program alive while the operation is referenced.
    pub _function: Arc<Function>,
    pub name: String,
    pub state: Mutex<OpState>,
}

impl Operation {
    pub fn create(options: &OpOptions) -> Result<Operation> {
        let settings = lock(&options.settings).clone();
        let function = Arc::clone(&options.function);
        let compiled = &function.compiled;
        let name = settings
            .operation_name
            .unwrap_or_else(|| compiled.name.clone());
        let alignment = config::row_alignment();
        let slots = compiled
            .inputs
            .iter()
            .chain(&compiled.outputs)
            .map(|spec| PortSlot {
                layout: Layout::for_port(spec, alignment),
                spec: spec.clone(),
                bound: None,
            })
            .collect();
        let state = OpState {
            slots,
            n_inputs: compiled.inputs.len(),
            completion: None,
            phase: Phase::Ready,
            executable: compiled.plan.instantiate(),
        };
        Ok(Operation {
            _function: function,
            name,
            state: Mutex::new(state),
        })
    }

    /// The index of port `name` among inputs (`input = true`) or outputs.
    pub fn port_index(&self, input: bool, name: &str) -> Result<usize> {
        let state = lock(&self.state);
        let (range, kind) = if input {
            (0..state.n_inputs, "input")
        } else {
            (state.n_inputs..state.slots.len(), "output")
        };
        range
            .clone()
            .find(|&i| state.slots[i].spec.name == name)
            .ok_or_else(|| {
                let names: Vec<&str> = state.slots[range]
                    .iter()
                    .map(|s| s.spec.name.as_str())
                    .collect();
                SimError::new(
                    Code::NotFound,
                    format!(
                        "operation `{}` has no {kind} port named `{name}` ({kind}s: {})",
                        self.name,
                        names.join(", ")
                    ),
                )
            })
    }

    fn require_ready(&self, state: &OpState, action: &str) -> Result<()> {
        match state.phase {
            Phase::Ready => Ok(()),
            Phase::Encoded => Err(state_error(format!(
                "cannot {action}: operation `{}` is already encoded in a stream",
                self.name
            ))),
            Phase::Detached => Err(state_error(format!(
                "cannot {action}: operation `{}` was encoded before; call \
                 e5rt_execution_stream_operation_prepare_op_for_encode first",
                self.name
            ))),
        }
    }

    pub fn bind(&self, index: usize, buffer: Arc<Buffer>) -> Result<()> {
        let mut state = lock(&self.state);
        let slot = &state.slots[index];
        self.require_ready(&state, &format!("bind port `{}`", slot.spec.name))?;
        if buffer.memory.len() < slot.layout.extent {
            return Err(SimError::new(
                Code::InvalidArgument,
                format!(
                    "buffer object of {} bytes is too small for port `{}`, which needs {}",
                    buffer.memory.len(),
                    slot.spec.name,
                    slot.layout.extent
                ),
            ));
        }
        state.slots[index].bound = Some(buffer);
        Ok(())
    }

    pub fn bind_completion_event(&self, event: Arc<Event>) -> Result<()> {
        let mut state = lock(&self.state);
        self.require_ready(&state, "bind a completion event")?;
        state.completion = Some(event);
        Ok(())
    }

    pub fn prepare_for_encode(&self) -> Result<()> {
        let mut state = lock(&self.state);
        match state.phase {
            Phase::Detached => {
                state.phase = Phase::Ready;
                Ok(())
            }
            Phase::Ready => Err(state_error(format!(
                "operation `{}` has not been encoded and hence cannot be prepared for encode",
                self.name
            ))),
            Phase::Encoded => Err(state_error(format!(
                "operation `{}` is still encoded in a stream; reset the stream first",
                self.name
            ))),
        }
    }

    /// Runs once: reads every input from its bound buffer, executes, writes every output.
    /// Inputs are all read before any output is written, so an input bound to an output's buffer
    /// sees the previous value.
    fn run(&self) -> Result<()> {
        let mut guard = lock(&self.state);
        let OpState {
            slots,
            n_inputs,
            executable,
            completion,
            ..
        } = &mut *guard;
        let failed = |m: String| {
            SimError::new(
                Code::ExecutionFailed,
                format!("operation `{}`: {m}", self.name),
            )
        };
        for (i, slot) in slots.iter().enumerate().take(*n_inputs) {
            let buffer = slot.bound.as_ref().ok_or_else(|| {
                state_error(format!(
                    "input port `{}` has no buffer bound",
                    slot.spec.name
                ))
            })?;
            let mut dense = vec![0u8; slot.spec.dense_bytes()];
            // SAFETY: executions are serialized by `EXECUTION`; the caller does not touch bound
            // buffers during `execute_sync` (the runtime's contract), so nothing writes this memory
            // while the slice lives.
            let src = unsafe { buffer.memory.bytes() };
            slot.layout.gather(&slot.spec, src, &mut dense);
            executable.write_input(i, &dense).map_err(failed)?;
        }
        executable.execute().map_err(failed)?;
        for (j, slot) in slots.iter().enumerate().skip(*n_inputs) {
            let buffer = slot.bound.as_ref().ok_or_else(|| {
                state_error(format!(
                    "output port `{}` has no buffer bound",
                    slot.spec.name
                ))
            })?;
            let mut dense = vec![0u8; slot.spec.dense_bytes()];
            executable
                .read_output(j - *n_inputs, &mut dense)
                .map_err(failed)?;
            // SAFETY: as above, and no other slice of this memory is alive: input slices were
            // dropped before execution, and each output's slice is dropped before the next.
            let dst = unsafe { buffer.memory.bytes_mut() };
            slot.layout.scatter(&slot.spec, &dense, dst);
        }
        if let Some(event) = completion {
            event.signaled.fetch_add(1, Ordering::SeqCst);
        }
        config::count_execution();
        Ok(())
    }
}

pub struct Port {
    pub operation: Arc<Operation>,
    pub index: usize,
}

impl Port {
    pub fn spec_and_layout(&self) -> (PortSpec, Layout) {
        let state = lock(&self.operation.state);
        let slot = &state.slots[self.index];
        (slot.spec.clone(), slot.layout.clone())
    }
}

pub struct Buffer {
    pub memory: Memory,
}

pub struct Event {
    pub _name: String,
    pub signaled: AtomicU64,
}

#[derive(Default)]
pub struct StreamState {
    pub ops: Vec<Arc<Operation>>,
}

impl Drop for StreamState {
    fn drop(&mut self) {
        for op in &self.ops {
            lock(&op.state).phase = Phase::Detached;
        }
    }
}

#[derive(Default)]
pub struct Stream {
    pub state: Mutex<StreamState>,
}

/// One dispatch at a time, as on the real runtime.
static EXECUTION: Mutex<()> = Mutex::new(());

impl Stream {
    pub fn encode(&self, op: Arc<Operation>) -> Result<()> {
        let mut stream = lock(&self.state);
        {
            let mut state = lock(&op.state);
            op.require_ready(&state, "encode")?;
            if let Some(slot) = state.slots.iter().find(|s| s.bound.is_none()) {
                return Err(state_error(format!(
                    "cannot encode operation `{}`: port `{}` has no buffer bound",
                    op.name, slot.spec.name
                )));
            }
            state.phase = Phase::Encoded;
        }
        stream.ops.push(op);
        Ok(())
    }

    pub fn execute_sync(&self) -> Result<()> {
        let _one = lock(&EXECUTION);
        let stream = lock(&self.state);
        if stream.ops.is_empty() {
            return Err(state_error(
                "execute_sync on a stream with no encoded operation (encode_operation first)",
            ));
        }
        for op in &stream.ops {
            op.run()?;
        }
        Ok(())
    }

    pub fn reset(&self) -> Result<()> {
        let mut stream = lock(&self.state);
        if stream.ops.is_empty() {
            return Err(state_error("reset of a stream with no encoded operation"));
        }
        for op in stream.ops.drain(..) {
            lock(&op.state).phase = Phase::Detached;
        }
        Ok(())
    }
}

pub struct TensorDesc {
    pub shape: Vec<u64>,
    pub strides: Vec<u64>,
}

impl TensorDesc {
    pub fn for_port(spec: &PortSpec, layout: &Layout) -> TensorDesc {
        let unit = if config::strides_in_bytes() {
            1
        } else {
            elem(spec)
        };
        TensorDesc {
            shape: spec.shape.iter().map(|&d| d as u64).collect(),
            strides: layout.strides.iter().map(|&s| (s / unit) as u64).collect(),
        }
    }
}
