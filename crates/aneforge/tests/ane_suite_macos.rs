//! The ANE-engine suite against Apple's real e5rt runtime (the Espresso framework). macOS on Apple
//! Silicon only; not yet run by the aneforge developers, who have no Apple hardware. Results are
//! compared with the CPU engine within fp16 tolerances (the ANE has its own arithmetic).
#![cfg(target_os = "macos")]

mod ane_support;

use ane_support::suite::{self, Agreement};
use aneforge::engine::ane::SYSTEM_LIBRARY;
use aneforge::engine::{AneEngine, AneOptions};
use std::path::Path;
use std::sync::Arc;

const CLOSE: Agreement = Agreement::Close {
    rel: 1e-2,
    abs: 1e-2,
};

fn system_engine(scratch: &Path) -> Arc<AneEngine> {
    AneEngine::open(AneOptions {
        library: Some(SYSTEM_LIBRARY.into()),
        program_cache: Some(scratch.join("cache")),
        ..AneOptions::default()
    })
    .expect("the Espresso framework loads")
}

#[test]
fn fp16_programs_match_the_cpu_engine() {
    let scratch = tempfile::tempdir().unwrap();
    suite::fp16_programs_match_the_cpu_engine(
        &system_engine(scratch.path()),
        scratch.path(),
        CLOSE,
    );
}

#[test]
fn accumulator_state_stays_resident() {
    let scratch = tempfile::tempdir().unwrap();
    suite::accumulator(&system_engine(scratch.path()), scratch.path(), CLOSE);
}

#[test]
fn kv_cache_one_hot_writes() {
    let scratch = tempfile::tempdir().unwrap();
    suite::kv_cache_onehot(&system_engine(scratch.path()), scratch.path(), CLOSE);
}

#[test]
fn kv_cache_slice_update_writes() {
    let scratch = tempfile::tempdir().unwrap();
    suite::kv_cache_slice_update(&system_engine(scratch.path()), scratch.path(), CLOSE);
}

#[test]
fn training_steps_update_a_resident_weight() {
    let scratch = tempfile::tempdir().unwrap();
    suite::training_step(&system_engine(scratch.path()), scratch.path(), CLOSE);
}

#[test]
fn misuse_is_reported() {
    let scratch = tempfile::tempdir().unwrap();
    suite::misuse_is_reported(&system_engine(scratch.path()), scratch.path());
}
