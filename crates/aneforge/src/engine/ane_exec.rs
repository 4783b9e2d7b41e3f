//! The ANE engine behind [`Executable`]: an [`AneProgram`] of an artifact's program directory.

use super::ane::{AneEngine, AneError, AneProgram};
use super::{BufferMut, BufferRef, EngineError, Executable, HostSlice, HostTensor, Port};
use crate::lower::Artifact;
use std::path::PathBuf;
use std::sync::Arc;

pub struct AneExecutable {
    program: AneProgram,
    inputs: Vec<Port>,
    outputs: Vec<Port>,
}

fn ports(infos: &[aneforge_cpu::PortInfo]) -> Vec<Port> {
    infos
        .iter()
        .map(|p| Port {
            name: p.name.clone(),
            dtype: p.dtype,
            shape: p.shape.clone(),
        })
        .collect()
}

impl AneExecutable {
    /// Saves the artifact's program directory in `engine`'s program cache (named by the
    /// artifact's content hash) and loads it.
    pub fn load(
        engine: &Arc<AneEngine>,
        artifact: &Artifact,
    ) -> Result<AneExecutable, EngineError> {
        let dir = artifact.program_dir().map_err(|e| AneError::Program {
            path: PathBuf::from(format!("artifact {}", artifact.content_hash_hex())),
            message: e.to_string(),
        })?;
        let program = engine.load_keyed(&dir, artifact.content_hash())?;
        Ok(AneExecutable {
            inputs: ports(program.inputs()),
            outputs: ports(program.outputs()),
            program,
        })
    }

    pub fn program(&self) -> &AneProgram {
        &self.program
    }
}

impl Executable for AneExecutable {
    fn inputs(&self) -> &[Port] {
        &self.inputs
    }

    fn outputs(&self) -> &[Port] {
        &self.outputs
    }

    fn set_input(&mut self, name: &str, data: HostSlice<'_>) -> Result<(), EngineError> {
        Ok(self.program.set_input(name, data)?)
    }

    fn execute(&mut self) -> Result<(), EngineError> {
        Ok(self.program.execute()?)
    }

    fn read_output(&self, name: &str) -> Result<HostTensor, EngineError> {
        Ok(self.program.read_output(name)?)
    }

    fn read_output_f32(&self, name: &str) -> Result<Vec<f32>, EngineError> {
        Ok(self.program.read_output_f32(name)?)
    }

    fn input_view_mut(&mut self, name: &str) -> Result<BufferMut<'_>, EngineError> {
        Ok(self.program.input_view_mut(name)?)
    }

    fn output_view(&self, name: &str) -> Result<BufferRef<'_>, EngineError> {
        Ok(self.program.output_view(name)?)
    }

    fn share_buffer(&mut self, output: &str, input: &str) -> Result<(), EngineError> {
        Ok(self.program.share_buffer(output, input)?)
    }
}
