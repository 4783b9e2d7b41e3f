//! Wide matmuls at the outputs (vocabulary heads of 50257 or 151936 columns) tiled under the
//! family's width cap: each tile is its own program output, and the host concatenates them.

use super::segmented::HostOutput;
use crate::arch::{AneArch, Finding, FindingKind, Limits};
use crate::graph::{constant, GraphError, HostArray, HostData, Op, Tensor};
use crate::lower::{LowerError, TiledOutput};

/// Outputs after tiling: what the program returns and how the host reassembles each graph output.
pub(crate) struct Tiled {
    pub outputs: Vec<(String, Tensor)>,
    pub host: Vec<HostOutput>,
    pub findings: Vec<Finding>,
}

impl Tiled {
    /// The graph outputs returned in more than one tile, as the artifact records them.
    pub fn tiled_ports(&self) -> Vec<TiledOutput> {
        self.host
            .iter()
            .filter(|h| h.parts.len() > 1)
            .map(|h| TiledOutput {
                name: h.name.clone(),
                shape: h.shape.clone(),
                parts: h.parts.iter().map(|(_, p)| p.clone()).collect(),
            })
            .collect()
    }
}

/// Tiles every output wider than `arch`'s dimension cap; other outputs pass through.
pub(crate) fn tile_outputs(
    outputs: &[(&str, &Tensor)],
    arch: AneArch,
) -> Result<Tiled, LowerError> {
    let cap = Limits::of(arch.family()).max_spatial;
    let mut tiled = Tiled {
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
                tiled.findings.push(Finding {
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
        tiled.host.push(HostOutput {
            name: name.to_string(),
            shape: t.shape().to_vec(),
            axis: t.rank().saturating_sub(1),
            parts: parts.iter().map(|(n, _)| (0, n.clone())).collect(),
        });
        tiled.outputs.extend(parts);
    }
    Ok(tiled)
}

/// The pieces of one wide output, concatenated on the host along the last axis.
fn tile_output(t: &Tensor, cap: usize) -> Result<Option<Vec<Tensor>>, GraphError> {
    let width = t.shape().last().copied().unwrap_or(0);
    if width <= cap {
        return Ok(None);
    }
    let tiles = width.div_ceil(cap);
    let chunk = width.div_ceil(tiles);
    let ranges: Vec<(usize, usize)> = (0..width)
        .step_by(chunk)
        .map(|s| (s, chunk.min(width - s)))
        .collect();
    let s = t.srcs();
    match t.op() {
        Op::Linear { has_bias } => {
            let Some(weight) = s[1].constant_value() else {
                return Ok(None);
            };
            let inner = s[1].shape()[1];
            // Rows of the weight: f32 or block-quantized (blocks run along rows, so a row range
            // is a whole number of blocks).
            let rows_of = |start: usize, len: usize| -> Result<Option<Tensor>, GraphError> {
                Ok(match weight.data() {
                    HostData::F32(w) => Some(constant(HostArray::from_f32(
                        &[len, inner],
                        w[start * inner..(start + len) * inner].to_vec(),
                    )?)),
                    HostData::BlockQuantized(q) => Some(constant(HostArray::from_block_quantized(
                        q.slice_rows(start, len)?,
                    )?)),
                    HostData::Deferred(d) => {
                        let mut rows = vec![0f32; len * inner];
                        d.read(start * inner, &mut rows)
                            .map_err(GraphError::ConstantData)?;
                        Some(constant(HostArray::from_f32(&[len, inner], rows)?))
                    }
                    _ => None,
                })
            };
            let bias = if *has_bias {
                match s
                    .get(2)
                    .and_then(|b| b.constant_value())
                    .and_then(|c| c.as_f32())
                {
                    Some(b) => Some(b),
                    None => return Ok(None),
                }
            } else {
                None
            };
            let mut parts = Vec::new();
            for &(start, len) in &ranges {
                let Some(wt) = rows_of(start, len)? else {
                    return Ok(None);
                };
                let bt = match bias {
                    Some(b) => Some(constant(HostArray::from_f32(
                        &[len],
                        b[start..start + len].to_vec(),
                    )?)),
                    None => None,
                };
                parts.push(s[0].linear(&wt, bt.as_ref())?);
            }
            Ok(Some(parts))
        }
        Op::MatMul {
            transpose_a,
            transpose_b,
        } => {
            let Some(b) = s[1].constant_value().and_then(|c| c.as_f32()) else {
                return Ok(None);
            };
            let bs = s[1].shape();
            let r = bs.len();
            let (rows, cols) = (bs[r - 2], bs[r - 1]);
            let batch: usize = bs[..r - 2].iter().product();
            let mut parts = Vec::new();
            for &(start, len) in &ranges {
                let mut shape = bs.to_vec();
                let mut data =
                    Vec::with_capacity(batch * len * if *transpose_b { cols } else { rows });
                for bi in 0..batch {
                    let m = &b[bi * rows * cols..(bi + 1) * rows * cols];
                    if *transpose_b {
                        data.extend_from_slice(&m[start * cols..(start + len) * cols]);
                    } else {
                        for row in m.chunks_exact(cols) {
                            data.extend_from_slice(&row[start..start + len]);
                        }
                    }
                }
                if *transpose_b {
                    shape[r - 2] = len;
                } else {
                    shape[r - 1] = len;
                }
                let bt = constant(HostArray::from_f32(&shape, data)?);
                parts.push(s[0].matmul_t(&bt, *transpose_a, *transpose_b)?);
            }
            Ok(Some(parts))
        }
        Op::Reshape { shape } if s[0].shape().last() == shape.last() => {
            let Some(parts) = tile_output(&s[0], cap)? else {
                return Ok(None);
            };
            parts
                .into_iter()
                .map(|p| {
                    let mut target: Vec<isize> = shape.iter().map(|&d| d as isize).collect();
                    if let Some(last) = target.last_mut() {
                        *last = p.shape().last().copied().unwrap_or(1) as isize;
                    }
                    p.reshape(&target)
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some)
        }
        _ => Ok(None),
    }
}
