//! `--engine`, `--target` and `--threads`: how every command that runs a program chooses the
//! engine that runs it, the target its programs are compiled for, and the CPU engine's threads.

use aneforge::engine::{self, EngineKind, MatmulPrecision, SelectError};
use aneforge::{Engine, Target};
use anyhow::bail;

#[derive(clap::Args, Clone, Debug)]
pub struct EngineArgs {
    /// Engine that runs the programs: cpu (aneforge's CPU engine), ane (Apple's e5rt runtime, or
    /// the e5rt implementation ANEFORGE_E5RT_LIB names) or auto (ane where it loads, else cpu).
    #[arg(long, default_value = "cpu")]
    pub engine: EngineKind,
    /// Compile target: cpu (fp32) or an ANE architecture or alias (h13…h18, m1…m5, a13…a18; ane
    /// for the detected host). Default: cpu on the CPU engine, the detected host (ANEFORGE_TARGET
    /// overrides) on the ANE engine. An ANE target on the CPU engine previews the fp16 program.
    #[arg(long)]
    pub target: Option<String>,
    #[command(flatten)]
    pub threads: ThreadArgs,
}

impl Default for EngineArgs {
    fn default() -> Self {
        EngineArgs {
            engine: EngineKind::Cpu,
            target: None,
            threads: ThreadArgs::default(),
        }
    }
}

#[derive(clap::Args, Clone, Debug, Default)]
pub struct ThreadArgs {
    /// Worker threads of the CPU engine (default: RAYON_NUM_THREADS, else every core).
    #[arg(short = 't', long = "threads", value_name = "N")]
    pub threads: Option<usize>,
}

impl ThreadArgs {
    /// Sizes rayon's global pool, which the CPU engine's programs run on; the pool is built once,
    /// so this runs before any program is compiled.
    pub fn apply(&self) -> anyhow::Result<()> {
        let Some(n) = self.threads else {
            return Ok(());
        };
        if n == 0 {
            bail!("--threads takes a count of at least 1");
        }
        match rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global()
        {
            Ok(()) => Ok(()),
            Err(_) if rayon::current_num_threads() == n => Ok(()),
            Err(e) => bail!("cannot start {n} worker threads: {e}"),
        }
    }
}

impl EngineArgs {
    /// The selected engine and the target to compile for, after sizing the CPU engine's threads.
    /// The engine error is returned as the engine gives it (no context), so its first line is the
    /// reason.
    pub fn select(&self) -> anyhow::Result<(Engine, Target)> {
        self.threads.apply()?;
        match engine::select(self.engine, self.target.as_deref()) {
            Ok(selection) => {
                if let Some(warning) = &selection.warning {
                    eprintln!("warning: {warning}");
                }
                Ok((selection.engine, selection.target))
            }
            Err(SelectError::Engine(e)) => Err(e.into()),
            Err(SelectError::Target { name, source }) => Err(anyhow::Error::new(source).context(
                format!("--target {name}: not cpu, ane or an ANE architecture"),
            )),
            Err(SelectError::CpuTargetOnAne) => bail!(
                "--engine ane runs fp16 ANE programs: drop --target cpu (the default on the ANE \
                 engine is the detected host) or use --engine cpu"
            ),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aneforge::AneArch;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        engine: EngineArgs,
    }

    fn select(args: &[&str]) -> anyhow::Result<(Engine, Target)> {
        let cli = Cli::try_parse_from(std::iter::once("t").chain(args.iter().copied()))?;
        cli.engine.select()
    }

    #[test]
    fn cpu_engine_defaults_to_the_cpu_target_and_accepts_ane_architectures() {
        assert_eq!(select(&[]).unwrap(), (Engine::Cpu, Target::Cpu));
        assert_eq!(
            select(&["--engine", "cpu", "--target", "m1"]).unwrap(),
            (Engine::Cpu, Target::Ane(AneArch::new("h13").unwrap()))
        );
        assert_eq!(
            select(&["--target", "H16"]).unwrap(),
            (Engine::Cpu, Target::Ane(AneArch::new("h16").unwrap()))
        );
    }

    #[test]
    fn bad_names_are_errors_that_say_what_is_valid() {
        let err = select(&["--target", "h99"]).unwrap_err().to_string();
        assert!(err.contains("--target h99"), "{err}");
        let err = select(&["--engine", "gpu"]).unwrap_err().to_string();
        assert!(err.contains("expected cpu, ane or auto"), "{err}");
    }
}

/// `--matmul-precision`, for the commands whose fp32 programs take it.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct MatmulArgs {
    /// Arithmetic of the CPU engine's many-row products against weights in fp32 programs: f32
    /// (exact), or bf16 (both operands rounded to bfloat16, sums in f32; on AMX tiles where the
    /// CPU has them, Intel Sapphire Rapids and later).
    #[arg(long, value_enum, default_value_t = MatmulArg::F32, value_name = "f32|bf16")]
    pub matmul_precision: MatmulArg,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MatmulArg {
    #[default]
    F32,
    Bf16,
}

impl MatmulArgs {
    /// The precision for programs compiled for `target` on `engine` (`engine::select_matmul`:
    /// bf16 is refused where it would do nothing).
    pub fn precision(&self, engine: Engine, target: &Target) -> anyhow::Result<MatmulPrecision> {
        let name = match self.matmul_precision {
            MatmulArg::F32 => "f32",
            MatmulArg::Bf16 => "bf16",
        };
        engine::select_matmul(name, engine, target)
            .map_err(|e| anyhow::anyhow!("--matmul-precision {name}: {e}"))
    }
}
