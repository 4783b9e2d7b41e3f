//! Which MIL ops each ANE family accepts: a floor family for ops that arrived later, the ops our
//! legalizer always rewrites away, and the walled ops no family runs.

use super::Family;

/// What a family needs to run a MIL op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Requirement {
    /// Accepted by every MIL-capable family.
    Any,
    /// Accepted from this family on.
    From(Family),
    /// Accepted in principle, but unreliable on the hardware; the legalizer replaces it
    /// (the text says with what).
    Rewritten(&'static str),
    /// No family runs it (the text says why).
    Walled(&'static str),
}

/// Ops no ANE family runs.
const WALLED: &[(&str, &str)] = &[
    ("gather", "data-dependent indexing"),
    ("gather_along_axis", "data-dependent indexing"),
    ("gather_nd", "data-dependent indexing"),
    ("scatter", "data-dependent indexing"),
    ("scatter_along_axis", "data-dependent indexing"),
    ("scatter_nd", "data-dependent indexing"),
    ("one_hot", "no one-hot unit (build it with equal + select)"),
    ("non_zero", "data-dependent output shape"),
    ("band_part", "no band mask unit (use a constant mask)"),
    ("cond", "control flow"),
    ("while_loop", "control flow"),
    ("make_list", "list ops"),
    ("list_length", "list ops"),
    ("list_read", "list ops"),
    ("list_write", "list ops"),
    ("list_gather", "list ops"),
    ("list_scatter", "list ops"),
    ("random_bernoulli", "random ops"),
    ("random_categorical", "random ops"),
    ("random_normal", "random ops"),
    ("random_uniform", "random ops"),
    (
        "reduce_prod",
        "no product reduction (exp of a sum of logs instead)",
    ),
    ("logical_and", "logical ops"),
    ("logical_or", "logical ops"),
    ("logical_xor", "logical ops"),
    ("logical_not", "logical ops"),
    ("mod", "no modulo unit"),
    ("lstm", "recurrent layers"),
    ("gru", "recurrent layers"),
    ("rnn", "recurrent layers"),
    ("non_maximum_suppression", "data-dependent output"),
    ("read_state", "state ops"),
    ("coreml_update_state", "state ops"),
];

const FLOORS: &[(&str, Family)] = &[
    ("sin", Family::A15),
    ("cos", Family::A15),
    ("reduce_argmax", Family::A15),
    ("reduce_argmin", Family::A15),
    ("topk", Family::A14),
    ("argsort", Family::A14),
    ("sort", Family::A14),
    ("resize_bilinear", Family::A14),
    ("resize_nearest_neighbor", Family::A14),
    ("crop_resize", Family::A14),
    ("affine", Family::A14),
    ("resample", Family::A14),
    // iOS17 activation quantization; Apple documents int8-int8 Neural Engine compute from A17
    // Pro and M4, which sit in the A16 family.
    ("quantize", Family::A16),
    ("dequantize", Family::A16),
];

const REWRITTEN: &[(&str, &str)] = &[("cumsum", "a triangular matmul"), ("square", "mul(x, x)")];

/// The requirement of `op_type` (every op not listed is accepted everywhere).
pub fn requirement(op_type: &str) -> Requirement {
    if let Some((_, why)) = WALLED.iter().find(|(n, _)| *n == op_type) {
        return Requirement::Walled(why);
    }
    if let Some((_, f)) = FLOORS.iter().find(|(n, _)| *n == op_type) {
        return Requirement::From(*f);
    }
    if let Some((_, with)) = REWRITTEN.iter().find(|(n, _)| *n == op_type) {
        return Requirement::Rewritten(with);
    }
    Requirement::Any
}

/// Whether `family` runs `op_type` as emitted.
pub fn accepts(op_type: &str, family: Family) -> bool {
    match requirement(op_type) {
        Requirement::Any => true,
        Requirement::From(f) => family >= f,
        Requirement::Rewritten(_) | Requirement::Walled(_) => false,
    }
}

/// Ops named in the tables (walled, floored, rewritten), for listings.
pub fn listed_ops() -> impl Iterator<Item = &'static str> {
    WALLED
        .iter()
        .map(|(n, _)| *n)
        .chain(FLOORS.iter().map(|(n, _)| *n))
        .chain(REWRITTEN.iter().map(|(n, _)| *n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floors_gate_by_family() {
        assert!(!accepts("sin", Family::A14));
        assert!(accepts("sin", Family::A15));
        assert!(!accepts("topk", Family::A13));
        assert!(accepts("topk", Family::A14));
        assert!(!accepts("reduce_prod", Family::A16));
        assert!(accepts("matmul", Family::A13));
    }

    #[test]
    fn no_op_is_listed_twice() {
        let mut names: Vec<&str> = listed_ops().collect();
        let n = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), n);
    }
}
