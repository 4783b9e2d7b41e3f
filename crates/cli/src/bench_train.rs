//! `aneforge bench train`: training steps of the demo configuration, next to PyTorch in the same run.

use crate::engine_args::EngineArgs;
use aneforge_apps::char_lm::{CharLm, CharLmConfig};
use anyhow::Context;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub struct TrainArgs {
    /// Timed steps (after the warm-up steps).
    #[arg(long, default_value_t = 20)]
    pub steps: u64,
    #[arg(long, default_value_t = 3)]
    pub warmup: u64,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// A Python with PyTorch: runs tools/bench/train_peer.py (2 threads, fp32) in the same run.
    #[arg(long)]
    pub peer_python: Option<PathBuf>,
    /// Threads for the PyTorch peer.
    #[arg(long, default_value_t = 2)]
    pub peer_threads: usize,
    /// Also time every kernel of the step program on the CPU engine and list the costliest.
    #[arg(long)]
    pub profile: bool,
}

const TRAIN_PEER: &str = include_str!("../../../tools/bench/train_peer.py");

pub fn train(args: TrainArgs) -> anyhow::Result<()> {
    let (engine, target) = args.engine.select()?;
    let (data, _) = crate::demo::training_text(None)?;
    let cfg = CharLmConfig::default();
    let vocab = data.vocab_size();
    let mut lm = CharLm::new(data, cfg.clone(), target.clone(), engine)?;
    for _ in 0..args.warmup {
        lm.step()?;
    }
    let cpu_start = process_cpu_seconds();
    let start = Instant::now();
    for _ in 0..args.steps {
        lm.step()?;
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu = process_cpu_seconds()
        .zip(cpu_start)
        .map(|(end, begin)| (end - begin) / args.steps as f64);
    let tokens = lm.tokens_per_step() as f64;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "demo configuration: {} layers, d_model {}, {} heads, MLP {}, context {}, batch {}, vocab \
         {vocab}; AdamW; {} timed steps after {} warm-up",
        cfg.layers,
        cfg.d_model,
        cfg.heads,
        cfg.mlp,
        cfg.context,
        cfg.batch,
        args.steps,
        args.warmup
    );
    println!(
        "{:<44} {:>9} {:>11} {:>11} {:>15}",
        "system", "steps/s", "tokens/s", "ms/step", "CPU ms/step"
    );
    let line = |name: &str, steps_per_s: f64, cpu: Option<f64>| {
        let cpu = cpu.map_or("-".to_string(), |c| format!("{:.0}", c * 1e3));
        println!(
            "{name:<44} {steps_per_s:>9.3} {:>11.0} {:>11.1} {cpu:>15}",
            steps_per_s * tokens,
            1000.0 / steps_per_s
        )
    };
    let ours = args.steps as f64 / secs;
    line(
        &format!("aneforge ({engine:?} engine, {target}, {threads} threads)"),
        ours,
        cpu,
    );
    if args.profile {
        profile(&lm, args.steps.max(1))?;
    }
    if let Some(python) = &args.peer_python {
        let script = "tools/bench/train_peer.py";
        let out = std::process::Command::new(python)
            .args(["-c", TRAIN_PEER])
            .args(["--steps", &args.steps.to_string()])
            .args(["--warmup", &args.warmup.to_string()])
            .args(["--threads", &args.peer_threads.to_string()])
            .args(["--vocab", &vocab.to_string()])
            .output()
            .with_context(|| format!("running {} {script}", python.display()))?;
        if !out.status.success() {
            anyhow::bail!("{script} failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let steps_per_s: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("steps_per_s "))
            .and_then(|v| v.trim().parse().ok())
            .with_context(|| format!("no `steps_per_s` line in the peer's output:\n{text}"))?;
        let version = text
            .lines()
            .find_map(|l| l.strip_prefix("torch "))
            .unwrap_or("?")
            .trim()
            .to_string();
        let peer_cpu = text
            .lines()
            .find_map(|l| l.strip_prefix("cpu_s_per_step "))
            .and_then(|v| v.trim().parse::<f64>().ok());
        line(
            &format!("PyTorch {version} (fp32, {} threads)", args.peer_threads),
            steps_per_s,
            peer_cpu,
        );
        println!(
            "aneforge / PyTorch: {:.2}x steps/s{}",
            ours / steps_per_s,
            match (cpu, peer_cpu) {
                (Some(a), Some(b)) => format!(", {:.2}x less CPU time per step", b / a),
                _ => String::new(),
            }
        );
    }
    Ok(())
}

/// CPU time of every thread of this process so far (Linux: the sum of
/// `/proc/self/task/*/schedstat` on-CPU nanoseconds; worker threads are long-lived).
pub(crate) fn process_cpu_seconds() -> Option<f64> {
    let mut total = 0u64;
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let stat = std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok()?;
        total += stat.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(total as f64 * 1e-9)
}

/// Runs the trainer's step program on a fresh CPU-engine instance with every kernel timed, and
/// prints the time per op type and the costliest kernels.
fn profile(lm: &CharLm, runs: u64) -> anyhow::Result<()> {
    use aneforge::lower::PortKind;
    use aneforge_cpu::HostSlice;
    let artifact = lm.trainer().model().artifact().clone();
    let blobs = artifact.blob_store()?;
    let plan = aneforge_cpu::compile(
        artifact.program(),
        "main",
        &blobs,
        &aneforge_cpu::CompileOptions::default(),
    )?;
    let mut inst = plan.instantiate();
    for port in artifact.inputs() {
        let n = port.len();
        match (&port.kind, port.dtype) {
            // a trainer's artifact does not keep the initial values: the current ones
            (PortKind::Parameter(_), _) => {
                let v = lm.trainer().read_param(&port.name)?;
                inst.set_input(&port.name, HostSlice::F32(&v))?;
            }
            (_, aneforge::DType::I32) => {
                let ids: Vec<i32> = (0..n).map(|i| (i * 7 % 13) as i32).collect();
                inst.set_input(&port.name, HostSlice::I32(&ids))?;
            }
            _ => inst.set_input(&port.name, HostSlice::F32(&vec![0.5f32; n]))?,
        }
    }
    inst.execute()?;
    let profiled = (0..runs)
        .map(|_| inst.execute_profiled())
        .collect::<Result<Vec<_>, _>>()?;
    crate::bench_program::print_profile(&profiled);
    Ok(())
}
