//! The CPU engine behind [`Executable`]: an `aneforge_cpu::Instance` of a cached plan. Its
//! methods are the instance's own; only their errors widen to [`EngineError`].

use super::{
    BufferMut, BufferRef, EngineError, Executable, HostSlice, HostTensor, InstanceMemory, Port,
};
use aneforge_cpu::Instance;

impl Executable for Instance {
    fn inputs(&self) -> &[Port] {
        self.plan().inputs()
    }

    fn outputs(&self) -> &[Port] {
        self.plan().outputs()
    }

    fn set_input(&mut self, name: &str, data: HostSlice<'_>) -> Result<(), EngineError> {
        Ok(Instance::set_input(self, name, data)?)
    }

    fn execute(&mut self) -> Result<(), EngineError> {
        Ok(Instance::execute(self)?)
    }

    fn read_output(&self, name: &str) -> Result<HostTensor, EngineError> {
        Ok(Instance::read_output(self, name)?)
    }

    fn input_view_mut(&mut self, name: &str) -> Result<BufferMut<'_>, EngineError> {
        Ok(Instance::input_view_mut(self, name)?)
    }

    fn output_view(&self, name: &str) -> Result<BufferRef<'_>, EngineError> {
        Ok(Instance::output_view(self, name)?)
    }

    fn share_buffer(&mut self, output: &str, input: &str) -> Result<(), EngineError> {
        Ok(Instance::share_buffer(self, output, input)?)
    }

    fn take_state(
        &mut self,
        input: &str,
    ) -> Result<Option<aneforge_cpu::StateBuffer>, EngineError> {
        Ok(Some(Instance::take_state(self, input)?))
    }

    fn put_state(
        &mut self,
        input: &str,
        state: aneforge_cpu::StateBuffer,
    ) -> Result<(), EngineError> {
        Instance::put_state(self, input, state).map_err(|b| b.0.into())
    }

    fn memory(&self) -> Option<InstanceMemory> {
        Some(Instance::memory(self))
    }

    fn execute_inspected(&mut self) -> Result<Vec<aneforge_cpu::ValueStats>, EngineError> {
        Ok(Instance::execute_inspected(self)?)
    }

    fn execute_profiled(&mut self) -> Result<Vec<aneforge_cpu::KernelTime>, EngineError> {
        Ok(Instance::execute_profiled(self)?)
    }
}
