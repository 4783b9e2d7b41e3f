//! How the CLI tests run the binary: with the variables that change its behaviour (backtraces,
//! target, engine library, thread count) removed from the caller's environment, and the
//! repository's fixtures by path.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::{Command, Output};

/// The `aneforge` binary in a clean environment.
pub fn command() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_aneforge"));
    for var in [
        "RUST_BACKTRACE",
        "ANEFORGE_TARGET",
        "ANEFORGE_E5RT_LIB",
        "RAYON_NUM_THREADS",
    ] {
        c.env_remove(var);
    }
    c
}

/// Runs `aneforge args…` with extra environment variables.
pub fn run_with<K: AsRef<OsStr>, V: AsRef<OsStr>>(args: &[&str], env: &[(K, V)]) -> Output {
    let mut c = command();
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// Runs `aneforge args…`.
pub fn run(args: &[&str]) -> Output {
    run_with::<&str, &str>(args, &[])
}

/// A path inside the repository, as a string.
pub fn repo(path: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
        .display()
        .to_string()
}
