//! `aneforge bench program DIR`: the latency of one function of a program directory (as
//! `aneforge compile` or `aneforge import` write it) on an engine, fed the same `.npy` inputs every
//! run: load, first run, then the median and best of timed runs, with peak memory.
//! tools/bench/onnx.sh runs it beside ONNX Runtime on the imported models.

use std::path::PathBuf;
use std::time::Instant;

use aneforge::engine::EngineKind;
use anyhow::{bail, Context};

use crate::run::{read_inputs, OpenedProgram};

#[derive(clap::Args)]
pub struct BenchProgramArgs {
    /// Program directory (model.mil and weights/weight.bin).
    pub dir: PathBuf,
    /// Function to run (default: main, or the program's only function).
    #[arg(long)]
    pub function: Option<String>,
    /// An input port and the .npy file that feeds it, as NAME=FILE.npy (one per input port).
    #[arg(long = "input", short = 'i', value_name = "NAME=FILE")]
    pub inputs: Vec<String>,
    /// Timed runs after the first.
    #[arg(long, default_value_t = 20)]
    pub runs: usize,
    /// Engine that runs the program: cpu, ane or auto.
    #[arg(long, default_value = "cpu")]
    pub engine: EngineKind,
    /// After the timed runs, time every kernel over --runs more runs and print the costliest ops
    /// and kernels (the CPU engine only).
    #[arg(long)]
    pub profile: bool,
    #[command(flatten)]
    pub threads: crate::engine_args::ThreadArgs,
    #[command(flatten)]
    pub format: crate::output::FormatArgs,
}

pub fn run(args: BenchProgramArgs) -> anyhow::Result<()> {
    if args.runs == 0 {
        bail!("--runs must be at least 1");
    }
    args.threads.apply()?;
    let start = Instant::now();
    let opened = OpenedProgram::open(&args.dir, args.function.as_deref())?;
    let (function, inputs) = (&opened.function, &opened.inputs);
    let feeds = read_inputs(&args.inputs, inputs)?;
    let mut loaded = opened.load(args.engine)?;
    let load_s = start.elapsed().as_secs_f64();
    let mut once = || -> anyhow::Result<f64> {
        let start = Instant::now();
        for port in inputs {
            loaded
                .set_input(&port.name, feeds[&port.name].as_slice())
                .with_context(|| format!("input {}", port.name))?;
        }
        loaded
            .execute()
            .with_context(|| format!("executing {} ({function})", args.dir.display()))?;
        Ok(start.elapsed().as_secs_f64())
    };
    let first_run_s = once()?;
    let mut times = (0..args.runs)
        .map(|_| once())
        .collect::<anyhow::Result<Vec<f64>>>()?;
    if args.profile {
        let mut runs = Vec::with_capacity(args.runs);
        for _ in 0..args.runs {
            runs.push(
                loaded
                    .execute_profiled()
                    .with_context(|| format!("profiling {} ({function})", args.dir.display()))?,
            );
        }
        print_profile(&runs);
    }
    times.sort_by(f64::total_cmp);
    let median_s = times[times.len() / 2];
    let best_s = times[0];
    let rss = crate::bench::peak_rss_mib();
    let threads = rayon::current_num_threads();
    if args.format.is_text() {
        println!(
            "{}: median {:.3} ms, best {:.3} ms over {} runs ({threads} threads); first run {:.3} \
             ms; load {:.3} s; peak RSS {}",
            args.dir.display(),
            median_s * 1e3,
            best_s * 1e3,
            args.runs,
            first_run_s * 1e3,
            load_s,
            rss.map_or("n/a".to_string(), |r| format!("{r:.0} MiB")),
        );
    } else {
        let report = serde_json::json!({
            "system": "aneforge",
            "program": args.dir,
            "function": function,
            "threads": threads,
            "runs": args.runs,
            "load_s": load_s,
            "first_run_s": first_run_s,
            "median_s": median_s,
            "best_s": best_s,
            "peak_rss_mib": rss,
        });
        println!("{report}");
    }
    Ok(())
}

/// The costliest ops (by MIL op and kernel kind) and kernels of profiled runs, per run.
pub(crate) fn print_profile(runs: &[Vec<aneforge_cpu::KernelTime>]) {
    use std::collections::{BTreeMap, HashMap};
    let n = runs.len().max(1) as f64;
    let mut by_kernel: HashMap<(&str, &str, &str), f64> = HashMap::new();
    let mut total = 0.0;
    for k in runs.iter().flatten() {
        total += k.seconds;
        *by_kernel
            .entry((&k.op_type, &k.kernel, &k.name))
            .or_default() += k.seconds;
    }
    let mut by_op: BTreeMap<String, f64> = BTreeMap::new();
    for ((op, kind, _), s) in &by_kernel {
        *by_op
            .entry(format!("{op} [{}]", kind.split('[').next().unwrap_or(kind)))
            .or_default() += s;
    }
    let mut ops: Vec<_> = by_op.into_iter().collect();
    ops.sort_by(|a, b| b.1.total_cmp(&a.1));
    println!(
        "profile: {} kernels, {:.3} ms per run (kernels only)",
        runs.first().map_or(0, Vec::len),
        1e3 * total / n
    );
    for (op, s) in ops.iter().take(15) {
        println!(
            "  {op:<40} {:>9.3} ms  {:>5.1}%",
            1e3 * s / n,
            100.0 * s / total.max(f64::MIN_POSITIVE)
        );
    }
    let mut kernels: Vec<_> = by_kernel.into_iter().collect();
    kernels.sort_by(|a, b| b.1.total_cmp(&a.1));
    println!("  costliest kernels:");
    for ((op, kind, name), s) in kernels.iter().take(25) {
        println!("  {:>9.3} ms  {op} {kind} `{name}`", 1e3 * s / n);
    }
}
