//! A decoder's weights as graph constants, read from Hugging Face safetensors or GGUF through one
//! name map per source ([`names`]) by one loader. Projections that read the same input are fused
//! at load time (q|k|v, and gate|up), so a layer runs three projections less.

mod export;
mod names;

use std::sync::Arc;

use aneforge::graph::{self, HostArray, Tensor};

use super::config::{Experts, Family, LlmConfig, MlpKind, NormKind, Positions, QkNorm};
use super::matrix::Matrix;
use super::LlmError;
use crate::gguf::GgufFile;
use crate::weights::{DeferredTensor, TensorSource, VarBuilder};
pub use export::{check_export, hf_tensors};
use names::{ExpertLayout, NameMap, Part};

/// Weight (and bias) of one normalisation.
#[derive(Clone)]
pub struct NormWeights {
    pub weight: Tensor,
    pub bias: Option<Tensor>,
}

#[derive(Clone)]
pub struct LayerWeights {
    pub attn_norm: NormWeights,
    /// `[q; k; v]` rows: `[(H + 2·KV)·head_dim, hidden]`.
    pub qkv: Tensor,
    pub qkv_bias: Option<Tensor>,
    pub q_norm: Option<Tensor>,
    pub k_norm: Option<Tensor>,
    pub o: Tensor,
    pub o_bias: Option<Tensor>,
    /// The attention output's norm ([`LlmConfig::post_norms`]).
    pub post_attn_norm: Option<NormWeights>,
    pub mlp_norm: NormWeights,
    /// The MLP output's norm ([`LlmConfig::post_norms`]).
    pub post_mlp_norm: Option<NormWeights>,
    /// Gated MLPs: `[gate; up]` rows `[2·I, hidden]`; plain MLPs: `[I, hidden]`. A mixture of
    /// `E` experts: every expert's `[gate; up]` in expert order, `[E·2·I, hidden]`.
    pub up: Tensor,
    pub up_bias: Option<Tensor>,
    /// `[hidden, I]`; a mixture of experts: every expert's columns in expert order,
    /// `[hidden, E·I]`, so one projection sums the (router-weighted) experts.
    pub down: Tensor,
    pub down_bias: Option<Tensor>,
    /// The mixture of experts' router `[E, hidden]` ([`LlmConfig::experts_at`] the layer).
    pub router: Option<Tensor>,
    /// The mixture of experts' shared expert ([`super::config::Experts::shared`]).
    pub shared: Option<SharedExpert>,
}

/// A shared expert: a gated MLP every token goes through, scaled by `sigmoid(x · gateᵀ)`.
#[derive(Clone)]
pub struct SharedExpert {
    /// `[gate; up]` rows `[2·I, hidden]`.
    pub up: Tensor,
    /// `[hidden, I]`.
    pub down: Tensor,
    /// The one-output gate `[1, hidden]`.
    pub gate: Tensor,
}

#[derive(Clone)]
pub struct ModelWeights {
    /// `[vocab, hidden]`, as stored (dense or block-quantized).
    pub embed: Matrix,
    pub embed_const: Tensor,
    /// Learned positions `[max, hidden]` (GPT-2).
    pub pos_embed: Option<HostArray>,
    pub layers: Vec<LayerWeights>,
    pub final_norm: NormWeights,
    /// `[vocab, hidden]`; the embedding constant itself when tied.
    pub head: Tensor,
    /// Bytes of the weights as stored in a program, per layer (for segmenting).
    pub layer_bytes: Vec<usize>,
    pub other_bytes: usize,
}

/// Where tensors come from and how they are named.
pub enum WeightFile {
    Hf(VarBuilder),
    Gguf(Arc<GgufFile>),
}

impl WeightFile {
    fn source(&self) -> &dyn TensorSource {
        match self {
            WeightFile::Hf(vb) => vb.source().as_ref(),
            WeightFile::Gguf(f) => f.as_ref(),
        }
    }

    fn contains(&self, name: &str) -> bool {
        self.source().meta(name).is_some()
    }

    /// Checks that the tensor exists with exactly `shape`.
    fn check(&self, name: &str, shape: &[usize]) -> Result<(), LlmError> {
        let src = self.source();
        let meta = src.meta(name).ok_or_else(|| {
            LlmError::Weights(crate::WeightError::MissingTensor {
                name: name.to_string(),
                source_desc: src.describe(),
                similar: crate::weights::similar_names(name, &src.names(), 3),
            })
        })?;
        if meta.shape != shape {
            return Err(LlmError::Weights(crate::WeightError::WrongShape {
                name: name.to_string(),
                file: meta.file,
                expected: shape.to_vec(),
                found: meta.shape,
            }));
        }
        Ok(())
    }

    /// A tensor as f32 with exactly `shape`.
    fn dense(&self, name: &str, shape: &[usize]) -> Result<HostArray, LlmError> {
        self.check(name, shape)?;
        let (shape, data) = self.source().read_f32(name)?.into_parts();
        Ok(HostArray::from_f32(&shape, data)?)
    }

    /// A tensor of `shape` as a matrix of its last dimension's columns (`[rows, cols]`, or a
    /// stack `[E, rows, cols]` as `[E·rows, cols]`), kept block-quantized when the file stores
    /// it so and `quantized`. Float matrices are deferred: read when a program is compiled.
    fn matrix(&self, name: &str, shape: &[usize], quantized: bool) -> Result<Matrix, LlmError> {
        let cols = shape.last().copied().unwrap_or(1);
        let rows = shape.iter().product::<usize>() / cols.max(1);
        if let (WeightFile::Gguf(f), true) = (self, quantized) {
            if let Some(m) = Matrix::from_gguf_blocks(f, name, shape)? {
                return Ok(m);
            }
        }
        self.check(name, shape)?;
        let source: Arc<dyn TensorSource> = match self {
            WeightFile::Hf(vb) => vb.source().clone(),
            WeightFile::Gguf(f) => f.clone(),
        };
        if let Some(d) = DeferredTensor::new(&source, name) {
            return Ok(Matrix::Dense(HostArray::from_deferred(
                &[rows, cols],
                Arc::new(d),
            )?));
        }
        let a = self.dense(name, shape)?;
        Ok(Matrix::Dense(HostArray::new(
            &[rows, cols],
            a.data().clone(),
        )?))
    }
}

/// How projection matrices are stored in the programs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum WeightFormat {
    /// As the file stores them: GGUF block types stay quantized (see [`Matrix`]), everything else
    /// f32.
    #[default]
    Stored,
    /// Everything expanded to f32.
    Dense,
    /// Every matrix quantized to int8 in blocks of 32 with one scale each (Q8_0's scheme).
    Int8,
    /// Every matrix quantized to int4 in blocks of 32 with one scale each (Q4_0's scheme).
    Int4,
}

impl std::str::FromStr for WeightFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<WeightFormat, String> {
        Ok(match s {
            "stored" => WeightFormat::Stored,
            "none" | "dense" => WeightFormat::Dense,
            "int8" => WeightFormat::Int8,
            "int4" => WeightFormat::Int4,
            other => {
                return Err(format!(
                    "unknown weight format {other:?}; valid: stored, none, int8, int4"
                ))
            }
        })
    }
}

/// Options for reading weights.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadOptions {
    pub weights: WeightFormat,
}

impl LoadOptions {
    pub fn new(weights: WeightFormat) -> LoadOptions {
        LoadOptions { weights }
    }
}

fn concat_vectors(parts: &[HostArray]) -> Result<HostArray, LlmError> {
    let data: Vec<f32> = parts
        .iter()
        .flat_map(|p| p.as_f32().unwrap_or(&[]).iter().copied())
        .collect();
    Ok(HostArray::from_f32(&[data.len()], data)?)
}

/// `[in, out]` (a Conv1D weight) to `[out, in]`.
fn transpose(a: &HostArray) -> Result<HostArray, LlmError> {
    let (r, c) = match a.shape() {
        [r, c] => (*r, *c),
        s => return Err(LlmError::Internal(format!("transpose of shape {s:?}"))),
    };
    let out = transposed(r, c, a.as_f32().unwrap_or(&[]));
    Ok(HostArray::from_f32(&[c, r], out)?)
}

/// The row-major `[r, c]` matrix `v` as `[c, r]`.
fn transposed(r: usize, c: usize, v: &[f32]) -> Vec<f32> {
    let mut out = vec![0.0; r * c];
    for i in 0..r {
        for j in 0..c {
            out[j * r + i] = v[i * c + j];
        }
    }
    out
}

fn plus_one(a: HostArray) -> Result<HostArray, LlmError> {
    let v: Vec<f32> = a.as_f32().unwrap_or(&[]).iter().map(|&w| 1.0 + w).collect();
    Ok(HostArray::from_f32(a.shape(), v)?)
}

fn c(a: HostArray) -> Tensor {
    graph::constant(a)
}

/// Hugging Face safetensors: Llama-style names, or GPT-2's.
pub fn load_hf(
    cfg: &LlmConfig,
    vb: &VarBuilder,
    opts: LoadOptions,
) -> Result<ModelWeights, LlmError> {
    let file = WeightFile::Hf(vb.clone());
    let gpt2_prefix = if file.contains("transformer.wte.weight") {
        "transformer."
    } else {
        ""
    };
    let names = export::hf_names(cfg.family, gpt2_prefix);
    load(cfg, &file, &names, opts)
}

/// A GGUF file. Llama-architecture q/k rows are put back in Hugging Face order (pairs
/// `i, i + half`), which the step graph rotates.
pub fn load_gguf(
    cfg: &LlmConfig,
    gguf: &Arc<GgufFile>,
    opts: LoadOptions,
) -> Result<ModelWeights, LlmError> {
    let names = match cfg.family {
        Family::Phi3 => NameMap::gguf_phi3(),
        f => NameMap::gguf(matches!(f, Family::Llama | Family::Mixtral)),
    };
    load(cfg, &WeightFile::Gguf(gguf.clone()), &names, opts)
}

fn load(
    cfg: &LlmConfig,
    file: &WeightFile,
    names: &NameMap,
    opts: LoadOptions,
) -> Result<ModelWeights, LlmError> {
    let mut b = Builder {
        cfg,
        file,
        names,
        opts,
        bytes: 0,
    };
    let d = cfg.hidden_size;
    let embed = b.matrix(&names.embed, cfg.vocab_size, d)?;
    let pos_embed = match (&cfg.positions, &names.positions) {
        (Positions::Learned { max }, Some(name)) => Some(b.dense(name, &[*max, d])?),
        (Positions::Learned { .. }, None) => {
            return Err(LlmError::Internal(
                "learned positions in a source without them".into(),
            ))
        }
        (Positions::Rope(_), _) => None,
    };
    let mut layers = Vec::new();
    let mut layer_bytes = Vec::new();
    for i in 0..cfg.n_layers {
        let before = b.bytes;
        layers.push(b.layer(i)?);
        layer_bytes.push(b.bytes - before);
    }
    let before = b.bytes;
    let final_norm = b.norm(&names.final_norm)?;
    let embed_const = embed.constant()?;
    let head = if cfg.tied_embeddings {
        embed_const.clone()
    } else {
        b.matrix(&names.head, cfg.vocab_size, d)?.constant()?
    };
    let other_bytes = embed.stored_bytes() + (b.bytes - before);
    Ok(ModelWeights {
        embed,
        embed_const,
        pos_embed,
        layers,
        final_norm,
        head,
        layer_bytes,
        other_bytes,
    })
}

/// Reads one source's tensors through its name map and counts the bytes they take in a program.
struct Builder<'a> {
    cfg: &'a LlmConfig,
    file: &'a WeightFile,
    names: &'a NameMap,
    opts: LoadOptions,
    bytes: usize,
}

impl Builder<'_> {
    fn layer(&mut self, i: usize) -> Result<LayerWeights, LlmError> {
        let cfg = self.cfg;
        let (d, hd, inter) = (cfg.hidden_size, cfg.head_dim, cfg.intermediate_size);
        let (qw, kw) = (cfg.n_heads * hd, cfg.n_kv_heads * hd);
        let attn_norm = self.norm(&self.names.layer(i, Part::AttnNorm)?)?;
        let (qkv, qkv_bias) = if self.fused_qkv(i)? {
            let qkv = self.layer_matrix(i, Part::Qkv, qw + 2 * kw, d)?;
            (
                qkv,
                self.biases(cfg.qkv_bias, i, &[(Part::Qkv, qw + 2 * kw)])?,
            )
        } else {
            let mut q = self.layer_matrix(i, Part::Q, qw, d)?;
            let mut k = self.layer_matrix(i, Part::K, kw, d)?;
            if self.names.rope_permuted {
                q = q.permute_rows(&rope_unpermutation(cfg.n_heads, hd))?;
                k = k.permute_rows(&rope_unpermutation(cfg.n_kv_heads, hd))?;
            }
            let v = self.layer_matrix(i, Part::V, kw, d)?;
            let parts = [(Part::Q, qw), (Part::K, kw), (Part::V, kw)];
            let bias = self.biases(cfg.qkv_bias, i, &parts)?;
            (Matrix::concat_rows(&[q, k, v])?, bias)
        };
        let (q_len, k_len) = match cfg.qk_norm {
            QkNorm::Whole => (qw, kw),
            _ => (hd, hd),
        };
        let (q_norm, k_norm) = if cfg.qk_norm == QkNorm::None {
            (None, None)
        } else {
            let q = format!("{}.weight", self.names.layer(i, Part::QNorm)?);
            let k = format!("{}.weight", self.names.layer(i, Part::KNorm)?);
            (
                Some(self.norm_weight(&q, q_len)?),
                Some(self.norm_weight(&k, k_len)?),
            )
        };
        let o = self.layer_matrix(i, Part::O, d, qw)?;
        let o_bias = self.biases(cfg.o_bias, i, &[(Part::O, d)])?;
        let mlp_norm = self.norm(&self.names.layer(i, Part::MlpNorm)?)?;
        let (post_attn_norm, post_mlp_norm) = if cfg.post_norms {
            (
                Some(self.norm(&self.names.layer(i, Part::PostAttnNorm)?)?),
                Some(self.norm(&self.names.layer(i, Part::PostMlpNorm)?)?),
            )
        } else {
            (None, None)
        };
        let mut shared = None;
        let (up, up_bias, down, down_bias, router) = match (cfg.experts_at(i), cfg.mlp) {
            (Some(x), _) => {
                // experts first: a file with fewer experts than its config names the first
                // missing one
                let (up, down) = self.experts(i, x)?;
                let name = format!("{}.weight", self.names.layer(i, Part::Router)?);
                let router = c(self.dense(&name, &[x.count, d])?);
                if let Some(size) = x.shared {
                    shared = Some(self.shared_expert(i, size)?);
                }
                (up, None, down, None, Some(router))
            }
            (None, mlp) => {
                let (up, up_bias) = match mlp {
                    MlpKind::Gated(_) if self.names.has(Part::GateUp) => {
                        let gate_up = self.layer_matrix(i, Part::GateUp, 2 * inter, d)?;
                        let bias = self.biases(cfg.mlp_bias, i, &[(Part::GateUp, 2 * inter)])?;
                        (gate_up, bias)
                    }
                    MlpKind::Gated(_) => {
                        let gate = self.layer_matrix(i, Part::Gate, inter, d)?;
                        let up = self.layer_matrix(i, Part::Up, inter, d)?;
                        let parts = [(Part::Gate, inter), (Part::Up, inter)];
                        let bias = self.biases(cfg.mlp_bias, i, &parts)?;
                        (Matrix::concat_rows(&[gate, up])?, bias)
                    }
                    MlpKind::Plain(_) => (
                        self.layer_matrix(i, Part::Up, inter, d)?,
                        self.biases(cfg.mlp_bias, i, &[(Part::Up, inter)])?,
                    ),
                };
                let down = self.layer_matrix(i, Part::Down, d, inter)?;
                let down_bias = self.biases(cfg.mlp_bias, i, &[(Part::Down, d)])?;
                (up, up_bias, down, down_bias, None)
            }
        };
        Ok(LayerWeights {
            attn_norm,
            qkv: qkv.constant()?,
            qkv_bias,
            q_norm,
            k_norm,
            o: o.constant()?,
            o_bias,
            post_attn_norm,
            mlp_norm,
            post_mlp_norm,
            up: up.constant()?,
            up_bias,
            down: down.constant()?,
            down_bias,
            router,
            shared,
        })
    }

    /// Layer `i`'s shared expert of intermediate size `size`.
    fn shared_expert(&mut self, i: usize, size: usize) -> Result<SharedExpert, LlmError> {
        let d = self.cfg.hidden_size;
        let gate = self.layer_matrix(i, Part::SharedGate, size, d)?;
        let up = self.layer_matrix(i, Part::SharedUp, size, d)?;
        let down = self.layer_matrix(i, Part::SharedDown, d, size)?;
        // [1, hidden] as Hugging Face stores it; a converter may drop the 1
        let name = format!("{}.weight", self.names.layer(i, Part::SharedGateInp)?);
        let shape = match self.file.source().meta(&name) {
            Some(m) if m.shape == [d] => vec![d],
            _ => vec![1, d],
        };
        let gate_inp = self.dense(&name, &shape)?;
        let gate_inp = HostArray::new(&[1, d], gate_inp.data().clone())?;
        Ok(SharedExpert {
            up: Matrix::concat_rows(&[gate, up])?.constant()?,
            down: down.constant()?,
            gate: c(gate_inp),
        })
    }

    /// Layer `i`'s experts as the two matrices of [`LayerWeights::up`] and
    /// [`LayerWeights::down`]: `[g₀; u₀; g₁; u₁; …]` and `[hidden, E·I]`.
    fn experts(&mut self, i: usize, x: Experts) -> Result<(Matrix, Matrix), LlmError> {
        let (d, n, e) = (self.cfg.hidden_size, x.size, x.count);
        let names = self.names;
        let (gate_up, down) = match names.experts {
            ExpertLayout::PerExpert { .. } => {
                let mut gate_up = Vec::with_capacity(2 * e);
                let mut down = Vec::with_capacity(e);
                for j in 0..e {
                    let name = |p| -> Result<String, LlmError> {
                        Ok(format!("{}.weight", names.expert(i, j, p)?))
                    };
                    gate_up.push(self.matrix(&name(Part::ExpertGate)?, n, d)?);
                    gate_up.push(self.matrix(&name(Part::ExpertUp)?, n, d)?);
                    down.push(self.matrix(&name(Part::ExpertDown)?, d, n)?);
                }
                (Matrix::concat_rows(&gate_up)?, Matrix::concat_rows(&down)?)
            }
            ExpertLayout::Stacked => {
                let name = |p| -> Result<String, LlmError> {
                    Ok(format!("{}.weight", names.layer(i, p)?))
                };
                let gate = self.stack(&name(Part::ExpertGate)?, &[e, n, d])?;
                let up = self.stack(&name(Part::ExpertUp)?, &[e, n, d])?;
                // [g₀…g_E; u₀…u_E] → [g₀; u₀; g₁; u₁; …]
                let interleave: Vec<usize> = (0..e)
                    .flat_map(|j| (0..2 * n).map(move |r| (r / n) * e * n + j * n + r % n))
                    .collect();
                let gate_up = Matrix::concat_rows(&[gate, up])?.permute_rows(&interleave)?;
                (gate_up, self.stack(&name(Part::ExpertDown)?, &[e, d, n])?)
            }
        };
        // [E·hidden, I] (expert-major) → rows in (hidden, expert) order → [hidden, E·I]
        let by_row: Vec<usize> = (0..d * e).map(|r| (r % e) * d + r / e).collect();
        let down = down.permute_rows(&by_row)?.merge_rows(e)?;
        Ok((gate_up, down))
    }

    /// Whether layer `i` stores q, k and v as one matrix: always when the source has no separate
    /// names, else when the file holds the fused tensor.
    fn fused_qkv(&self, i: usize) -> Result<bool, LlmError> {
        if !self.names.has(Part::Qkv) {
            return Ok(false);
        }
        if !self.names.has(Part::Q) {
            return Ok(true);
        }
        let name = format!("{}.weight", self.names.layer(i, Part::Qkv)?);
        Ok(self.file.contains(&name))
    }

    fn dense(&mut self, name: &str, shape: &[usize]) -> Result<HostArray, LlmError> {
        let a = self.file.dense(name, shape)?;
        self.bytes += a.len() * 4;
        Ok(a)
    }

    fn matrix(&mut self, name: &str, rows: usize, cols: usize) -> Result<Matrix, LlmError> {
        self.stack(name, &[rows, cols])
    }

    /// A tensor of `shape` as a matrix of its last dimension's columns.
    fn stack(&mut self, name: &str, shape: &[usize]) -> Result<Matrix, LlmError> {
        let keep = self.opts.weights == WeightFormat::Stored;
        let m = self.file.matrix(name, shape, keep)?;
        self.stored(m)
    }

    /// Layer `i`'s `part` as a `[rows, cols]` matrix, whichever way round the source stores it.
    fn layer_matrix(
        &mut self,
        i: usize,
        part: Part,
        rows: usize,
        cols: usize,
    ) -> Result<Matrix, LlmError> {
        let name = format!("{}.weight", self.names.layer(i, part)?);
        if self.names.transposed {
            let w = transpose(&self.file.dense(&name, &[cols, rows])?)?;
            self.stored(Matrix::Dense(w))
        } else {
            self.matrix(&name, rows, cols)
        }
    }

    /// The biases of `parts` of layer `i`, concatenated; `None` unless `wanted`.
    fn biases(
        &mut self,
        wanted: bool,
        i: usize,
        parts: &[(Part, usize)],
    ) -> Result<Option<Tensor>, LlmError> {
        if !wanted {
            return Ok(None);
        }
        let mut read = Vec::with_capacity(parts.len());
        for &(part, len) in parts {
            let name = format!("{}.bias", self.names.layer(i, part)?);
            read.push(self.dense(&name, &[len])?);
        }
        Ok(Some(c(concat_vectors(&read)?)))
    }

    /// `m` in the requested weight format, counted.
    fn stored(&mut self, m: Matrix) -> Result<Matrix, LlmError> {
        let m = match self.opts.weights {
            WeightFormat::Int8 => m.quantize(aneforge::graph::QuantFormat::I8)?,
            WeightFormat::Int4 => m.quantize(aneforge::graph::QuantFormat::I4)?,
            _ => m,
        };
        self.bytes += m.stored_bytes();
        Ok(m)
    }

    /// The norm named `stem`: its weight, and its bias for LayerNorm.
    fn norm(&mut self, stem: &str) -> Result<NormWeights, LlmError> {
        let d = self.cfg.hidden_size;
        let weight = self.norm_weight(&format!("{stem}.weight"), d)?;
        let bias = match self.cfg.norm {
            NormKind::Layer { .. } => Some(c(self.dense(&format!("{stem}.bias"), &[d])?)),
            NormKind::Rms { .. } => None,
        };
        Ok(NormWeights { weight, bias })
    }

    fn norm_weight(&mut self, name: &str, len: usize) -> Result<Tensor, LlmError> {
        let w = self.dense(name, &[len])?;
        let w = match self.cfg.norm {
            NormKind::Rms { plus_one: true, .. } => plus_one(w)?,
            _ => w,
        };
        Ok(c(w))
    }
}

/// Row `r` of the result is row `perm[r]` of llama.cpp's q/k layout: within each head, Hugging
/// Face row `i < half` is stored at `2i` and row `half + i` at `2i + 1`.
fn rope_unpermutation(heads: usize, head_dim: usize) -> Vec<usize> {
    let half = head_dim / 2;
    (0..heads)
        .flat_map(|h| {
            (0..head_dim).map(move |r| {
                let stored = if r < half { 2 * r } else { 2 * (r - half) + 1 };
                h * head_dim + stored
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpermutation_inverts_llama_cpp_permute() {
        // llama.cpp: w.reshape(heads, 2, hd/2, ...).swapaxes(1, 2).reshape(...)
        let (heads, hd) = (3, 8);
        let half = hd / 2;
        let mut stored_of_hf = vec![0; heads * hd];
        for h in 0..heads {
            for pair in 0..2 {
                for i in 0..half {
                    let hf_row = h * hd + pair * half + i;
                    let gguf_row = h * hd + i * 2 + pair;
                    stored_of_hf[hf_row] = gguf_row;
                }
            }
        }
        assert_eq!(rope_unpermutation(heads, hd), stored_of_hf);
    }

    #[test]
    fn concat_and_transpose() {
        let a = Matrix::Dense(HostArray::from_f32(&[1, 2], vec![1.0, 2.0]).unwrap());
        let b2 = Matrix::Dense(HostArray::from_f32(&[2, 2], vec![3.0, 4.0, 5.0, 6.0]).unwrap());
        let Ok(Matrix::Dense(cat)) = Matrix::concat_rows(&[a, b2]) else {
            panic!("dense parts concatenate densely");
        };
        assert_eq!(cat.shape(), [3, 2]);
        let t = transpose(&cat).unwrap();
        assert_eq!(t.shape(), [2, 3]);
        assert_eq!(t.as_f32().unwrap(), [1.0, 3.0, 5.0, 2.0, 4.0, 6.0]);
    }
}
