//! The preflight report: every node of a graph that the target rejects, that legalization
//! rewrites, or that exceeds a family limit, each naming the node, the op, its shape and the
//! limit or rewrite involved.

use super::AneArch;
use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FindingKind {
    /// Legalization replaces the op (`rewrite` says with what); the program stays on the ANE.
    Rewritten { rewrite: String },
    /// No family member can run it (and no rewrite applies).
    Rejected { reason: String },
    /// A shape exceeds a family limit (`limit` names the limit and its value).
    Oversized { limit: String },
    /// Accepted, with a caveat the user should know (e.g. integers carried as fp16).
    Note { note: String },
}

impl FindingKind {
    pub fn label(&self) -> &'static str {
        match self {
            FindingKind::Rewritten { .. } => "rewritten",
            FindingKind::Rejected { .. } => "rejected",
            FindingKind::Oversized { .. } => "oversized",
            FindingKind::Note { .. } => "note",
        }
    }

    /// Whether the finding stops the graph from compiling for the target.
    pub fn is_blocking(&self) -> bool {
        matches!(
            self,
            FindingKind::Rejected { .. } | FindingKind::Oversized { .. }
        )
    }

    fn detail(&self) -> &str {
        match self {
            FindingKind::Rewritten { rewrite } => rewrite,
            FindingKind::Rejected { reason } => reason,
            FindingKind::Oversized { limit } => limit,
            FindingKind::Note { note } => note,
        }
    }
}

/// One node's entry in the report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// `%7` (the node's position in the graph's topological order), with the port name for
    /// inputs and outputs: `%0 input 'x'`, `%12 (output 'logits')`.
    pub node: String,
    pub op: String,
    pub shape: Vec<usize>,
    pub kind: FindingKind,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:<9} {} {} {:?}: {}",
            self.kind.label(),
            self.node,
            self.op,
            self.shape,
            self.kind.detail()
        )
    }
}

/// The findings for one graph and target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    pub arch: AneArch,
    pub findings: Vec<Finding>,
}

impl Report {
    pub fn new(arch: AneArch) -> Report {
        Report {
            arch,
            findings: Vec::new(),
        }
    }

    /// True when nothing blocks compilation (rewrites and notes are fine).
    pub fn is_legal(&self) -> bool {
        !self.findings.iter().any(|f| f.kind.is_blocking())
    }

    pub fn blocking(&self) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(|f| f.kind.is_blocking())
    }

    pub fn count(&self, label: &str) -> usize {
        self.findings
            .iter()
            .filter(|f| f.kind.label() == label)
            .count()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "preflight for {} ({}): {} rejected, {} oversized, {} rewritten, {} notes",
            self.arch,
            self.arch.family(),
            self.count("rejected"),
            self.count("oversized"),
            self.count("rewritten"),
            self.count("note"),
        )?;
        for finding in &self.findings {
            writeln!(f, "  {finding}")?;
        }
        Ok(())
    }
}
