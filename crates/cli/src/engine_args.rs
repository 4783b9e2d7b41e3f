//! `--engine` and `--target` flags shared by the training commands.

use aneforge::engine::EngineKind;
use aneforge::{AneArch, Engine, Target};

#[derive(clap::Args, Clone, Debug)]
pub struct EngineArgs {
    /// Engine that runs the programs: cpu (aneforge's CPU engine), ane (Apple's runtime, or the
    /// e5rt library ANEFORGE_E5RT_LIB names) or auto.
    #[arg(long, default_value = "cpu")]
    pub engine: EngineKind,
    /// Compile target: cpu (fp32), ane (fp16, default architecture) or an ANE architecture such
    /// as h16. Defaults to cpu on the CPU engine and ane on the ANE engine.
    #[arg(long)]
    pub target: Option<String>,
}

impl EngineArgs {
    /// The selected engine and the target to compile for.
    pub fn select(&self) -> anyhow::Result<(Engine, Target)> {
        let engine = self.engine.select()?;
        let name = match (&self.target, engine) {
            (Some(t), _) => t.as_str(),
            (None, Engine::Ane) => "ane",
            (None, _) => "cpu",
        };
        let target = match name {
            "cpu" => Target::Cpu,
            "ane" => Target::Ane(AneArch::default()),
            arch => Target::Ane(AneArch::new(arch)?),
        };
        Ok((engine, target))
    }
}
