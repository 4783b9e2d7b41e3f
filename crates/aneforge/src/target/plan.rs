//! An ANE compile plan: one or more programs ("segments") plus what the host does between and
//! after them — tensors passed from one segment's outputs to a later one's inputs, and wide
//! outputs concatenated from tiles.
//!
//! Segments exist because a program's weights must stay under a ceiling (about 1.6 GB of fp16):
//! a graph whose constants exceed it is cut, in topological order, into consecutive pieces that
//! each stay under it; activations crossing a cut become outputs of the earlier piece and
//! inputs of the later one.

use super::compress::{compress, CompressionReport};
use super::wide::tile_output;
use super::{AneArch, Finding, FindingKind, Limits, Report, TargetError};
use crate::graph::{input, HostData, NodeId, Op, Tensor};
use crate::lower::{lower, Artifact, Compress, LowerError, ParameterMode, Target};
use std::collections::{HashMap, HashSet};

/// Weights per program, in bytes of fp16: the default segment ceiling.
pub const WEIGHT_CEILING: u64 = 1_600_000_000;

#[derive(Clone, Debug)]
pub struct PlanOptions {
    pub compress: Compress,
    pub parameters: ParameterMode,
    /// Largest fp16 weight bytes per segment.
    pub weight_ceiling: u64,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            compress: Compress::None,
            parameters: ParameterMode::Input,
            weight_ceiling: WEIGHT_CEILING,
        }
    }
}

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

#[derive(Debug)]
pub struct Plan {
    pub arch: AneArch,
    pub segments: Vec<Segment>,
    pub outputs: Vec<HostOutput>,
    /// The preflight report of the whole graph (legal when a plan exists).
    pub report: Report,
    pub compression: CompressionReport,
}

/// Wide outputs tiled: the outputs the programs produce and how the host reassembles them.
pub(crate) struct Prepared {
    pub outputs: Vec<(String, Tensor)>,
    pub host: Vec<HostOutput>,
    pub findings: Vec<Finding>,
}

pub(crate) fn prepare(outputs: &[(&str, &Tensor)], arch: AneArch) -> Result<Prepared, LowerError> {
    let cap = Limits::of(arch.family()).max_spatial;
    let mut prepared = Prepared {
        outputs: Vec::new(),
        host: Vec::new(),
        findings: Vec::new(),
    };
    for (name, t) in outputs {
        let tiles = tile_output(t, cap).map_err(|source| LowerError::Rewrite {
            op: t.op().name(),
            source,
        })?;
        let parts: Vec<(String, Tensor)> = match tiles {
            Some(parts) => {
                prepared.findings.push(Finding {
                    node: format!("(output '{name}')"),
                    op: t.op().name().to_string(),
                    shape: t.shape().to_vec(),
                    kind: FindingKind::Rewritten {
                        rewrite: format!(
                            "wide matmul → {} tiles of ≤ {cap} columns, separate ports, concatenated on the host",
                            parts.len()
                        ),
                    },
                });
                parts
                    .into_iter()
                    .enumerate()
                    .map(|(k, p)| (format!("{name}__{k}"), p))
                    .collect()
            }
            None => vec![(name.to_string(), (*t).clone())],
        };
        prepared.host.push(HostOutput {
            name: name.to_string(),
            shape: t.shape().to_vec(),
            axis: t.rank().saturating_sub(1),
            parts: parts.iter().map(|(n, _)| (0, n.clone())).collect(),
        });
        prepared.outputs.extend(parts);
    }
    Ok(prepared)
}

/// Compiles a graph for an ANE architecture into a plan of one or more programs.
pub fn compile_ane(
    outputs: &[(&str, &Tensor)],
    arch: AneArch,
    options: &PlanOptions,
) -> Result<Plan, LowerError> {
    let prepared = prepare(outputs, arch)?;
    let named: Vec<(&str, &Tensor)> = prepared
        .outputs
        .iter()
        .map(|(n, t)| (n.as_str(), t))
        .collect();
    let mut report = super::preflight::preflight_prepared(&prepared, arch, options.parameters)?;
    if !report.is_legal() {
        return Err(TargetError::NotLegal {
            report: Box::new(report),
        }
        .into());
    }
    let roots: Vec<Tensor> = named.iter().map(|(_, t)| (*t).clone()).collect();
    let canonical = crate::lower::canonicalize::canonicalize(&roots, options.parameters)?;
    let canonical_named: Vec<(&str, &Tensor)> = named
        .iter()
        .map(|(n, _)| *n)
        .zip(canonical.iter())
        .collect();
    let pieces = split(&canonical_named, options.weight_ceiling, &mut report)?;
    let mut segments = Vec::with_capacity(pieces.len());
    let mut compression = CompressionReport::default();
    let mut produced: HashMap<String, usize> = HashMap::new();
    for (index, piece) in pieces.iter().enumerate() {
        let refs: Vec<(&str, &Tensor)> = piece.iter().map(|(n, t)| (n.as_str(), t)).collect();
        let artifact = lower(&refs, &Target::Ane(arch), options.parameters)?;
        let (artifact, c) = compress(artifact, options.compress)?;
        compression.weights.extend(c.weights);
        let feeds = artifact
            .inputs()
            .iter()
            .map(|p| {
                let source = match produced.get(&p.name) {
                    Some(&segment) => Source::Segment {
                        segment,
                        port: p.name.clone(),
                    },
                    None => Source::Input(p.name.clone()),
                };
                (p.name.clone(), source)
            })
            .collect();
        for p in artifact.outputs() {
            produced.insert(p.name.clone(), index);
        }
        segments.push(Segment { artifact, feeds });
    }
    let mut host = prepared.host;
    for h in &mut host {
        for (segment, port) in &mut h.parts {
            *segment = produced.get(port.as_str()).copied().unwrap_or(0);
        }
    }
    Ok(Plan {
        arch,
        segments,
        outputs: host,
        report,
        compression,
    })
}

fn weight_bytes(t: &Tensor) -> u64 {
    match t.op() {
        Op::Constant(c)
            if matches!(c.data(), HostData::F32(_))
                && c.len() > crate::lower::INLINE_MAX_ELEMENTS =>
        {
            (c.len() * 2) as u64
        }
        _ => 0,
    }
}

/// Cuts the graph into consecutive pieces whose weights stay under `ceiling`; each piece is
/// `(output name, tensor)` pairs over its own inputs. Crossing values are named `seg<p>_v<k>`.
fn split(
    outputs: &[(&str, &Tensor)],
    ceiling: u64,
    report: &mut Report,
) -> Result<Vec<Vec<(String, Tensor)>>, LowerError> {
    let roots: Vec<Tensor> = outputs.iter().map(|(_, t)| (*t).clone()).collect();
    let order = crate::lower::topo_order(&roots);
    let total: u64 = order.iter().map(weight_bytes).sum();
    if total <= ceiling {
        return Ok(vec![outputs
            .iter()
            .map(|(n, t)| (n.to_string(), (*t).clone()))
            .collect()]);
    }
    let mut seg: HashMap<NodeId, usize> = HashMap::new();
    let mut current = 0usize;
    let mut bytes = 0u64;
    let mut counted: HashSet<NodeId> = HashSet::new();
    let mut has_nodes = false;
    for node in order.iter().filter(|n| !n.op().is_leaf()) {
        let add: u64 = node
            .srcs()
            .iter()
            .filter(|s| !counted.contains(&s.id()))
            .map(weight_bytes)
            .sum();
        if has_nodes && bytes + add > ceiling {
            current += 1;
            bytes = 0;
            counted.clear();
        }
        if add > ceiling {
            report.findings.push(Finding {
                node: format!("{node:?}"),
                op: node.op().name().to_string(),
                shape: node.shape().to_vec(),
                kind: FindingKind::Note {
                    note: format!(
                        "one op's weights ({add} bytes) exceed the segment ceiling ({ceiling}); it gets a segment of its own"
                    ),
                },
            });
        }
        counted.extend(node.srcs().iter().map(|s| s.id()));
        bytes += add;
        has_nodes = true;
        seg.insert(node.id(), current);
    }
    let count = current + 1;
    let rebuild = |source| LowerError::Rewrite {
        op: "segment",
        source,
    };
    let mut boundary: HashMap<NodeId, String> = HashMap::new();
    let mut pieces: Vec<Vec<(String, Tensor)>> = vec![Vec::new(); count];
    let mut built: Vec<HashMap<NodeId, Tensor>> = vec![HashMap::new(); count];
    let mut fed: Vec<HashMap<NodeId, Tensor>> = vec![HashMap::new(); count];
    for node in order.iter().filter(|n| !n.op().is_leaf()) {
        let s = seg[&node.id()];
        let mut srcs = Vec::with_capacity(node.srcs().len());
        for src in node.srcs() {
            let t = match seg.get(&src.id()).copied() {
                Some(p) if p == s => built[s][&src.id()].clone(),
                Some(p) => match fed[s].get(&src.id()) {
                    Some(t) => t.clone(),
                    None => {
                        let next = boundary.len();
                        let name = boundary
                            .entry(src.id())
                            .or_insert_with(|| format!("seg{p}_v{next}"))
                            .clone();
                        let t = input(&name, src.shape(), src.dtype()).map_err(rebuild)?;
                        fed[s].insert(src.id(), t.clone());
                        t
                    }
                },
                None => src.clone(),
            };
            srcs.push(t);
        }
        let rebuilt = Tensor::from_op(node.op().clone(), srcs).map_err(rebuild)?;
        built[s].insert(node.id(), rebuilt);
    }
    let mut crossing: Vec<(&NodeId, &String)> = boundary.iter().collect();
    crossing.sort_by(|a, b| a.1.cmp(b.1));
    for (id, name) in crossing {
        let p = seg[id];
        pieces[p].push((name.clone(), built[p][id].clone()));
    }
    for (name, t) in outputs {
        let s = seg.get(&t.id()).copied().unwrap_or(count - 1);
        let value = built[s]
            .get(&t.id())
            .cloned()
            .unwrap_or_else(|| (*t).clone());
        pieces[s].push((name.to_string(), value));
    }
    Ok(pieces)
}

impl Plan {
    /// The cost estimate of each segment (one dispatch each); see [`super::estimate`].
    pub fn estimates(&self) -> Vec<super::Estimate> {
        self.segments
            .iter()
            .map(|s| super::estimate(s.artifact.program(), self.arch))
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
    pub fn run_cpu(
        &self,
        feeds: &HashMap<String, Vec<f32>>,
    ) -> Result<HashMap<String, Vec<f32>>, TargetError> {
        let fail = |segment: usize, message: String| TargetError::Run { segment, message };
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
