//! Element storage types, host data exchange types and aligned buffers.

use aneforge_mil::DType;
use half::f16;

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

/// Host data handed to [`crate::Instance::set_input`].
#[derive(Clone, Copy, Debug)]
pub enum HostSlice<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
    I32(&'a [i32]),
    I8(&'a [i8]),
    U8(&'a [u8]),
    Bool(&'a [bool]),
}

impl HostSlice<'_> {
    pub fn len(&self) -> usize {
        match self {
            HostSlice::F32(v) => v.len(),
            HostSlice::F16(v) => v.len(),
            HostSlice::I32(v) => v.len(),
            HostSlice::I8(v) => v.len(),
            HostSlice::U8(v) => v.len(),
            HostSlice::Bool(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn kind(&self) -> &'static str {
        match self {
            HostSlice::F32(_) => "f32",
            HostSlice::F16(_) => "f16",
            HostSlice::I32(_) => "i32",
            HostSlice::I8(_) => "i8",
            HostSlice::U8(_) => "u8",
            HostSlice::Bool(_) => "bool",
        }
    }
}

/// An owned copy of a port's data, in the port's dtype.
#[derive(Clone, Debug, PartialEq)]
pub enum HostTensor {
    F32(Vec<f32>),
    F16(Vec<f16>),
    I32(Vec<i32>),
    I8(Vec<i8>),
    U8(Vec<u8>),
    Bool(Vec<bool>),
}

impl HostTensor {
    pub fn len(&self) -> usize {
        match self {
            HostTensor::F32(v) => v.len(),
            HostTensor::F16(v) => v.len(),
            HostTensor::I32(v) => v.len(),
            HostTensor::I8(v) => v.len(),
            HostTensor::U8(v) => v.len(),
            HostTensor::Bool(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The NumPy name of the element type (`float32`, `int8`, ...).
    pub fn numpy_dtype(&self) -> &'static str {
        match self {
            HostTensor::F32(_) => "float32",
            HostTensor::F16(_) => "float16",
            HostTensor::I32(_) => "int32",
            HostTensor::I8(_) => "int8",
            HostTensor::U8(_) => "uint8",
            HostTensor::Bool(_) => "bool",
        }
    }

    /// Every element widened to f32 (bools as 0/1).
    pub fn to_f32(&self) -> Vec<f32> {
        match self {
            HostTensor::F32(v) => v.clone(),
            HostTensor::F16(v) => v.iter().map(|x| x.to_f32()).collect(),
            HostTensor::I32(v) => v.iter().map(|&x| x as f32).collect(),
            HostTensor::I8(v) => v.iter().map(|&x| x as f32).collect(),
            HostTensor::U8(v) => v.iter().map(|&x| x as f32).collect(),
            HostTensor::Bool(v) => v.iter().map(|&x| x as u8 as f32).collect(),
        }
    }
}

/// A zero-copy view of a port buffer.
#[derive(Debug)]
pub enum BufferRef<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
    I32(&'a [i32]),
    I8(&'a [i8]),
    U8(&'a [u8]),
    Bool(&'a [bool]),
}

/// A zero-copy mutable view of an input port buffer.
#[derive(Debug)]
pub enum BufferMut<'a> {
    F32(&'a mut [f32]),
    F16(&'a mut [f16]),
    I32(&'a mut [i32]),
    I8(&'a mut [i8]),
    U8(&'a mut [u8]),
    Bool(&'a mut [bool]),
}

impl HostTensor {
    /// The tensor's data as a slice to feed a port.
    pub fn as_slice(&self) -> HostSlice<'_> {
        match self {
            HostTensor::F32(v) => HostSlice::F32(v),
            HostTensor::F16(v) => HostSlice::F16(v),
            HostTensor::I32(v) => HostSlice::I32(v),
            HostTensor::I8(v) => HostSlice::I8(v),
            HostTensor::U8(v) => HostSlice::U8(v),
            HostTensor::Bool(v) => HostSlice::Bool(v),
        }
    }
}

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// A zero-initialised, 64-byte-aligned byte buffer.
pub(crate) struct AlignedBuf {
    lines: Lines,
    len: usize,
}

enum Lines {
    Heap(Vec<Line>),
    /// Anonymous pages: the kernel zeroes each page when it is first touched, so the parts of a
    /// large buffer never written (a KV cache's unused rows) cost no memory.
    Mapped(memmap2::MmapMut),
}

/// Buffers from this size on are mapped pages rather than heap memory.
const MAPPED_BYTES: usize = 1 << 20;

/// Bytes of the buffers held as anonymous mappings now (the heap allocator does not see them).
static MAPPED_LIVE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The bytes of engine buffers this process holds as anonymous mappings rather than heap memory
/// (large activation arenas, ports and state; their untouched pages are not resident).
pub fn mapped_buffer_bytes() -> usize {
    MAPPED_LIVE.load(std::sync::atomic::Ordering::Relaxed)
}

impl AlignedBuf {
    pub fn zeroed(len: usize) -> AlignedBuf {
        if len >= MAPPED_BYTES {
            if let Ok(map) = memmap2::MmapMut::map_anon(len) {
                MAPPED_LIVE.fetch_add(len, std::sync::atomic::Ordering::Relaxed);
                return AlignedBuf {
                    lines: Lines::Mapped(map),
                    len,
                };
            }
        }
        AlignedBuf {
            lines: Lines::Heap(vec![Line([0; 64]); len.div_ceil(64).max(1)]),
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
        match &self.lines {
            Lines::Heap(v) => v.as_ptr() as *const u8,
            Lines::Mapped(m) => m.as_ptr(),
        }
    }

    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        match &mut self.lines {
            Lines::Heap(v) => v.as_mut_ptr() as *mut u8,
            Lines::Mapped(m) => m.as_mut_ptr(),
        }
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

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if let Lines::Mapped(_) = self.lines {
            MAPPED_LIVE.fetch_sub(self.len, std::sync::atomic::Ordering::Relaxed);
        }
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
