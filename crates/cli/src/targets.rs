//! `aneforge targets` and `aneforge ops`: the architecture table and per-family op status.

use aneforge::arch::estimate::figures;
use aneforge::arch::mil_ops::{requirement, Requirement};
use aneforge::arch::{host, AneArch, ALIASES, ARCHS};
use aneforge::legalize::catalog::graph_ops;
use serde_json::json;

use crate::output::{print_json, Format};

pub fn targets(format: Format) -> anyhow::Result<()> {
    let detected = host::detect();
    let host_name = detected.as_ref().ok().map(|d| d.arch.to_string());
    if format != Format::Text {
        let rows: Vec<serde_json::Value> = ARCHS
            .iter()
            .map(|info| {
                let aliases: Vec<&str> = ALIASES
                    .iter()
                    .filter(|(_, h)| *h == info.name)
                    .map(|(a, _)| *a)
                    .collect();
                let mut row = json!({
                    "arch": info.name,
                    "cores": info.cores,
                    "silicon": info.silicon,
                    "aliases": aliases,
                    "host": host_name.as_deref() == Some(info.name),
                });
                if let Ok(arch) = AneArch::new(info.name) {
                    let f = figures(arch);
                    row["family"] = json!(arch.family().name());
                    row["chip"] = json!(f.chip.to_string());
                    row["fp16_tflops"] = json!(f.peak_tflops);
                    row["bandwidth_gbs"] = json!(f.bandwidth_gbs);
                } else {
                    row["family"] = json!(null);
                }
                row
            })
            .collect();
        report_host(&detected, false);
        return print_json(format, &rows);
    }
    println!(
        "{:<5} {:<11} {:>5}  {:<32} {:<4} {:>12} {:>8}",
        "arch", "family", "cores", "silicon", "chip", "fp16 TFLOP/s", "GB/s"
    );
    for info in ARCHS.iter() {
        let cores = info
            .cores
            .map_or_else(|| "-".to_string(), |c| c.to_string());
        match AneArch::new(info.name) {
            Ok(arch) => {
                let f = figures(arch);
                println!(
                    "{:<5} {:<11} {:>5}  {:<32} {:<4} {:>12.1} {:>8.1}",
                    info.name,
                    arch.family().name(),
                    cores,
                    info.silicon,
                    f.chip,
                    f.peak_tflops,
                    f.bandwidth_gbs
                );
            }
            Err(_) => println!(
                "{:<5} {:<11} {:>5}  {:<32}",
                info.name, "below MIL", cores, info.silicon
            ),
        }
    }
    let aliases: Vec<String> = ALIASES.iter().map(|(a, h)| format!("{a}={h}")).collect();
    println!("aliases: {}", aliases.join(" "));
    report_host(&detected, true);
    println!("cpu engine: {}", aneforge_cpu::simd::describe());
    Ok(())
}

/// The detected host on stdout (text) and its warnings on stderr.
fn report_host(detected: &Result<host::Detected, impl std::fmt::Display>, text: bool) {
    match detected {
        Ok(d) => {
            if text {
                println!("host: {} ({}, from {})", d.arch, d.arch.family(), d.source);
            }
            if let Some(w) = &d.warning {
                eprintln!("warning: {w}");
            }
        }
        Err(e) => eprintln!("host: {e}"),
    }
}

pub fn ops(target: &str, mil: bool, format: Format) -> anyhow::Result<()> {
    let arch = AneArch::new(target)?;
    let family = arch.family();
    let mut rows: Vec<(&str, String, &str, String)> = graph_ops(family)
        .into_iter()
        .map(|r| {
            (
                "graph",
                r.op.to_string(),
                r.status.name(),
                r.detail.to_string(),
            )
        })
        .collect();
    let graph_rows = rows.len();
    let mut names: Vec<&str> = if mil {
        aneforge_mil::ops::signatures().map(|s| s.op_type).collect()
    } else {
        aneforge::arch::mil_ops::listed_ops().collect()
    };
    names.sort_unstable();
    names.dedup();
    for name in names {
        let (status, detail) = match requirement(name) {
            Requirement::Any => ("native", String::new()),
            Requirement::From(f) if family >= f => ("native", format!("from {f}")),
            Requirement::From(f) => ("walled", format!("needs {f} or later")),
            Requirement::Rewritten(with) => ("rewritten", format!("legalization emits {with}")),
            Requirement::Walled(why) => ("walled", why.to_string()),
        };
        if mil || status != "native" || !detail.is_empty() {
            rows.push(("mil", name.to_string(), status, detail));
        }
    }
    if format != Format::Text {
        let rows: Vec<serde_json::Value> = rows
            .iter()
            .map(|(kind, op, status, detail)| {
                json!({"kind": kind, "op": op, "status": status, "detail": detail})
            })
            .collect();
        return print_json(format, &rows);
    }
    let line = |(_, op, status, detail): &(&str, String, &str, String)| {
        println!("  {op:<38} {status:<10} {detail}")
    };
    println!("graph ops on {arch} ({family}):");
    rows[..graph_rows].iter().for_each(line);
    println!("MIL ops gated or walled on {family}:");
    rows[graph_rows..].iter().for_each(line);
    Ok(())
}
