//! Which compressed weight formats each family streams natively: A13 int4 LUT and sparse; A14
//! adds int8; A15 and later add blockwise. A native format is decompressed by the engine as it
//! reads the weight, so memory traffic shrinks; any other is expanded when the program loads.

use super::Family;
use aneforge_mil::encode::Scheme;

/// Formats the family streams natively, in the order `Auto` tries them (smallest first).
pub fn native_schemes(family: Family) -> &'static [Scheme] {
    match family {
        Family::A13 => &[Scheme::Sparse, Scheme::Int4Lut],
        Family::A14 => &[Scheme::Sparse, Scheme::Int4Lut, Scheme::Int8],
        Family::A15 | Family::A16 => &[
            Scheme::Sparse,
            Scheme::Int4Lut,
            Scheme::Blockwise,
            Scheme::Int8,
        ],
    }
}

/// Whether `family` streams `scheme` natively (fp16 is the baseline and always is).
pub fn is_native(scheme: Scheme, family: Family) -> bool {
    scheme == Scheme::Fp16 || native_schemes(family).contains(&scheme)
}

/// The MIL op of a scheme back to the scheme.
pub fn scheme_of_op(op_type: &str) -> Option<Scheme> {
    Scheme::ALL.into_iter().find(|s| s.op_type() == op_type)
}
