//! Element types at graph level. Targets decide the precision of `F32`: fp32 on the CPU target,
//! fp16 on the ANE target. `F16` and `I8` are storage types, the same on every target: a graph
//! computes in `F32` (and `I32`, `Bool`) and casts to them only to keep values smaller (layout
//! ops and `dynamic_slice_update` move them; arithmetic refuses them).

use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    F32,
    I32,
    Bool,
    F16,
    I8,
}

impl DType {
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::I32 => "i32",
            DType::Bool => "bool",
            DType::F16 => "f16",
            DType::I8 => "i8",
        }
    }

    pub fn is_float(self) -> bool {
        self == DType::F32
    }

    /// Storage-only types ([`DType::F16`], [`DType::I8`]).
    pub fn is_storage(self) -> bool {
        matches!(self, DType::F16 | DType::I8)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
