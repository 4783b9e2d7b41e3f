//! `aneforge bench gemm|gemv|conv|attention|overhead`: the CPU engine's kernel benchmarks
//! (`aneforge_bench`), optionally next to NumPy/OpenBLAS and PyTorch running
//! tools/bench/peer_numpy.py and peer_torch.py with the same shapes in the same run.

use std::path::PathBuf;
use std::process::Command;

use aneforge_bench::{self as bench, Figure};
use anyhow::{bail, Context};
use serde_json::json;

use crate::output::{print_json, FormatArgs};

const PEER_NUMPY: &str = include_str!("../../../tools/bench/peer_numpy.py");
const PEER_TORCH: &str = include_str!("../../../tools/bench/peer_torch.py");

#[derive(clap::Args, Clone)]
pub struct CommonArgs {
    /// Worker threads to measure with: 1, 2 or both (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = [1, 2])]
    pub threads: Vec<usize>,
    /// Samples per figure, at least (each figure also runs at least 0.3 s after a warm-up).
    #[arg(long)]
    pub reps: Option<usize>,
    /// A Python with numpy (GEMM) or torch (conv, attention, GEMV): runs the peer script with the
    /// same shapes and thread counts in this run and prints the ratios.
    #[arg(long, value_name = "PY")]
    pub peer_python: Option<PathBuf>,
    #[command(flatten)]
    pub format: FormatArgs,
}

#[derive(clap::Args)]
pub struct GemmArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Square SGEMM sizes n (n×n times n×n, both operands runtime inputs).
    #[arg(long, value_delimiter = ',', default_values_t = [1024, 4096])]
    pub sizes: Vec<usize>,
    /// fp32 FLOP per cycle per core for the peak figure (default: from /proc/cpuinfo's vendor,
    /// family and flags).
    #[arg(long)]
    pub flops_per_cycle: Option<f64>,
    /// Clock in GHz for the peak figure (default: /proc/cpuinfo's "cpu MHz", the nominal clock).
    #[arg(long)]
    pub clock_ghz: Option<f64>,
}

#[derive(clap::Args)]
pub struct GemvArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Input features (the length of the vector).
    #[arg(long, default_value_t = 4096)]
    pub k: usize,
    /// Output features.
    #[arg(long, default_value_t = 4096)]
    pub n: usize,
    /// Weight formats: f32, int8, int4 (blockwise, kept compressed; k a multiple of 32).
    #[arg(long, value_delimiter = ',', default_values_t = ["f32".to_string(), "int8".into(), "int4".into()])]
    pub weights: Vec<String>,
}

#[derive(clap::Args)]
pub struct ConvArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// 3×3 stride-1 same-padded convolutions as CHANNELSxSIZE (channels in = out, square
    /// SIZE×SIZE maps, batch 1); the defaults are ResNet-50's 3×3 stages.
    #[arg(long, value_delimiter = ',', default_values_t = ["64x56".to_string(), "128x28".into(), "256x14".into(), "512x7".into()])]
    pub shapes: Vec<String>,
}

#[derive(clap::Args)]
pub struct AttentionArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Sequence lengths S (self-attention, S queries over S keys).
    #[arg(long, value_delimiter = ',', default_values_t = [128, 512])]
    pub seq: Vec<usize>,
    #[arg(long, default_value_t = 12)]
    pub heads: usize,
    #[arg(long, default_value_t = 64)]
    pub head_dim: usize,
}

#[derive(clap::Args)]
pub struct OverheadArgs {
    /// Samples of 1000 executes each.
    #[arg(long, default_value_t = 50)]
    pub reps: usize,
    #[command(flatten)]
    pub format: FormatArgs,
}

/// One case measured at one thread count, with the peer's figure when one ran.
struct Row {
    ours: Figure,
    peer: Option<PeerFigure>,
    /// Peak fp32 GFLOP/s of the cores this figure may use, and how it was derived.
    peak: Option<(f64, String)>,
}

#[derive(Clone, Debug)]
struct PeerFigure {
    system: String,
    best_s: f64,
    median_s: f64,
    cpu_s: Option<f64>,
}

fn check_common(c: &CommonArgs) -> anyhow::Result<()> {
    if c.threads.is_empty() || c.threads.contains(&0) {
        bail!("--threads takes thread counts of at least 1 (such as 1,2)");
    }
    let available = std::thread::available_parallelism().map_or(1, |n| n.get());
    if let Some(t) = c.threads.iter().find(|&&t| t > available) {
        eprintln!("warning: --threads {t} is more than the {available} CPUs available");
    }
    if c.reps == Some(0) {
        bail!("--reps must be at least 1");
    }
    Ok(())
}

fn positive(what: &str, values: &[usize]) -> anyhow::Result<()> {
    if values.is_empty() || values.contains(&0) {
        bail!("{what} takes sizes of at least 1");
    }
    Ok(())
}

pub fn gemm(args: GemmArgs) -> anyhow::Result<()> {
    check_common(&args.common)?;
    positive("--sizes", &args.sizes)?;
    let peak_core = core_peak(args.flops_per_cycle, args.clock_ghz);
    let mut jobs: Vec<Box<dyn Fn() -> Figure>> = Vec::new();
    for &t in &args.common.threads {
        for &n in &args.sizes {
            let reps = args.common.reps.unwrap_or(if n >= 2048 { 3 } else { 10 });
            jobs.push(Box::new(move || bench::gemm(n, t, reps)));
        }
    }
    let sizes = join(&args.sizes);
    let peer =
        |py: &PathBuf, t: usize| peer_run(py, PEER_NUMPY, "peer_numpy.py", t, &["--sizes", &sizes]);
    report(&args.common, jobs, peer, |f| {
        peak_core.as_ref().map(|(g, how)| {
            (
                g * f.threads as f64,
                format!("{} core(s) × {how}", f.threads),
            )
        })
    })
}

pub fn gemv(args: GemvArgs) -> anyhow::Result<()> {
    check_common(&args.common)?;
    positive("--k and --n", &[args.k, args.n])?;
    let mut jobs: Vec<Box<dyn Fn() -> Figure>> = Vec::new();
    for &t in &args.common.threads {
        for w in &args.weights {
            let (k, n) = (args.k, args.n);
            let reps = args.common.reps.unwrap_or(50);
            let bits = match w.as_str() {
                "f32" => None,
                "int8" => Some(8),
                "int4" => Some(4),
                other => bail!("--weights {other}: expected f32, int8 or int4"),
            };
            if bits.is_some() && k % 32 != 0 {
                bail!("--weights {w} quantizes in blocks of 32 along k: --k {k} is not a multiple of 32");
            }
            jobs.push(Box::new(move || match bits {
                None => bench::gemv(k, n, t, reps),
                Some(b) => bench::gemv_quant(k, n, b, t, reps),
            }));
        }
    }
    let shape = format!("{}x{}", args.k, args.n);
    let peer = |py: &PathBuf, t: usize| {
        peer_run(
            py,
            PEER_TORCH,
            "peer_torch.py",
            t,
            &["--cases", "gemv", "--gemv", &shape],
        )
    };
    report(&args.common, jobs, peer, |_| None)
}

pub fn conv(args: ConvArgs) -> anyhow::Result<()> {
    check_common(&args.common)?;
    let shapes = args
        .shapes
        .iter()
        .map(|s| {
            let parsed = s
                .split_once('x')
                .and_then(|(c, hw)| Some((c.trim().parse().ok()?, hw.trim().parse().ok()?)));
            match parsed {
                Some((c, hw)) if c > 0 && hw > 0 => Ok((c, hw)),
                _ => bail!("--shapes {s}: expected CHANNELSxSIZE such as 64x56"),
            }
        })
        .collect::<anyhow::Result<Vec<(usize, usize)>>>()?;
    let mut jobs: Vec<Box<dyn Fn() -> Figure>> = Vec::new();
    for &(c, hw) in &shapes {
        for &t in &args.common.threads {
            let reps = args.common.reps.unwrap_or(10);
            jobs.push(Box::new(move || bench::conv(1, c, hw, c, 3, t, reps)));
        }
    }
    let list = args.shapes.join(",");
    let peer = |py: &PathBuf, t: usize| {
        peer_run(
            py,
            PEER_TORCH,
            "peer_torch.py",
            t,
            &["--cases", "conv", "--conv", &list],
        )
    };
    report(&args.common, jobs, peer, |_| None)
}

pub fn attention(args: AttentionArgs) -> anyhow::Result<()> {
    check_common(&args.common)?;
    positive("--seq", &args.seq)?;
    positive("--heads and --head-dim", &[args.heads, args.head_dim])?;
    let mut jobs: Vec<Box<dyn Fn() -> Figure>> = Vec::new();
    for &s in &args.seq {
        for &t in &args.common.threads {
            let (h, d) = (args.heads, args.head_dim);
            let reps = args.common.reps.unwrap_or(20);
            jobs.push(Box::new(move || bench::attention(s, h, d, t, reps)));
        }
    }
    let (seq, heads, dim) = (
        join(&args.seq),
        args.heads.to_string(),
        args.head_dim.to_string(),
    );
    let peer = |py: &PathBuf, t: usize| {
        peer_run(
            py,
            PEER_TORCH,
            "peer_torch.py",
            t,
            &[
                "--cases",
                "attention",
                "--seq",
                &seq,
                "--heads",
                &heads,
                "--head-dim",
                &dim,
            ],
        )
    };
    report(&args.common, jobs, peer, |_| None)
}

pub fn overhead(args: OverheadArgs) -> anyhow::Result<()> {
    if args.reps == 0 {
        bail!("--reps must be at least 1");
    }
    let load_start = load_average();
    let f = bench::overhead(args.reps);
    if !args.format.is_text() {
        println!(
            "{}",
            json!({
                "case": f.name,
                "threads": f.threads,
                "best_us": f.seconds * 1e6,
                "median_us": f.median_seconds * 1e6,
                "on_cpu_us": f.cpu_seconds.map(|c| c * 1e6),
                "load_average": [load_start, load_average()],
            })
        );
    } else {
        println!("{}", machine());
        println!("load average at start: {}", load_start.unwrap_or_default());
        println!("{f}");
        println!(
            "load average at end: {}",
            load_average().unwrap_or_default()
        );
    }
    Ok(())
}

/// Runs our figures, then the peer once per thread count, and prints both side by side.
fn report(
    common: &CommonArgs,
    jobs: Vec<Box<dyn Fn() -> Figure>>,
    peer: impl Fn(&PathBuf, usize) -> anyhow::Result<Vec<(String, usize, PeerFigure)>>,
    peak: impl Fn(&Figure) -> Option<(f64, String)>,
) -> anyhow::Result<()> {
    let load_start = load_average();
    let text = common.format.is_text();
    if text {
        println!("{}", machine());
        println!(
            "load average at start: {}",
            load_start.clone().unwrap_or_default()
        );
    }
    let mut rows = Vec::new();
    for job in jobs {
        let ours = job();
        if text {
            println!("{ours}");
        }
        let peak = peak(&ours);
        rows.push(Row {
            ours,
            peer: None,
            peak,
        });
    }
    if let Some(py) = &common.peer_python {
        let mut threads = common.threads.clone();
        threads.dedup();
        for &t in &threads {
            for (case, peer_threads, figure) in peer(py, t)? {
                if let Some(row) = rows
                    .iter_mut()
                    .find(|r| r.ours.name == case && r.ours.threads == peer_threads)
                {
                    row.peer = Some(figure);
                }
            }
        }
    }
    let load_end = load_average();
    if !text {
        let values: Vec<serde_json::Value> = rows
            .iter()
            .map(|row| row_json(row, &load_start, &load_end))
            .collect();
        return print_json(common.format.get(), &values);
    }
    println!();
    for row in &rows {
        print_row(row);
    }
    println!("load average at end: {}", load_end.unwrap_or_default());
    Ok(())
}

fn print_row(row: &Row) {
    let f = &row.ours;
    let single = f.threads == 1;
    let mut line = format!(
        "{} threads={}: ours best {}",
        f.name,
        f.threads,
        ms(f.seconds)
    );
    if let (true, Some(c)) = (single, f.cpu_seconds) {
        line.push_str(&format!(", on-CPU {}", ms(c)));
    }
    if let Some(p) = &row.peer {
        line.push_str(&format!("; {} best {}", p.system, ms(p.best_s)));
        if let (true, Some(c)) = (single, p.cpu_s) {
            line.push_str(&format!(", on-CPU {}", ms(c)));
        }
        line.push_str(&format!(
            "; peer time / ours: best {:.2}",
            p.best_s / f.seconds
        ));
        if let (true, Some(a), Some(b)) = (single, f.cpu_seconds, p.cpu_s) {
            line.push_str(&format!(", on-CPU {:.2}", b / a));
        }
    }
    if let Some((peak, how)) = &row.peak {
        let (gflops, basis) = match (single, f.cpu_seconds) {
            (true, Some(c)) => (f.flops / c / 1e9, "on-CPU"),
            _ => (f.gflops(), "best wall"),
        };
        line.push_str(&format!(
            "; {gflops:.1} GFLOP/s ({basis}) = {:.2}× the fp32 peak of {peak:.1} GFLOP/s ({how})",
            gflops / peak
        ));
    }
    println!("{line}");
}

fn row_json(
    row: &Row,
    load_start: &Option<String>,
    load_end: &Option<String>,
) -> serde_json::Value {
    let f = &row.ours;
    let peer = row.peer.as_ref().map(|p| {
        json!({
            "system": p.system,
            "best_s": p.best_s,
            "median_s": p.median_s,
            "on_cpu_s": p.cpu_s,
            "best_ratio": p.best_s / f.seconds,
            "on_cpu_ratio": match (p.cpu_s, f.cpu_seconds) {
                (Some(b), Some(a)) if f.threads == 1 => Some(b / a),
                _ => None,
            },
        })
    });
    json!({
        "case": f.name,
        "threads": f.threads,
        "best_s": f.seconds,
        "median_s": f.median_seconds,
        "on_cpu_s": f.cpu_seconds,
        "flops": f.flops,
        "gflops_best": if f.flops > 0.0 { Some(f.gflops()) } else { None },
        "peak_gflops": row.peak.as_ref().map(|p| p.0),
        "peak_basis": row.peak.as_ref().map(|p| p.1.clone()),
        "peer": peer,
        "load_average": [load_start, load_end],
    })
}

/// Runs a peer script (embedded at build time from tools/bench) with `--json` and parses its
/// figures: (case, threads, figure).
fn peer_run(
    python: &PathBuf,
    script: &str,
    script_name: &str,
    threads: usize,
    extra: &[&str],
) -> anyhow::Result<Vec<(String, usize, PeerFigure)>> {
    let output = Command::new(python)
        .arg("-c")
        .arg(script)
        .arg(threads.to_string())
        .arg("--json")
        .args(extra)
        .output()
        .with_context(|| format!("cannot start {}", python.display()))?;
    if !output.status.success() {
        bail!(
            "{} running tools/bench/{script_name} failed ({}): {}",
            python.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let text = String::from_utf8_lossy(&output.stdout);
    let mut figures = Vec::new();
    for line in text.lines().filter(|l| l.trim_start().starts_with('{')) {
        let v: serde_json::Value = serde_json::from_str(line)
            .with_context(|| format!("tools/bench/{script_name} printed {line:?}"))?;
        let field = |k: &str| {
            v.get(k)
                .and_then(serde_json::Value::as_f64)
                .with_context(|| format!("tools/bench/{script_name}: no number {k:?} in {line}"))
        };
        let case = v
            .get("case")
            .and_then(serde_json::Value::as_str)
            .with_context(|| format!("tools/bench/{script_name}: no case in {line}"))?;
        let system = v
            .get("system")
            .and_then(serde_json::Value::as_str)
            .unwrap_or(script_name);
        figures.push((
            case.to_string(),
            field("threads")? as usize,
            PeerFigure {
                system: system.to_string(),
                best_s: field("best_s")?,
                median_s: field("median_s")?,
                cpu_s: v.get("cpu_s").and_then(serde_json::Value::as_f64),
            },
        ));
    }
    if figures.is_empty() {
        bail!(
            "tools/bench/{script_name} printed no figures: {}",
            text.trim()
        );
    }
    Ok(figures)
}

fn ms(seconds: f64) -> String {
    if seconds < 1e-3 {
        format!("{:.2} µs", seconds * 1e6)
    } else {
        format!("{:.3} ms", seconds * 1e3)
    }
}

fn join(values: &[usize]) -> String {
    values
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

fn load_average() -> Option<String> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    Some(
        text.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
    )
}

fn cpuinfo_field(info: &str, key: &str) -> Option<String> {
    info.lines()
        .find(|l| l.split(':').next().is_some_and(|k| k.trim() == key))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

/// The CPU model, the CPU engine's kernel schedule and the core count.
fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    format!(
        "machine: {}, {cpus} CPUs available",
        aneforge_cpu::simd::describe()
    )
}

/// One core's theoretical fp32 peak in GFLOP/s and how it was derived: FLOP per cycle (FMA
/// width × pipes × 2) times the clock.
fn core_peak(flops_per_cycle: Option<f64>, clock_ghz: Option<f64>) -> Option<(f64, String)> {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let (fpc, fpc_how) = match flops_per_cycle {
        Some(f) => (f, "--flops-per-cycle".to_string()),
        None => flops_per_cycle_from(&info)?,
    };
    let (ghz, ghz_how) = match clock_ghz {
        Some(g) => (g, "--clock-ghz".to_string()),
        None => {
            let mhz: f64 = cpuinfo_field(&info, "cpu MHz")?.parse().ok()?;
            (mhz / 1e3, "nominal clock from /proc/cpuinfo".to_string())
        }
    };
    Some((
        fpc * ghz,
        format!("{fpc} FLOP/cycle [{fpc_how}] × {ghz:.3} GHz [{ghz_how}]"),
    ))
}

fn flops_per_cycle_from(info: &str) -> Option<(f64, String)> {
    let vendor = cpuinfo_field(info, "vendor_id")?;
    let family: u32 = cpuinfo_field(info, "cpu family")?.parse().ok()?;
    let flags = cpuinfo_field(info, "flags").unwrap_or_default();
    let has = |f: &str| flags.split_whitespace().any(|x| x == f);
    Some(match (vendor.as_str(), family) {
        ("AuthenticAMD", 25) => (
            32.0,
            "AMD family 25 (Zen 3/4): two 256-bit FMA pipes, 512-bit ops over two cycles".into(),
        ),
        ("AuthenticAMD", f) if f >= 26 && has("avx512f") => {
            (64.0, "AMD family 26 (Zen 5): two 512-bit FMA pipes".into())
        }
        ("GenuineIntel", _) if has("avx512f") => (
            64.0,
            "Intel AVX-512: two 512-bit FMA units (one on some SKUs: half)".into(),
        ),
        _ if has("fma") => (32.0, "AVX2: two 256-bit FMA units".into()),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peak_rule_for_this_machine_kind() {
        let zen4 = "vendor_id\t: AuthenticAMD\ncpu family\t: 25\nflags\t\t: fpu fma avx512f\n";
        assert_eq!(flops_per_cycle_from(zen4).unwrap().0, 32.0);
        let intel = "vendor_id\t: GenuineIntel\ncpu family\t: 6\nflags\t\t: fma avx512f\n";
        assert_eq!(flops_per_cycle_from(intel).unwrap().0, 64.0);
        let old = "vendor_id\t: GenuineIntel\ncpu family\t: 6\nflags\t\t: sse2\n";
        assert!(flops_per_cycle_from(old).is_none());
    }
}
