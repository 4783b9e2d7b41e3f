//! Host detection: which ANE the machine running us has.
//!
//! On macOS the CPU brand string (`sysctl machdep.cpu.brand_string`, e.g. `Apple M2 Pro`) names
//! the M-series generation, which maps onto an architecture (`mN` → `h(N+12)`). `ANEFORGE_TARGET`
//! overrides detection. An unrecognised chip falls back to the lowest family, with a warning.

use super::{AneArch, ArchError, Family};

/// The environment variable that overrides host detection.
pub const TARGET_ENV: &str = "ANEFORGE_TARGET";

/// The outcome of host detection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Detected {
    pub arch: AneArch,
    /// Where the answer came from, for messages (`ANEFORGE_TARGET`, the brand string, ...).
    pub source: String,
    /// Set when detection fell back to the lowest family.
    pub warning: Option<String>,
}

/// Maps a CPU brand string to an architecture: `Apple M<n>[ Pro| Max| Ultra]` → `h(n+12)`.
/// Returns `None` for anything else (Intel Macs, unknown or future chips).
pub fn arch_from_brand(brand: &str) -> Option<AneArch> {
    let rest = brand.trim().strip_prefix("Apple M")?;
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    if digits.is_empty() {
        return None;
    }
    let after = &rest[digits.len()..];
    if !(after.is_empty() || after.starts_with(' ')) {
        return None;
    }
    let generation: u32 = digits.parse().ok()?;
    if !(1..=5).contains(&generation) {
        return None;
    }
    AneArch::new(&format!("m{generation}")).ok()
}

/// Resolves the host's architecture from an override and a brand string (either may be absent).
/// An invalid override is an error; an unknown brand falls back to the lowest family.
pub fn resolve(override_value: Option<&str>, brand: Option<&str>) -> Result<Detected, ArchError> {
    if let Some(value) = override_value.filter(|v| !v.trim().is_empty()) {
        let arch = AneArch::new(value).map_err(|e| ArchError::BadOverride {
            variable: TARGET_ENV,
            source: Box::new(e),
        })?;
        return Ok(Detected {
            arch,
            source: format!("{TARGET_ENV}={value}"),
            warning: None,
        });
    }
    if let Some(arch) = brand.and_then(arch_from_brand) {
        return Ok(Detected {
            arch,
            source: format!("CPU brand {:?}", brand.unwrap_or_default()),
            warning: None,
        });
    }
    let lowest = Family::A13.base_arch();
    let seen = brand.map_or_else(|| "no CPU brand string".to_string(), |b| format!("{b:?}"));
    Ok(Detected {
        arch: lowest,
        source: "fallback".into(),
        warning: Some(format!(
            "cannot tell the ANE generation from {seen}; assuming the lowest family ({}, {}). Set {TARGET_ENV} to choose.",
            lowest.name(),
            lowest.family()
        )),
    })
}

/// Detects the host: `ANEFORGE_TARGET`, else the CPU brand string on macOS, else the fallback.
pub fn detect() -> Result<Detected, ArchError> {
    let override_value = std::env::var(TARGET_ENV).ok();
    resolve(override_value.as_deref(), brand_string().as_deref())
}

#[cfg(target_os = "macos")]
fn brand_string() -> Option<String> {
    let out = std::process::Command::new("sysctl")
        .args(["-n", "machdep.cpu.brand_string"])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

#[cfg(not(target_os = "macos"))]
fn brand_string() -> Option<String> {
    None
}
