//! What runs a planned function: the CPU engine (`aneforge-cpu`) behind two small traits.

use crate::program::PortSpec;
use std::sync::Arc;

pub type BlobStore = std::collections::HashMap<String, aneforge_mil::BlobFile>;

/// A function planned once per compiled program; shared by every operation created from it.
pub trait Plan: Send + Sync {
    fn instantiate(&self) -> Box<dyn Executable>;
}

/// One operation's private copy of a plan: dense port bytes in, dense port bytes out.
pub trait Executable: Send {
    fn write_input(&mut self, index: usize, bytes: &[u8]) -> Result<(), String>;
    fn execute(&mut self) -> Result<(), String>;
    fn read_output(&self, index: usize, dst: &mut [u8]) -> Result<(), String>;
}

/// Plans `function` of `program`. Until the CPU engine lands on main the plan cannot execute:
/// operations can be built, bound and encoded, and `execute_sync` reports that execution is
/// unavailable.
pub fn plan(
    _program: &aneforge_mil::Program,
    _function: &str,
    _blobs: &BlobStore,
    _inputs: &[PortSpec],
    _outputs: &[PortSpec],
) -> Result<Arc<dyn Plan>, String> {
    Ok(Arc::new(NoExecution))
}

struct NoExecution;

impl Plan for NoExecution {
    fn instantiate(&self) -> Box<dyn Executable> {
        Box::new(NoExecution)
    }
}

impl Executable for NoExecution {
    fn write_input(&mut self, _: usize, _: &[u8]) -> Result<(), String> {
        Ok(())
    }

    fn execute(&mut self) -> Result<(), String> {
        Err("this build of the simulator has no CPU engine to execute with".to_string())
    }

    fn read_output(&self, _: usize, _: &mut [u8]) -> Result<(), String> {
        Ok(())
    }
}
