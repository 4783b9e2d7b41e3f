//! Compiled vision programs, one per shape key, built on first use and kept; and the batching
//! rule every vision runner shares.

use std::sync::Mutex;

use aneforge::engine::{Executable, HostSlice};
use aneforge::pipeline::CompressionReport;
use aneforge::{Compress, Engine, ParameterMode, ProgramOptions, Target, Tensor};

use super::VisionError;

/// How vision programs are compiled and run.
pub struct Compiler {
    pub target: Target,
    pub engine: Engine,
    pub compress: Compress,
    pub matmul: aneforge::engine::MatmulPrecision,
}

impl Compiler {
    /// `outputs` (name, graph) lowered for the target and loaded on the engine, with what the
    /// compression stage did to each large weight (empty when `compress` is `None`).
    pub fn load(&self, outputs: &[(&str, &Tensor)]) -> Result<Built, VisionError> {
        let program = |e: aneforge::Error| VisionError::Program(e);
        let compiled = aneforge::compile_program(
            &[aneforge::FunctionSpec {
                name: "main",
                outputs,
            }],
            &ProgramOptions {
                target: self.target.clone(),
                parameters: ParameterMode::Constant,
                compress: self.compress,
                weight_ceiling: None,
                ..ProgramOptions::default()
            },
        )
        .map_err(|e| program(e.into()))?;
        let compression = compiled.report.compression.clone();
        let artifact = compiled.into_artifact().map_err(|e| program(e.into()))?;
        let main = artifact.functions()[0].name.clone();
        let engine_options = aneforge::engine::EngineOptions {
            matmul: self.matmul,
            ..Default::default()
        };
        let exec =
            aneforge::engine::load_function_with(&artifact, &main, self.engine, engine_options)
                .map_err(|e| program(e.into()))?;
        Ok((exec, compression))
    }
}

/// A loaded program and its compression report.
pub type Built = (Box<dyn Executable>, CompressionReport);

/// A compiled program under its key, with its compression report.
type Entry<K> = (K, Box<dyn Executable>, CompressionReport);

/// Programs by key, compiled on first use.
pub struct Programs<K> {
    programs: Mutex<Vec<Entry<K>>>,
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
        build: impl FnOnce() -> Result<Built, VisionError>,
        inputs: &[(&str, &[f32])],
        output: &str,
    ) -> Result<Vec<f32>, VisionError> {
        let mut programs = self.lock();
        let at = match programs.iter().position(|(k, _, _)| *k == key) {
            Some(at) => at,
            None => {
                let (exec, report) = build()?;
                programs.push((key, exec, report));
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

    /// The compression report of each program compiled so far, in compile order.
    pub fn compression(&self) -> Vec<CompressionReport> {
        self.lock().iter().map(|(_, _, r)| r.clone()).collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Entry<K>>> {
        self.programs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
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
