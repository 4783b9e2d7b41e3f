//! The public entry points: [`compile`] a graph into a [`Model`], then run it.

use crate::engine::{
    self, BufferMut, BufferRef, Carried, Direction, Engine, EngineError, Executable, HostSlice,
    HostTensor, PortError,
};
use crate::graph::{GraphError, HostData, Tensor};
use crate::lower::{Artifact, ParameterMode, PortKind, PortSpec, Target, TiledOutput};
use crate::pipeline::{compile_artifact, CompileError, Compress, ProgramOptions};
use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct CompileOptions {
    pub target: Target,
    pub compress: Compress,
    pub parameters: ParameterMode,
    pub engine: Engine,
    /// Numerical choices the program leaves to the engine it is loaded into.
    pub engine_options: engine::EngineOptions,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Graph(#[from] GraphError),
    #[error(transparent)]
    Compile(#[from] CompileError),
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    ProgramDir(#[from] aneforge_mil::ProgramDirError),
}

/// Compiles `outputs` (named `output_0`, `output_1`, ...) into a loaded model.
pub fn compile(outputs: &[&Tensor], options: &CompileOptions) -> Result<Model, Error> {
    let names: Vec<String> = (0..outputs.len()).map(|i| format!("output_{i}")).collect();
    let named: Vec<(&str, &Tensor)> = names
        .iter()
        .map(|n| n.as_str())
        .zip(outputs.iter().copied())
        .collect();
    compile_named(&named, options)
}

/// Compiles named outputs into a loaded model. The same program (MIL text and weights) compiles
/// in the engine once per process; later compiles reuse the plan.
pub fn compile_named(
    outputs: &[(&str, &Tensor)],
    options: &CompileOptions,
) -> Result<Model, Error> {
    let artifact = compile_artifact(
        outputs,
        &ProgramOptions {
            target: options.target.clone(),
            parameters: options.parameters,
            compress: options.compress,
            weight_ceiling: None,
            ..ProgramOptions::default()
        },
    )?;
    let main = artifact.functions()[0].name.clone();
    Model::load_function_with(
        Arc::new(artifact),
        &main,
        options.engine,
        options.engine_options,
    )
}

/// A compiled program loaded into an engine, with its artifact.
pub struct Model {
    artifact: Arc<Artifact>,
    /// Index of the loaded function in `artifact.functions()`.
    function: usize,
    exec: Box<dyn Executable>,
    provided: HashSet<String>,
    executed: bool,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("hash", &self.artifact.content_hash_hex())
            .field("function", &self.function_name())
            .field("inputs", &self.inputs())
            .field("outputs", &self.outputs())
            .finish()
    }
}

impl Model {
    /// Loads an artifact's default function into `engine`; parameter inputs start at their
    /// initial values.
    pub fn load(artifact: Arc<Artifact>, engine: Engine) -> Result<Model, Error> {
        let main = artifact.functions()[0].name.clone();
        Model::load_function(artifact, &main, engine)
    }

    /// Loads one function of a (multi-function) artifact into `engine`. Functions of one artifact
    /// share its weights blob.
    pub fn load_function(
        artifact: Arc<Artifact>,
        function: &str,
        engine: Engine,
    ) -> Result<Model, Error> {
        Model::load_function_with(artifact, function, engine, engine::EngineOptions::default())
    }

    /// [`Model::load_function`] with engine options.
    pub fn load_function_with(
        artifact: Arc<Artifact>,
        function: &str,
        engine: Engine,
        options: engine::EngineOptions,
    ) -> Result<Model, Error> {
        let exec = engine::load_function_with(&artifact, function, engine, options)?;
        let index = artifact
            .functions()
            .iter()
            .position(|f| f.name == function)
            .unwrap_or(0);
        let mut model = Model {
            artifact,
            function: index,
            exec,
            provided: HashSet::new(),
            executed: false,
        };
        let params: Vec<(String, crate::HostArray)> = model
            .inputs()
            .iter()
            .filter_map(|p| match &p.kind {
                PortKind::Parameter(Some(init)) => Some((p.name.clone(), init.clone())),
                _ => None,
            })
            .collect();
        for (name, init) in params {
            let dequantized;
            let data = match init.data() {
                HostData::F32(v) => HostSlice::F32(v),
                HostData::I32(v) => HostSlice::I32(v),
                HostData::Bool(v) => HostSlice::Bool(v),
                HostData::BlockQuantized(_) | HostData::Deferred(_) => {
                    dequantized = init.data().values_f32()?.unwrap_or_default();
                    HostSlice::F32(&dequantized)
                }
            };
            model.set_input(&name, data)?;
        }
        Ok(model)
    }

    /// Drops the artifact's copies of the parameters' initial values, which this model's engine
    /// has bound (a training step's resident parameters, say), so the values live only in the
    /// engine; their other holders (the graph compiled from) must let go too for the memory to
    /// return. Needs the artifact to itself, since another holder could load a model from it;
    /// returns whether the values were released. The artifact's content hash and program are
    /// unchanged.
    pub fn release_parameter_values(&mut self) -> bool {
        match Arc::get_mut(&mut self.artifact) {
            Some(artifact) => {
                artifact.release_parameter_values();
                true
            }
            None => false,
        }
    }

    /// What this model holds in memory (see [`MemoryReport`]).
    pub fn memory(&self) -> MemoryReport {
        MemoryReport {
            parameter_values: self.artifact.parameter_value_bytes(),
            engine: self.exec.memory(),
        }
    }

    pub fn artifact(&self) -> &Arc<Artifact> {
        &self.artifact
    }

    pub fn program(&self) -> &aneforge_mil::Program {
        self.artifact.program()
    }

    pub fn mil_text(&self) -> &str {
        self.artifact.mil_text()
    }

    pub fn weights(&self) -> &[u8] {
        self.artifact.weights()
    }

    /// Writes the program directory (`model.mil`, `weights/weight.bin`).
    pub fn save(&self, dir: &Path) -> Result<(), Error> {
        Ok(self.artifact.save(dir)?)
    }

    /// The loaded function's name.
    pub fn function_name(&self) -> &str {
        &self.artifact.functions()[self.function].name
    }

    pub fn inputs(&self) -> &[PortSpec] {
        &self.artifact.functions()[self.function].inputs
    }

    pub fn outputs(&self) -> &[PortSpec] {
        &self.artifact.functions()[self.function].outputs
    }

    pub fn input_names(&self) -> Vec<&str> {
        self.inputs().iter().map(|p| p.name.as_str()).collect()
    }

    pub fn output_names(&self) -> Vec<&str> {
        self.outputs().iter().map(|p| p.name.as_str()).collect()
    }

    fn input_port(&self, name: &str) -> Result<&PortSpec, EngineError> {
        find(self.inputs(), Direction::Input, name)
    }

    fn output_port(&self, name: &str) -> Result<&PortSpec, EngineError> {
        find(self.outputs(), Direction::Output, name)
    }

    /// Copies host data into an input; f32 or f16 data feeds float ports (converted to the port's
    /// precision), i32 feeds i32 ports (and i32 inputs an ANE program carries as fp16), bool feeds
    /// bool inputs (whose ports carry 0 and 1 in the program's float type).
    pub fn set_input(&mut self, name: &str, data: HostSlice<'_>) -> Result<(), Error> {
        let port = self.input_port(name)?;
        match carried(port).and_then(|c| c.widen(&data)) {
            Some(as_float) => self.exec.set_input(name, HostSlice::F32(&as_float))?,
            None => self.exec.set_input(name, data)?,
        }
        self.provided.insert(name.to_string());
        Ok(())
    }

    pub fn execute(&mut self) -> Result<(), Error> {
        self.check_ready()?;
        self.exec.execute()?;
        self.executed = true;
        Ok(())
    }

    /// Every input was set, shared or written.
    fn check_ready(&self) -> Result<(), EngineError> {
        match self
            .inputs()
            .iter()
            .find(|p| !self.provided.contains(&p.name))
        {
            Some(p) => Err(EngineError::from(PortError::Unset {
                port: p.name.clone(),
            })),
            None => Ok(()),
        }
    }

    /// [`Model::execute`], returning the magnitude and inf/NaN count of every value each op of
    /// the program wrote, in order (CPU engine; load with `EngineOptions::inspect` to see every
    /// op unfused).
    pub fn execute_inspected(&mut self) -> Result<Vec<aneforge_cpu::ValueStats>, Error> {
        self.check_ready()?;
        let stats = self.exec.execute_inspected()?;
        self.executed = true;
        Ok(stats)
    }

    /// An owned copy of an output: bool outputs as bool, others in the port's dtype.
    pub fn read_output(&self, name: &str) -> Result<HostTensor, Error> {
        let port = self.output_port(name)?;
        match carried(port) {
            Some(c) => Ok(c.narrow(&self.exec.read_output_f32(name)?)),
            None => Ok(self.exec.read_output(name)?),
        }
    }

    /// An output as f32; an output returned in tiles (see [`Model::tiled_output`]) is assembled.
    pub fn read_output_f32(&self, name: &str) -> Result<Vec<f32>, Error> {
        if let Some(tiled) = self.tiled_output(name) {
            return self.assemble(tiled);
        }
        self.output_port(name)?;
        Ok(self.exec.read_output_f32(name)?)
    }

    /// How `name` is returned when the program splits it into tile ports (vocabulary heads wider
    /// than an ANE family's dimension cap).
    pub fn tiled_output(&self, name: &str) -> Option<&TiledOutput> {
        self.artifact.functions()[self.function]
            .tiled
            .iter()
            .find(|t| t.name == name)
    }

    fn assemble(&self, tiled: &TiledOutput) -> Result<Vec<f32>, Error> {
        let width = tiled.shape.last().copied().unwrap_or(1);
        let rows = tiled.shape.iter().product::<usize>() / width.max(1);
        let mut out = vec![0.0f32; rows * width];
        let mut offset = 0;
        for part in &tiled.parts {
            let w = self.output_port(part)?.shape.last().copied().unwrap_or(1);
            let v = self.exec.read_output_f32(part)?;
            for (r, row) in v.chunks_exact(w).take(rows).enumerate() {
                out[r * width + offset..r * width + offset + w].copy_from_slice(row);
            }
            offset += w;
        }
        Ok(out)
    }

    /// The input's buffer for writing in place; counts as setting the input.
    pub fn input_view_mut(&mut self, name: &str) -> Result<BufferMut<'_>, Error> {
        self.input_port(name)?;
        self.provided.insert(name.to_string());
        Ok(self.exec.input_view_mut(name)?)
    }

    pub fn output_view(&self, name: &str) -> Result<BufferRef<'_>, Error> {
        self.output_port(name)?;
        Ok(self.exec.output_view(name)?)
    }

    /// Before the first execute: `input` reads what `output` wrote in the previous execute; its
    /// initial value is whatever was set (a parameter's initial value, or `set_input`).
    pub fn share_buffer(&mut self, output: &str, input: &str) -> Result<(), Error> {
        let share_err = |message: String| {
            EngineError::from(PortError::Share {
                output: output.to_string(),
                input: input.to_string(),
                message,
            })
        };
        if self.executed {
            return Err(share_err("must be called before the first execute".into()).into());
        }
        let (i, o) = (self.input_port(input)?, self.output_port(output)?);
        if i.mil_dtype != o.mil_dtype || i.shape != o.shape {
            return Err(share_err(format!(
                "input is {} {:?} but output is {} {:?}",
                i.mil_dtype, i.shape, o.mil_dtype, o.shape
            ))
            .into());
        }
        self.exec.share_buffer(output, input)?;
        self.provided.insert(input.to_string());
        Ok(())
    }

    /// Moves input `input`'s buffer (resident state, such as a KV cache shared with an output)
    /// to the same input of `to`, a program with that input in the same dtype and shape: `to`
    /// then holds the state without a copy and this model cannot execute until a buffer is moved
    /// back. `false` when the engine cannot move buffers (nothing changed: copy instead).
    pub fn move_state(&mut self, input: &str, to: &mut Model) -> Result<bool, Error> {
        let (a, b) = (self.input_port(input)?, to.input_port(input)?);
        if a.mil_dtype != b.mil_dtype || a.shape != b.shape {
            return Err(EngineError::from(PortError::View {
                port: input.to_string(),
                message: format!(
                    "cannot move state between {} {:?} and {} {:?}",
                    a.mil_dtype, a.shape, b.mil_dtype, b.shape
                ),
            })
            .into());
        }
        let Some(state) = self.exec.take_state(input)? else {
            return Ok(false);
        };
        to.exec.put_state(input, state)?;
        to.provided.insert(input.to_string());
        Ok(true)
    }

    /// Frees input `input`'s buffer (resident state no longer needed, such as a KV cache whose
    /// rows were copied elsewhere), so its memory returns before the model is dropped: this model
    /// cannot execute until a buffer is moved back. `false` when the engine cannot give buffers
    /// up (nothing changed).
    pub fn release_state(&mut self, input: &str) -> Result<bool, Error> {
        self.input_port(input)?;
        Ok(self.exec.take_state(input)?.is_some())
    }

    fn feed_and_execute(&mut self, inputs: &[(&str, HostSlice<'_>)]) -> Result<(), Error> {
        let mut seen = HashSet::new();
        for (name, data) in inputs {
            if !seen.insert(*name) {
                return Err(EngineError::from(PortError::Repeated {
                    port: name.to_string(),
                })
                .into());
            }
            self.set_input(name, *data)?;
        }
        self.execute()
    }

    /// Sets the given inputs, executes, and returns every output in order.
    pub fn run(&mut self, inputs: &[(&str, HostSlice<'_>)]) -> Result<Vec<HostTensor>, Error> {
        self.feed_and_execute(inputs)?;
        let names: Vec<String> = self.outputs().iter().map(|p| p.name.clone()).collect();
        names.iter().map(|n| self.read_output(n)).collect()
    }

    /// As [`Model::run`], with every output converted to f32.
    pub fn run_f32(&mut self, inputs: &[(&str, HostSlice<'_>)]) -> Result<Vec<Vec<f32>>, Error> {
        self.feed_and_execute(inputs)?;
        let names: Vec<String> = self.outputs().iter().map(|p| p.name.clone()).collect();
        names.iter().map(|n| self.read_output_f32(n)).collect()
    }

    /// Frees the engine's resources now.
    pub fn release(self) {
        self.exec.release();
    }
}

/// Bytes a [`Model`] holds, for accounting of large programs such as a training step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryReport {
    /// The parameters' initial values kept by the artifact's ports (shared with the graph the
    /// program was compiled from while that lives).
    pub parameter_values: usize,
    /// The engine's buffers (the CPU engine's; `None` on engines that do not report them).
    pub engine: Option<engine::InstanceMemory>,
}

/// How a port's program dtype carries its graph dtype, when they differ.
fn carried(port: &PortSpec) -> Option<Carried> {
    match port.dtype {
        crate::DType::Bool => Some(Carried::Bool),
        crate::DType::I32 if port.mil_dtype.is_float() => Some(Carried::I32),
        _ => None,
    }
}

fn find<'a>(
    ports: &'a [PortSpec],
    direction: Direction,
    name: &str,
) -> Result<&'a PortSpec, EngineError> {
    ports.iter().find(|p| p.name == name).ok_or_else(|| {
        PortError::unknown(direction, name, ports.iter().map(|p| p.name.as_str())).into()
    })
}
