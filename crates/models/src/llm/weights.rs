//! A decoder's weights as graph constants, read from Hugging Face safetensors or GGUF through
//! per-family name maps. Projections that read the same input are fused at load time (q|k|v, and
//! gate|up), so a layer runs three projections less.

use std::sync::Arc;

use aneforge::graph::{self, HostArray, Tensor};

use super::config::{Family, LlmConfig, MlpKind, NormKind};
use super::matrix::Matrix;
use super::LlmError;
use crate::gguf::GgufFile;
use crate::weights::{TensorSource, VarBuilder};

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
    pub mlp_norm: NormWeights,
    /// Gated MLPs: `[gate; up]` rows `[2·I, hidden]`; plain MLPs: `[I, hidden]`.
    pub up: Tensor,
    pub up_bias: Option<Tensor>,
    pub down: Tensor,
    pub down_bias: Option<Tensor>,
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

    /// A tensor as f32 with exactly `shape`.
    fn dense(&self, name: &str, shape: &[usize]) -> Result<HostArray, LlmError> {
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
        let (shape, data) = src.read_f32(name)?.into_parts();
        Ok(HostArray::from_f32(&shape, data)?)
    }

    /// A matrix `[rows, cols]`, kept block-quantized when the file stores it so and `quantized`.
    fn matrix(
        &self,
        name: &str,
        rows: usize,
        cols: usize,
        quantized: bool,
    ) -> Result<Matrix, LlmError> {
        if let (WeightFile::Gguf(f), true) = (self, quantized) {
            if let Some(m) = Matrix::from_gguf_blocks(f, name, rows, cols)? {
                return Ok(m);
            }
        }
        Ok(Matrix::Dense(self.dense(name, &[rows, cols])?))
    }

    fn optional_dense(&self, name: &str, shape: &[usize]) -> Result<Option<HostArray>, LlmError> {
        if self.contains(name) {
            self.dense(name, shape).map(Some)
        } else {
            Ok(None)
        }
    }
}

/// How projection matrices are stored in the programs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum WeightFormat {
    /// As the file stores them: GGUF Q4_0/Q4_1/Q8_0 blocks stay quantized, everything else f32.
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
    let v = a.as_f32().unwrap_or(&[]);
    let mut out = vec![0.0; r * c];
    for i in 0..r {
        for j in 0..c {
            out[j * r + i] = v[i * c + j];
        }
    }
    Ok(HostArray::from_f32(&[c, r], out)?)
}

fn plus_one(a: HostArray) -> Result<HostArray, LlmError> {
    let v: Vec<f32> = a.as_f32().unwrap_or(&[]).iter().map(|&w| 1.0 + w).collect();
    Ok(HostArray::from_f32(a.shape(), v)?)
}

fn c(a: HostArray) -> Tensor {
    graph::constant(a)
}

struct Builder<'a> {
    cfg: &'a LlmConfig,
    file: &'a WeightFile,
    opts: LoadOptions,
    bytes: usize,
}

impl Builder<'_> {
    fn dense(&mut self, name: &str, shape: &[usize]) -> Result<HostArray, LlmError> {
        let a = self.file.dense(name, shape)?;
        self.bytes += a.len() * 4;
        Ok(a)
    }

    fn optional(&mut self, name: &str, shape: &[usize]) -> Result<Option<HostArray>, LlmError> {
        let a = self.file.optional_dense(name, shape)?;
        self.bytes += a.as_ref().map_or(0, |a| a.len() * 4);
        Ok(a)
    }

    fn matrix(&mut self, name: &str, rows: usize, cols: usize) -> Result<Matrix, LlmError> {
        let keep = self.opts.weights == WeightFormat::Stored;
        let m = self.file.matrix(name, rows, cols, keep)?;
        self.stored(m)
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

    fn norm(&mut self, weight: &str, bias: Option<&str>) -> Result<NormWeights, LlmError> {
        let d = self.cfg.hidden_size;
        let w = self.dense(weight, &[d])?;
        let w = match self.cfg.norm {
            NormKind::Rms { plus_one: true, .. } => plus_one(w)?,
            _ => w,
        };
        let b = match (self.cfg.norm, bias) {
            (NormKind::Layer { .. }, Some(b)) => Some(c(self.dense(b, &[d])?)),
            _ => None,
        };
        Ok(NormWeights {
            weight: c(w),
            bias: b,
        })
    }

    fn head_norm(&mut self, name: &str) -> Result<Tensor, LlmError> {
        let w = self.dense(name, &[self.cfg.head_dim])?;
        let w = match self.cfg.norm {
            NormKind::Rms { plus_one: true, .. } => plus_one(w)?,
            _ => w,
        };
        Ok(c(w))
    }
}

/// Hugging Face names (`model.layers.N.self_attn.q_proj.weight`, GPT-2's `transformer.h.N...`).
pub fn load_hf(
    cfg: &LlmConfig,
    vb: &VarBuilder,
    opts: LoadOptions,
) -> Result<ModelWeights, LlmError> {
    let file = WeightFile::Hf(vb.clone());
    if cfg.family == Family::Gpt2 {
        return load_gpt2_hf(cfg, &file, opts);
    }
    let mut b = Builder {
        cfg,
        file: &file,
        opts,
        bytes: 0,
    };
    let (d, hd) = (cfg.hidden_size, cfg.head_dim);
    let (qw, kw) = (cfg.n_heads * hd, cfg.n_kv_heads * hd);
    let inter = cfg.intermediate_size;
    let embed = b.matrix("model.embed_tokens.weight", cfg.vocab_size, d)?;
    let mut layer_bytes = Vec::new();
    let mut layers = Vec::new();
    for i in 0..cfg.n_layers {
        let p = |s: &str| format!("model.layers.{i}.{s}");
        let before = b.bytes;
        let attn_norm = b.norm(&p("input_layernorm.weight"), None)?;
        let q = b.matrix(&p("self_attn.q_proj.weight"), qw, d)?;
        let k = b.matrix(&p("self_attn.k_proj.weight"), kw, d)?;
        let v = b.matrix(&p("self_attn.v_proj.weight"), kw, d)?;
        let qkv = Matrix::concat_rows(&[q, k, v])?;
        let qkv_bias = if cfg.qkv_bias {
            let parts = [
                b.dense(&p("self_attn.q_proj.bias"), &[qw])?,
                b.dense(&p("self_attn.k_proj.bias"), &[kw])?,
                b.dense(&p("self_attn.v_proj.bias"), &[kw])?,
            ];
            Some(c(concat_vectors(&parts)?))
        } else {
            None
        };
        let (q_norm, k_norm) = if cfg.qk_norm {
            (
                Some(b.head_norm(&p("self_attn.q_norm.weight"))?),
                Some(b.head_norm(&p("self_attn.k_norm.weight"))?),
            )
        } else {
            (None, None)
        };
        let o = b.matrix(&p("self_attn.o_proj.weight"), d, qw)?;
        let o_bias = if cfg.o_bias {
            Some(c(b.dense(&p("self_attn.o_proj.bias"), &[d])?))
        } else {
            None
        };
        let mlp_norm = b.norm(&p("post_attention_layernorm.weight"), None)?;
        let gate = b.matrix(&p("mlp.gate_proj.weight"), inter, d)?;
        let up = b.matrix(&p("mlp.up_proj.weight"), inter, d)?;
        let up = Matrix::concat_rows(&[gate, up])?;
        let up_bias = if cfg.mlp_bias {
            let parts = [
                b.dense(&p("mlp.gate_proj.bias"), &[inter])?,
                b.dense(&p("mlp.up_proj.bias"), &[inter])?,
            ];
            Some(c(concat_vectors(&parts)?))
        } else {
            None
        };
        let down = b.matrix(&p("mlp.down_proj.weight"), d, inter)?;
        let down_bias = if cfg.mlp_bias {
            Some(c(b.dense(&p("mlp.down_proj.bias"), &[d])?))
        } else {
            None
        };
        layers.push(LayerWeights {
            attn_norm,
            qkv: qkv.constant()?,
            qkv_bias,
            q_norm,
            k_norm,
            o: o.constant()?,
            o_bias,
            mlp_norm,
            up: up.constant()?,
            up_bias,
            down: down.constant()?,
            down_bias,
        });
        layer_bytes.push(b.bytes - before);
    }
    let before = b.bytes;
    let final_norm = b.norm("model.norm.weight", None)?;
    let embed_const = embed.constant()?;
    let head = if cfg.tied_embeddings || !file.contains("lm_head.weight") {
        if !cfg.tied_embeddings {
            return Err(LlmError::Weights(crate::WeightError::MissingTensor {
                name: "lm_head.weight".into(),
                source_desc: file.source().describe(),
                similar: Vec::new(),
            }));
        }
        embed_const.clone()
    } else {
        b.matrix("lm_head.weight", cfg.vocab_size, d)?.constant()?
    };
    let other_bytes = embed.stored_bytes() + (b.bytes - before);
    Ok(ModelWeights {
        embed,
        embed_const,
        pos_embed: None,
        layers,
        final_norm,
        head,
        layer_bytes,
        other_bytes,
    })
}

fn load_gpt2_hf(
    cfg: &LlmConfig,
    file: &WeightFile,
    opts: LoadOptions,
) -> Result<ModelWeights, LlmError> {
    let prefix = if file.contains("transformer.wte.weight") {
        "transformer."
    } else {
        ""
    };
    let mut b = Builder {
        cfg,
        file,
        opts,
        bytes: 0,
    };
    let (d, inter) = (cfg.hidden_size, cfg.intermediate_size);
    let n = |s: &str| format!("{prefix}{s}");
    let wte = b.dense(&n("wte.weight"), &[cfg.vocab_size, d])?;
    b.bytes -= wte.len() * 4;
    let embed = b.stored(Matrix::Dense(wte))?;
    let max = match cfg.positions {
        super::config::Positions::Learned { max } => max,
        _ => return Err(LlmError::Internal("GPT-2 without learned positions".into())),
    };
    let pos = b.dense(&n("wpe.weight"), &[max, d])?;
    let mut layers = Vec::new();
    let mut layer_bytes = Vec::new();
    for i in 0..cfg.n_layers {
        let p = |s: &str| format!("{prefix}h.{i}.{s}");
        let before = b.bytes;
        let attn_norm = b.norm(&p("ln_1.weight"), Some(&p("ln_1.bias")))?;
        // Conv1D weights are [in, out]: transposed to [out, in]
        let conv1d =
            |b: &mut Builder<'_>, name: &str, shape: [usize; 2]| -> Result<Tensor, LlmError> {
                let w = transpose(&b.dense(name, &shape)?)?;
                b.bytes -= w.len() * 4;
                b.stored(Matrix::Dense(w))?.constant()
            };
        let qkv = conv1d(&mut b, &p("attn.c_attn.weight"), [d, 3 * d])?;
        let qkv_bias = b.dense(&p("attn.c_attn.bias"), &[3 * d])?;
        let o = conv1d(&mut b, &p("attn.c_proj.weight"), [d, d])?;
        let o_bias = b.dense(&p("attn.c_proj.bias"), &[d])?;
        let mlp_norm = b.norm(&p("ln_2.weight"), Some(&p("ln_2.bias")))?;
        let up = conv1d(&mut b, &p("mlp.c_fc.weight"), [d, inter])?;
        let up_bias = b.dense(&p("mlp.c_fc.bias"), &[inter])?;
        let down = conv1d(&mut b, &p("mlp.c_proj.weight"), [inter, d])?;
        let down_bias = b.dense(&p("mlp.c_proj.bias"), &[d])?;
        layers.push(LayerWeights {
            attn_norm,
            qkv,
            qkv_bias: Some(c(qkv_bias)),
            q_norm: None,
            k_norm: None,
            o,
            o_bias: Some(c(o_bias)),
            mlp_norm,
            up,
            up_bias: Some(c(up_bias)),
            down,
            down_bias: Some(c(down_bias)),
        });
        layer_bytes.push(b.bytes - before);
    }
    let before = b.bytes;
    let final_norm = b.norm(&n("ln_f.weight"), Some(&n("ln_f.bias")))?;
    let embed_const = embed.constant()?;
    let head = if file.contains("lm_head.weight") && !cfg.tied_embeddings {
        b.matrix("lm_head.weight", cfg.vocab_size, d)?.constant()?
    } else {
        embed_const.clone()
    };
    let other_bytes = embed.stored_bytes() + b.bytes - before;
    Ok(ModelWeights {
        embed,
        embed_const,
        pos_embed: Some(pos),
        layers,
        final_norm,
        head,
        layer_bytes,
        other_bytes,
    })
}

/// llama.cpp's names (`blk.N.attn_q.weight`, `token_embd.weight`, ...). Llama-architecture q/k
/// rows are stored permuted for llama.cpp's adjacent-pair RoPE; they are put back in Hugging Face
/// order (pairs `i, i + half`), which the layer plan rotates.
pub fn load_gguf(
    cfg: &LlmConfig,
    gguf: &Arc<GgufFile>,
    opts: LoadOptions,
) -> Result<ModelWeights, LlmError> {
    let file = WeightFile::Gguf(gguf.clone());
    let mut b = Builder {
        cfg,
        file: &file,
        opts,
        bytes: 0,
    };
    let (d, hd, inter) = (cfg.hidden_size, cfg.head_dim, cfg.intermediate_size);
    let (qw, kw) = (cfg.n_heads * hd, cfg.n_kv_heads * hd);
    let embed = b.matrix("token_embd.weight", cfg.vocab_size, d)?;
    let pos_embed = match cfg.positions {
        super::config::Positions::Learned { max } => {
            Some(b.dense("position_embd.weight", &[max, d])?)
        }
        _ => None,
    };
    let unpermute = cfg.family == Family::Llama;
    let layer_norm = matches!(cfg.norm, NormKind::Layer { .. });
    let mut layers = Vec::new();
    let mut layer_bytes = Vec::new();
    for i in 0..cfg.n_layers {
        let p = |s: &str| format!("blk.{i}.{s}");
        let before = b.bytes;
        let attn_norm = b.norm(
            &p("attn_norm.weight"),
            layer_norm.then(|| p("attn_norm.bias")).as_deref(),
        )?;
        let (qkv, qkv_bias) = if file.contains(&p("attn_qkv.weight")) {
            let m = b.matrix(&p("attn_qkv.weight"), qw + 2 * kw, d)?;
            let bias = b.optional(&p("attn_qkv.bias"), &[qw + 2 * kw])?;
            (m, bias.map(c))
        } else {
            let mut q = b.matrix(&p("attn_q.weight"), qw, d)?;
            let mut k = b.matrix(&p("attn_k.weight"), kw, d)?;
            if unpermute {
                q = q.permute_rows(&rope_unpermutation(cfg.n_heads, hd))?;
                k = k.permute_rows(&rope_unpermutation(cfg.n_kv_heads, hd))?;
            }
            let v = b.matrix(&p("attn_v.weight"), kw, d)?;
            let bias = if cfg.qkv_bias {
                let parts = [
                    b.dense(&p("attn_q.bias"), &[qw])?,
                    b.dense(&p("attn_k.bias"), &[kw])?,
                    b.dense(&p("attn_v.bias"), &[kw])?,
                ];
                Some(c(concat_vectors(&parts)?))
            } else {
                None
            };
            (Matrix::concat_rows(&[q, k, v])?, bias)
        };
        let (q_norm, k_norm) = if cfg.qk_norm {
            (
                Some(b.head_norm(&p("attn_q_norm.weight"))?),
                Some(b.head_norm(&p("attn_k_norm.weight"))?),
            )
        } else {
            (None, None)
        };
        let o = b.matrix(&p("attn_output.weight"), d, qw)?;
        let o_bias = b.optional(&p("attn_output.bias"), &[d])?.map(c);
        let mlp_norm = b.norm(
            &p("ffn_norm.weight"),
            layer_norm.then(|| p("ffn_norm.bias")).as_deref(),
        )?;
        let (up, up_bias) = match cfg.mlp {
            MlpKind::Gated(_) => {
                let gate = b.matrix(&p("ffn_gate.weight"), inter, d)?;
                let up = b.matrix(&p("ffn_up.weight"), inter, d)?;
                let bias = if cfg.mlp_bias {
                    let parts = [
                        b.dense(&p("ffn_gate.bias"), &[inter])?,
                        b.dense(&p("ffn_up.bias"), &[inter])?,
                    ];
                    Some(c(concat_vectors(&parts)?))
                } else {
                    None
                };
                (Matrix::concat_rows(&[gate, up])?, bias)
            }
            MlpKind::Plain(_) => (
                b.matrix(&p("ffn_up.weight"), inter, d)?,
                b.optional(&p("ffn_up.bias"), &[inter])?.map(c),
            ),
        };
        let down = b.matrix(&p("ffn_down.weight"), d, inter)?;
        let down_bias = b.optional(&p("ffn_down.bias"), &[d])?.map(c);
        layers.push(LayerWeights {
            attn_norm,
            qkv: qkv.constant()?,
            qkv_bias,
            q_norm,
            k_norm,
            o: o.constant()?,
            o_bias,
            mlp_norm,
            up: up.constant()?,
            up_bias,
            down: down.constant()?,
            down_bias,
        });
        layer_bytes.push(b.bytes - before);
    }
    let before = b.bytes;
    let final_norm = b.norm(
        "output_norm.weight",
        layer_norm.then_some("output_norm.bias"),
    )?;
    let embed_const = embed.constant()?;
    let head = if cfg.tied_embeddings {
        embed_const.clone()
    } else {
        b.matrix("output.weight", cfg.vocab_size, d)?.constant()?
    };
    let other_bytes = embed.stored_bytes() + b.bytes - before;
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
