//! Giving back the pages of a read-only file mapping once their bytes have been read.

/// A page fault on a file mapping also maps the resident pages around it, within its 64 KiB
/// window (the kernel's fault-around, `fault_around_bytes`), so releasing exactly what was read
/// leaves the pages just before the next read to come back with its first fault.
const FAULT_AROUND: usize = 64 << 10;

/// Drops from this process the pages holding bytes `start..end` of `map`, read front to back,
/// from the start of the fault-around window holding `start` (the rest of a window past `end`
/// goes with the next range). The pages stay in the page cache; the next access maps them again.
#[cfg(unix)]
pub(crate) fn release_read(map: &memmap2::Mmap, start: usize, end: usize) {
    let end = end.min(map.len());
    let from = start / FAULT_AROUND * FAULT_AROUND;
    if from < end {
        // SAFETY: the mapping is read-only and file-backed, so discarding its pages loses
        // nothing: the next access reads the same bytes back. An error leaves them resident.
        let _ = unsafe {
            map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, from, end - from)
        };
    }
}

#[cfg(not(unix))]
pub(crate) fn release_read(_map: &memmap2::Mmap, _start: usize, _end: usize) {}
