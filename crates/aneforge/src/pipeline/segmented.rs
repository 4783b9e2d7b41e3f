//! A compiled graph: one or more programs ("segments") plus what the host does between and after
//! them — tensors passed from one segment's outputs to a later one's inputs, and wide outputs
//! concatenated from tiles — and the report of the compile.

use super::{CompileError, CompileReport};
use crate::arch::{estimate, AneArch, Estimate};
use crate::lower::{Artifact, Target};
use std::collections::HashMap;

/// Where a segment input comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A fed input (or parameter) of the graph, by name.
    Input(String),
    /// An output port of an earlier segment.
    Segment { segment: usize, port: String },
}

/// One program and where each of its inputs comes from.
#[derive(Debug)]
pub struct Segment {
    pub artifact: Artifact,
    /// `(input port, source)` for every input port of the program.
    pub feeds: Vec<(String, Source)>,
}

/// A graph output as the host assembles it: the concatenation, along `axis`, of output ports
/// (one port unless the output was tiled).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostOutput {
    pub name: String,
    pub shape: Vec<usize>,
    pub axis: usize,
    /// `(segment, port)` pieces in order.
    pub parts: Vec<(usize, String)>,
}

/// The result of the compile pipeline.
#[derive(Debug)]
pub struct Compiled {
    pub target: Target,
    pub segments: Vec<Segment>,
    /// The graph outputs of the default function, as the host assembles them.
    pub outputs: Vec<HostOutput>,
    pub report: CompileReport,
}

impl Compiled {
    /// The ANE architecture the programs are for (`None` on the CPU target).
    pub fn arch(&self) -> Option<AneArch> {
        match &self.target {
            Target::Ane(arch) => Some(*arch),
            Target::Cpu => None,
        }
    }

    /// The cost estimate of each segment (one dispatch each) on an ANE target; see
    /// [`crate::arch::estimate`]. Empty on the CPU target.
    pub fn estimates(&self) -> Vec<Estimate> {
        let Some(arch) = self.arch() else {
            return Vec::new();
        };
        self.segments
            .iter()
            .map(|s| estimate(s.artifact.program(), arch))
            .collect()
    }

    /// Estimated microseconds for one pass through every segment.
    pub fn estimate_us(&self) -> f64 {
        self.estimates().iter().map(|e| e.total_us).sum()
    }

    /// Fp16 weight bytes per segment, as stored (compressed weights at their stored size).
    pub fn segment_weight_bytes(&self) -> Vec<u64> {
        self.segments
            .iter()
            .map(|s| s.artifact.weights().len() as u64)
            .collect()
    }

    /// Runs every segment on the CPU engine (which executes the same fp16 programs the ANE
    /// would), passing tensors between segments and concatenating tiled outputs on the host.
    /// Feeds are f32 for every port; integer and bool ports take their values as f32.
    /// The one program, when the graph was not segmented.
    pub fn into_artifact(self) -> Result<Artifact, CompileError> {
        let count = self.segments.len();
        match <[Segment; 1]>::try_from(self.segments) {
            Ok([segment]) => Ok(segment.artifact),
            Err(_) => Err(CompileError::Segmented { count }),
        }
    }

    pub fn run_cpu(
        &self,
        feeds: &HashMap<String, Vec<f32>>,
    ) -> Result<HashMap<String, Vec<f32>>, CompileError> {
        let fail = |segment: usize, message: String| CompileError::Run { segment, message };
        let mut produced: HashMap<(usize, String), Vec<f32>> = HashMap::new();
        for (index, segment) in self.segments.iter().enumerate() {
            let a = &segment.artifact;
            let blobs = a.blob_store().map_err(|e| fail(index, e.to_string()))?;
            let plan = aneforge_cpu::compile(
                a.program(),
                "main",
                &blobs,
                &aneforge_cpu::CompileOptions::default(),
            )
            .map_err(|e| fail(index, e.to_string()))?;
            let mut inst = plan.instantiate();
            for (port, source) in &segment.feeds {
                let data = match source {
                    Source::Input(name) => feeds
                        .get(name)
                        .ok_or_else(|| fail(index, format!("no value fed for input '{name}'")))?,
                    Source::Segment { segment, port } => {
                        produced.get(&(*segment, port.clone())).ok_or_else(|| {
                            fail(index, format!("segment {segment} did not produce '{port}'"))
                        })?
                    }
                };
                inst.set_input(port, aneforge_cpu::HostSlice::F32(data))
                    .map_err(|e| fail(index, e.to_string()))?;
            }
            inst.execute().map_err(|e| fail(index, e.to_string()))?;
            for p in a.outputs() {
                let v = inst
                    .read_output_f32(&p.name)
                    .map_err(|e| fail(index, e.to_string()))?;
                produced.insert((index, p.name.clone()), v);
            }
        }
        let mut out = HashMap::new();
        for h in &self.outputs {
            let outer: usize = h.shape[..h.axis].iter().product();
            let mut pieces = Vec::with_capacity(h.parts.len());
            for (segment, port) in &h.parts {
                let v = produced
                    .get(&(*segment, port.clone()))
                    .ok_or_else(|| fail(*segment, format!("output port '{port}' missing")))?;
                pieces.push(v);
            }
            let mut data = Vec::with_capacity(h.shape.iter().product());
            for o in 0..outer {
                for v in &pieces {
                    let row = v.len() / outer.max(1);
                    data.extend_from_slice(&v[o * row..(o + 1) * row]);
                }
            }
            out.insert(h.name.clone(), data);
        }
        Ok(out)
    }
}
