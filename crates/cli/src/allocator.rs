//! The C allocator's policy for this process.
//!
//! glibc serves blocks of at least its mmap threshold (128 KiB) from fresh mappings, which a free
//! returns to the system, but it raises that threshold to the size of every such block freed, up
//! to 32 MiB. Loading a model frees many large blocks (its graph, the emitted program, decoded
//! weights), so afterwards blocks of those sizes come from the heap, where freed memory stays
//! resident between the live blocks around it: the peak RSS of a long generation was 22 MiB
//! higher (SmolLM2 Q4_1, 6,000 tokens, q8_0 cache). Fixing the threshold keeps large blocks mapped.
//!
//! Only the commands that generate text take this policy. Under it, every block of 128 KiB or
//! more that a kernel allocates per call (the gemm crate's packing buffers) is a fresh mapping,
//! faulted in page by page and unmapped on free, and with two threads each unmapping interrupts
//! the other core to flush its TLB: MobileNetV2 at batch 8 and 2 threads ran at 130 images/s
//! under it against 160–174 under glibc's default (AMD EPYC Zen 4, 2 vCPUs; 62 unmappings per
//! run against none), MiniLM embeddings at 110–120 against 123–127 sentences/s.

#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn keep_large_blocks_mapped() {
    // SAFETY: mallopt only changes glibc's allocation parameters; called before other threads
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 << 10);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn keep_large_blocks_mapped() {}
