//! Element storage types and aligned buffers.

use aneforge_mil::DType;

/// How a runtime value is stored. fp16 values are stored as f16 and computed in f32.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Elem {
    F32,
    F16,
    I32,
    I8,
    U8,
    Bool,
}

impl Elem {
    pub fn size(self) -> usize {
        match self {
            Elem::F32 | Elem::I32 => 4,
            Elem::F16 => 2,
            Elem::I8 | Elem::U8 | Elem::Bool => 1,
        }
    }

    pub fn from_dtype(dtype: DType) -> Option<Elem> {
        Some(match dtype {
            DType::Fp32 => Elem::F32,
            DType::Fp16 => Elem::F16,
            DType::Int32 => Elem::I32,
            DType::Int8 => Elem::I8,
            DType::Uint8 => Elem::U8,
            DType::Bool => Elem::Bool,
            _ => return None,
        })
    }

    pub fn is_float(self) -> bool {
        matches!(self, Elem::F32 | Elem::F16)
    }
}

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// A zero-initialised, 64-byte-aligned byte buffer.
pub(crate) struct AlignedBuf {
    lines: Vec<Line>,
    len: usize,
}

impl AlignedBuf {
    pub fn zeroed(len: usize) -> AlignedBuf {
        AlignedBuf {
            lines: vec![Line([0; 64]); len.div_ceil(64).max(1)],
            len,
        }
    }

    pub fn from_bytes(bytes: &[u8]) -> AlignedBuf {
        let mut b = AlignedBuf::zeroed(bytes.len());
        b.bytes_mut().copy_from_slice(bytes);
        b
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn as_ptr(&self) -> *const u8 {
        self.lines.as_ptr() as *const u8
    }

    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.lines.as_mut_ptr() as *mut u8
    }

    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `lines` holds at least `len` initialised bytes.
        unsafe { std::slice::from_raw_parts(self.as_ptr(), self.len) }
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, uniquely borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.as_mut_ptr(), self.len) }
    }
}

/// A raw pointer that may cross into rayon tasks; the planner guarantees disjoint access.
#[derive(Clone, Copy)]
pub(crate) struct SendPtr<T>(pub *mut T);
unsafe impl<T> Send for SendPtr<T> {}
unsafe impl<T> Sync for SendPtr<T> {}

impl<T> SendPtr<T> {
    #[inline]
    pub fn get(self) -> *mut T {
        self.0
    }
}
