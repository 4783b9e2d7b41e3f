//! `Instance`: port buffers, the arena and scratch of one running copy of a plan.

use crate::codec;
use crate::error::{CpuError, Result};
use crate::kernels::Cx;
use crate::plan::{Home, Plan};
use crate::port::{find_port, Direction, Port, PortError};
use crate::tensor::{AlignedBuf, BufferMut, BufferRef, Elem, HostSlice, HostTensor, SendPtr};
use aneforge_mil::DType;
use half::f16;
use std::cell::RefCell;
use std::sync::Arc;

thread_local! {
    /// The activation arena of every instance executed on this thread. A thread runs one
    /// instance at a time, so instances of many plans (an encoder's bucket programs, say) share
    /// one buffer sized to the largest arena instead of holding one each. Arena contents never
    /// outlive an execute (state lives in port buffers).
    static ARENA: RefCell<Option<AlignedBuf>> = const { RefCell::new(None) };
}

/// This thread's arena if it holds at least `bytes`, else a new one.
fn take_arena(bytes: usize) -> AlignedBuf {
    ARENA
        .with(|a| a.borrow_mut().take())
        .filter(|b| b.len() >= bytes)
        .unwrap_or_else(|| AlignedBuf::zeroed(bytes))
}

/// Keeps `arena` for the next execute on this thread unless a larger one is already kept.
fn return_arena(arena: AlignedBuf) {
    ARENA.with(|a| {
        let mut slot = a.borrow_mut();
        if slot.as_ref().is_none_or(|kept| kept.len() < arena.len()) {
            *slot = Some(arena);
        }
    });
}

/// Frees this thread's activation arena, which is otherwise kept for the thread's next execute
/// (that execute allocates a new one): for a process done with a large program, such as a
/// training run after its last step.
pub fn release_thread_arena() {
    drop(ARENA.with(|a| a.borrow_mut().take()));
}

/// The time one scheduled kernel took in [`Instance::execute_profiled`].
#[derive(Clone, Debug, PartialEq)]
pub struct KernelTime {
    /// The MIL op that heads the kernel (its `name`).
    pub name: String,
    pub op_type: String,
    /// What runs it (`matmul`, `elementwise[3]`, `copy`, ...), after fusion.
    pub kernel: String,
    pub seconds: f64,
}

/// What one value held right after the kernel that wrote it, in
/// [`Instance::execute_inspected`].
#[derive(Clone, Debug, PartialEq)]
pub struct ValueStats {
    /// The MIL op that heads the kernel (its `name`) and its type.
    pub op: String,
    pub op_type: String,
    /// The value written.
    pub value: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
    /// Largest finite |element|.
    pub max_abs: f32,
    /// Elements that are inf or NaN.
    pub non_finite: usize,
}

/// Bytes an [`Instance`] uses, by what holds them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InstanceMemory {
    /// Port buffers: inputs, outputs not shared with an input (allocated at the first execute),
    /// and resident state (a shared output lives in its input's buffer).
    pub ports: usize,
    /// Staging buffers of shared outputs that cannot be updated in place (written during the
    /// execute, copied into the input's buffer at its end).
    pub staging: usize,
    /// The plan's activation arena (one per thread, shared by the instances run on it).
    pub arena: usize,
    /// Constants the plan decoded (constants read in place from the weights blob hold none).
    pub constants: usize,
    /// Kernel scratch space.
    pub scratch: usize,
}

/// Where a run records kernel times or value statistics.
enum Observe<'a> {
    Nothing,
    Times(&'a mut Vec<KernelTime>),
    Values(&'a mut Vec<ValueStats>),
}

/// One executable copy of a plan. Not shared between threads while executing.
pub struct Instance {
    plan: Arc<Plan>,
    scratch: Vec<f32>,
    /// Port storages: inputs, then outputs, then staging buffers for shared outputs.
    storage: Vec<AlignedBuf>,
    /// Per plan buffer index 1..=nin+nout: the storage it is bound to.
    bind: Vec<usize>,
    /// Storage read by `read_output` for output j.
    out_store: Vec<usize>,
    /// After execute: copy storage `.0` into storage `.1` (staged shared outputs).
    end_copies: Vec<(usize, usize)>,
    ptrs: Vec<SendPtr<u8>>,
    executed: bool,
    shared_inputs: Vec<bool>,
    /// Inputs whose buffer was taken ([`Instance::take_state`]) and not replaced.
    taken: Vec<bool>,
}

/// The buffer of an input taken from one instance ([`Instance::take_state`]) to become the same
/// input's buffer in another ([`Instance::put_state`]): resident state (a KV cache, say) handed
/// between programs without a copy.
pub struct StateBuffer {
    dtype: DType,
    shape: Vec<usize>,
    buf: AlignedBuf,
}

impl std::fmt::Debug for StateBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StateBuffer({} {:?})", self.dtype, self.shape)
    }
}

// SAFETY: the raw pointers in `ptrs` point into buffers owned by this instance or its `Arc<Plan>`.
unsafe impl Send for Instance {}

impl std::fmt::Debug for Instance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Instance")
            .field("plan", &self.plan)
            .finish()
    }
}

/// Magnitude and inf/NaN count of value `v` as it is in memory now.
fn value_stats(cx: &Cx<'_>, n: &crate::plan::Node, v: crate::plan::Vid) -> ValueStats {
    let value = &cx.plan.values[v];
    let len = value.len();
    let (mut max_abs, mut non_finite) = (0f32, 0usize);
    let mut see = |x: f32| {
        if x.is_finite() {
            max_abs = max_abs.max(x.abs());
        } else {
            non_finite += 1;
        }
    };
    let p = cx.ptr(v);
    // SAFETY: the value was just written by its kernel and holds `len` elements of its type.
    match value.elem() {
        Some(Elem::F32) => unsafe { std::slice::from_raw_parts(p as *const f32, len) }
            .iter()
            .for_each(|&x| see(x)),
        Some(Elem::F16) => unsafe { std::slice::from_raw_parts(p as *const f16, len) }
            .iter()
            .for_each(|&x| see(x.to_f32())),
        _ => {}
    }
    ValueStats {
        op: n.name.clone(),
        op_type: n.op_type.clone(),
        value: value.name.clone(),
        dtype: value.dtype,
        shape: value.shape.clone(),
        max_abs,
        non_finite,
    }
}

impl Instance {
    pub(crate) fn new(plan: Arc<Plan>) -> Instance {
        let nin = plan.inputs.len();
        let nout = plan.outputs.len();
        // outputs get their storage at the first execute, unless shared with an input before
        let mut storage: Vec<AlignedBuf> = plan
            .inputs
            .iter()
            .map(|p| AlignedBuf::zeroed(p.dense_bytes()))
            .collect();
        storage.extend(plan.outputs.iter().map(|_| AlignedBuf::zeroed(0)));
        let mut inst = Instance {
            scratch: vec![0.0; plan.scratch_floats.max(1)],
            storage,
            bind: (0..nin + nout).collect(),
            out_store: (nin..nin + nout).collect(),
            end_copies: Vec::new(),
            ptrs: Vec::new(),
            executed: false,
            shared_inputs: vec![false; nin],
            taken: vec![false; nin],
            plan,
        };
        inst.rebuild_ptrs();
        inst
    }

    fn rebuild_ptrs(&mut self) {
        // slot 0 is the arena, bound for the length of each execute
        let mut ptrs = vec![SendPtr(std::ptr::null_mut())];
        for &s in &self.bind {
            ptrs.push(SendPtr(self.storage[s].as_mut_ptr()));
        }
        for c in &self.plan.consts {
            ptrs.push(SendPtr(c.as_ptr() as *mut u8));
        }
        self.ptrs = ptrs;
    }

    pub fn plan(&self) -> &Arc<Plan> {
        &self.plan
    }

    /// What this instance holds, and the arena its executes use.
    pub fn memory(&self) -> InstanceMemory {
        let staging: usize = self
            .end_copies
            .iter()
            .map(|&(from, _)| self.storage[from].len())
            .sum();
        let all: usize = self.storage.iter().map(AlignedBuf::len).sum();
        InstanceMemory {
            ports: all - staging,
            staging,
            arena: self.plan.arena_bytes,
            constants: self.plan.const_bytes(),
            scratch: std::mem::size_of_val::<[f32]>(&self.scratch),
        }
    }

    fn input_index(&self, name: &str) -> Result<usize> {
        Ok(find_port(&self.plan.inputs, Direction::Input, name)?)
    }

    fn output_index(&self, name: &str) -> Result<usize> {
        Ok(find_port(&self.plan.outputs, Direction::Output, name)?)
    }

    /// Input `i`'s buffer, unless [`Instance::take_state`] took it.
    fn input_storage(&mut self, i: usize) -> Result<&mut AlignedBuf> {
        if self.taken[i] {
            return Err(CpuError::Port(PortError::View {
                port: self.plan.inputs[i].name.clone(),
                message: "its buffer was taken by take_state and not put back".into(),
            }));
        }
        Ok(&mut self.storage[self.bind[i]])
    }

    /// Copies (and converts) host data into an input port.
    pub fn set_input(&mut self, name: &str, data: HostSlice<'_>) -> Result<()> {
        let i = self.input_index(name)?;
        let plan = self.plan.clone();
        let buf = self.input_storage(i)?;
        Ok(codec::encode(&plan.inputs[i], data, buf.bytes_mut())?)
    }

    /// Copies an input's dense bytes in the codec's form (bool bytes may be any value).
    pub fn write_input_bytes(&mut self, name: &str, bytes: &[u8]) -> Result<()> {
        let i = self.input_index(name)?;
        let plan = self.plan.clone();
        let buf = self.input_storage(i)?;
        Ok(codec::copy_dense(&plan.inputs[i], bytes, buf.bytes_mut())?)
    }

    /// Binds input `input` to output `output`'s buffer so state stays resident across executes.
    pub fn share_buffer(&mut self, output: &str, input: &str) -> Result<()> {
        let err = |m: &str| {
            CpuError::Port(PortError::Share {
                output: output.to_string(),
                input: input.to_string(),
                message: m.to_string(),
            })
        };
        if self.executed {
            return Err(err("must be called before the first execute"));
        }
        let j = self.output_index(output)?;
        let i = self.input_index(input)?;
        let (op, ip) = (&self.plan.outputs[j], &self.plan.inputs[i]);
        if op.dtype != ip.dtype || op.shape != ip.shape {
            return Err(err(&format!(
                "output is {} {:?} but input is {} {:?}",
                op.dtype, op.shape, ip.dtype, ip.shape
            )));
        }
        if self.shared_inputs[i] {
            return Err(err("the input is already shared"));
        }
        let nin = self.plan.inputs.len();
        if self.out_store[j] != nin + j {
            return Err(err("the output is already shared"));
        }
        // the output lives in the input's storage from now on, so the input keeps its contents
        // as the initial state
        let state = self.bind[i];
        self.out_store[j] = state;
        self.shared_inputs[i] = true;
        let in_place = self.plan.inplace[j].contains(&i);
        if self.plan.output_direct[j] && !in_place {
            self.storage[nin + j] = AlignedBuf::zeroed(op.dense_bytes());
            self.end_copies.push((nin + j, state));
        } else {
            self.bind[nin + j] = state;
        }
        self.rebuild_ptrs();
        Ok(())
    }

    /// Takes input `input`'s buffer (with its contents) out of this instance; the input has
    /// none until [`Instance::put_state`] gives it one, and executing fails until then. An
    /// output shared with the input ([`Instance::share_buffer`]) follows the buffer.
    pub fn take_state(&mut self, input: &str) -> Result<StateBuffer> {
        let i = self.input_index(input)?;
        if self.taken[i] {
            return Err(CpuError::Port(PortError::View {
                port: input.to_string(),
                message: "its buffer was already taken".into(),
            }));
        }
        let (dtype, shape) = (self.plan.inputs[i].dtype, self.plan.inputs[i].shape.clone());
        let buf = std::mem::replace(&mut self.storage[self.bind[i]], AlignedBuf::zeroed(0));
        self.taken[i] = true;
        self.rebuild_ptrs();
        Ok(StateBuffer { dtype, shape, buf })
    }

    /// Makes `state` input `input`'s buffer (it must have the input's dtype and shape), freeing
    /// the buffer the input had. On error `state` is returned unchanged.
    pub fn put_state(
        &mut self,
        input: &str,
        state: StateBuffer,
    ) -> std::result::Result<(), Box<(CpuError, StateBuffer)>> {
        let i = match self.input_index(input) {
            Ok(i) => i,
            Err(e) => return Err(Box::new((e, state))),
        };
        let p = &self.plan.inputs[i];
        if p.dtype != state.dtype || p.shape != state.shape {
            let message = format!(
                "the buffer holds {} {:?} but the input is {} {:?}",
                state.dtype, state.shape, p.dtype, p.shape
            );
            let e = CpuError::Port(PortError::View {
                port: input.to_string(),
                message,
            });
            return Err(Box::new((e, state)));
        }
        self.storage[self.bind[i]] = state.buf;
        self.taken[i] = false;
        self.rebuild_ptrs();
        Ok(())
    }

    /// Runs the plan once.
    pub fn execute(&mut self) -> Result<()> {
        self.run_plan(Observe::Nothing)
    }

    /// Runs the plan once like [`Instance::execute`], timing every scheduled kernel (in schedule
    /// order). For profiling; the timers cost a clock read per kernel.
    pub fn execute_profiled(&mut self) -> Result<Vec<KernelTime>> {
        let mut times = Vec::with_capacity(self.plan.nodes.len());
        self.run_plan(Observe::Times(&mut times))?;
        Ok(times)
    }

    /// Executes, recording after every kernel the largest magnitude and the count of inf/NaN
    /// elements of each value it wrote, in schedule order. Compile the plan without fusion
    /// (`CompileOptions::fuse = false`) to see every MIL op's result.
    pub fn execute_inspected(&mut self) -> Result<Vec<ValueStats>> {
        let mut stats = Vec::with_capacity(self.plan.nodes.len());
        self.run_plan(Observe::Values(&mut stats))?;
        Ok(stats)
    }

    fn run_plan(&mut self, observe: Observe<'_>) -> Result<()> {
        if let Some(i) = self.taken.iter().position(|&t| t) {
            return Err(CpuError::Port(PortError::View {
                port: self.plan.inputs[i].name.clone(),
                message: "its buffer was taken by take_state and not put back".into(),
            }));
        }
        if !self.executed {
            let nin = self.plan.inputs.len();
            for (j, p) in self.plan.outputs.iter().enumerate() {
                let s = &mut self.storage[nin + j];
                if self.bind[nin + j] == nin + j && s.len() != p.dense_bytes() {
                    *s = AlignedBuf::zeroed(p.dense_bytes());
                }
            }
            self.rebuild_ptrs();
        }
        let mut arena = take_arena(self.plan.arena_bytes);
        self.ptrs[0] = SendPtr(arena.as_mut_ptr());
        let result = self.run_with_arena(observe);
        self.ptrs[0] = SendPtr(std::ptr::null_mut());
        return_arena(arena);
        result
    }

    fn run_with_arena(&mut self, mut observe: Observe<'_>) -> Result<()> {
        self.executed = true;
        let plan = self.plan.clone();
        let threads = if plan.parallel { plan.threads } else { 1 };
        let lease = if threads > 1 {
            Some(crate::team::acquire(threads).map_err(|e| {
                CpuError::Execute(format!("cannot start {threads} worker threads: {e}"))
            })?)
        } else {
            None
        };
        let cx = Cx {
            team: lease.as_deref(),
            plan: &plan,
            ptrs: &self.ptrs,
            scratch: SendPtr(self.scratch.as_mut_ptr()),
            scratch_len: self.scratch.len(),
            threads,
        };
        let mut run = || -> Result<()> {
            for n in &plan.nodes {
                let start = matches!(observe, Observe::Times(_)).then(std::time::Instant::now);
                n.kernel.run(&cx).map_err(|m| {
                    CpuError::Execute(format!("op `{}` ({}): {m}", n.name, n.op_type))
                })?;
                match (&mut observe, start) {
                    (Observe::Times(t), Some(start)) => {
                        // read the clock first: `kind()` formats the kernel (for rows kernels with
                        // their constant vectors), which must not count as the kernel's time
                        let seconds = start.elapsed().as_secs_f64();
                        t.push(KernelTime {
                            name: n.name.clone(),
                            op_type: n.op_type.clone(),
                            kernel: n.kernel.kind(),
                            seconds,
                        });
                    }
                    (Observe::Values(stats), _) => {
                        for &v in &n.writes {
                            if plan.values[v].home != Home::None {
                                stats.push(value_stats(&cx, n, v));
                            }
                        }
                    }
                    _ => {}
                }
            }
            Ok(())
        };
        run()?;
        // outputs not written in place: copy from where the value lives
        let nin = plan.inputs.len();
        for (j, &v) in plan.output_vids.iter().enumerate() {
            if plan.output_direct[j] {
                continue;
            }
            let bytes = plan.values[v].bytes();
            let src = cx.ptr(v) as *const u8;
            let dst = self.storage[self.bind[nin + j]].as_mut_ptr();
            // SAFETY: both hold `bytes` bytes; ports never alias values they copy from except
            // when the value already lives in the port (then the copy is skipped).
            unsafe {
                if !std::ptr::eq(src, dst) {
                    std::ptr::copy(src, dst, bytes);
                }
            }
        }
        for &(from, to) in &self.end_copies {
            let (a, b) = if from < to {
                let (lo, hi) = self.storage.split_at_mut(to);
                (&lo[from], &mut hi[0])
            } else {
                let (lo, hi) = self.storage.split_at_mut(from);
                (&hi[0], &mut lo[to])
            };
            b.bytes_mut().copy_from_slice(a.bytes());
        }
        Ok(())
    }

    fn out_buf(&self, name: &str) -> Result<(&AlignedBuf, &Port)> {
        let j = self.output_index(name)?;
        Ok((&self.storage[self.out_store[j]], &self.plan.outputs[j]))
    }

    pub fn read_output(&self, name: &str) -> Result<HostTensor> {
        let (b, p) = self.out_buf(name)?;
        Ok(codec::decode(p, b.bytes())?)
    }

    pub fn read_output_f32(&self, name: &str) -> Result<Vec<f32>> {
        Ok(self.read_output(name)?.to_f32())
    }

    /// An output's dense bytes in the codec's form.
    pub fn output_bytes(&self, name: &str) -> Result<&[u8]> {
        Ok(self.out_buf(name)?.0.bytes())
    }

    pub fn output_view(&self, name: &str) -> Result<BufferRef<'_>> {
        let (b, p) = self.out_buf(name)?;
        if p.dtype == DType::Bool {
            // SAFETY: bool storage only ever holds 0 or 1 (every write goes through the codec or
            // a `&mut [bool]` view).
            return Ok(BufferRef::Bool(unsafe {
                std::slice::from_raw_parts(b.as_ptr() as *const bool, b.len())
            }));
        }
        Ok(codec::view(p, b.bytes())?)
    }

    pub fn input_view_mut(&mut self, name: &str) -> Result<BufferMut<'_>> {
        let i = self.input_index(name)?;
        self.input_storage(i)?;
        let p = &self.plan.inputs[i];
        let b = &mut self.storage[self.bind[i]];
        if p.dtype == DType::Bool {
            let n = b.len();
            // SAFETY: bool storage holds 0/1; `bool` has the same layout as u8. Callers can only
            // write valid bools through `&mut [bool]`.
            return Ok(BufferMut::Bool(unsafe {
                std::slice::from_raw_parts_mut(b.as_mut_ptr() as *mut bool, n)
            }));
        }
        Ok(codec::view_mut(p, b.bytes_mut())?)
    }
}
