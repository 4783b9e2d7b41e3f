//! Kernels and their execution context.

pub mod attention;
pub mod bf16;
pub mod conv;
pub mod conv_depthwise;
pub mod conv_direct;
pub mod conv_epilogue;
pub mod conv_expand;
pub mod conv_winograd;
pub mod dots;
pub mod ew;
pub mod gather;
pub mod int_activations;
pub mod layout;
pub mod math;
pub mod matmul;
pub mod micro;
pub mod packed;
pub mod quant;
pub mod quant_blocks;
pub mod rows;
pub mod sgemm;
pub mod spatial;
pub mod window;

use crate::plan::{Plan, Value, Vid};
use crate::tensor::SendPtr;

/// Per-execute view of the instance's buffers.
pub struct Cx<'a> {
    pub plan: &'a Plan,
    pub ptrs: &'a [SendPtr<u8>],
    pub scratch: SendPtr<f32>,
    pub scratch_len: usize,
    pub threads: usize,
    /// The run's workers; `None` runs every loop on the calling thread.
    pub team: Option<&'a crate::team::Team>,
}

impl Cx<'_> {
    #[inline]
    pub fn ptr(&self, v: Vid) -> *mut u8 {
        let (b, off) = self.plan.locs[v];
        // SAFETY: every value a kernel touches was placed (compile-time invariant).
        unsafe { self.ptrs[b].get().add(off) }
    }

    #[inline]
    pub fn len(&self, v: Vid) -> usize {
        self.plan.values[v].len()
    }

    /// The first `n` scratch floats.
    #[allow(clippy::mut_from_ref)]
    pub fn scratch(&self, n: usize) -> &mut [f32] {
        self.scratch_at(0, n)
    }

    /// `n` scratch floats starting at `off` (kernels use disjoint regions).
    #[allow(clippy::mut_from_ref)]
    pub fn scratch_at(&self, off: usize, n: usize) -> &mut [f32] {
        assert!(off + n <= self.scratch_len, "scratch sized at compile time");
        // SAFETY: in bounds; one kernel runs at a time and splits regions between its tasks.
        unsafe { std::slice::from_raw_parts_mut(self.scratch.get().add(off), n) }
    }

    /// Runs `f(0..n)` on the run's team when it has one, inline otherwise.
    pub fn par_for(&self, n: usize, f: &(dyn Fn(usize) + Sync)) {
        match self.team {
            Some(t) if self.threads > 1 => t.run(n, f),
            _ => (0..n).for_each(f),
        }
    }
}

#[derive(Debug)]
pub enum Kernel {
    Chain(ew::Chain),
    IntEw(ew::IntEw),
    Matmul(matmul::Matmul),
    Copy(layout::Copy),
    Rows(rows::Rows),
    Gather(gather::Gather),
    Conv(conv::Conv),
    Spatial(spatial::Spatial),
    Attention(attention::Attention),
    Window(window::Window),
    QuantGather(quant_blocks::QuantGather),
}

impl Kernel {
    pub fn kind(&self) -> String {
        match self {
            Kernel::Chain(c) => format!("elementwise[{}]", c.instrs.len()),
            Kernel::IntEw(_) => "elementwise-int".into(),
            Kernel::Matmul(m) => format!(
                "matmul{}{}",
                match &m.rhs {
                    matmul::Rhs::Prepared(_) if m.m <= 2 => "-gemv".to_string(),
                    matmul::Rhs::Packed(_) => "-packed".to_string(),
                    matmul::Rhs::Bf16(_) => "-bf16".to_string(),
                    matmul::Rhs::Quant(q) => format!("-gemv-q{}", q.bits),
                    matmul::Rhs::Blocks(q)
                        if m.m <= quant_blocks::GEMV_MAX_ROWS && int_activations::applies(q) =>
                        format!("-quant-gemv-i{}", 8 * q.activations.planes()),
                    matmul::Rhs::Blocks(_) if m.m <= quant_blocks::GEMV_MAX_ROWS =>
                        "-quant-gemv".into(),
                    matmul::Rhs::Blocks(_) => "-quant".into(),
                    _ => String::new(),
                },
                if m.epilogue.as_ref().is_some_and(|e| e.instrs.len() > 1) {
                    "+epilogue"
                } else {
                    ""
                }
            ),
            Kernel::Copy(_) => "copy".into(),
            Kernel::QuantGather(_) => "gather-quant".into(),
            Kernel::Window(w) => match w.side {
                window::Side::Read { .. } => "window-read".into(),
                window::Side::Write { .. } => "window-write".into(),
            },
            Kernel::Gather(_) => "gather".into(),
            Kernel::Attention(a) if a.few_rows() => "attention-rows".into(),
            Kernel::Attention(_) => "attention-flash".into(),
            Kernel::Conv(c) => format!(
                "{}{}",
                if c.transpose {
                    "conv_transpose".to_string()
                } else if c.schedule().is_empty() {
                    "conv".to_string()
                } else {
                    format!("conv-{}", c.schedule())
                },
                if c.fused.is_some() {
                    "+fused"
                } else if c.epilogue.as_ref().is_some_and(|e| e.instrs.len() > 1) {
                    "+epilogue"
                } else {
                    ""
                }
            ),
            Kernel::Spatial(s) => format!("{:?}", s.kind)
                .split([' ', '{'])
                .next()
                .unwrap_or("spatial")
                .to_lowercase(),
            Kernel::Rows(r) => format!("rows-{:?}", r.kind)
                .split(['{', '('])
                .next()
                .unwrap_or("rows")
                .trim()
                .to_lowercase(),
        }
    }

    pub fn run(&self, cx: &Cx) -> Result<(), String> {
        match self {
            Kernel::Chain(c) => c.run(cx),
            Kernel::IntEw(k) => k.run(cx),
            Kernel::Matmul(m) => m.run(cx),
            Kernel::Copy(c) => c.run(cx),
            Kernel::Rows(r) => r.run(cx),
            Kernel::Attention(a) => a.run(cx),
            Kernel::Conv(c) => c.run(cx),
            Kernel::Spatial(s) => s.run(cx),
            Kernel::Gather(g) => return g.run(cx),
            Kernel::Window(w) => return w.run(cx),
            Kernel::QuantGather(g) => return g.run(cx),
        }
        Ok(())
    }

    pub fn scratch_floats(&self, values: &[Value], threads: usize) -> usize {
        match self {
            Kernel::Chain(c) => c.scratch_floats(threads),
            Kernel::Matmul(m) => m.scratch_floats(values, threads),
            Kernel::Rows(r) => r.scratch_floats(threads),
            Kernel::Conv(c) => c.scratch_floats(threads),
            Kernel::Attention(a) => a.scratch_floats(threads),
            Kernel::Spatial(s) => s.scratch_floats(threads),
            Kernel::QuantGather(g) => g.scratch_floats(),
            _ => 0,
        }
    }

    /// Large enough that running on the worker pool pays off.
    pub fn wants_threads(&self, values: &[Value]) -> bool {
        match self {
            Kernel::Chain(c) => c.len() >= 1 << 15,
            Kernel::Matmul(m) => m.flops() >= 1 << 20,
            Kernel::Copy(c) => c.elements(values) >= 1 << 18,
            Kernel::IntEw(_) | Kernel::Gather(_) | Kernel::Window(_) | Kernel::QuantGather(_) => {
                false
            }
            Kernel::Rows(r) => r.elements() >= 1 << 15,
            Kernel::Conv(c) => c.flops() >= 1 << 20,
            Kernel::Attention(a) => a.flops() >= 1 << 20,
            Kernel::Spatial(s) => s.elements() >= 1 << 15,
        }
    }

    /// Compile-time final form (collapsed iteration spaces) once fusion is done.
    pub fn finalize(&mut self) {
        match self {
            Kernel::Chain(c) => c.collapse(),
            Kernel::Matmul(m) => {
                if let Some(e) = &mut m.epilogue {
                    e.collapse();
                }
            }
            Kernel::Conv(c) => c.finalize(),
            _ => {}
        }
    }

    pub fn has_side_effects(&self) -> bool {
        false
    }

    /// The values that may share the buffer of the kernel's output `out`: the updated value of a
    /// `slice_update`, or the values an elementwise chain storing `out` loads at the output's own
    /// positions (each block of a chain is loaded whole before any of it is stored).
    pub fn inplace_sources(&self, values: &[Value], out: Vid) -> Vec<Vid> {
        match self {
            Kernel::Copy(c) => c.inplace_src.into_iter().collect(),
            Kernel::Window(w) => w.inplace_source().into_iter().collect(),
            Kernel::Chain(c) => c.dense_loads(values, out),
            _ => Vec::new(),
        }
    }

    /// Bytes of prepared constants the kernel owns.
    pub fn owned_bytes(&self) -> usize {
        match self {
            Kernel::Matmul(m) => match &m.rhs {
                matmul::Rhs::Prepared(p) => p.wt.owned_bytes(),
                matmul::Rhs::Packed(p) => p.bytes(),
                matmul::Rhs::Bf16(p) => p.bytes(),
                matmul::Rhs::Quant(q) => q.bytes(),
                _ => 0,
            },
            Kernel::Conv(c) => c.weight.owned_len() * 4,
            _ => 0,
        }
    }
}

/// Runs `f` with a kernel context of `threads` threads (a worker team past one), an empty plan
/// and no scratch, for kernels' own tests.
#[cfg(test)]
pub(crate) fn with_test_cx<R>(threads: usize, f: impl FnOnce(&Cx) -> R) -> R {
    let lease = crate::team::acquire(threads).expect("team");
    let plan = Plan::empty();
    f(&Cx {
        plan: &plan,
        ptrs: &[],
        scratch: SendPtr(std::ptr::null_mut()),
        scratch_len: 0,
        threads,
        team: (threads > 1).then_some(&*lease),
    })
}
