//! Buffer object memory: zeroed, 64-byte aligned, at a fixed address for its whole life.

use crate::error::{Code, Result, SimError};
use std::alloc::Layout;
use std::ptr::NonNull;

pub const ALIGN: usize = 64;

pub struct Memory {
    ptr: NonNull<u8>,
    layout: Layout,
    len: usize,
}

// SAFETY: `Memory` owns its allocation. Reads and writes through `bytes`/`bytes_mut` are made
// only while executing a stream, under the simulator's execution lock (see `objects::Stream`);
// the C caller may write through the data pointer only while no execution uses the buffer, which
// is the runtime's documented contract.
unsafe impl Send for Memory {}
// SAFETY: as above.
unsafe impl Sync for Memory {}

impl Memory {
    pub fn zeroed(len: usize) -> Result<Memory> {
        let layout = Layout::from_size_align(len.max(1), ALIGN).map_err(|_| {
            SimError::new(
                Code::InvalidArgument,
                format!("{len} bytes is too large a buffer"),
            )
        })?;
        // SAFETY: `layout` has a non-zero size.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or_else(|| {
            SimError::new(Code::OutOfMemory, format!("cannot allocate {len} bytes"))
        })?;
        Ok(Memory { ptr, layout, len })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// # Safety
    /// No one may write the memory while the returned slice is alive (see the `Sync` impl).
    pub unsafe fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr` holds `len` initialized (zeroed at allocation) bytes; the caller
        // guarantees no concurrent writer.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// # Safety
    /// No one else may read or write the memory while the returned slice is alive.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn bytes_mut(&self) -> &mut [u8] {
        // SAFETY: as in `bytes`; the caller guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with exactly this layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}
