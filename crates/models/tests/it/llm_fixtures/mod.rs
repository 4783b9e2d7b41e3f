//! The LLM fixtures written by tools/fixtures/llm (`expected.safetensors` per model): where they
//! are and how their int32 / float32 tensors are read.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use aneforge::engine::Activations;
use aneforge::{Engine, Target};
use aneforge_models::llm::{Llm, Runner, RunnerOptions};

use safetensors::SafeTensors;

/// `tools/fixtures/llm/out/tiny/<family>`.
pub fn tiny(family: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tools/fixtures/llm/out/tiny")
        .join(family)
}

/// Tensor `name` of `st`, int32 read as token ids.
pub fn ints(st: &SafeTensors, name: &str) -> Vec<u32> {
    st.tensor(name)
        .unwrap_or_else(|e| panic!("fixture tensor {name}: {e}"))
        .data()
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as u32)
        .collect()
}

/// Tensor `name` of `st` as float32.
pub fn floats(st: &SafeTensors, name: &str) -> Vec<f32> {
    st.tensor(name)
        .unwrap_or_else(|e| panic!("fixture tensor {name}: {e}"))
        .data()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// [`ints`] of the safetensors file at `file`.
pub fn file_ints(file: &Path, name: &str) -> Vec<u32> {
    let bytes = std::fs::read(file).unwrap_or_else(|e| panic!("fixture {}: {e}", file.display()));
    ints(&SafeTensors::deserialize(&bytes).unwrap(), name)
}

/// `tools/fixtures/llm/out/tiny_large/<family>`: the realistic-magnitude variants.
pub fn tiny_large(family: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tools/fixtures/llm/out/tiny_large")
        .join(family)
}

/// A runner with one context bucket of 128 positions and prefill chunks of `chunk` tokens.
pub fn small_runner(llm: Arc<Llm>, target: Target, engine: Engine, chunk: usize) -> Runner {
    Runner::new(llm, small_runner_options(target, engine, chunk)).unwrap()
}

/// A 128-token context and one prefill chunk, otherwise the defaults.
pub fn small_runner_options(target: Target, engine: Engine, chunk: usize) -> RunnerOptions {
    RunnerOptions {
        target,
        engine,
        max_context: 128,
        min_context: 128,
        prefill_chunks: vec![chunk],
        ..RunnerOptions::default()
    }
}

/// `tools/fixtures/llm/out/<model>/expected.safetensors`, the fixture of a real model.
pub fn real_model_fixture(model: &str) -> Vec<u8> {
    real_model_file(model, "expected.safetensors")
}

/// `tools/fixtures/llm/out/<model>/<file>`.
pub fn real_model_file(model: &str, file: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tools/fixtures/llm/out")
        .join(model)
        .join(file);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The CPU runner the llama.cpp comparisons use: contexts of 64 to 128 positions, prefill chunks
/// of `chunk` tokens, activations exact or quantized.
pub fn llamacpp_runner(llm: Arc<Llm>, activations: Activations, chunk: usize) -> Runner {
    let opts = RunnerOptions {
        max_context: 128,
        min_context: 64,
        prefill_chunks: vec![chunk],
        activations,
        ..RunnerOptions::default()
    };
    Runner::new(llm, opts).unwrap()
}

/// max |got − want| / max |want|.
pub fn relative_error(got: &[f32], want: &[f32]) -> f64 {
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(0f64, |m, &w| m.max(f64::from(w).abs()));
    let diff = got.iter().zip(want).fold(0f64, |m, (&g, &w)| {
        m.max((f64::from(g) - f64::from(w)).abs())
    });
    diff / scale
}
