//! ANE targets: the 28 architecture strings and their capability families, per-family limits
//! and op floors, the checker every ANE program passes, host detection, the preflight report,
//! the cost estimate, weight compression and program segmentation.

mod arch;
pub mod check;
pub mod compress;
pub mod estimate;
pub mod host;
pub mod limits;
pub mod mil_ops;
pub mod plan;
mod preflight;
mod report;
mod wide;

pub use arch::{valid_names, AneArch, ArchInfo, Chip, Family, ALIASES, ARCHS};
pub use check::{check_program, Violation};
pub use estimate::{estimate, Estimate};
pub use limits::Limits;
pub(crate) use plan::prepare;
pub use plan::{compile_ane, HostOutput, Plan, PlanOptions, Segment, Source, WEIGHT_CEILING};
pub use preflight::preflight;
pub use report::{Finding, FindingKind, Report};

/// Errors of target selection, legalization and the final program check.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
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
        source: Box<TargetError>,
    },
    #[error("the graph cannot run on {}: {report}", report.arch)]
    NotLegal { report: Box<Report> },
    #[error("running segment {segment} on the CPU engine: {message}")]
    Run { segment: usize, message: String },
    #[error("weight compression applies to ANE programs; the CPU target keeps fp32 weights")]
    CompressCpu,
    #[error("this compression mode is not supported")]
    CompressMode,
    #[error("weight compression: {0}")]
    Encode(#[from] aneforge_mil::encode::EncodeError),
    #[error("weights blob: {0}")]
    Blob(#[from] aneforge_mil::BlobError),
    #[error("the compressed program fails MIL validation (a compression bug): {0}")]
    Invalid(aneforge_mil::ValidationErrors),
    #[error("the emitted program is not accepted by {arch} ({}):\n{}", arch.family(), list(.violations))]
    Check {
        arch: AneArch,
        violations: Vec<Violation>,
    },
}

fn list(violations: &[Violation]) -> String {
    violations
        .iter()
        .map(|v| format!("  {v}"))
        .collect::<Vec<_>>()
        .join("\n")
}
