//! The CPU engine behind [`Executable`]: an `aneforge_cpu::Instance` of a cached plan.

use super::{cache, BufferMut, BufferRef, EngineError, Executable, HostSlice, HostTensor, Port};
use crate::lower::Artifact;

pub struct CpuExecutable {
    instance: aneforge_cpu::Instance,
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

impl CpuExecutable {
    /// Loads the artifact's default function.
    pub fn load(artifact: &Artifact) -> Result<CpuExecutable, EngineError> {
        let main = artifact.functions()[0].name.clone();
        Self::load_function(artifact, &main)
    }

    pub fn load_function(
        artifact: &Artifact,
        function: &str,
    ) -> Result<CpuExecutable, EngineError> {
        Self::load_function_with(artifact, function, super::EngineOptions::default())
    }

    pub fn load_function_with(
        artifact: &Artifact,
        function: &str,
        options: super::EngineOptions,
    ) -> Result<CpuExecutable, EngineError> {
        let plan = cache::cpu_plan(artifact, function, options)?;
        let inputs = ports(plan.inputs());
        let outputs = ports(plan.outputs());
        Ok(CpuExecutable {
            instance: plan.instantiate(),
            inputs,
            outputs,
        })
    }
}

impl Executable for CpuExecutable {
    fn inputs(&self) -> &[Port] {
        &self.inputs
    }

    fn outputs(&self) -> &[Port] {
        &self.outputs
    }

    fn set_input(&mut self, name: &str, data: HostSlice<'_>) -> Result<(), EngineError> {
        Ok(self.instance.set_input(name, data)?)
    }

    fn execute(&mut self) -> Result<(), EngineError> {
        Ok(self.instance.execute()?)
    }

    fn read_output(&self, name: &str) -> Result<HostTensor, EngineError> {
        Ok(self.instance.read_output(name)?)
    }

    fn read_output_f32(&self, name: &str) -> Result<Vec<f32>, EngineError> {
        Ok(self.instance.read_output_f32(name)?)
    }

    fn input_view_mut(&mut self, name: &str) -> Result<BufferMut<'_>, EngineError> {
        Ok(self.instance.input_view_mut(name)?)
    }

    fn output_view(&self, name: &str) -> Result<BufferRef<'_>, EngineError> {
        Ok(self.instance.output_view(name)?)
    }

    fn share_buffer(&mut self, output: &str, input: &str) -> Result<(), EngineError> {
        Ok(self.instance.share_buffer(output, input)?)
    }

    fn execute_inspected(&mut self) -> Result<Vec<aneforge_cpu::ValueStats>, EngineError> {
        Ok(self.instance.execute_inspected()?)
    }
}
