//! Hugging Face ViT (`ViTForImageClassification`, google/vit-* layout) and DeiT
//! (`DeiTForImageClassification` and `…WithTeacher`, facebook/deit-* layout): patch embedding,
//! class (and distillation) tokens, the pre-norm encoder, the final LayerNorm and the head on the
//! class token (DeiT with a teacher: the mean of the class-token and distillation-token heads).

use aneforge::Tensor;

use crate::activation::Activation;
use crate::weights::VarBuilder;

use super::image_input::{CropRounding, Preprocess, Resize, IMAGENET_MEAN, IMAGENET_STD};
use super::layers::{load_layer_norm, load_linear, LayerNorm, Linear};
use super::resample::Interpolation;
use super::transformer::{Encoder, EncoderShape, Names, PatchEmbedding};
use super::VisionError;

/// The classification head on the final hidden states.
enum Head {
    /// `classifier` on the class token.
    Class(Linear),
    /// `(cls_classifier(h₀) + distillation_classifier(h₁)) / 2`.
    Distilled { cls: Linear, distillation: Linear },
}

pub struct VisionTransformer {
    deit: bool,
    embedding: PatchEmbedding,
    encoder: Encoder,
    norm: LayerNorm,
    head: Head,
}

/// `config.json`'s number at `key`, or `default` when it is absent.
fn config_usize(config: Option<&serde_json::Value>, key: &str, default: usize) -> usize {
    config
        .and_then(|c| c[key].as_u64())
        .map_or(default, |v| v as usize)
}

impl VisionTransformer {
    /// The root prefix (`vit` or `deit`) when the checkpoint is one of these.
    pub fn detect(vb: &VarBuilder) -> Option<&'static str> {
        ["vit", "deit"]
            .into_iter()
            .find(|p| vb.contains(&format!("{p}.embeddings.cls_token")))
    }

    /// Reads the checkpoint under `root` (`vit` or `deit`); `config` (the model's
    /// `config.json`) gives the head count (default: hidden / 64, as every released ViT has),
    /// `layer_norm_eps` (default 1e-12) and `hidden_act` (default `gelu`).
    pub fn load(
        vb: &VarBuilder,
        root: &str,
        config: Option<&serde_json::Value>,
    ) -> Result<Self, VisionError> {
        let token = |name: &str| -> Result<Option<Vec<f32>>, VisionError> {
            let full = format!("{root}.embeddings.{name}");
            let Some(meta) = vb.meta(&full) else {
                return Ok(None);
            };
            let hidden = meta.shape.last().copied().unwrap_or(0);
            Ok(Some(vb.get(&[1, 1, hidden], &full)?.into_data()))
        };
        let mut leading = token("cls_token")?.ok_or_else(|| {
            VisionError::Unsupported(format!("{root}.embeddings.cls_token is missing"))
        })?;
        let hidden = leading.len();
        let deit = root == "deit";
        if let Some(d) = token("distillation_token")? {
            if d.len() != hidden {
                return Err(VisionError::Unsupported(format!(
                    "{root}.embeddings.distillation_token has {} values, expected {hidden}",
                    d.len()
                )));
            }
            leading.extend(d);
        }
        let lead = leading.len() / hidden;
        let positions = format!("{root}.embeddings.position_embeddings");
        let tokens = vb
            .meta(&positions)
            .map_or(0, |m| m.shape.get(1).copied().unwrap_or(0));
        let embedding = PatchEmbedding::load(
            vb,
            &format!("{root}.embeddings.patch_embeddings.projection"),
            true,
            leading,
            (&positions, &[1, tokens.max(lead + 1), hidden]),
        )?;
        let names = Names::detect_vit(vb, root).ok_or_else(|| {
            VisionError::Unsupported(format!(
                "{}: no encoder layers under {root}.encoder.layer.N or {root}.layers.N",
                vb.source().describe()
            ))
        })?;
        let layers = names.count_layers(vb, root);
        let fc1 = match names {
            Names::VitHub => format!("{root}.encoder.layer.0.intermediate.dense.weight"),
            _ => format!("{root}.layers.0.mlp.fc1.weight"),
        };
        let intermediate = vb.meta(&fc1).map_or(4 * hidden, |m| m.shape[0]);
        let act_name = config
            .and_then(|c| c["hidden_act"].as_str())
            .unwrap_or("gelu");
        let activation = Activation::parse(act_name).ok_or_else(|| {
            VisionError::Unsupported(format!(
                "config.json: hidden_act {act_name:?} is not one of {}",
                Activation::supported()
            ))
        })?;
        let eps = config
            .and_then(|c| c["layer_norm_eps"].as_f64())
            .unwrap_or(1e-12) as f32;
        let shape = EncoderShape {
            hidden,
            intermediate,
            layers,
            heads: config_usize(config, "num_attention_heads", (hidden / 64).max(1)),
            eps,
            activation,
        };
        let encoder = Encoder::load(vb, root, names, shape)?;
        let norm = load_layer_norm(vb, &format!("{root}.layernorm"), hidden, eps)?;
        let classes = |name: &str| vb.meta(&format!("{name}.bias")).map(|m| m.shape[0]);
        let head = if let Some(n) = classes("cls_classifier") {
            Head::Distilled {
                cls: load_linear(vb, "cls_classifier", hidden, n)?,
                distillation: load_linear(vb, "distillation_classifier", hidden, n)?,
            }
        } else {
            let n = classes("classifier").ok_or_else(|| {
                VisionError::Unsupported(format!(
                    "{}: no classification head (classifier or cls_classifier); a bare \
                     {root} encoder cannot classify",
                    vb.source().describe()
                ))
            })?;
            Head::Class(load_linear(vb, "classifier", hidden, n)?)
        };
        Ok(VisionTransformer {
            deit,
            embedding,
            encoder,
            norm,
            head,
        })
    }

    pub fn name(&self) -> String {
        let s = self.encoder.shape();
        let family = if self.deit { "deit" } else { "vit" };
        let distilled = if matches!(self.head, Head::Distilled { .. }) {
            "-distilled"
        } else {
            ""
        };
        format!(
            "{family}{distilled}-patch{}-{}-{}x{}",
            self.embedding.patch, self.embedding.image_size, s.layers, s.hidden
        )
    }

    pub fn classes(&self) -> usize {
        match &self.head {
            Head::Class(l) | Head::Distilled { cls: l, .. } => l.out_features(),
        }
    }

    /// The square input size the position embeddings were trained for.
    pub fn image_size(&self) -> usize {
        self.embedding.image_size
    }

    /// The defaults of transformers' image processors when no `preprocessor_config.json` is
    /// given: ViT resizes to the input size (bilinear) with mean and std 0.5; DeiT resizes to
    /// `size·8/7` square (bicubic), crops the input size, ImageNet mean and std.
    pub fn default_preprocess(&self) -> Preprocess {
        let size = self.image_size();
        if self.deit {
            Preprocess {
                resize: Some(Resize::Exact {
                    height: size * 8 / 7,
                    width: size * 8 / 7,
                }),
                interpolation: Interpolation::Bicubic,
                crop: Some((size, size)),
                crop_rounding: CropRounding::Floor,
                rescale: 1.0 / 255.0,
                mean: IMAGENET_MEAN,
                std: IMAGENET_STD,
            }
        } else {
            Preprocess {
                resize: Some(Resize::Exact {
                    height: size,
                    width: size,
                }),
                interpolation: Interpolation::Bilinear,
                crop: None,
                crop_rounding: CropRounding::Floor,
                rescale: 1.0 / 255.0,
                mean: [0.5; 3],
                std: [0.5; 3],
            }
        }
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor, VisionError> {
        let h = self
            .encoder
            .forward(&self.embedding.forward(x)?, None, false)?;
        let h = self.norm.apply(&h)?;
        let (b, d) = (h.shape()[0] as isize, h.shape()[2] as isize);
        let token =
            |i: usize| -> Result<Tensor, VisionError> { Ok(h.narrow(1, i, 1)?.reshape(&[b, d])?) };
        match &self.head {
            Head::Class(l) => l.apply(&token(0)?),
            Head::Distilled { cls, distillation } => Ok(cls
                .apply(&token(0)?)?
                .add(&distillation.apply(&token(1)?)?)?
                .mul_scalar(0.5)?),
        }
    }
}
