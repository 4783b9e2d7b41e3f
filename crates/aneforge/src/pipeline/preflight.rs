//! `preflight`: what a graph needs to run on an ANE architecture — every node rejected,
//! rewritten or oversized — without failing on the first problem.

use super::{run, FunctionSpec, Mode, ProgramOptions};
use crate::arch::{AneArch, Report};
use crate::graph::Tensor;
use crate::lower::{ParameterMode, Target};

/// The preflight report for `outputs` on `arch`: the compile pipeline up to the family's checker,
/// with every blocking problem recorded instead of returned. Errors only for malformed graphs
/// (bad output names, duplicate port names).
pub fn preflight(
    outputs: &[(&str, &Tensor)],
    arch: AneArch,
) -> Result<Report, super::CompileError> {
    let options = ProgramOptions::new(&Target::Ane(arch), ParameterMode::Input);
    let compiled = run(
        &[FunctionSpec {
            name: "main",
            outputs,
        }],
        &options,
        Mode::Report,
    )?;
    Ok(compiled
        .report
        .legality
        .unwrap_or_else(|| Report::new(arch)))
}
