//! Choosing an engine and the target its programs are compiled for: `--engine cpu|ane|auto` and
//! `--target cpu|ane|ARCH`, as every command (and the Python package) takes them.

use super::ane::{AneEngine, AneError};
use super::Engine;
use crate::arch::{host, AneArch, ArchError};
use crate::lower::Target;

/// What the user asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum EngineKind {
    Cpu,
    Ane,
    /// The ANE where its runtime can be loaded, the CPU otherwise.
    #[default]
    Auto,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown engine `{0}`: expected cpu, ane or auto")]
pub struct UnknownEngine(pub String);

impl std::str::FromStr for EngineKind {
    type Err = UnknownEngine;

    fn from_str(s: &str) -> Result<EngineKind, UnknownEngine> {
        match s.trim().to_ascii_lowercase().as_str() {
            "cpu" => Ok(EngineKind::Cpu),
            "ane" => Ok(EngineKind::Ane),
            "auto" => Ok(EngineKind::Auto),
            _ => Err(UnknownEngine(s.to_string())),
        }
    }
}

impl std::fmt::Display for EngineKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            EngineKind::Cpu => "cpu",
            EngineKind::Ane => "ane",
            EngineKind::Auto => "auto",
        })
    }
}

impl EngineKind {
    /// `Cpu` always succeeds; `Ane` loads the process-wide ANE engine or fails saying why;
    /// `Auto` falls back to the CPU when the ANE engine cannot be loaded.
    pub fn select(self) -> Result<Engine, AneError> {
        match self {
            EngineKind::Cpu => Ok(Engine::Cpu),
            EngineKind::Ane => AneEngine::global().map(|_| Engine::Ane),
            EngineKind::Auto => Ok(Engine::auto()),
        }
    }
}

/// An engine and the target to compile for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selection {
    pub engine: Engine,
    pub target: Target,
    /// Set when the host's architecture was a fallback guess (for the caller to show).
    pub warning: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum SelectError {
    #[error(transparent)]
    Engine(#[from] AneError),
    #[error("target {name}: not cpu, ane or an ANE architecture: {source}")]
    Target { name: String, source: ArchError },
    #[error("detecting the host's ANE architecture: {0}")]
    Host(ArchError),
    #[error(
        "the ANE engine runs fp16 ANE programs: drop target cpu (the default on the ANE engine is \
         the detected host) or use the cpu engine"
    )]
    CpuTargetOnAne,
}

/// Resolves an engine request and an optional target name: `cpu`, `ane` (the detected host) or
/// an ANE architecture or alias (case-insensitive). Without a target: the CPU target on the CPU
/// engine, the detected host on the ANE engine. The ANE engine only runs ANE targets.
pub fn select(kind: EngineKind, target: Option<&str>) -> Result<Selection, SelectError> {
    let engine = kind.select()?;
    let mut warning = None;
    let mut host_arch = || -> Result<AneArch, SelectError> {
        let detected = host::detect().map_err(SelectError::Host)?;
        warning = detected.warning;
        Ok(detected.arch)
    };
    let target = match (target.map(str::trim), engine) {
        (Some(name), _) if name.eq_ignore_ascii_case("cpu") => Target::Cpu,
        (Some(name), _) if name.eq_ignore_ascii_case("ane") => Target::Ane(host_arch()?),
        (Some(name), _) => {
            Target::Ane(AneArch::new(name).map_err(|source| SelectError::Target {
                name: name.to_string(),
                source,
            })?)
        }
        (None, Engine::Ane) => Target::Ane(host_arch()?),
        (None, _) => Target::Cpu,
    };
    if engine == Engine::Ane && !target.is_ane() {
        return Err(SelectError::CpuTargetOnAne);
    }
    Ok(Selection {
        engine,
        target,
        warning,
    })
}

/// The CPU engine's matmul precision named `name` (`"f32"` or `"bf16"`, as
/// [`MatmulPrecision::name`](aneforge_cpu::MatmulPrecision::name) spells them) for programs
/// compiled for `target` and run on `engine`. bf16 acts on fp32 programs on the CPU engine only,
/// so it is refused elsewhere rather than ignored.
pub fn select_matmul(
    name: &str,
    engine: Engine,
    target: &Target,
) -> Result<aneforge_cpu::MatmulPrecision, String> {
    use aneforge_cpu::MatmulPrecision;
    match name.trim().to_ascii_lowercase().as_str() {
        "f32" => Ok(MatmulPrecision::F32),
        "bf16" if engine == Engine::Cpu && *target == Target::Cpu => Ok(MatmulPrecision::Bf16),
        "bf16" => Err(
            "matmul precision bf16 applies to fp32 programs on the CPU engine (engine cpu, \
             target cpu); ANE-target programs are fp16 already"
                .to_string(),
        ),
        other => Err(format!(
            "unknown matmul precision {other:?}: expected f32 or bf16"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_three_spellings() {
        assert_eq!("cpu".parse::<EngineKind>(), Ok(EngineKind::Cpu));
        assert_eq!("ANE".parse::<EngineKind>(), Ok(EngineKind::Ane));
        assert_eq!(" auto ".parse::<EngineKind>(), Ok(EngineKind::Auto));
        let err = "gpu".parse::<EngineKind>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown engine `gpu`: expected cpu, ane or auto"
        );
        for kind in [EngineKind::Cpu, EngineKind::Ane, EngineKind::Auto] {
            assert_eq!(kind.to_string().parse::<EngineKind>(), Ok(kind));
        }
    }

    #[test]
    fn without_a_runtime_ane_fails_and_auto_falls_back_to_the_cpu() {
        if cfg!(target_os = "macos") || std::env::var_os(super::super::ane::LIBRARY_ENV).is_some() {
            // a runtime may be loadable here; this test is about machines without one
            return;
        }
        assert!(matches!(EngineKind::Cpu.select(), Ok(Engine::Cpu)));
        assert!(matches!(EngineKind::Auto.select(), Ok(Engine::Cpu)));
        let err = EngineKind::Ane.select().unwrap_err();
        assert!(
            err.to_string().starts_with(
                "the ANE engine needs macOS on Apple Silicon, or ANEFORGE_E5RT_LIB pointing at \
                 an e5rt implementation (such as this repo's simulator)"
            ),
            "{err}"
        );
    }

    #[test]
    fn select_resolves_targets_the_same_way_for_every_caller() {
        let cpu = select(EngineKind::Cpu, None).unwrap();
        assert_eq!((cpu.engine, cpu.target), (Engine::Cpu, Target::Cpu));
        let h16 = select(EngineKind::Cpu, Some(" H16 ")).unwrap();
        assert_eq!(h16.target, Target::Ane(AneArch::new("h16").unwrap()));
        assert_eq!(
            select(EngineKind::Cpu, Some("cpu")).unwrap().target,
            Target::Cpu
        );
        let err = select(EngineKind::Cpu, Some("h99")).unwrap_err();
        assert!(
            matches!(err, SelectError::Target { ref name, .. } if name == "h99"),
            "{err}"
        );
    }

    #[test]
    fn matmul_precision_bf16_is_for_fp32_programs_on_the_cpu_engine() {
        use aneforge_cpu::MatmulPrecision;
        let h16 = Target::Ane(AneArch::new("h16").unwrap());
        assert_eq!(
            select_matmul("bf16", Engine::Cpu, &Target::Cpu),
            Ok(MatmulPrecision::Bf16)
        );
        assert_eq!(
            select_matmul(" F32 ", Engine::Ane, &h16),
            Ok(MatmulPrecision::F32)
        );
        for (engine, target) in [(Engine::Cpu, &h16), (Engine::Ane, &h16)] {
            let e = select_matmul("bf16", engine, target).unwrap_err();
            assert!(e.contains("bf16") && e.contains("fp16"), "{e}");
        }
        let e = select_matmul("fp8", Engine::Cpu, &Target::Cpu).unwrap_err();
        assert!(e.contains("\"fp8\"") && e.contains("f32 or bf16"), "{e}");
    }
}
