//! The compiled plan: values with their homes, the node schedule, constants, arena layout.

use crate::error::CpuError;
use crate::kernels::Kernel;
use crate::known::Floats;
use crate::port::Port;
use crate::tensor::{AlignedBuf, Elem};
use aneforge_mil::DType;
use std::sync::Arc;

pub(crate) type Vid = usize;

/// Where a value's bytes live at run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Home {
    /// Not placed yet (compile time) or never needed at run time.
    None,
    Arena(usize),
    Input(usize),
    Output(usize),
    Const(usize),
    /// Same bytes as another value (reshape-like ops).
    Alias(Vid),
}

#[derive(Clone, Debug)]
pub(crate) struct Value {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub home: Home,
}

impl Value {
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn elem(&self) -> Option<Elem> {
        Elem::from_dtype(self.dtype)
    }

    pub fn bytes(&self) -> usize {
        self.len() * self.elem().map_or(0, |e| e.size())
    }
}

pub(crate) struct Node {
    pub name: String,
    pub op_type: String,
    pub kernel: Kernel,
    pub reads: Vec<Vid>,
    pub writes: Vec<Vid>,
}

/// A constant's bytes at run time (read only, shared by every instance of the plan): decoded
/// here, or f32 values read in place from the weights blob.
pub(crate) enum ConstBuf {
    Owned(AlignedBuf),
    Blob(Floats),
}

impl ConstBuf {
    pub fn as_ptr(&self) -> *const u8 {
        match self {
            ConstBuf::Owned(b) => b.as_ptr(),
            ConstBuf::Blob(v) => v.as_ptr() as *const u8,
        }
    }

    /// Bytes held by the plan itself (a blob view holds none).
    pub fn owned_bytes(&self) -> usize {
        match self {
            ConstBuf::Owned(b) => b.len(),
            ConstBuf::Blob(v) => v.owned_bytes(),
        }
    }
}

/// An immutable, validated execution plan for one function. Share it between instances.
pub struct Plan {
    pub(crate) values: Vec<Value>,
    /// Per value: (buffer index, byte offset). Buffer 0 is the arena, then input ports,
    /// output ports, constants.
    pub(crate) locs: Vec<(usize, usize)>,
    pub(crate) nodes: Vec<Node>,
    pub(crate) consts: Vec<ConstBuf>,
    pub(crate) inputs: Vec<Port>,
    pub(crate) outputs: Vec<Port>,
    pub(crate) output_vids: Vec<Vid>,
    /// Output j is written in place by its producer (otherwise copied at the end of execute).
    pub(crate) output_direct: Vec<bool>,
    /// The inputs output j may share its buffer with, updated in place by its producer: a
    /// `slice_update` of the input, or an elementwise chain reading it densely; either way every
    /// other reader of the input runs before the producer.
    pub(crate) inplace: Vec<Vec<usize>>,
    pub(crate) arena_bytes: usize,
    pub(crate) scratch_floats: usize,
    pub(crate) threads: usize,
    pub(crate) parallel: bool,
}

impl std::fmt::Debug for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plan")
            .field("inputs", &self.inputs)
            .field("outputs", &self.outputs)
            .field("nodes", &self.nodes.len())
            .field("arena_bytes", &self.arena_bytes)
            .finish()
    }
}

#[cfg(test)]
impl Plan {
    /// A plan with nothing in it, for kernel tests that only need a context.
    pub(crate) fn empty() -> Plan {
        Plan {
            values: Vec::new(),
            locs: Vec::new(),
            nodes: Vec::new(),
            consts: Vec::new(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            output_vids: Vec::new(),
            output_direct: Vec::new(),
            inplace: Vec::new(),
            arena_bytes: 0,
            scratch_floats: 0,
            threads: 1,
            parallel: false,
        }
    }
}

impl Plan {
    pub fn inputs(&self) -> &[Port] {
        &self.inputs
    }

    pub fn outputs(&self) -> &[Port] {
        &self.outputs
    }

    pub fn instantiate(self: &Arc<Self>) -> crate::Instance {
        crate::Instance::new(self.clone())
    }

    /// Bytes of the activation arena (lifetime-shared slots).
    pub fn arena_bytes(&self) -> usize {
        self.arena_bytes
    }

    /// Bytes of decoded constants held by the plan.
    pub fn const_bytes(&self) -> usize {
        self.consts.iter().map(ConstBuf::owned_bytes).sum::<usize>()
            + self
                .nodes
                .iter()
                .map(|n| n.kernel.owned_bytes())
                .sum::<usize>()
    }

    /// One line per scheduled kernel: `name: kind`. For tests and `aneforge compile --explain`.
    pub fn schedule(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("{}: {}", n.name, n.kernel.kind()))
            .collect()
    }

    /// Whether `share_buffer(output, input)` would update the state in place (the output is a
    /// `slice_update` of that input, or an elementwise chain reading it at the output's own
    /// positions, and its other readers all run before it) instead of staging.
    pub fn shares_in_place(&self, output: &str, input: &str) -> bool {
        let j = self.outputs.iter().position(|p| p.name == output);
        let i = self.inputs.iter().position(|p| p.name == input);
        matches!((j, i), (Some(j), Some(i)) if self.inplace[j].contains(&i))
    }

    pub fn threads(&self) -> usize {
        self.threads
    }
}

/// First-fit allocator over a growing arena; blocks are 64-byte aligned.
#[derive(Default)]
pub(crate) struct ArenaAlloc {
    free: Vec<(usize, usize)>,
    pub top: usize,
}

impl ArenaAlloc {
    pub fn alloc(&mut self, bytes: usize) -> usize {
        let size = bytes.div_ceil(64).max(1) * 64;
        if let Some(i) = self.free.iter().position(|&(_, s)| s >= size) {
            let (off, s) = self.free[i];
            if s == size {
                self.free.remove(i);
            } else {
                self.free[i] = (off + size, s - size);
            }
            return off;
        }
        // grow: extend a free block touching the top if there is one
        if let Some(i) = self.free.iter().position(|&(o, s)| o + s == self.top) {
            let (off, _) = self.free.remove(i);
            self.top = off + size;
            return off;
        }
        let off = self.top;
        self.top += size;
        off
    }

    pub fn release(&mut self, off: usize, bytes: usize) {
        let size = bytes.div_ceil(64).max(1) * 64;
        self.free.push((off, size));
        self.free.sort_unstable();
        let mut merged: Vec<(usize, usize)> = Vec::with_capacity(self.free.len());
        for &(o, s) in &self.free {
            match merged.last_mut() {
                Some(last) if last.0 + last.1 == o => last.1 += s,
                _ => merged.push((o, s)),
            }
        }
        self.free = merged;
    }
}

pub(crate) fn op_error(name: &str, op_type: &str, message: impl Into<String>) -> CpuError {
    CpuError::Op {
        name: name.to_string(),
        op_type: op_type.to_string(),
        message: message.into(),
    }
}
