//! What runs a planned function: the CPU engine (`aneforge-cpu`) behind two small traits, so the
//! simulator's handle layer deals in dense port bytes only.

use crate::program::PortSpec;
use aneforge_cpu::{BufferMut, BufferRef, CompileOptions, Instance};
use std::sync::Arc;

pub use aneforge_cpu::BlobStore;

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

/// Plans `function` of `program` on the CPU engine and checks that its ports are the ones the
/// program declares.
pub fn plan(
    program: &aneforge_mil::Program,
    function: &str,
    blobs: &BlobStore,
    inputs: &[PortSpec],
    outputs: &[PortSpec],
) -> Result<Arc<dyn Plan>, String> {
    let plan = aneforge_cpu::compile(program, function, blobs, &CompileOptions::default())
        .map_err(|e| format!("function `{function}`: {e}"))?;
    for (kind, planned, declared) in [
        ("input", plan.inputs(), inputs),
        ("output", plan.outputs(), outputs),
    ] {
        let same = planned.len() == declared.len()
            && planned
                .iter()
                .zip(declared)
                .all(|(p, d)| p.name == d.name && p.dtype == d.dtype && p.shape == d.shape);
        if !same {
            return Err(format!(
                "function `{function}`: the CPU engine planned {kind}s {:?}, the program declares {:?}",
                planned
                    .iter()
                    .map(|p| (&p.name, p.dtype, &p.shape))
                    .collect::<Vec<_>>(),
                declared
                    .iter()
                    .map(|p| (&p.name, p.dtype, &p.shape))
                    .collect::<Vec<_>>()
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

impl Plan for CpuPlan {
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

fn copy_in<T: bytemuck::Pod>(dst: &mut [T], src: &[u8]) -> Result<(), String> {
    let dst: &mut [u8] = bytemuck::cast_slice_mut(dst);
    if dst.len() != src.len() {
        return Err(format!("port holds {} bytes, got {}", dst.len(), src.len()));
    }
    dst.copy_from_slice(src);
    Ok(())
}

fn copy_out<T: bytemuck::Pod>(src: &[T], dst: &mut [u8]) -> Result<(), String> {
    let src: &[u8] = bytemuck::cast_slice(src);
    if dst.len() != src.len() {
        return Err(format!(
            "port holds {} bytes, asked for {}",
            src.len(),
            dst.len()
        ));
    }
    dst.copy_from_slice(src);
    Ok(())
}

impl Executable for CpuExecutable {
    fn write_input(&mut self, index: usize, bytes: &[u8]) -> Result<(), String> {
        let port = name(&self.inputs, index)?;
        let view = self
            .instance
            .input_view_mut(port)
            .map_err(|e| e.to_string())?;
        match view {
            BufferMut::F32(v) => copy_in(v, bytes),
            BufferMut::F16(v) => copy_in(v, bytes),
            BufferMut::I32(v) => copy_in(v, bytes),
            BufferMut::I8(v) => copy_in(v, bytes),
            BufferMut::U8(v) => copy_in(v, bytes),
            BufferMut::Bool(v) => {
                if v.len() != bytes.len() {
                    return Err(format!("port holds {} bytes, got {}", v.len(), bytes.len()));
                }
                for (d, &b) in v.iter_mut().zip(bytes) {
                    *d = b != 0;
                }
                Ok(())
            }
        }
        .map_err(|e| format!("input `{port}`: {e}"))
    }

    fn execute(&mut self) -> Result<(), String> {
        self.instance.execute().map_err(|e| e.to_string())
    }

    fn read_output(&self, index: usize, dst: &mut [u8]) -> Result<(), String> {
        let port = name(&self.outputs, index)?;
        let view = self.instance.output_view(port).map_err(|e| e.to_string())?;
        match view {
            BufferRef::F32(v) => copy_out(v, dst),
            BufferRef::F16(v) => copy_out(v, dst),
            BufferRef::I32(v) => copy_out(v, dst),
            BufferRef::I8(v) => copy_out(v, dst),
            BufferRef::U8(v) => copy_out(v, dst),
            BufferRef::Bool(v) => {
                if v.len() != dst.len() {
                    return Err(format!(
                        "port holds {} bytes, asked for {}",
                        v.len(),
                        dst.len()
                    ));
                }
                for (d, &b) in dst.iter_mut().zip(v) {
                    *d = u8::from(b);
                }
                Ok(())
            }
        }
        .map_err(|e| format!("output `{port}`: {e}"))
    }
}
