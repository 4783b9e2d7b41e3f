//! fp16 numerics audit: a prompt through the fp32 CPU program and through an ANE target's fp16
//! program (run with the CPU engine's fp16 semantics), compared layer by layer, with every op of
//! the fp16 program inspected for values past fp16's range.

use std::sync::Arc;

use aneforge::engine::{Accumulation, ValueStats};
use aneforge::{Engine, Target};

use super::sampling::{argmax, top2_margin};
use super::{Llm, LlmError, Runner, RunnerOptions};

/// The largest finite fp16 value.
pub const FP16_MAX: f32 = 65504.0;

/// One probe (a layer's hidden state) in both programs.
#[derive(Clone, Debug, PartialEq)]
pub struct ProbeDrift {
    pub name: String,
    /// Largest |value| in the fp32 program.
    pub max_abs: f32,
    /// Largest |fp16 − fp32| over the prompt's rows.
    pub max_abs_diff: f32,
    /// `max_abs_diff / max_abs`.
    pub relative: f32,
    /// inf/NaN elements in the fp16 program's value.
    pub non_finite: usize,
}

/// The last position's logits in both programs.
#[derive(Clone, Debug, PartialEq)]
pub struct LogitsDrift {
    pub max_abs_diff: f32,
    /// `max_abs_diff / max |fp32 logit|`.
    pub relative: f32,
    pub top1_fp32: usize,
    pub top1_fp16: usize,
    /// fp32 top-1 minus top-2.
    pub margin_fp32: f32,
    pub non_finite: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Fp16Audit {
    /// The ANE target audited.
    pub target: String,
    pub accumulation: Accumulation,
    pub tokens: usize,
    /// Per layer, in order: after attention, the MLP activation, the layer's output.
    pub probes: Vec<ProbeDrift>,
    /// The first op of the fp16 program whose result holds inf or NaN.
    pub first_non_finite: Option<ValueStats>,
    /// The fp16 program's values nearest fp16's limit, largest first.
    pub largest: Vec<ValueStats>,
    /// `None` when the fp16 program's logits were not finite.
    pub logits: Option<LogitsDrift>,
    /// The first probe whose relative deviation exceeds the threshold the audit was run with.
    pub first_drift: Option<String>,
}

impl Fp16Audit {
    /// No value of the fp16 program left fp16's range and the logits agree on the top token.
    pub fn is_clean(&self) -> bool {
        self.first_non_finite.is_none()
            && self
                .logits
                .as_ref()
                .is_some_and(|l| l.non_finite == 0 && l.top1_fp16 == l.top1_fp32)
    }
}

fn max_abs(v: &[f32]) -> f32 {
    v.iter()
        .filter(|x| x.is_finite())
        .fold(0f32, |m, &x| m.max(x.abs()))
}

fn runner(
    llm: &Arc<Llm>,
    target: Target,
    tokens: usize,
    acc: Accumulation,
) -> Result<Runner, LlmError> {
    let context = tokens.next_power_of_two().max(16);
    Runner::new(
        llm.clone(),
        RunnerOptions {
            target,
            engine: Engine::Cpu,
            max_context: context,
            min_context: context,
            prefill_chunks: vec![tokens],
            accumulation: acc,
            probes: true,
            ..RunnerOptions::default()
        },
    )
}

/// Runs `ids` through the fp32 CPU program and `target`'s fp16 program and compares them.
/// `drift` is the relative deviation from which a probe counts as drifted (e.g. 0.05).
pub fn audit_fp16(
    llm: &Arc<Llm>,
    ids: &[u32],
    target: &Target,
    accumulation: Accumulation,
    drift: f32,
) -> Result<Fp16Audit, LlmError> {
    if !target.is_ane() {
        return Err(LlmError::Invalid(format!(
            "the fp16 audit compares an ANE target's program with the CPU's; {target} is not an ANE target"
        )));
    }
    if ids.is_empty() {
        return Err(LlmError::EmptyPrompt);
    }
    let n = ids.len();
    let mut fp32 = runner(llm, Target::Cpu, n, Accumulation::F32)?;
    let mut fp16 = runner(llm, target.clone(), n, accumulation)?;
    let want = fp32.feed(ids)?;
    let got = match fp16.feed(ids) {
        Ok(l) => Some(l),
        Err(LlmError::NonFinite { .. }) => None,
        Err(e) => return Err(e),
    };
    // the prompt runs as one prefill chunk of exactly its length: probes hold no padding rows
    let mut probes = Vec::new();
    for ((name, a), (_, b)) in fp32.probes().iter().zip(fp16.probes()) {
        let m = max_abs(a);
        let diff = a
            .iter()
            .zip(b)
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .fold(0f32, |acc, (x, y)| acc.max((x - y).abs()));
        probes.push(ProbeDrift {
            name: name
                .trim_start_matches(super::step::PROBE_PREFIX)
                .to_string(),
            max_abs: m,
            max_abs_diff: diff,
            relative: if m > 0.0 { diff / m } else { diff },
            non_finite: b.iter().filter(|x| !x.is_finite()).count(),
        });
    }
    let first_drift = probes
        .iter()
        .find(|p| p.non_finite > 0 || p.relative > drift)
        .map(|p| p.name.clone());
    let inspection = fp16.inspection();
    let first_non_finite = inspection.iter().find(|s| s.non_finite > 0).cloned();
    let mut largest: Vec<ValueStats> = inspection.to_vec();
    largest.sort_by(|a, b| b.max_abs.total_cmp(&a.max_abs));
    largest.truncate(5);
    let logits = got.map(|got| {
        let diff = want
            .iter()
            .zip(&got)
            .fold(0f32, |acc, (x, y)| acc.max((x - y).abs()));
        let scale = max_abs(&want);
        LogitsDrift {
            max_abs_diff: diff,
            relative: if scale > 0.0 { diff / scale } else { diff },
            top1_fp32: argmax(&want) as usize,
            top1_fp16: argmax(&got) as usize,
            margin_fp32: top2_margin(&want),
            non_finite: got.iter().filter(|x| !x.is_finite()).count(),
        }
    });
    Ok(Fp16Audit {
        target: target.to_string(),
        accumulation,
        tokens: n,
        probes,
        first_non_finite,
        largest,
        logits,
        first_drift,
    })
}
