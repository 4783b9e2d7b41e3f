//! Where commands keep what they write when no `--output` is given: `$XDG_DATA_HOME/aneforge`,
//! else `~/.local/share/aneforge`; never the current directory.

use std::path::PathBuf;

use anyhow::bail;

pub fn dir() -> anyhow::Result<PathBuf> {
    let var = |key: &str| std::env::var_os(key).filter(|v| !v.is_empty());
    if let Some(data) = var("XDG_DATA_HOME").map(PathBuf::from) {
        if data.is_absolute() {
            return Ok(data.join("aneforge"));
        }
    }
    match var("HOME") {
        Some(home) => Ok(PathBuf::from(home).join(".local/share/aneforge")),
        None => bail!("neither XDG_DATA_HOME nor HOME is set: give --output DIR"),
    }
}
