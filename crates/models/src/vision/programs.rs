//! Compiled vision programs, one per shape key, built on first use and kept; and the batching
//! rule every vision runner shares.

use std::sync::Mutex;

use aneforge::engine::{Executable, HostSlice};
use aneforge::{Compress, Engine, ParameterMode, ProgramOptions, Target, Tensor};

use super::VisionError;

/// How vision programs are compiled and run.
pub struct Compiler {
    pub target: Target,
    pub engine: Engine,
    pub compress: Compress,
}

impl Compiler {
    /// `outputs` (name, graph) lowered for the target and loaded on the engine.
    pub fn load(&self, outputs: &[(&str, &Tensor)]) -> Result<Box<dyn Executable>, VisionError> {
        let program = |e: aneforge::Error| VisionError::Program(e);
        let artifact = aneforge::compile_artifact(
            outputs,
            &ProgramOptions {
                target: self.target.clone(),
                parameters: ParameterMode::Constant,
                compress: self.compress,
                weight_ceiling: None,
            },
        )
        .map_err(|e| program(e.into()))?;
        aneforge::engine::load(&artifact, self.engine).map_err(|e| program(e.into()))
    }
}

/// Programs by key, compiled on first use.
pub struct Programs<K> {
    programs: Mutex<Vec<(K, Box<dyn Executable>)>>,
}

impl<K: PartialEq> Default for Programs<K> {
    fn default() -> Self {
        Programs {
            programs: Mutex::new(Vec::new()),
        }
    }
}

impl<K: PartialEq> Programs<K> {
    /// Runs the program of `key` (compiled by `build` when new): sets the f32 `inputs`,
    /// executes, and reads `output`.
    pub fn run(
        &self,
        key: K,
        build: impl FnOnce() -> Result<Box<dyn Executable>, VisionError>,
        inputs: &[(&str, &[f32])],
        output: &str,
    ) -> Result<Vec<f32>, VisionError> {
        let mut programs = self
            .programs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let at = match programs.iter().position(|(k, _)| *k == key) {
            Some(at) => at,
            None => {
                let exec = build()?;
                programs.push((key, exec));
                programs.len() - 1
            }
        };
        let exec = &mut programs[at].1;
        let engine = |e: aneforge::engine::EngineError| VisionError::Program(e.into());
        for (name, data) in inputs {
            exec.set_input(name, HostSlice::F32(data)).map_err(engine)?;
        }
        exec.execute().map_err(engine)?;
        exec.read_output_f32(output).map_err(engine)
    }
}

/// The program batch for a chunk of `len` inputs under `batch_size`: full chunks run as they
/// are; a short final chunk rounds up to a power of two (at most the batch size) and is padded.
pub fn program_batch(len: usize, batch_size: usize) -> usize {
    if len == batch_size {
        len
    } else {
        len.next_power_of_two().min(batch_size)
    }
}

/// Runs `inputs` (each `[3, height, width]`) through a batched program, `batch_size` at a time:
/// each chunk padded to its [`program_batch`] is handed to `run(batch, feed)`, whose output rows
/// (one per batch entry) are returned in input order. `progress` is told each chunk's length.
pub fn run_batched(
    inputs: &[Vec<f32>],
    (height, width): (usize, usize),
    batch_size: usize,
    progress: &mut dyn FnMut(usize),
    mut run: impl FnMut(usize, &[f32]) -> Result<Vec<f32>, VisionError>,
) -> Result<Vec<Vec<f32>>, VisionError> {
    let per = 3 * height * width;
    for (i, x) in inputs.iter().enumerate() {
        if x.len() != per {
            return Err(VisionError::Unsupported(format!(
                "input {i} holds {} values, expected 3x{height}x{width} = {per}",
                x.len()
            )));
        }
    }
    let mut out = Vec::with_capacity(inputs.len());
    for chunk in inputs.chunks(batch_size) {
        let batch = program_batch(chunk.len(), batch_size);
        let mut feed = vec![0f32; batch * per];
        for (i, x) in chunk.iter().enumerate() {
            feed[i * per..(i + 1) * per].copy_from_slice(x);
        }
        let rows = run(batch, &feed)?;
        let width = rows.len() / batch;
        out.extend(rows.chunks(width).take(chunk.len()).map(<[f32]>::to_vec));
        progress(chunk.len());
    }
    Ok(out)
}
