//! Choosing an engine: `--engine cpu|ane|auto`.

use super::ane::{AneEngine, AneError};
use super::Engine;

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
}
