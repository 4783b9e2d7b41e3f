//! Models to train from scratch: an MLP, convolutional blocks with trainable group norm, a small
//! CIFAR-style CNN, and a GPT-style decoder (pre-norm, causal attention, learned positions).

use super::init::{ParamStore, WeightLayout};
use crate::autograd::{accuracy, one_hot, softmax_cross_entropy};
use crate::graph::{input, sdpa, Conv2dParams, DType, GraphError, Pool2dParams, Tensor};

/// `x → linear → relu → … → linear`: `sizes` lists the layer widths after the input's last axis.
/// Weights `[out, in]` with He initialisation, biases zero; parameters `{name}{i}_w`, `{name}{i}_b`.
pub fn mlp(
    store: &mut ParamStore,
    x: &Tensor,
    sizes: &[usize],
    name: &str,
) -> Result<Tensor, GraphError> {
    let mut h = x.clone();
    for (i, &out) in sizes.iter().enumerate() {
        let inp = h.shape()[h.rank() - 1];
        let w = store.he_normal(&format!("{name}{i}_w"), &[out, inp], WeightLayout::OutIn)?;
        let b = store.zeros(&format!("{name}{i}_b"), &[out])?;
        h = h.linear(&w, Some(&b))?;
        if i + 1 < sizes.len() {
            h = h.relu()?;
        }
    }
    Ok(h)
}

/// Group normalisation of `[N, C, *S]` with trainable `{name}_gamma` (ones) and `{name}_beta`
/// (zeros), eps 1e-5.
pub fn group_norm_train(
    store: &mut ParamStore,
    x: &Tensor,
    groups: usize,
    name: &str,
) -> Result<Tensor, GraphError> {
    let c = x.shape().get(1).copied().unwrap_or(0);
    let gamma = store.ones(&format!("{name}_gamma"), &[c])?;
    let beta = store.zeros(&format!("{name}_beta"), &[c])?;
    x.group_norm(groups, Some(&gamma), Some(&beta), 1e-5)
}

/// 3×3 convolution (padding 1, no bias, He init from fan-in `Cin·9`) → group norm → ReLU.
pub fn conv_block(
    store: &mut ParamStore,
    x: &Tensor,
    out_channels: usize,
    norm_groups: usize,
    name: &str,
) -> Result<Tensor, GraphError> {
    let cin = x.shape().get(1).copied().unwrap_or(0);
    let w = store.he_normal(
        &format!("{name}_conv_w"),
        &[out_channels, cin, 3, 3],
        WeightLayout::Conv,
    )?;
    let y = x.conv2d(
        &w,
        None,
        Conv2dParams {
            padding: [1, 1],
            ..Conv2dParams::default()
        },
    )?;
    group_norm_train(store, &y, norm_groups, &format!("{name}_gn"))?.relu()
}

/// `[N, C, H, W]` → conv blocks of the given widths, each followed by 2×2 max pooling while the
/// image is at least 2×2 → global average pool → dense `[C, classes]` (He init, `x @ W + b`).
pub fn conv_net(
    store: &mut ParamStore,
    images: &Tensor,
    widths: &[usize],
    norm_groups: usize,
    classes: usize,
) -> Result<Tensor, GraphError> {
    let mut h = images.clone();
    for (i, &w) in widths.iter().enumerate() {
        h = conv_block(store, &h, w, norm_groups, &format!("block{i}"))?;
        if h.shape()[2] >= 2 && h.shape()[3] >= 2 {
            h = h.max_pool2d(Pool2dParams::new([2, 2]))?;
        }
    }
    let pooled = h.mean(&[2, 3], false)?;
    let c = pooled.shape()[1];
    let w = store.he_normal("fc_w", &[c, classes], WeightLayout::InOut)?;
    let b = store.zeros("fc_b", &[classes])?;
    pooled.matmul(&w)?.add(&b)
}

/// A classifier ready to train: inputs `images` and `labels`, its logits, loss and accuracy.
#[derive(Clone, Debug)]
pub struct Classifier {
    pub images: Tensor,
    pub labels: Tensor,
    pub logits: Tensor,
    pub loss: Tensor,
    pub accuracy: Tensor,
}

/// A classifier over `[batch, channels, size, size]` images (`images` f32, `labels` i32 inputs).
pub fn image_classifier(
    store: &mut ParamStore,
    batch: usize,
    channels: usize,
    size: usize,
    widths: &[usize],
    norm_groups: usize,
    classes: usize,
) -> Result<Classifier, GraphError> {
    let images = input("images", &[batch, channels, size, size], DType::F32)?;
    let labels = input("labels", &[batch], DType::I32)?;
    let logits = conv_net(store, &images, widths, norm_groups, classes)?;
    let loss = softmax_cross_entropy(&logits, &labels)?;
    let accuracy = accuracy(&logits, &labels)?;
    Ok(Classifier {
        images,
        labels,
        logits,
        loss,
        accuracy,
    })
}

/// The CIFAR-10-shaped CNN: 32×32 RGB images.
pub fn cifar_cnn(
    store: &mut ParamStore,
    batch: usize,
    widths: &[usize],
    groups: usize,
    classes: usize,
) -> Result<Classifier, GraphError> {
    image_classifier(store, batch, 3, 32, widths, groups, classes)
}

/// A GPT-style decoder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GptConfig {
    pub vocab: usize,
    pub context: usize,
    pub d_model: usize,
    pub heads: usize,
    pub layers: usize,
    pub mlp: usize,
}

impl GptConfig {
    pub fn params(&self) -> usize {
        let (v, t, d, m) = (self.vocab, self.context, self.d_model, self.mlp);
        let block = 4 * d + 3 * d * d + 3 * d + d * d + d + m * d + m + d * m + d;
        v * d + t * d + self.layers * block + 2 * d + v * d
    }
}

/// A decoder's graph: `tokens` i32 `[batch, context]` in, `logits` `[batch, context, vocab]` out.
#[derive(Clone, Debug)]
pub struct Gpt {
    pub tokens: Tensor,
    pub logits: Tensor,
}

fn layer_norm(store: &mut ParamStore, x: &Tensor, name: &str) -> Result<Tensor, GraphError> {
    let d = x.shape()[x.rank() - 1];
    let g = store.ones(&format!("{name}_g"), &[d])?;
    let b = store.zeros(&format!("{name}_b"), &[d])?;
    x.layer_norm(&[-1], Some(&g), Some(&b), 1e-5)
}

/// Builds the decoder (parameters named `wte`, `wpe`, `h{i}_…`, `lnf_…`, `lm_head`). Weights are
/// normal(0, 0.02), the residual projections normal(0, 0.02/√(2·layers)), biases zero, norms
/// identity; embeddings are a one-hot product, so no data-dependent gather is needed.
pub fn gpt(store: &mut ParamStore, cfg: &GptConfig, batch: usize) -> Result<Gpt, GraphError> {
    let (b, t, d, h) = (batch, cfg.context, cfg.d_model, cfg.heads);
    if h == 0 || !d.is_multiple_of(h) {
        return Err(GraphError::attribute(
            "gpt",
            format!("d_model {d} is not divisible by {h} heads"),
        ));
    }
    let dh = d / h;
    let std = 0.02f32;
    let proj_std = std / ((2 * cfg.layers.max(1)) as f32).sqrt();
    let tokens = input("tokens", &[b, t], DType::I32)?;
    let wte = store.normal("wte", &[cfg.vocab, d], std)?;
    let wpe = store.normal("wpe", &[t, d], std)?;
    let hot = one_hot(&tokens, cfg.vocab)?.reshape(&[(b * t) as isize, cfg.vocab as isize])?;
    let mut x = hot
        .matmul(&wte)?
        .reshape(&[b as isize, t as isize, d as isize])?
        .add(&wpe)?;
    let heads = |u: &Tensor| -> Result<Tensor, GraphError> {
        u.reshape(&[b as isize, t as isize, h as isize, dh as isize])?
            .transpose(&[0, 2, 1, 3])
    };
    for l in 0..cfg.layers {
        let p = format!("h{l}");
        let a_in = layer_norm(store, &x, &format!("{p}_ln1"))?;
        let w_qkv = store.normal(&format!("{p}_qkv_w"), &[3 * d, d], std)?;
        let b_qkv = store.zeros(&format!("{p}_qkv_b"), &[3 * d])?;
        let qkv = a_in.linear(&w_qkv, Some(&b_qkv))?;
        let q = heads(&qkv.narrow(-1, 0, d)?)?;
        let k = heads(&qkv.narrow(-1, d, d)?)?;
        let v = heads(&qkv.narrow(-1, 2 * d, d)?)?;
        let att = sdpa(&q, &k, &v, None, true, None)?
            .transpose(&[0, 2, 1, 3])?
            .reshape(&[b as isize, t as isize, d as isize])?;
        let w_o = store.normal(&format!("{p}_attn_proj_w"), &[d, d], proj_std)?;
        let b_o = store.zeros(&format!("{p}_attn_proj_b"), &[d])?;
        x = x.add(&att.linear(&w_o, Some(&b_o))?)?;
        let m_in = layer_norm(store, &x, &format!("{p}_ln2"))?;
        let w_fc = store.normal(&format!("{p}_fc_w"), &[cfg.mlp, d], std)?;
        let b_fc = store.zeros(&format!("{p}_fc_b"), &[cfg.mlp])?;
        let w_pr = store.normal(&format!("{p}_mlp_proj_w"), &[d, cfg.mlp], proj_std)?;
        let b_pr = store.zeros(&format!("{p}_mlp_proj_b"), &[d])?;
        let hidden = m_in.linear(&w_fc, Some(&b_fc))?.gelu()?;
        x = x.add(&hidden.linear(&w_pr, Some(&b_pr))?)?;
    }
    let xf = layer_norm(store, &x, "lnf")?;
    let head = store.normal("lm_head", &[cfg.vocab, d], std)?;
    let logits = xf.linear(&head, None)?;
    Ok(Gpt { tokens, logits })
}

/// A decoder with next-token loss: `targets` i32 `[batch, context]` is the second input.
#[derive(Clone, Debug)]
pub struct GptTraining {
    pub gpt: Gpt,
    pub targets: Tensor,
    pub loss: Tensor,
}

pub fn gpt_training(
    store: &mut ParamStore,
    cfg: &GptConfig,
    batch: usize,
) -> Result<GptTraining, GraphError> {
    let gpt = gpt(store, cfg, batch)?;
    let targets = input("targets", &[batch, cfg.context], DType::I32)?;
    let loss = softmax_cross_entropy(&gpt.logits, &targets)?;
    Ok(GptTraining { gpt, targets, loss })
}
