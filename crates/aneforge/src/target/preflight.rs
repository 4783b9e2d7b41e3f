//! `preflight`: what a graph needs to run on an ANE architecture — every node rejected,
//! rewritten or oversized — without failing on the first problem.

use super::plan::{prepare, Prepared};
use super::{AneArch, Finding, FindingKind, Report, TargetError};
use crate::graph::Tensor;
use crate::lower::{lower, LowerError, ParameterMode, Target};

/// The preflight report for `outputs` on `arch`. Errors only for malformed graphs (bad output
/// names, duplicate port names); everything the target cannot do is in the report.
pub fn preflight(outputs: &[(&str, &Tensor)], arch: AneArch) -> Result<Report, LowerError> {
    let prepared = prepare(outputs, arch)?;
    preflight_prepared(&prepared, arch, ParameterMode::Input)
}

pub(crate) fn preflight_prepared(
    prepared: &Prepared,
    arch: AneArch,
    parameters: ParameterMode,
) -> Result<Report, LowerError> {
    let named: Vec<(&str, &Tensor)> = prepared
        .outputs
        .iter()
        .map(|(n, t)| (n.as_str(), t))
        .collect();
    let roots: Vec<Tensor> = named.iter().map(|(_, t)| (*t).clone()).collect();
    let canonical = crate::lower::canonicalize::canonicalize(&roots, parameters)?;
    let canonical_named: Vec<(&str, &Tensor)> = named
        .iter()
        .map(|(n, _)| *n)
        .zip(canonical.iter())
        .collect();
    let legal = crate::legalize::legalize(&canonical_named, arch);
    let mut report = Report::new(arch);
    report.findings.extend(prepared.findings.iter().cloned());
    report.findings.extend(legal.report.findings);
    if !report.is_legal() {
        return Ok(report);
    }
    match lower(&named, &Target::Ane(arch), parameters) {
        Ok(_) => {}
        Err(LowerError::Target(TargetError::Check { violations, .. })) => {
            report
                .findings
                .extend(violations.into_iter().map(|v| Finding {
                    node: format!("program value '{}'", v.value),
                    op: v.op_type,
                    shape: v.shape,
                    kind: FindingKind::Rejected { reason: v.problem },
                }));
        }
        Err(LowerError::Unsupported {
            op, shapes, reason, ..
        }) => {
            report.findings.push(Finding {
                node: "(emission)".into(),
                op: op.to_string(),
                shape: shapes.first().cloned().unwrap_or_default(),
                kind: FindingKind::Rejected { reason },
            });
        }
        Err(e) => return Err(e),
    }
    Ok(report)
}
