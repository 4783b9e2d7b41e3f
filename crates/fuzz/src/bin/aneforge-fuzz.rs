//! The stable-Rust fuzz driver. For each target the driver starts a worker process (this binary,
//! `--worker`) that mutates the target's seeds and runs every input under `catch_unwind`, an
//! address-space limit (`setrlimit(RLIMIT_AS)`) and a watchdog. The worker copies each input into
//! a file it has mapped shared before running it, so when it dies (an allocation over the cap
//! aborts, a signal, the watchdog's abort on a hang) the driver saves the input that killed it,
//! reports it, and starts a new worker for the rest of the budget. A panic is saved by the worker
//! itself and counted. Every failure's input is written under `<out>/crashes/`.
//!
//! ```text
//! aneforge-fuzz [--execs N] [--seconds S] [--max-memory BYTES] [--timeout-ms T] [TARGET...]
//! ```

use aneforge_fuzz::mutate::{mutate, Rng, MAX_INPUT};
use aneforge_fuzz::{targets, Target, TARGETS};
use memmap2::MmapMut;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The shared state file: eight-byte fields (executions, panics, the hang flag, the current
/// input's length, accepted inputs), then
/// the input itself at [`HEADER`].
const HEADER: usize = 64;
const STATE_BYTES: usize = HEADER + MAX_INPUT;
/// Workers started per target after crashes before the driver gives up on it.
const MAX_RESTARTS: usize = 5;

struct Options {
    execs: u64,
    seconds: f64,
    max_memory: u64,
    timeout_ms: u64,
    seed: u64,
    out: PathBuf,
    scratch: Option<PathBuf>,
    targets: Vec<&'static Target>,
    worker: bool,
}

fn usage() -> String {
    let names: Vec<&str> = TARGETS.iter().map(|t| t.name).collect();
    format!(
        "usage: aneforge-fuzz [--execs N] [--seconds S] [--max-memory BYTES] [--timeout-ms T] \
         [--seed N] [--out DIR] [--scratch DIR] [TARGET...]\n\
         Each target runs until N executions or S seconds, whichever comes first \
         (defaults: 1000000 executions, no time limit; 2 GiB address space; 5000 ms per input).\n\
         Parsers that take a path read inputs written under --scratch (default: the system \
         temporary directory); a memory file system there is much faster.\n\
         targets: {}",
        names.join(" ")
    )
}

fn parse_args() -> Result<Options, String> {
    let mut o = Options {
        execs: 1_000_000,
        seconds: f64::INFINITY,
        max_memory: 2 << 30,
        timeout_ms: 5000,
        seed: 1,
        out: Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/fuzz"),
        scratch: None,
        targets: Vec::new(),
        worker: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |what: &str| args.next().ok_or(format!("{arg} needs {what}"));
        let number = |text: String| -> Result<u64, String> {
            text.parse()
                .map_err(|_| format!("{arg}: {text:?} is not a count"))
        };
        match arg.as_str() {
            "--execs" => o.execs = number(value("a count")?)?,
            "--seconds" => {
                let text = value("a duration")?;
                o.seconds = text
                    .parse()
                    .ok()
                    .filter(|s: &f64| *s > 0.0)
                    .ok_or(format!("--seconds: {text:?} is not a positive number"))?
            }
            "--max-memory" => o.max_memory = number(value("a byte count")?)?,
            "--timeout-ms" => o.timeout_ms = number(value("milliseconds")?)?.max(1),
            "--seed" => o.seed = number(value("a number")?)?,
            "--out" => o.out = PathBuf::from(value("a directory")?),
            "--scratch" => o.scratch = Some(PathBuf::from(value("a directory")?)),
            "--worker" => o.worker = true,
            "-h" | "--help" => return Err(usage()),
            name => o
                .targets
                .push(targets::find(name).ok_or(format!("unknown target {name:?}\n{}", usage()))?),
        }
    }
    if o.targets.is_empty() {
        o.targets = TARGETS.iter().collect();
    }
    Ok(o)
}

fn main() -> ExitCode {
    let options = match parse_args() {
        Ok(o) => o,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    if options.worker {
        return worker(&options);
    }
    if let Err(e) = std::fs::create_dir_all(options.out.join("crashes")) {
        eprintln!("{}: {e}", options.out.display());
        return ExitCode::from(2);
    }
    println!(
        "{:<15} {:>10} {:>8} {:>9} {:>9} {:>7} {:>7} {:>6}",
        "target", "execs", "seconds", "execs/s", "accepted", "panics", "aborts", "hangs"
    );
    // The workers' scratch files go to a directory the driver removes when it ends: a worker
    // killed by the watchdog or the memory cap cannot clean up after itself.
    let scratch = match tempfile::Builder::new()
        .prefix("aneforge-fuzz")
        .tempdir_in(options.scratch.clone().unwrap_or_else(std::env::temp_dir))
    {
        Ok(dir) => dir,
        Err(e) => {
            eprintln!("creating the scratch directory: {e}");
            return ExitCode::from(2);
        }
    };
    let mut failed = false;
    for target in &options.targets {
        match drive(target, &options, scratch.path()) {
            Ok(report) => {
                failed |= report.panics + report.aborts + report.hangs > 0;
                println!(
                    "{:<15} {:>10} {:>8.1} {:>9.0} {:>8.1}% {:>7} {:>7} {:>6}",
                    target.name,
                    report.execs,
                    report.seconds,
                    report.execs as f64 / report.seconds.max(1e-9),
                    100.0 * report.accepted as f64 / report.execs.max(1) as f64,
                    report.panics,
                    report.aborts,
                    report.hangs
                );
            }
            Err(e) => {
                eprintln!("{}: {e}", target.name);
                failed = true;
            }
        }
    }
    if failed {
        eprintln!(
            "fuzzing found failures; inputs are in {}",
            options.out.join("crashes").display()
        );
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

#[derive(Default)]
struct Report {
    execs: u64,
    accepted: u64,
    panics: u64,
    aborts: u64,
    hangs: u64,
    seconds: f64,
}

fn state_path(options: &Options, target: &Target) -> PathBuf {
    options.out.join(format!("{}.state", target.name))
}

fn map_state(path: &Path) -> std::io::Result<MmapMut> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    file.set_len(STATE_BYTES as u64)?;
    // SAFETY: the state file is this tool's own; the driver reads it only after the worker exits.
    unsafe { MmapMut::map_mut(&file) }
}

fn field(map: &[u8], index: usize) -> u64 {
    u64::from_le_bytes(map[index * 8..index * 8 + 8].try_into().expect("8 bytes"))
}

fn set_field(map: &mut [u8], index: usize, value: u64) {
    map[index * 8..index * 8 + 8].copy_from_slice(&value.to_le_bytes());
}

/// Runs workers for `target` until its budget is spent, saving the input of every worker death.
fn drive(target: &Target, options: &Options, scratch: &Path) -> Result<Report, String> {
    let state = state_path(options, target);
    let started = Instant::now();
    let mut report = Report::default();
    for restart in 0..=MAX_RESTARTS {
        let mut map = map_state(&state).map_err(|e| format!("{}: {e}", state.display()))?;
        map[..HEADER].fill(0);
        map.flush().map_err(|e| e.to_string())?;
        let remaining = options.seconds - started.elapsed().as_secs_f64();
        let mut command = Command::new(std::env::current_exe().map_err(|e| e.to_string())?);
        let status = command
            .env("TMPDIR", scratch)
            .args(["--worker", target.name])
            .args(["--execs", &(options.execs - report.execs).to_string()])
            .args(["--max-memory", &options.max_memory.to_string()])
            .args(["--timeout-ms", &options.timeout_ms.to_string()])
            .args(["--seed", &(options.seed + restart as u64).to_string()])
            .arg("--out")
            .arg(&options.out)
            .args(
                remaining
                    .is_finite()
                    .then(|| format!("{:.3}", remaining.max(0.001)))
                    .map(|s| ["--seconds".to_string(), s])
                    .into_iter()
                    .flatten(),
            )
            .status()
            .map_err(|e| format!("starting the worker: {e}"))?;
        report.execs += field(&map, 0);
        report.panics += field(&map, 1);
        report.accepted += field(&map, 4);
        if status.success() || (status.code() == Some(1) && field(&map, 1) > 0) {
            break;
        }
        let hang = field(&map, 2) != 0;
        let len = (field(&map, 3) as usize).min(MAX_INPUT);
        let saved = save_input(
            options,
            target,
            if hang { "hang" } else { "abort" },
            &map[HEADER..HEADER + len],
        );
        if hang {
            report.hangs += 1;
        } else {
            report.aborts += 1;
        }
        eprintln!(
            "{}: the worker died ({status}{}) on the input saved to {}",
            target.name,
            if hang { ", a hang" } else { "" },
            saved.display()
        );
        if report.execs >= options.execs || started.elapsed().as_secs_f64() >= options.seconds {
            break;
        }
    }
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// Writes a failing input to `<out>/crashes/<target>-<kind>-<hash>.bin`.
fn save_input(options: &Options, target: &Target, kind: &str, input: &[u8]) -> PathBuf {
    // FNV-1a: names the input by its content, so the same crash is saved once
    let hash = input.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    let path = options
        .out
        .join("crashes")
        .join(format!("{}-{kind}-{hash:016x}.bin", target.name));
    if let Err(e) = std::fs::write(&path, input) {
        eprintln!("{}: {e}", path.display());
    }
    path
}

fn limit_address_space(bytes: u64) -> Result<(), String> {
    let limit = libc::rlimit {
        rlim_cur: bytes as libc::rlim_t,
        rlim_max: bytes as libc::rlim_t,
    };
    // SAFETY: setrlimit reads the struct; it only lowers this process's own limit.
    if unsafe { libc::setrlimit(libc::RLIMIT_AS, &limit) } != 0 {
        return Err(format!(
            "setrlimit(RLIMIT_AS): {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// The worker: fuzzes one target, recording progress and the current input in the state file.
fn worker(options: &Options) -> ExitCode {
    let target = options.targets[0];
    // The CPU engine's own limit (plans over it are errors) sits under the process cap.
    std::env::set_var(
        aneforge_cpu::MAX_MEMORY_ENV,
        (options.max_memory / 2).to_string(),
    );
    if let Err(e) = limit_address_space(options.max_memory) {
        eprintln!("{e}");
        return ExitCode::from(2);
    }
    let mut map = match map_state(&state_path(options, target)) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let seeds = (target.seeds)();
    if seeds.is_empty() {
        eprintln!(
            "{}: no seed inputs (the fixtures are missing?)",
            target.name
        );
        return ExitCode::from(2);
    }

    let last_panic: Arc<Mutex<Option<String>>> = Arc::default();
    let hook_panic = last_panic.clone();
    std::panic::set_hook(Box::new(move |info| {
        let thread = std::thread::current()
            .name()
            .unwrap_or("unnamed")
            .to_string();
        *hook_panic.lock().unwrap_or_else(|e| e.into_inner()) =
            Some(format!("{info} (thread {thread})"));
    }));

    // The watchdog: 0 while idle, else the millisecond (since `epoch`) the current input started.
    let epoch = Instant::now();
    let busy_since = Arc::new(AtomicU64::new(0));
    let hang_flag = map.as_mut_ptr() as usize + 16;
    {
        let busy_since = busy_since.clone();
        let timeout = options.timeout_ms;
        let name = target.name;
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_millis((timeout / 4).clamp(10, 250)));
            let since = busy_since.load(Ordering::Acquire);
            let now = epoch.elapsed().as_millis() as u64 + 1;
            if since != 0 && now.saturating_sub(since) > timeout {
                eprintln!("hang: target {name} ran one input for over {timeout} ms; aborting");
                // SAFETY: the header's hang field lies inside the live mapping, which outlives
                // this thread (the process aborts next).
                unsafe { std::ptr::write_volatile(hang_flag as *mut u64, 1) };
                std::process::abort();
            }
        });
    }

    let mut rng = Rng::new(options.seed);
    let mut pool: Vec<Vec<u8>> = Vec::new();
    let (mut execs, mut panics, mut accepted) = (0u64, 0u64, 0u64);
    let started = Instant::now();
    let mut input = Vec::new();
    while execs < options.execs {
        if execs % 64 == 0 && started.elapsed().as_secs_f64() >= options.seconds {
            break;
        }
        input.clear();
        if (execs as usize) < seeds.len() {
            input.extend_from_slice(&seeds[execs as usize]);
        } else {
            let base = if !pool.is_empty() && rng.below(3) == 0 {
                rng.pick(&pool)
            } else {
                rng.pick(&seeds)
            };
            input.extend_from_slice(base);
            let other = rng.pick(&seeds).clone();
            mutate(&mut rng, &mut input, &other);
        }
        set_field(&mut map, 3, input.len() as u64);
        map[HEADER..HEADER + input.len()].copy_from_slice(&input);
        *last_panic.lock().unwrap_or_else(|e| e.into_inner()) = None;
        busy_since.store(epoch.elapsed().as_millis() as u64 + 1, Ordering::Release);
        let outcome = std::panic::catch_unwind(|| (target.run)(&input));
        busy_since.store(0, Ordering::Release);
        execs += 1;
        match outcome {
            Ok(true) => {
                accepted += 1;
                // inputs that still parse after mutation are the ones worth mutating further
                if pool.len() < 256 {
                    pool.push(input.clone());
                } else {
                    let at = rng.below(pool.len());
                    pool[at] = input.clone();
                }
            }
            Ok(false) => {}
            Err(_) => {
                panics += 1;
                let message = last_panic
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take()
                    .unwrap_or_else(|| "a panic without a message".into());
                let saved = save_input(options, target, "panic", &input);
                eprintln!(
                    "PANIC in target {}: {message}\n  input saved to {}",
                    target.name,
                    saved.display()
                );
            }
        }
        set_field(&mut map, 0, execs);
        set_field(&mut map, 1, panics);
        set_field(&mut map, 4, accepted);
    }
    if panics > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
