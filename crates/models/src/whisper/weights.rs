//! Whisper's tensors under transformers' `WhisperForConditionalGeneration` names, each checked
//! against the shape the config implies. A CTranslate2 file is read through the same names
//! ([`super::ct2::Ct2Model`]).

use std::sync::Arc;

use aneforge::HostArray as GraphArray;

use super::config::WhisperConfig;
use crate::weights::{VarBuilder, WeightError};

/// `y = x Wᵀ + b` with `weight[out, in]`.
#[derive(Clone, Debug)]
pub struct Linear {
    pub weight: GraphArray,
    pub bias: Option<GraphArray>,
}

#[derive(Clone, Debug)]
pub struct Norm {
    pub gamma: GraphArray,
    pub beta: GraphArray,
}

#[derive(Clone, Debug)]
pub struct Attention {
    pub q: Linear,
    /// No bias in Whisper.
    pub k: Linear,
    pub v: Linear,
    pub out: Linear,
}

#[derive(Clone, Debug)]
pub struct EncoderLayer {
    pub attn_norm: Norm,
    pub attn: Attention,
    pub ffn_norm: Norm,
    pub fc1: Linear,
    pub fc2: Linear,
}

#[derive(Clone, Debug)]
pub struct DecoderLayer {
    pub self_norm: Norm,
    pub self_attn: Attention,
    pub cross_norm: Norm,
    pub cross_attn: Attention,
    pub ffn_norm: Norm,
    pub fc1: Linear,
    pub fc2: Linear,
}

#[derive(Clone, Debug)]
pub struct WhisperWeights {
    /// `[d, n_mels, 3]` and `[d, d, 3]`.
    pub conv1: Linear,
    pub conv2: Linear,
    /// `[max_source_positions, d]`.
    pub encoder_positions: GraphArray,
    pub encoder_layers: Vec<EncoderLayer>,
    pub encoder_norm: Norm,
    /// `[vocab, d]`, also the output projection (tied).
    pub token_embeddings: GraphArray,
    /// `[max_target_positions, d]`.
    pub decoder_positions: GraphArray,
    pub decoder_layers: Vec<DecoderLayer>,
    pub decoder_norm: Norm,
}

fn array(vb: &VarBuilder, shape: &[usize], name: &str) -> Result<GraphArray, WeightError> {
    let (shape, data) = vb.get(shape, name)?.into_parts();
    GraphArray::from_f32(&shape, data).map_err(|e| WeightError::BadTensor {
        name: vb.path(name),
        file: vb.meta(name).map(|m| m.file).unwrap_or_default(),
        reason: e.to_string(),
    })
}

/// How a tower's matrices sit in an fp32 program's blob.
#[derive(Clone, Copy)]
enum Storage {
    /// As the checkpoint stores them (an fp16 checkpoint's stay fp16): the decoder's one-row
    /// products read half the bytes.
    AsStored,
    /// f32: the encoder's products have 1500 rows, where the f32 GEMM against the blob is faster
    /// than one over fp16 tiles widened first.
    F32,
}

/// A matrix read when a program is compiled where the source reads in parts: then it is held
/// once (in the program's blob).
fn matrix(
    vb: &VarBuilder,
    shape: &[usize],
    name: &str,
    storage: Storage,
) -> Result<GraphArray, WeightError> {
    let deferred = vb.get_deferred(shape, name)?.map(|d| match storage {
        Storage::AsStored => d,
        Storage::F32 => d.widened(),
    });
    match deferred {
        Some(d) => {
            GraphArray::from_deferred(shape, Arc::new(d)).map_err(|e| WeightError::BadTensor {
                name: vb.path(name),
                file: vb.meta(name).map(|m| m.file).unwrap_or_default(),
                reason: e.to_string(),
            })
        }
        None => array(vb, shape, name),
    }
}

fn linear(
    vb: &VarBuilder,
    out: usize,
    inp: usize,
    bias: bool,
    storage: Storage,
) -> Result<Linear, WeightError> {
    Ok(Linear {
        weight: matrix(vb, &[out, inp], "weight", storage)?,
        bias: if bias {
            Some(array(vb, &[out], "bias")?)
        } else {
            None
        },
    })
}

fn norm(vb: &VarBuilder, d: usize) -> Result<Norm, WeightError> {
    Ok(Norm {
        gamma: array(vb, &[d], "weight")?,
        beta: array(vb, &[d], "bias")?,
    })
}

fn attention(vb: &VarBuilder, d: usize, storage: Storage) -> Result<Attention, WeightError> {
    Ok(Attention {
        q: linear(&vb.pp("q_proj"), d, d, true, storage)?,
        k: linear(&vb.pp("k_proj"), d, d, false, storage)?,
        v: linear(&vb.pp("v_proj"), d, d, true, storage)?,
        out: linear(&vb.pp("out_proj"), d, d, true, storage)?,
    })
}

/// A decoder layer's attention over the encoder: its keys and values are projected from the
/// encoder's 1500 rows (in the encoder program), its queries and output from one token's.
fn cross_attention(vb: &VarBuilder, d: usize) -> Result<Attention, WeightError> {
    Ok(Attention {
        q: linear(&vb.pp("q_proj"), d, d, true, Storage::AsStored)?,
        k: linear(&vb.pp("k_proj"), d, d, false, Storage::F32)?,
        v: linear(&vb.pp("v_proj"), d, d, true, Storage::F32)?,
        out: linear(&vb.pp("out_proj"), d, d, true, Storage::AsStored)?,
    })
}

impl WhisperWeights {
    /// Reads every tensor of `cfg`'s model from `vb` (rooted at the checkpoint's top level).
    pub fn load(vb: &VarBuilder, cfg: &WhisperConfig) -> Result<WhisperWeights, WeightError> {
        let d = cfg.d_model;
        let f = cfg.ffn_dim;
        let enc = vb.pp("model.encoder");
        let dec = vb.pp("model.decoder");
        let conv = |name: &str, inp: usize| -> Result<Linear, WeightError> {
            Ok(Linear {
                weight: array(&enc, &[d, inp, 3], &format!("{name}.weight"))?,
                bias: Some(array(&enc, &[d], &format!("{name}.bias"))?),
            })
        };
        let encoder_layers = (0..cfg.encoder_layers)
            .map(|i| {
                let l = enc.pp(format!("layers.{i}"));
                Ok(EncoderLayer {
                    attn_norm: norm(&l.pp("self_attn_layer_norm"), d)?,
                    attn: attention(&l.pp("self_attn"), d, Storage::F32)?,
                    ffn_norm: norm(&l.pp("final_layer_norm"), d)?,
                    fc1: linear(&l.pp("fc1"), f, d, true, Storage::F32)?,
                    fc2: linear(&l.pp("fc2"), d, f, true, Storage::F32)?,
                })
            })
            .collect::<Result<Vec<_>, WeightError>>()?;
        let decoder_layers = (0..cfg.decoder_layers)
            .map(|i| {
                let l = dec.pp(format!("layers.{i}"));
                Ok(DecoderLayer {
                    self_norm: norm(&l.pp("self_attn_layer_norm"), d)?,
                    self_attn: attention(&l.pp("self_attn"), d, Storage::AsStored)?,
                    cross_norm: norm(&l.pp("encoder_attn_layer_norm"), d)?,
                    cross_attn: cross_attention(&l.pp("encoder_attn"), d)?,
                    ffn_norm: norm(&l.pp("final_layer_norm"), d)?,
                    fc1: linear(&l.pp("fc1"), f, d, true, Storage::AsStored)?,
                    fc2: linear(&l.pp("fc2"), d, f, true, Storage::AsStored)?,
                })
            })
            .collect::<Result<Vec<_>, WeightError>>()?;
        Ok(WhisperWeights {
            conv1: conv("conv1", cfg.n_mels)?,
            conv2: conv("conv2", d)?,
            encoder_positions: array(
                &enc,
                &[cfg.max_source_positions, d],
                "embed_positions.weight",
            )?,
            encoder_layers,
            encoder_norm: norm(&enc.pp("layer_norm"), d)?,
            token_embeddings: matrix(
                &dec,
                &[cfg.vocab_size, d],
                "embed_tokens.weight",
                Storage::AsStored,
            )?,
            decoder_positions: array(
                &dec,
                &[cfg.max_target_positions, d],
                "embed_positions.weight",
            )?,
            decoder_layers,
            decoder_norm: norm(&dec.pp("layer_norm"), d)?,
        })
    }
}
