//! The C allocator's policy for this process.
//!
//! glibc serves blocks of at least its mmap threshold (128 KiB) from fresh mappings, which a free
//! returns to the system, but it raises that threshold to the size of every such block freed, up
//! to 32 MiB. Loading a model frees many large blocks (its graph, the emitted program, decoded
//! weights), so afterwards blocks of those sizes come from the heap, where freed memory stays
//! resident between the live blocks around it: the peak RSS of a long generation was 22 MiB
//! higher (SmolLM2 Q4_1, 6,000 tokens, q8_0 cache). Fixing the threshold keeps large blocks mapped.

#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn keep_large_blocks_mapped() {
    // SAFETY: mallopt only changes glibc's allocation parameters; called before other threads
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 << 10);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn keep_large_blocks_mapped() {}
