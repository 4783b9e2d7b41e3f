//! Process-wide simulator settings and counters, adjustable through the `e5rt_sim_*` exports.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// Programs (compiled libraries) one process may hold at once, like the real runtime's ~128.
pub const DEFAULT_MAX_PROGRAMS: usize = 128;

static ROW_ALIGNMENT: AtomicUsize = AtomicUsize::new(0);
static STRIDES_IN_BYTES: AtomicBool = AtomicBool::new(false);
static MAX_PROGRAMS: AtomicUsize = AtomicUsize::new(DEFAULT_MAX_PROGRAMS);
static LIVE_PROGRAMS: AtomicUsize = AtomicUsize::new(0);
static COMPILES: AtomicU64 = AtomicU64::new(0);
static EXECUTIONS: AtomicU64 = AtomicU64::new(0);

/// Port layout of operations created from now on: rows (the innermost axis) padded to a
/// multiple of `row_alignment` bytes (0 = dense), strides reported in bytes or elements.
pub fn set_layout(row_alignment: usize, strides_in_bytes: bool) {
    ROW_ALIGNMENT.store(row_alignment, Ordering::SeqCst);
    STRIDES_IN_BYTES.store(strides_in_bytes, Ordering::SeqCst);
}

pub fn row_alignment() -> usize {
    ROW_ALIGNMENT.load(Ordering::SeqCst)
}

pub fn strides_in_bytes() -> bool {
    STRIDES_IN_BYTES.load(Ordering::SeqCst)
}

pub fn set_max_programs(n: usize) {
    MAX_PROGRAMS.store(n, Ordering::SeqCst);
}

pub fn max_programs() -> usize {
    MAX_PROGRAMS.load(Ordering::SeqCst)
}

/// Claims a program slot; `None` when the process is at its limit.
pub fn claim_program() -> Option<ProgramSlot> {
    let limit = max_programs();
    LIVE_PROGRAMS
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
            (n < limit).then_some(n + 1)
        })
        .ok()
        .map(|_| ProgramSlot(()))
}

pub fn live_programs() -> usize {
    LIVE_PROGRAMS.load(Ordering::SeqCst)
}

/// One loaded program; the slot is given back when dropped.
#[derive(Debug)]
pub struct ProgramSlot(());

impl Drop for ProgramSlot {
    fn drop(&mut self) {
        LIVE_PROGRAMS.fetch_sub(1, Ordering::SeqCst);
    }
}

pub fn count_compile() {
    COMPILES.fetch_add(1, Ordering::SeqCst);
}

pub fn compiles() -> u64 {
    COMPILES.load(Ordering::SeqCst)
}

pub fn count_execution() {
    EXECUTIONS.fetch_add(1, Ordering::SeqCst);
}

pub fn executions() -> u64 {
    EXECUTIONS.load(Ordering::SeqCst)
}
