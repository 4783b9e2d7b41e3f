//! `aneforge targets` and `aneforge ops`: the architecture table and per-family op status.

use aneforge::legalize::catalog::graph_ops;
use aneforge::target::estimate::figures;
use aneforge::target::mil_ops::{requirement, Requirement};
use aneforge::target::{host, AneArch, ALIASES, ARCHS};

pub fn targets() -> anyhow::Result<()> {
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
    match host::detect() {
        Ok(d) => {
            println!("host: {} ({}, from {})", d.arch, d.arch.family(), d.source);
            if let Some(w) = d.warning {
                eprintln!("warning: {w}");
            }
        }
        Err(e) => eprintln!("host: {e}"),
    }
    Ok(())
}

pub fn ops(target: &str, mil: bool) -> anyhow::Result<()> {
    let arch = AneArch::new(target)?;
    let family = arch.family();
    println!("graph ops on {arch} ({family}):");
    for r in graph_ops(family) {
        println!("  {:<38} {:<10} {}", r.op, r.status.name(), r.detail);
    }
    println!("MIL ops gated or walled on {family}:");
    let mut names: Vec<&str> = if mil {
        aneforge_mil::ops::signatures().map(|s| s.op_type).collect()
    } else {
        aneforge::target::mil_ops::listed_ops().collect()
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
            println!("  {name:<38} {status:<10} {detail}");
        }
    }
    Ok(())
}
