//! What runs a planned function: the CPU engine (`aneforge-cpu`) behind two small traits, so the
//! simulator's handle layer deals in dense port bytes only.

use aneforge_cpu::{CompileOptions, Instance, Port};
use std::sync::Arc;

pub use aneforge_cpu::BlobStore;

/// A function planned once per compiled program; shared by every operation created from it.
pub trait Executor: Send + Sync {
    fn instantiate(&self) -> Box<dyn Executable>;
}

/// One operation's private copy of a plan: dense port bytes in, dense port bytes out.
pub trait Executable: Send {
    fn write_input(&mut self, index: usize, bytes: &[u8]) -> Result<(), String>;
    fn execute(&mut self) -> Result<(), String>;
    fn read_output(&self, index: usize, dst: &mut [u8]) -> Result<(), String>;
}

/// Plans `function` of `program` on the CPU engine and checks that its ports are the ones the
/// program declares.
pub fn plan(
    program: &aneforge_mil::Program,
    function: &str,
    blobs: &BlobStore,
    inputs: &[Port],
    outputs: &[Port],
) -> Result<Arc<dyn Executor>, String> {
    let plan = aneforge_cpu::compile(program, function, blobs, &CompileOptions::default())
        .map_err(|e| format!("function `{function}`: {e}"))?;
    for (kind, planned, declared) in [
        ("input", plan.inputs(), inputs),
        ("output", plan.outputs(), outputs),
    ] {
        if planned != declared {
            return Err(format!(
                "function `{function}`: the CPU engine planned {kind}s {planned:?}, the program \
                 declares {declared:?}"
            ));
        }
    }
    Ok(Arc::new(CpuPlan {
        inputs: inputs.iter().map(|p| p.name.clone()).collect(),
        outputs: outputs.iter().map(|p| p.name.clone()).collect(),
        plan,
    }))
}

struct CpuPlan {
    plan: Arc<aneforge_cpu::Plan>,
    inputs: Vec<String>,
    outputs: Vec<String>,
}

impl Executor for CpuPlan {
    fn instantiate(&self) -> Box<dyn Executable> {
        Box::new(CpuExecutable {
            instance: self.plan.instantiate(),
            inputs: self.inputs.clone(),
            outputs: self.outputs.clone(),
        })
    }
}

struct CpuExecutable {
    instance: Instance,
    inputs: Vec<String>,
    outputs: Vec<String>,
}

fn name(names: &[String], index: usize) -> Result<&str, String> {
    names
        .get(index)
        .map(String::as_str)
        .ok_or_else(|| format!("no port {index}"))
}

impl Executable for CpuExecutable {
    fn write_input(&mut self, index: usize, bytes: &[u8]) -> Result<(), String> {
        let port = name(&self.inputs, index)?;
        self.instance
            .write_input_bytes(port, bytes)
            .map_err(|e| format!("input `{port}`: {e}"))
    }

    fn execute(&mut self) -> Result<(), String> {
        self.instance.execute().map_err(|e| e.to_string())
    }

    fn read_output(&self, index: usize, dst: &mut [u8]) -> Result<(), String> {
        let port = name(&self.outputs, index)?;
        let src = self
            .instance
            .output_bytes(port)
            .map_err(|e| format!("output `{port}`: {e}"))?;
        if src.len() != dst.len() {
            return Err(format!(
                "output `{port}`: port holds {} bytes, asked for {}",
                src.len(),
                dst.len()
            ));
        }
        dst.copy_from_slice(src);
        Ok(())
    }
}
