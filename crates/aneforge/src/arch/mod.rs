//! ANE architectures: the 28 architecture strings and their capability families, per-family
//! limits, op floors and native weight formats, the checker every ANE program passes, host
//! detection, the findings report and the cost estimate.

pub mod check;
pub mod estimate;
pub mod formats;
pub mod host;
pub mod limits;
pub mod mil_ops;
mod names;
mod report;

pub use check::{check_program, Violation};
pub use estimate::{estimate, Estimate};
pub use formats::{is_native, native_schemes, scheme_of_op};
pub use limits::Limits;
pub use names::{valid_names, AneArch, ArchInfo, Chip, Family, ALIASES, ARCHS};
pub use report::{Finding, FindingKind, Report};

/// Errors of naming or detecting an ANE architecture.
#[derive(Debug, thiserror::Error)]
pub enum ArchError {
    #[error("unknown ANE target {name:?}; valid: {valid}")]
    UnknownArch { name: String, valid: String },
    #[error(
        "ANE target {name:?} is below the MIL floor (h11, h12, m9 and t0 predate MIL on the ANE); use h13 (A13/M1) or later"
    )]
    BelowMilFloor { name: String },
    #[error("{variable}: {source}")]
    BadOverride {
        variable: &'static str,
        #[source]
        source: Box<ArchError>,
    },
}
