//! The pre-norm transformer encoder of ViT, DeiT and both CLIP towers
//! (`x + attn(ln1(x))`, then `x + mlp(ln2(x))`), its patch embedding, and the two tensor-name
//! layouts it is read from (Hugging Face ViT/DeiT and CLIP).

use aneforge::graph::{concat, constant, mha, AttentionWeights};
use aneforge::{HostArray as GraphArray, Tensor};

use crate::activation::Activation;
use crate::weights::VarBuilder;

use super::layers::{
    graph_array, load_conv, load_layer_norm, load_linear, Conv, ConvShape, LayerNorm, Linear,
    Padding,
};
use super::VisionError;

/// The sizes an encoder is read with.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EncoderShape {
    pub hidden: usize,
    pub intermediate: usize,
    pub layers: usize,
    pub heads: usize,
    pub eps: f32,
    pub activation: Activation,
}

/// Where a layer's tensors are named.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Names {
    /// The hub checkpoints of ViT and DeiT: `{p}.encoder.layer.N.{layernorm_before,
    /// attention.attention.{query,key,value}, attention.output.dense, layernorm_after,
    /// intermediate.dense, output.dense}`.
    VitHub,
    /// ViT and DeiT as transformers 5 saves them: `{p}.layers.N.{layernorm_before,
    /// attention.{q,k,v,o}_proj, layernorm_after, mlp.fc1, mlp.fc2}`.
    Vit5,
    /// `{p}.encoder.layers.N.{layer_norm1, self_attn.{q,k,v,out}_proj, layer_norm2, mlp.fc1,
    /// mlp.fc2}`.
    Clip,
}

impl Names {
    /// The ViT/DeiT layout of the checkpoint under `prefix`, if either is there.
    pub fn detect_vit(vb: &VarBuilder, prefix: &str) -> Option<Names> {
        [Names::VitHub, Names::Vit5]
            .into_iter()
            .find(|n| n.count_layers(vb, prefix) > 0)
    }

    fn layer(self, prefix: &str, i: usize) -> String {
        match self {
            Names::VitHub => format!("{prefix}.encoder.layer.{i}"),
            Names::Vit5 => format!("{prefix}.layers.{i}"),
            Names::Clip => format!("{prefix}.encoder.layers.{i}"),
        }
    }

    /// `[ln1, q, k, v, out, ln2, fc1, fc2]` under a layer's prefix.
    fn parts(self) -> [&'static str; 8] {
        match self {
            Names::VitHub => [
                "layernorm_before",
                "attention.attention.query",
                "attention.attention.key",
                "attention.attention.value",
                "attention.output.dense",
                "layernorm_after",
                "intermediate.dense",
                "output.dense",
            ],
            Names::Vit5 => [
                "layernorm_before",
                "attention.q_proj",
                "attention.k_proj",
                "attention.v_proj",
                "attention.o_proj",
                "layernorm_after",
                "mlp.fc1",
                "mlp.fc2",
            ],
            Names::Clip => [
                "layer_norm1",
                "self_attn.q_proj",
                "self_attn.k_proj",
                "self_attn.v_proj",
                "self_attn.out_proj",
                "layer_norm2",
                "mlp.fc1",
                "mlp.fc2",
            ],
        }
    }

    /// How many layers are stored under `prefix`.
    pub fn count_layers(self, vb: &VarBuilder, prefix: &str) -> usize {
        let first = self.parts()[1];
        (0..)
            .take_while(|&i| vb.contains(&format!("{}.{first}.weight", self.layer(prefix, i))))
            .count()
    }
}

struct Block {
    ln1: LayerNorm,
    q: Linear,
    k: Linear,
    v: Linear,
    out: Linear,
    ln2: LayerNorm,
    fc1: Linear,
    fc2: Linear,
}

pub struct Encoder {
    shape: EncoderShape,
    blocks: Vec<Block>,
}

impl Encoder {
    pub fn load(
        vb: &VarBuilder,
        prefix: &str,
        names: Names,
        shape: EncoderShape,
    ) -> Result<Encoder, VisionError> {
        let EncoderShape {
            hidden: d,
            intermediate: f,
            ..
        } = shape;
        if shape.heads == 0 || !d.is_multiple_of(shape.heads) {
            return Err(VisionError::Unsupported(format!(
                "{prefix}: hidden size {d} is not divisible by {} attention heads",
                shape.heads
            )));
        }
        let mut blocks = Vec::with_capacity(shape.layers);
        for i in 0..shape.layers {
            let p = names.layer(prefix, i);
            let [ln1, q, k, v, out, ln2, fc1, fc2] = names.parts().map(|n| format!("{p}.{n}"));
            blocks.push(Block {
                ln1: load_layer_norm(vb, &ln1, d, shape.eps)?,
                q: load_linear(vb, &q, d, d)?,
                k: load_linear(vb, &k, d, d)?,
                v: load_linear(vb, &v, d, d)?,
                out: load_linear(vb, &out, d, d)?,
                ln2: load_layer_norm(vb, &ln2, d, shape.eps)?,
                fc1: load_linear(vb, &fc1, d, f)?,
                fc2: load_linear(vb, &fc2, f, d)?,
            });
        }
        Ok(Encoder { shape, blocks })
    }

    pub fn shape(&self) -> &EncoderShape {
        &self.shape
    }

    /// `x[B, T, hidden]` through every layer; `mask` (`[B, 1, 1, T]`, additive) and `causal` as
    /// in [`aneforge::graph::sdpa`].
    pub fn forward(
        &self,
        x: &Tensor,
        mask: Option<&Tensor>,
        causal: bool,
    ) -> Result<Tensor, VisionError> {
        let mut x = x.clone();
        for b in &self.blocks {
            let (wq, bq) = b.q.constants();
            let (wk, bk) = b.k.constants();
            let (wv, bv) = b.v.constants();
            let (wo, bo) = b.out.constants();
            let w = AttentionWeights {
                wq,
                wk,
                wv,
                wo,
                bq,
                bk,
                bv,
                bo,
                num_heads: self.shape.heads,
                num_kv_heads: self.shape.heads,
            };
            let h = b.ln1.apply(&x)?;
            x = x.add(&mha(&h, &h, &w, mask, causal)?)?;
            let h = self
                .shape
                .activation
                .apply(&b.fc1.apply(&b.ln2.apply(&x)?)?)?;
            x = x.add(&b.fc2.apply(&h)?)?;
        }
        Ok(x)
    }
}

/// Non-overlapping `patch × patch` patches projected to `hidden` by a strided convolution,
/// leading tokens (class, distillation) prepended, position embeddings added.
pub struct PatchEmbedding {
    pub projection: Conv,
    pub patch: usize,
    /// `[tokens, hidden]`: the class (and distillation) tokens, in order.
    pub leading: GraphArray,
    /// `[leading + patches, hidden]`.
    pub positions: GraphArray,
    /// The square input size the position table was trained for.
    pub image_size: usize,
}

impl PatchEmbedding {
    /// The projection `{conv}.weight` `[hidden, 3, patch, patch]` (and `{conv}.bias` when
    /// `bias`), the leading token vectors and the `[tokens, hidden]` position table.
    pub fn load(
        vb: &VarBuilder,
        conv: &str,
        bias: bool,
        leading: Vec<f32>,
        positions: (&str, &[usize]),
    ) -> Result<PatchEmbedding, VisionError> {
        let meta = vb.meta(&format!("{conv}.weight")).ok_or_else(|| {
            VisionError::Unsupported(format!("{}: no {conv}.weight", vb.source().describe()))
        })?;
        if meta.shape.len() != 4 || meta.shape[1] != 3 || meta.shape[2] != meta.shape[3] {
            return Err(VisionError::Unsupported(format!(
                "{conv}.weight has shape {:?}, expected [hidden, 3, patch, patch]",
                meta.shape
            )));
        }
        let (hidden, patch) = (meta.shape[0], meta.shape[2]);
        let projection = load_conv(
            vb,
            conv,
            ConvShape {
                cin: 3,
                cout: hidden,
                kernel: patch,
                stride: patch,
                groups: 1,
            },
            bias,
        )?;
        let (name, shape) = positions;
        let table = vb.get(shape, name)?.into_data();
        let tokens = table.len() / hidden;
        let lead = leading.len() / hidden;
        let side = ((tokens - lead) as f64).sqrt().round() as usize;
        if side * side + lead != tokens || tokens <= lead {
            return Err(VisionError::Unsupported(format!(
                "{name}: {tokens} positions are not {lead} leading tokens and a square grid of \
                 patches"
            )));
        }
        Ok(PatchEmbedding {
            projection,
            patch,
            leading: graph_array(&[lead, hidden], leading)?,
            positions: graph_array(&[tokens, hidden], table)?,
            image_size: side * patch,
        })
    }

    pub fn hidden(&self) -> usize {
        self.projection.out_channels
    }

    /// `pixel_values[B, 3, S, S]` → `[B, leading + (S/patch)², hidden]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor, VisionError> {
        let s = x.shape();
        let (b, h, w) = (s[0], s[2], s[3]);
        if h != self.image_size || w != self.image_size {
            return Err(VisionError::Unsupported(format!(
                "the position embeddings are for {0}x{0} inputs, not {h}x{w} (interpolated \
                 position embeddings are not supported)",
                self.image_size
            )));
        }
        let d = self.hidden();
        let patches = self.projection.apply(x, Padding::Valid)?;
        let n = (h / self.patch) * (w / self.patch);
        let patches = patches
            .reshape(&[b as isize, d as isize, n as isize])?
            .transpose(&[0, 2, 1])?;
        let lead = self.leading.shape()[0];
        let leading = constant(self.leading.clone())
            .reshape(&[1, lead as isize, d as isize])?
            .broadcast_to(&[b, lead, d])?;
        let tokens = concat(&[leading, patches], 1)?;
        Ok(tokens.add(&constant(self.positions.clone()))?)
    }
}
