//! The whole encoder as one graph for a fixed `[batch, seq]` bucket: embeddings (looked up in the
//! program, or fed from the host for ANE targets), post-norm transformer layers, and the head
//! (pooling + optional L2 normalisation, or a classifier).
//!
//! Program inputs (all `[batch, seq]` unless noted):
//! - `input_ids` i32, `token_type_ids` i32 (BERT only), `position_ids` i32 (padding-relative
//!   position families) — when embeddings are looked up in the program;
//! - `inputs_embeds` f32 `[batch, seq, hidden]` — the summed word, position and type embeddings,
//!   when they are looked up on the host;
//! - `attention_mask` f32: 1 for tokens, 0 for padding;
//! - `pool_weights` f32 `[batch, modes, seq]` for weighted-sum pooling modes, `pool_mask` f32 for
//!   max pooling.
//!
//! Packed programs (`ProgramKey::tokens`, CPU target) carry only the batch's real tokens, `tokens`
//! rows of them, through every per-token op (embeddings, linear layers, norms, activations), so
//! padding costs no GEMM work: `inputs_embeds` is `[tokens, hidden]` (or `input_ids`,
//! `token_type_ids` and `position_ids` are `[tokens]`), `unpack_index` i32 `[batch·seq]` names the
//! packed row of every padded slot (any row for padding: those keys are masked and those queries
//! dropped), and `pack_index` i32 `[tokens]` the padded slot of every packed row. Attention runs
//! on the padded layout, gathered through `unpack_index` and back through `pack_index`; the head
//! sees the padded `[batch, seq, hidden]` hidden states.
//!
//! The output is `output`: `[batch, dim]` embeddings or `[batch, labels]` logits.

use aneforge::graph::{concat, constant, input, nn::MASKED, sdpa};
use aneforge::{DType, GraphError, HostArray as GraphArray, Tensor};

use super::config::{EncoderConfig, Positions};
use super::pooling::Pooling;
use super::weights::{ClassifierHead, EncoderWeights, Linear, Norm};
use super::EncoderError;

pub const INPUT_IDS: &str = "input_ids";
pub const TOKEN_TYPE_IDS: &str = "token_type_ids";
pub const POSITION_IDS: &str = "position_ids";
pub const INPUTS_EMBEDS: &str = "inputs_embeds";
pub const ATTENTION_MASK: &str = "attention_mask";
pub const POOL_WEIGHTS: &str = "pool_weights";
pub const POOL_MASK: &str = "pool_mask";
pub const UNPACK_INDEX: &str = "unpack_index";
pub const PACK_INDEX: &str = "pack_index";
pub const OUTPUT: &str = "output";

/// What the program computes after the transformer.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Head {
    /// Pooled embeddings, modes concatenated in order, optionally L2-normalised.
    Pooled {
        modes: Vec<Pooling>,
        normalize: bool,
    },
    /// The checkpoint's classification head: `[batch, labels]` logits.
    Logits,
}

/// One compiled program's shape and head.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ProgramKey {
    pub batch: usize,
    pub seq: usize,
    pub head: Head,
    /// Embeddings summed on the host and fed as `inputs_embeds`.
    pub host_embeddings: bool,
    /// Packed rows (real tokens, rounded up) when per-token ops skip padding; `None` runs every
    /// op on the padded `[batch, seq]` layout (ANE targets: `gather` is walled there).
    pub tokens: Option<usize>,
}

pub(crate) struct Encoder<'a> {
    pub cfg: &'a EncoderConfig,
    pub weights: &'a EncoderWeights,
    pub classifier: Option<&'a ClassifierHead>,
}

fn c(a: &GraphArray) -> Tensor {
    constant(a.clone())
}

fn linear(x: &Tensor, l: &Linear) -> Result<Tensor, GraphError> {
    let bias = l.bias.as_ref().map(c);
    x.linear(&c(&l.weight), bias.as_ref())
}

fn layer_norm(x: &Tensor, n: &Norm, eps: f32) -> Result<Tensor, GraphError> {
    x.layer_norm(&[-1], Some(&c(&n.gamma)), Some(&c(&n.beta)), eps)
}

fn dims(shape: &[usize]) -> Vec<isize> {
    shape.iter().map(|&d| d as isize).collect()
}

impl Encoder<'_> {
    /// The graph of `key`'s program; its single output is [`OUTPUT`].
    pub fn build(&self, key: &ProgramKey) -> Result<Tensor, EncoderError> {
        let (b, s) = (key.batch, key.seq);
        let hidden = self.embeddings(key)?;
        let mask = input(ATTENTION_MASK, &[b, s], DType::F32)?;
        let additive = mask
            .sub_scalar(1.0)?
            .mul_scalar(-MASKED)?
            .reshape(&[b as isize, 1, 1, s as isize])?;
        let attn_mask = match self.relative_bias(s)? {
            Some(bias) => additive.add(&bias)?,
            None => additive,
        };
        let packing = match key.tokens {
            Some(tokens) => Some(Packing {
                unpack: input(UNPACK_INDEX, &[b * s], DType::I32)?,
                pack: input(PACK_INDEX, &[tokens], DType::I32)?,
            }),
            None => None,
        };
        let mut x = hidden;
        for layer in &self.weights.layers {
            x = self.layer(&x, layer, &attn_mask, key, packing.as_ref())?;
        }
        if let Some(p) = &packing {
            x = x.gather(&p.unpack, 0)?.reshape(&[
                b as isize,
                s as isize,
                self.cfg.hidden_size as isize,
            ])?;
        }
        match &key.head {
            Head::Pooled { modes, normalize } => self.pool(&x, key, modes, *normalize),
            Head::Logits => self.classify(&x),
        }
    }

    fn embeddings(&self, key: &ProgramKey) -> Result<Tensor, EncoderError> {
        let (b, s, h) = (key.batch, key.seq, self.cfg.hidden_size);
        let rows: Vec<usize> = match key.tokens {
            Some(t) => vec![t],
            None => vec![b, s],
        };
        let w = self.weights;
        let summed = if key.host_embeddings {
            let mut shape = rows.clone();
            shape.push(h);
            input(INPUTS_EMBEDS, &shape, DType::F32)?
        } else {
            let ids = input(INPUT_IDS, &rows, DType::I32)?;
            let mut x = c(&w.word_embeddings.array).gather(&ids, 0)?;
            if let Some(types) = &w.token_type_embeddings {
                if self.cfg.family.reads_token_types() {
                    let t = input(TOKEN_TYPE_IDS, &rows, DType::I32)?;
                    x = x.add(&c(&types.array).gather(&t, 0)?)?;
                } else {
                    x = x.add(&row_constant(types, 0)?)?;
                }
            }
            let positions = match self.cfg.positions {
                Positions::Absolute if key.tokens.is_none() => {
                    leading_rows(&w.position_embeddings, s)?
                }
                _ => {
                    let p = input(POSITION_IDS, &rows, DType::I32)?;
                    c(&w.position_embeddings.array).gather(&p, 0)?
                }
            };
            x.add(&positions)?
        };
        Ok(layer_norm(
            &summed,
            &w.embedding_norm,
            self.cfg.layer_norm_eps,
        )?)
    }

    /// MPNet's relative position bias for a `seq`-long bucket, `[1, heads, seq, seq]`. Relative
    /// positions are those of the padded bucket, as in transformers (which ignores padding there).
    fn relative_bias(&self, seq: usize) -> Result<Option<Tensor>, EncoderError> {
        let Some(table) = &self.weights.relative_attention_bias else {
            return Ok(None);
        };
        let heads = self.cfg.num_heads;
        let mut data = vec![0.0f32; heads * seq * seq];
        for i in 0..seq {
            for j in 0..seq {
                let bucket = relative_position_bucket(j as i64 - i as i64, 32, 128);
                let row = table.row(bucket).ok_or_else(|| {
                    EncoderError::Unsupported(format!(
                        "MPNet relative position bucket {bucket} is past the {}-row \
                         encoder.relative_attention_bias table",
                        table.rows
                    ))
                })?;
                for (hd, &v) in row.iter().enumerate() {
                    data[(hd * seq + i) * seq + j] = v;
                }
            }
        }
        Ok(Some(constant(GraphArray::from_f32(
            &[1, heads, seq, seq],
            data,
        )?)))
    }

    fn layer(
        &self,
        x: &Tensor,
        l: &super::weights::LayerWeights,
        mask: &Tensor,
        key: &ProgramKey,
        packing: Option<&Packing>,
    ) -> Result<Tensor, GraphError> {
        let shape = x.shape().to_vec();
        let (b, s) = (key.batch as isize, key.seq as isize);
        let heads = self.cfg.num_heads as isize;
        let d = self.cfg.head_dim() as isize;
        let split = |t: Tensor| -> Result<Tensor, GraphError> {
            let padded = match packing {
                Some(p) => t.gather(&p.unpack, 0)?,
                None => t,
            };
            padded.reshape(&[b, s, heads, d])?.transpose(&[0, 2, 1, 3])
        };
        let q = split(linear(x, &l.query)?)?;
        let k = split(linear(x, &l.key)?)?;
        let v = split(linear(x, &l.value)?)?;
        let attended = sdpa(&q, &k, &v, Some(mask), false, None)?.transpose(&[0, 2, 1, 3])?;
        let attended = match packing {
            Some(p) => attended.reshape(&[b * s, heads * d])?.gather(&p.pack, 0)?,
            None => attended.reshape(&dims(&shape))?,
        };
        let eps = self.cfg.layer_norm_eps;
        let x = layer_norm(
            &linear(&attended, &l.attention_out)?.add(x)?,
            &l.attention_norm,
            eps,
        )?;
        let inner = self.cfg.activation.apply(&linear(&x, &l.ffn_in)?)?;
        layer_norm(&linear(&inner, &l.ffn_out)?.add(&x)?, &l.ffn_norm, eps)
    }

    fn pool(
        &self,
        x: &Tensor,
        key: &ProgramKey,
        modes: &[Pooling],
        normalize: bool,
    ) -> Result<Tensor, EncoderError> {
        let (b, s, h) = (key.batch, key.seq, self.cfg.hidden_size);
        let weighted: Vec<Pooling> = modes
            .iter()
            .copied()
            .filter(|m| m.is_weighted_sum())
            .collect();
        let sums = if weighted.is_empty() {
            None
        } else {
            let w = input(POOL_WEIGHTS, &[b, weighted.len(), s], DType::F32)?;
            Some(w.matmul(x)?)
        };
        let max = if modes.contains(&Pooling::Max) {
            let m = input(POOL_MASK, &[b, s], DType::F32)?;
            let fill = m
                .sub_scalar(1.0)?
                .mul_scalar(-MASKED)?
                .reshape(&[b as isize, s as isize, 1])?;
            Some(x.add(&fill)?.max(&[1], false)?)
        } else {
            None
        };
        let mut parts = Vec::with_capacity(modes.len());
        let mut next_weighted = 0;
        for &mode in modes {
            let part = if mode == Pooling::Max {
                max.clone()
            } else {
                let row = sums
                    .as_ref()
                    .map(|t| {
                        t.narrow(1, next_weighted, 1)?
                            .reshape(&[b as isize, h as isize])
                    })
                    .transpose()?;
                next_weighted += 1;
                row
            };
            parts.push(part.ok_or_else(|| {
                EncoderError::Unsupported(format!("pooling mode {} produced no value", mode.name()))
            })?);
        }
        let pooled = if parts.len() == 1 {
            parts.remove(0)
        } else {
            concat(&parts, -1)?
        };
        Ok(if normalize {
            pooled.l2_normalize(-1, 1e-12)?
        } else {
            pooled
        })
    }

    fn classify(&self, x: &Tensor) -> Result<Tensor, EncoderError> {
        let head = self.classifier.ok_or_else(|| {
            EncoderError::Unsupported("the checkpoint has no classification head".into())
        })?;
        let shape = x.shape();
        let first = x
            .narrow(1, 0, 1)?
            .reshape(&[shape[0] as isize, shape[2] as isize])?;
        Ok(match head {
            ClassifierHead::BertPooler { pooler, classifier } => {
                linear(&linear(&first, pooler)?.tanh()?, classifier)?
            }
            ClassifierHead::DenseTanh { dense, out_proj } => {
                linear(&linear(&first, dense)?.tanh()?, out_proj)?
            }
            ClassifierHead::PreClassifierRelu {
                pre_classifier,
                classifier,
            } => linear(&linear(&first, pre_classifier)?.relu()?, classifier)?,
        })
    }
}

/// The index inputs of a packed program.
struct Packing {
    unpack: Tensor,
    pack: Tensor,
}

/// One row of a table as a `[dim]` constant.
fn row_constant(table: &super::weights::Table, row: usize) -> Result<Tensor, EncoderError> {
    let data = table.row(row).ok_or_else(|| {
        EncoderError::Unsupported(format!("the token type table has no row {row}"))
    })?;
    Ok(constant(GraphArray::from_f32(&[table.dim], data.to_vec())?))
}

/// The first `n` rows of a table as a `[n, dim]` constant.
fn leading_rows(table: &super::weights::Table, n: usize) -> Result<Tensor, EncoderError> {
    let data = table
        .array
        .as_f32()
        .and_then(|d| d.get(..n * table.dim))
        .ok_or_else(|| {
            EncoderError::Unsupported(format!(
                "{n} positions exceed the {}-row position table",
                table.rows
            ))
        })?;
    Ok(constant(GraphArray::from_f32(
        &[n, table.dim],
        data.to_vec(),
    )?))
}

/// transformers' `MPNetEncoder.relative_position_bucket` (T5's scheme), with the same f32
/// arithmetic so bucket boundaries agree.
pub fn relative_position_bucket(relative: i64, num_buckets: usize, max_distance: usize) -> usize {
    let half = (num_buckets / 2) as i64;
    let n = -relative;
    let mut bucket = if n < 0 { half } else { 0 };
    let n = n.abs();
    let max_exact = half / 2;
    if n < max_exact {
        bucket += n;
    } else {
        let scaled = (n as f32 / max_exact as f32).ln()
            / ((max_distance as f64 / max_exact as f64).ln() as f32)
            * (half - max_exact) as f32;
        let large = max_exact + scaled as i64;
        bucket += large.min(half - 1);
    }
    bucket as usize
}
