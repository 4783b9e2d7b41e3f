//! `aneforge check-fp16`: a model's ANE-target (fp16) program next to its fp32 program on real
//! inputs. LLMs are compared layer by layer, with every op of the fp16 program inspected for
//! values past fp16's range; sentence encoders embedding by embedding (cosine).

use std::sync::Arc;

use aneforge::engine::{Accumulation, ValueStats};
use aneforge::Target;
use aneforge_models::llm::audit::FP16_MAX;
use aneforge_models::llm::{audit_fp16, ChatMessage, Fp16Audit, Llm, LoadOptions};
use anyhow::{bail, Context};
use serde_json::json;

use crate::model_hints::{self, Wants};
use crate::output::{Format, FormatArgs};

#[derive(clap::Args)]
pub struct CheckFp16Args {
    /// Model: an id (ORG/NAME, from the Hugging Face cache), a model directory or a .gguf file.
    #[arg(short = 'm', long = "model")]
    model: String,
    /// The text to run (default: a short English sentence). Encoders embed every `-p` and every
    /// line of `-f`.
    #[arg(short = 'p', long = "prompt")]
    prompt: Vec<String>,
    /// Texts for an encoder, one per line (`-` for stdin).
    #[arg(short = 'f', long = "file")]
    file: Option<String>,
    /// Wrap the prompt in the model's chat template as one user message.
    #[arg(long)]
    chat: bool,
    /// ANE architecture or alias whose fp16 program is audited.
    #[arg(long, default_value = "h16")]
    target: String,
    /// Weight compression, as for `generate`: none (as stored), dense, int8 or int4.
    #[arg(long, default_value = "none")]
    compress: String,
    /// Width assumed for sums inside fp16 matmuls and reductions: f32 (rounded once per op) or
    /// f16 (every partial sum rounded; the pessimistic reading, slow).
    #[arg(long, default_value = "f32", value_parser = ["f32", "f16"])]
    accumulation: String,
    /// Relative deviation (max |fp16 − fp32| / max |fp32|) from which a layer counts as drifted.
    #[arg(long, default_value_t = 0.05)]
    drift: f32,
    #[command(flatten)]
    threads: crate::engine_args::ThreadArgs,
    #[command(flatten)]
    format: FormatArgs,
}

const DEFAULT_PROMPT: &str = "The quick brown fox jumps over the lazy dog near the river bank.";

pub fn run(args: CheckFp16Args) -> anyhow::Result<()> {
    args.threads.apply()?;
    let arch = aneforge::AneArch::new(&args.target)
        .with_context(|| format!("--target {}: not an ANE architecture or alias", args.target))?;
    let target = Target::Ane(arch);
    if let Some(model_hints::ModelKind::Encoder(_)) = model_hints::kind(&args.model) {
        return encoder(&args, target);
    }
    let format = crate::llm::weight_format(&args.compress)?;
    let llm = Llm::load(&args.model, LoadOptions::new(format))
        .with_context(|| format!("loading {}", args.model))
        .map_err(|e| model_hints::explain(e, &args.model, Wants::Decoder))?;
    let llm = Arc::new(llm);
    let prompt = match args.prompt.as_slice() {
        [] => DEFAULT_PROMPT,
        [one] => one.as_str(),
        _ => bail!("an LLM audit runs one prompt; give -p once"),
    };
    let ids = if args.chat {
        let text = llm
            .chat()?
            .render(&[ChatMessage::new("user", prompt)], true)?;
        llm.encode_raw(&text)?
    } else {
        llm.encode(prompt)?
    };
    let accumulation = match args.accumulation.as_str() {
        "f16" => Accumulation::F16,
        _ => Accumulation::F32,
    };
    if args.drift.is_nan() || args.drift <= 0.0 {
        bail!("--drift takes a positive fraction, got {}", args.drift);
    }
    eprintln!(
        "auditing {} on {target}: {} tokens, fp32 and fp16 programs with every op inspected",
        args.model,
        ids.len()
    );
    let audit = audit_fp16(&llm, &ids, &target, accumulation, args.drift)?;
    match args.format.get() {
        Format::Text => print_text(&audit, args.drift),
        f => crate::output::print_json(f, &[to_json(&audit)])?,
    }
    if let Some(op) = &audit.first_non_finite {
        bail!(
            "the fp16 program overflows: op `{}` ({}) writes {} inf/NaN values into `{}` {:?}",
            op.op,
            op.op_type,
            op.non_finite,
            op.value,
            op.shape
        );
    }
    match &audit.logits {
        Some(l) if l.top1_fp16 != l.top1_fp32 && l.margin_fp32 > 2.0 * l.max_abs_diff => bail!(
            "the fp16 program picks token {} where fp32 picks {} (fp32 margin {:.3}, fp16 deviation {:.3})",
            l.top1_fp16,
            l.top1_fp32,
            l.margin_fp32,
            l.max_abs_diff
        ),
        Some(_) => Ok(()),
        None => bail!("the fp16 program's logits are not finite"),
    }
}

fn headroom(v: &ValueStats) -> f32 {
    100.0 * v.max_abs / FP16_MAX
}

fn print_text(a: &Fp16Audit, drift: f32) {
    println!(
        "target {}, {} tokens, {:?} accumulation",
        a.target, a.tokens, a.accumulation
    );
    println!(
        "{:<14} {:>12} {:>12} {:>10} {:>8}",
        "layer probe", "max|fp32|", "max|Δ|", "relative", "inf/NaN"
    );
    for p in &a.probes {
        let flag = if p.non_finite > 0 || p.relative > drift {
            "  <- drift"
        } else {
            ""
        };
        println!(
            "{:<14} {:>12.4e} {:>12.4e} {:>10.2e} {:>8}{flag}",
            p.name, p.max_abs, p.max_abs_diff, p.relative, p.non_finite
        );
    }
    println!("largest values in the fp16 program:");
    for v in &a.largest {
        println!(
            "  {:>10.4e} ({:.1}% of fp16's max) op `{}` ({}) -> `{}` {:?}",
            v.max_abs,
            headroom(v),
            v.op,
            v.op_type,
            v.value,
            v.shape
        );
    }
    match &a.first_non_finite {
        Some(v) => println!(
            "first op leaving fp16's range: `{}` ({}) -> `{}` {:?}: {} inf/NaN",
            v.op, v.op_type, v.value, v.shape, v.non_finite
        ),
        None => println!("no op leaves fp16's range"),
    }
    match &a.first_drift {
        Some(p) => println!("first layer probe past {drift}: {p}"),
        None => println!("no layer probe drifts past {drift}"),
    }
    match &a.logits {
        Some(l) => println!(
            "last-position logits: max |Δ| {:.4e} ({:.2e} of the largest), top-1 {} (fp32 {}, margin {:.3})",
            l.max_abs_diff,
            l.relative,
            if l.top1_fp16 == l.top1_fp32 {
                "agrees"
            } else {
                "differs"
            },
            l.top1_fp32,
            l.margin_fp32
        ),
        None => println!("last-position logits: not finite in fp16"),
    }
}

fn stats_json(v: &ValueStats) -> serde_json::Value {
    json!({
        "op": v.op, "op_type": v.op_type, "value": v.value, "shape": v.shape,
        "max_abs": v.max_abs, "non_finite": v.non_finite,
    })
}

fn to_json(a: &Fp16Audit) -> serde_json::Value {
    json!({
        "target": a.target,
        "accumulation": format!("{:?}", a.accumulation).to_lowercase(),
        "tokens": a.tokens,
        "probes": a.probes.iter().map(|p| json!({
            "name": p.name, "max_abs": p.max_abs, "max_abs_diff": p.max_abs_diff,
            "relative": p.relative, "non_finite": p.non_finite,
        })).collect::<Vec<_>>(),
        "largest": a.largest.iter().map(stats_json).collect::<Vec<_>>(),
        "first_non_finite": a.first_non_finite.as_ref().map(stats_json),
        "first_drift": a.first_drift,
        "logits": a.logits.as_ref().map(|l| json!({
            "max_abs_diff": l.max_abs_diff, "relative": l.relative, "top1_fp32": l.top1_fp32,
            "top1_fp16": l.top1_fp16, "margin_fp32": l.margin_fp32, "non_finite": l.non_finite,
        })),
        "clean": a.is_clean(),
    })
}

/// The texts an encoder audit embeds: every `-p`, every line of `-f`, else the default sentence.
fn encoder_texts(args: &CheckFp16Args) -> anyhow::Result<Vec<String>> {
    let mut texts = args.prompt.clone();
    if let Some(f) = &args.file {
        texts.extend(
            crate::input::read_lines(std::path::Path::new(f))?
                .into_iter()
                .filter(|l| !l.trim().is_empty()),
        );
    }
    if texts.is_empty() {
        texts.push(DEFAULT_PROMPT.to_string());
    }
    Ok(texts)
}

/// A sentence encoder's fp16 embeddings against its fp32 embeddings, text by text.
fn encoder(args: &CheckFp16Args, target: Target) -> anyhow::Result<()> {
    use aneforge_models::encoders::{EncoderOptions, SentenceEncoder};
    let texts = encoder_texts(args)?;
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let load = |target: Target| {
        SentenceEncoder::load(
            &args.model,
            EncoderOptions {
                target,
                ..EncoderOptions::default()
            },
        )
        .with_context(|| format!("loading {}", args.model))
    };
    eprintln!(
        "auditing {} on {target}: {} texts through the fp32 and fp16 programs",
        args.model,
        texts.len()
    );
    let want = load(Target::Cpu)?.encode(&refs)?;
    let got = load(target.clone())?.encode(&refs)?;
    let rows: Vec<(f64, usize)> = want
        .iter()
        .zip(got.iter())
        .map(|(a, b)| {
            (
                aneforge_models::encoders::cosine(a, b),
                b.iter().filter(|x| !x.is_finite()).count(),
            )
        })
        .collect();
    let (worst, at) = rows
        .iter()
        .enumerate()
        .map(|(i, (c, _))| (*c, i))
        .fold((f64::INFINITY, 0), |m, x| if x.0 < m.0 { x } else { m });
    let non_finite: usize = rows.iter().map(|r| r.1).sum();
    match args.format.get() {
        Format::Text => {
            println!("target {target}, {} texts", texts.len());
            for (i, (c, bad)) in rows.iter().enumerate() {
                println!("{i:>4}  cosine {c:.7}  inf/NaN {bad}");
            }
            println!("worst cosine {worst:.7} (text {at})");
        }
        f => crate::output::print_json(
            f,
            &[json!({
                "target": target.to_string(),
                "texts": texts.len(),
                "cosines": rows.iter().map(|r| r.0).collect::<Vec<_>>(),
                "worst_cosine": worst,
                "worst_text": at,
                "non_finite": non_finite,
            })],
        )?,
    }
    if non_finite > 0 {
        bail!("the fp16 program's embeddings hold {non_finite} inf/NaN values");
    }
    Ok(())
}
