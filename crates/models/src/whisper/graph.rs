//! Whisper's two programs as graphs.
//!
//! The encoder program runs once per 30 s window: `mel` `[1, n_mels, 2·P]` → conv1 (k 3, pad 1)
//! and GELU → conv2 (k 3, stride 2, pad 1) and GELU → plus positions → pre-norm transformer
//! layers → final norm; its outputs are every decoder layer's cross-attention keys and values,
//! `cross_k_l` and `cross_v_l` `[heads, P, head_dim]` (P = 1500 positions), so the decoder never
//! recomputes them within a window.
//!
//! The decoder step program takes one token: `hidden_in` `[1, d]` (token and position embeddings
//! summed on the host: the ANE cannot gather at run time), `write_pos` i32 `[3]` = `[0, pos, 0]`,
//! `mask` `[1, S]` (additive, over the self-attention cache's S positions), the resident caches
//! `k_cache_l`, `v_cache_l` `[heads, S, head_dim]` and the window's `cross_k_l`, `cross_v_l`.
//! Outputs: `logits` `[1, vocab]` (the tied token embeddings as the output projection) and
//! `k_cache_l_out`, `v_cache_l_out` (shared with the inputs, so the caches stay resident).

use aneforge::graph::{constant, input, nn::Conv1dParams, sdpa};
use aneforge::{DType, GraphError, HostArray as GraphArray, Tensor};

use super::config::WhisperConfig;
use super::weights::{Attention, Linear, Norm, WhisperWeights};

pub const MEL: &str = "mel";
// The self-attention cache ports, the hidden input, the write position, the mask and the logits are
// named as the LLM step graph names them.
pub use crate::llm::step::{
    k_cache, k_cache_out, v_cache, v_cache_out, HIDDEN_IN, LOGITS, MASK, WRITE_POS,
};

pub fn cross_k(layer: usize) -> String {
    format!("cross_k_{layer}")
}
pub fn cross_v(layer: usize) -> String {
    format!("cross_v_{layer}")
}
/// Whisper's layer norms use eps 1e-5.
const EPS: f32 = 1e-5;

fn c(a: &GraphArray) -> Tensor {
    constant(a.clone())
}

fn linear(x: &Tensor, l: &Linear) -> Result<Tensor, GraphError> {
    let bias = l.bias.as_ref().map(c);
    x.linear(&c(&l.weight), bias.as_ref())
}

fn norm(x: &Tensor, n: &Norm) -> Result<Tensor, GraphError> {
    x.layer_norm(&[-1], Some(&c(&n.gamma)), Some(&c(&n.beta)), EPS)
}

/// `[rows, d]` → `[heads, rows, head_dim]`.
fn heads_first(x: &Tensor, heads: usize) -> Result<Tensor, GraphError> {
    let s = x.shape().to_vec();
    let (rows, d) = (s[0] as isize, s[1] as isize);
    let h = heads as isize;
    if rows == 1 {
        return x.reshape(&[h, 1, d / h]);
    }
    x.reshape(&[rows, h, d / h])?.transpose(&[1, 0, 2])
}

/// `[heads, rows, head_dim]` → `[rows, d]`.
fn heads_last(x: &Tensor) -> Result<Tensor, GraphError> {
    let s = x.shape().to_vec();
    let (h, rows, hd) = (s[0] as isize, s[1] as isize, s[2] as isize);
    if rows == 1 {
        return x.reshape(&[1, h * hd]);
    }
    x.transpose(&[1, 0, 2])?.reshape(&[rows, h * hd])
}

fn ffn(x: &Tensor, ln: &Norm, fc1: &Linear, fc2: &Linear) -> Result<Tensor, GraphError> {
    let h = linear(&norm(x, ln)?, fc1)?.gelu()?;
    x.add(&linear(&h, fc2)?)
}

/// The encoder program's named outputs (cross-attention keys and values of every decoder layer).
pub fn encoder(
    cfg: &WhisperConfig,
    w: &WhisperWeights,
) -> Result<Vec<(String, Tensor)>, GraphError> {
    let (d, p, heads) = (cfg.d_model, cfg.max_source_positions, cfg.encoder_heads);
    let mel = input(MEL, &[1, cfg.n_mels, cfg.n_frames()], DType::F32)?;
    let conv = |x: &Tensor, l: &Linear, stride: usize| -> Result<Tensor, GraphError> {
        let bias = l.bias.as_ref().map(c);
        x.conv1d(
            &c(&l.weight),
            bias.as_ref(),
            Conv1dParams {
                stride,
                padding: 1,
                dilation: 1,
                groups: 1,
            },
        )?
        .gelu()
    };
    let x = conv(&mel, &w.conv1, 1)?;
    let x = conv(&x, &w.conv2, 2)?;
    let mut x = x
        .reshape(&[d as isize, p as isize])?
        .transpose(&[1, 0])?
        .add(&c(&w.encoder_positions))?;
    for l in &w.encoder_layers {
        let h = norm(&x, &l.attn_norm)?;
        let q = heads_first(&linear(&h, &l.attn.q)?, heads)?;
        let k = heads_first(&linear(&h, &l.attn.k)?, heads)?;
        let v = heads_first(&linear(&h, &l.attn.v)?, heads)?;
        let att = heads_last(&sdpa(&q, &k, &v, None, false, None)?)?;
        x = x.add(&linear(&att, &l.attn.out)?)?;
        x = ffn(&x, &l.ffn_norm, &l.fc1, &l.fc2)?;
    }
    let x = norm(&x, &w.encoder_norm)?;
    let mut outputs = Vec::new();
    for (i, l) in w.decoder_layers.iter().enumerate() {
        let dh = cfg.decoder_heads;
        outputs.push((cross_k(i), heads_first(&linear(&x, &l.cross_attn.k)?, dh)?));
        outputs.push((cross_v(i), heads_first(&linear(&x, &l.cross_attn.v)?, dh)?));
    }
    Ok(outputs)
}

fn attend(
    x: &Tensor,
    a: &Attention,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    heads: usize,
) -> Result<Tensor, GraphError> {
    let q = heads_first(&linear(x, &a.q)?, heads)?;
    let att = heads_last(&sdpa(&q, k, v, mask, false, None)?)?;
    linear(&att, &a.out)
}

/// The decoder step program's named outputs for a self-attention cache of `context` positions.
pub fn decoder_step(
    cfg: &WhisperConfig,
    w: &WhisperWeights,
    context: usize,
) -> Result<Vec<(String, Tensor)>, GraphError> {
    let (d, heads) = (cfg.d_model, cfg.decoder_heads);
    let hd = d / heads;
    let p = cfg.max_source_positions;
    let mut x = input(HIDDEN_IN, &[1, d], DType::F32)?;
    let write_pos = input(WRITE_POS, &[3], DType::I32)?;
    let mask = input(MASK, &[1, context], DType::F32)?;
    let mut caches = Vec::new();
    for (i, l) in w.decoder_layers.iter().enumerate() {
        let h = norm(&x, &l.self_norm)?;
        let k = heads_first(&linear(&h, &l.self_attn.k)?, heads)?;
        let v = heads_first(&linear(&h, &l.self_attn.v)?, heads)?;
        let k_cache = input(&k_cache(i), &[heads, context, hd], DType::F32)?;
        let v_cache = input(&v_cache(i), &[heads, context, hd], DType::F32)?;
        let k_all = k_cache.dynamic_slice_update(&k, &write_pos)?;
        let v_all = v_cache.dynamic_slice_update(&v, &write_pos)?;
        x = x.add(&attend(
            &h,
            &l.self_attn,
            &k_all,
            &v_all,
            Some(&mask),
            heads,
        )?)?;
        let h = norm(&x, &l.cross_norm)?;
        let ck = input(&cross_k(i), &[heads, p, hd], DType::F32)?;
        let cv = input(&cross_v(i), &[heads, p, hd], DType::F32)?;
        x = x.add(&attend(&h, &l.cross_attn, &ck, &cv, None, heads)?)?;
        x = ffn(&x, &l.ffn_norm, &l.fc1, &l.fc2)?;
        caches.push((k_cache_out(i), k_all));
        caches.push((v_cache_out(i), v_all));
    }
    let x = norm(&x, &w.decoder_norm)?;
    let logits = x.linear(&c(&w.token_embeddings), None)?;
    let mut outputs = vec![(LOGITS.to_string(), logits)];
    outputs.extend(caches);
    Ok(outputs)
}
