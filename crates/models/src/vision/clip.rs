//! CLIP (Hugging Face `CLIPModel`, openai/clip-vit-* layout): the vision tower (patch embedding
//! with a class embedding, pre-LayerNorm, encoder, post-LayerNorm of the class token, projection)
//! and the text tower (token and position embeddings, causal encoder, final LayerNorm of the
//! end-of-text token, projection), both L2-normalised; `logits_per_image` is
//! `exp(logit_scale) · image · text`, and zero-shot classification is its softmax over labels.
//!
//! Programs: `pixel_values[N, 3, S, S]` → `image_embeds[N, P]`; `inputs_embeds[N, L, D]`
//! (token + position embeddings, summed on the host: gather is walled on the ANE),
//! `attention_mask[N, L]` (1 for tokens) and `pool_weights[N, 1, L]` (one-hot at the pooled
//! token) → `text_embeds[N, P]`. Text lengths round up to a multiple of 8 (at most the position
//! table), so a few programs serve every batch.

use std::path::{Path, PathBuf};

use aneforge::graph::{input, nn::MASKED};
use aneforge::{DType, Tensor};

use crate::activation::Activation;
use crate::resolve::{resolve, ModelSource};
use crate::tokenizer::{Padding, TextTokenizer};
use crate::weights::VarBuilder;

use super::classifier::{open_checkpoint, read_json, ClassifierOptions, Prediction, PIXEL_VALUES};
use super::image_input::{CropRounding, Preprocess, RgbImage};
use super::layers::{load_layer_norm, load_linear_no_bias, LayerNorm, Linear};
use super::programs::{program_batch, run_batched, Compiler, Programs};
use super::resample::Interpolation;
use super::transformer::{Encoder, EncoderShape, Names, PatchEmbedding};
use super::VisionError;

pub const IMAGE_EMBEDS: &str = "image_embeds";
pub const TEXT_EMBEDS: &str = "text_embeds";
pub const INPUTS_EMBEDS: &str = "inputs_embeds";
pub const ATTENTION_MASK: &str = "attention_mask";
pub const POOL_WEIGHTS: &str = "pool_weights";

/// OpenAI CLIP's normalisation constants.
pub const CLIP_MEAN: [f32; 3] = [0.481_454_66, 0.457_827_5, 0.408_210_73];
pub const CLIP_STD: [f32; 3] = [0.268_629_54, 0.261_302_6, 0.275_777_1];

/// Which token the text tower pools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EosPooling {
    /// The highest id of the row (configs with the legacy `eos_token_id` 2, as openai/clip-vit-*
    /// ship: `<|endoftext|>` is the vocabulary's last token).
    HighestId,
    /// The first occurrence of this id.
    FirstOf(u32),
}

impl EosPooling {
    /// The pooled position of one unpadded row of ids.
    pub fn position(self, ids: &[u32]) -> Option<usize> {
        match self {
            EosPooling::HighestId => {
                let max = ids.iter().copied().max()?;
                ids.iter().position(|&i| i == max)
            }
            EosPooling::FirstOf(eos) => ids.iter().position(|&i| i == eos),
        }
    }
}

struct VisionTower {
    embedding: PatchEmbedding,
    pre_norm: LayerNorm,
    encoder: Encoder,
    post_norm: LayerNorm,
    projection: Linear,
}

struct TextTower {
    /// `[vocab, hidden]`.
    tokens: Vec<f32>,
    /// `[positions, hidden]`.
    positions: Vec<f32>,
    hidden: usize,
    encoder: Encoder,
    final_norm: LayerNorm,
    projection: Linear,
    pooling: EosPooling,
}

/// Program shapes: images by batch, texts by (batch, length).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Key {
    Image(usize, usize),
    Text(usize, usize),
}

pub struct ClipModel {
    vision: VisionTower,
    text: TextTower,
    /// `exp(logit_scale)`.
    scale: f64,
    tokenizer: TextTokenizer,
    pub preprocess: Preprocess,
    options: ClassifierOptions,
    programs: Programs<Key>,
}

/// A tower's sizes from `config.json`'s `text_config` / `vision_config` and the tensors.
fn tower_shape(
    vb: &VarBuilder,
    prefix: &str,
    config: Option<&serde_json::Value>,
    hidden: usize,
) -> Result<EncoderShape, VisionError> {
    let get = |k: &str| config.and_then(|c| c.get(k));
    let layers = Names::Clip.count_layers(vb, prefix);
    if layers == 0 {
        return Err(VisionError::Unsupported(format!(
            "{}: no layers under {prefix}.encoder.layers.N",
            vb.source().describe()
        )));
    }
    let intermediate = vb
        .meta(&format!("{prefix}.encoder.layers.0.mlp.fc1.weight"))
        .map_or(4 * hidden, |m| m.shape[0]);
    let act_name = get("hidden_act")
        .and_then(|v| v.as_str())
        .unwrap_or("quick_gelu");
    let activation = Activation::parse(act_name).ok_or_else(|| {
        VisionError::Unsupported(format!(
            "config.json: {prefix} hidden_act {act_name:?} is not one of {}",
            Activation::supported()
        ))
    })?;
    Ok(EncoderShape {
        hidden,
        intermediate,
        layers,
        heads: get("num_attention_heads")
            .and_then(|v| v.as_u64())
            .map_or((hidden / 64).max(1), |v| v as usize),
        eps: get("layer_norm_eps")
            .and_then(|v| v.as_f64())
            .unwrap_or(1e-5) as f32,
        activation,
    })
}

fn hidden_of(vb: &VarBuilder, name: &str) -> Result<usize, VisionError> {
    vb.meta(name)
        .and_then(|m| m.shape.last().copied())
        .ok_or_else(|| {
            VisionError::Unsupported(format!(
                "{}: no {name}; not a CLIP checkpoint (CLIPModel names)",
                vb.source().describe()
            ))
        })
}

fn projection(vb: &VarBuilder, name: &str, from: usize) -> Result<Linear, VisionError> {
    let out = vb
        .meta(&format!("{name}.weight"))
        .map(|m| m.shape[0])
        .ok_or_else(|| VisionError::Unsupported(format!("{name}.weight is missing")))?;
    load_linear_no_bias(vb, name, from, out)
}

impl ClipModel {
    /// Whether the checkpoint holds CLIP's towers.
    pub fn detect(vb: &VarBuilder) -> bool {
        vb.contains("vision_model.embeddings.class_embedding")
            && vb.contains("text_model.embeddings.token_embedding.weight")
    }

    /// `spec`: a model directory (config.json, model.safetensors, tokenizer.json,
    /// preprocessor_config.json) or a hub id in the local cache.
    pub fn load(spec: &str, options: ClassifierOptions) -> Result<ClipModel, VisionError> {
        Self::from_dir(&Self::dir_of(spec)?, options)
    }

    /// Whether `spec` names a model directory whose `model.safetensors` holds CLIP's towers;
    /// anything unreadable is not CLIP (its own loader reports why).
    pub fn is_clip(spec: &str) -> bool {
        let Ok(dir) = Self::dir_of(spec) else {
            return false;
        };
        let weights = dir.join("model.safetensors");
        weights.is_file() && open_checkpoint(&weights).is_ok_and(|vb| Self::detect(&vb))
    }

    fn dir_of(spec: &str) -> Result<PathBuf, VisionError> {
        let path = Path::new(spec);
        if path.is_dir() {
            return Ok(path.to_path_buf());
        }
        match resolve(spec)?.source {
            ModelSource::Dir(dir) => Ok(dir),
            ModelSource::GgufFile(f) => Err(VisionError::Model {
                path: f,
                message: "a GGUF file is not a CLIP model".into(),
            }),
        }
    }

    pub fn from_dir(dir: &Path, options: ClassifierOptions) -> Result<ClipModel, VisionError> {
        if options.batch_size == 0 {
            return Err(VisionError::Unsupported(
                "batch size must be at least 1".into(),
            ));
        }
        let weights = dir.join("model.safetensors");
        if !weights.is_file() {
            return Err(VisionError::Model {
                path: dir.to_path_buf(),
                message: "holds no model.safetensors".into(),
            });
        }
        let vb = open_checkpoint(&weights)?;
        if !Self::detect(&vb) {
            return Err(VisionError::Model {
                path: weights,
                message: "not a CLIP checkpoint: no vision_model.embeddings.class_embedding and \
                          text_model.embeddings.token_embedding.weight"
                    .into(),
            });
        }
        let config = read_json(&dir.join("config.json"))?;
        let sub = |k: &str| config.as_ref().and_then(|c| c.get(k)).cloned();
        let (vision_cfg, text_cfg) = (sub("vision_config"), sub("text_config"));

        let dv = hidden_of(&vb, "vision_model.embeddings.class_embedding")?;
        let class = vb
            .get(&[dv], "vision_model.embeddings.class_embedding")?
            .into_data();
        let positions = "vision_model.embeddings.position_embedding.weight";
        let tokens = vb.meta(positions).map_or(0, |m| m.shape[0]);
        let vshape = tower_shape(&vb, "vision_model", vision_cfg.as_ref(), dv)?;
        let vision = VisionTower {
            embedding: PatchEmbedding::load(
                &vb,
                "vision_model.embeddings.patch_embedding",
                false,
                class,
                (positions, &[tokens.max(2), dv]),
            )?,
            pre_norm: load_layer_norm(&vb, "vision_model.pre_layrnorm", dv, vshape.eps)?,
            encoder: Encoder::load(&vb, "vision_model", Names::Clip, vshape)?,
            post_norm: load_layer_norm(&vb, "vision_model.post_layernorm", dv, vshape.eps)?,
            projection: projection(&vb, "visual_projection", dv)?,
        };

        let dt = hidden_of(&vb, "text_model.embeddings.token_embedding.weight")?;
        let table = |name: &str| -> Result<Vec<f32>, VisionError> {
            let rows = vb.meta(name).map_or(0, |m| m.shape[0]);
            Ok(vb.get(&[rows, dt], name)?.into_data())
        };
        let tshape = tower_shape(&vb, "text_model", text_cfg.as_ref(), dt)?;
        let eos = text_cfg
            .as_ref()
            .and_then(|c| c["eos_token_id"].as_u64())
            .unwrap_or(49407);
        let text = TextTower {
            tokens: table("text_model.embeddings.token_embedding.weight")?,
            positions: table("text_model.embeddings.position_embedding.weight")?,
            hidden: dt,
            encoder: Encoder::load(&vb, "text_model", Names::Clip, tshape)?,
            final_norm: load_layer_norm(&vb, "text_model.final_layer_norm", dt, tshape.eps)?,
            projection: projection(&vb, "text_projection", dt)?,
            pooling: if eos == 2 {
                EosPooling::HighestId
            } else {
                EosPooling::FirstOf(eos as u32)
            },
        };
        if text.projection.out_features() != vision.projection.out_features() {
            return Err(VisionError::Unsupported(format!(
                "text_projection gives {} values and visual_projection {}: the towers must agree",
                text.projection.out_features(),
                vision.projection.out_features()
            )));
        }
        let scale = f64::from(vb.get(&[], "logit_scale")?.into_data()[0]).exp();

        let max_positions = text.positions.len() / dt;
        let tokenizer = TextTokenizer::from_dir(dir)
            .and_then(|t| t.with_max_length(Some(max_positions)))
            .map_err(|e| VisionError::Model {
                path: dir.join("tokenizer.json"),
                message: e.to_string(),
            })?;
        let size = vision.embedding.image_size;
        let preprocessor = dir.join("preprocessor_config.json");
        let preprocess = match read_json(&preprocessor)? {
            Some(cfg) => Preprocess::from_preprocessor_config(&cfg).map_err(|message| {
                VisionError::Model {
                    path: preprocessor,
                    message,
                }
            })?,
            None => {
                let mut p = Preprocess::imagenet(size, size, Interpolation::Bicubic);
                p.crop_rounding = CropRounding::Floor;
                p.mean = CLIP_MEAN;
                p.std = CLIP_STD;
                p
            }
        };
        Ok(ClipModel {
            vision,
            text,
            scale,
            tokenizer,
            preprocess,
            options,
            programs: Programs::default(),
        })
    }

    /// The width of both towers' embeddings.
    pub fn dimension(&self) -> usize {
        self.vision.projection.out_features()
    }

    /// `exp(logit_scale)`.
    pub fn logit_scale(&self) -> f64 {
        self.scale
    }

    pub fn tokenizer(&self) -> &TextTokenizer {
        &self.tokenizer
    }

    /// What weight compression did in each program compiled so far (image and text programs,
    /// one report per program; every report is empty without `compress`).
    pub fn compression(&self) -> Vec<aneforge::pipeline::CompressionReport> {
        self.programs.compression()
    }

    fn compiler(&self) -> Compiler {
        Compiler {
            target: self.options.target.clone(),
            engine: self.options.engine,
            compress: self.options.compress,
            matmul: self.options.matmul,
        }
    }

    /// L2-normalised image embeddings of already preprocessed `[3, S, S]` tensors.
    pub fn image_embeddings_of(
        &self,
        inputs: &[Vec<f32>],
        progress: &mut dyn FnMut(usize),
    ) -> Result<Vec<Vec<f32>>, VisionError> {
        let s = self.vision.embedding.image_size;
        run_batched(
            inputs,
            (s, s),
            self.options.batch_size,
            progress,
            |batch, feed| {
                let build = || {
                    let x = input(PIXEL_VALUES, &[batch, 3, s, s], DType::F32)?;
                    let e = self.image_graph(&x)?;
                    self.compiler().load(&[(IMAGE_EMBEDS, &e)])
                };
                self.programs.run(
                    Key::Image(batch, s),
                    build,
                    &[(PIXEL_VALUES, feed)],
                    IMAGE_EMBEDS,
                )
            },
        )
    }

    /// Preprocesses `images` and embeds them (L2-normalised).
    pub fn image_embeddings(
        &self,
        images: &[RgbImage],
        progress: &mut dyn FnMut(usize),
    ) -> Result<Vec<Vec<f32>>, VisionError> {
        let s = self.vision.embedding.image_size;
        for (i, img) in images.iter().enumerate() {
            let size = self.preprocess.output_size(img.width, img.height);
            if size != (s, s) {
                return Err(VisionError::Unsupported(format!(
                    "image {i} preprocesses to {}x{}, the model takes {s}x{s}",
                    size.0, size.1
                )));
            }
        }
        let inputs: Vec<Vec<f32>> = images.iter().map(|i| self.preprocess.tensor(i)).collect();
        self.image_embeddings_of(&inputs, progress)
    }

    /// L2-normalised text embeddings; texts longer than the position table are truncated.
    pub fn text_embeddings(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, VisionError> {
        let dim = self.dimension();
        let d = self.text.hidden;
        let max_positions = self.text.positions.len() / d;
        let mut out = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(self.options.batch_size) {
            let enc = self
                .tokenizer
                .encode_batch(chunk, Padding::Longest)
                .map_err(|e| VisionError::Unsupported(format!("tokenizing: {e}")))?;
            let batch = program_batch(chunk.len(), self.options.batch_size);
            let len = enc.seq_len.div_ceil(8).saturating_mul(8).min(max_positions);
            let mut embeds = vec![0f32; batch * len * d];
            let mut mask = vec![0f32; batch * len];
            let mut pool = vec![0f32; batch * len];
            for row in 0..chunk.len() {
                let ids = &enc.row_ids(row)[..enc.lengths[row]];
                for (t, &id) in ids.iter().enumerate() {
                    let tok = self
                        .text
                        .tokens
                        .get(id as usize * d..(id as usize + 1) * d)
                        .ok_or_else(|| {
                            VisionError::Unsupported(format!(
                                "token id {id} is past the {}-row token embedding table",
                                self.text.tokens.len() / d
                            ))
                        })?;
                    let pos = &self.text.positions[t * d..(t + 1) * d];
                    let at = (row * len + t) * d;
                    for (o, (a, b)) in embeds[at..at + d].iter_mut().zip(tok.iter().zip(pos)) {
                        *o = a + b;
                    }
                    mask[row * len + t] = 1.0;
                }
                let p = self.text.pooling.position(ids).ok_or_else(|| {
                    VisionError::Unsupported(format!(
                        "text {:?} holds no end-of-text token to pool",
                        chunk[row]
                    ))
                })?;
                pool[row * len + p] = 1.0;
            }
            // Padding rows of a rounded-up batch see one token, so no softmax row is empty.
            for row in chunk.len()..batch {
                mask[row * len] = 1.0;
            }
            let build = || {
                let e = self.text_graph(batch, len)?;
                self.compiler().load(&[(TEXT_EMBEDS, &e)])
            };
            let e = self.programs.run(
                Key::Text(batch, len),
                build,
                &[
                    (INPUTS_EMBEDS, &embeds),
                    (ATTENTION_MASK, &mask),
                    (POOL_WEIGHTS, &pool),
                ],
                TEXT_EMBEDS,
            )?;
            out.extend(e.chunks(dim).take(chunk.len()).map(<[f32]>::to_vec));
        }
        Ok(out)
    }

    /// `exp(logit_scale) · image · text` for every image (rows) and text (columns), from
    /// normalised embeddings.
    pub fn logits(&self, images: &[Vec<f32>], texts: &[Vec<f32>]) -> Vec<Vec<f32>> {
        images
            .iter()
            .map(|i| {
                texts
                    .iter()
                    .map(|t| {
                        let dot: f64 = i.iter().zip(t).map(|(a, b)| f64::from(a * b)).sum();
                        (self.scale * dot) as f32
                    })
                    .collect()
            })
            .collect()
    }

    /// Zero-shot classification: each label put into `template` (its `{}` replaced by the
    /// label; `"{}"` uses labels as they are), and the `top_k` labels of each image by the
    /// softmax of `logits_per_image`.
    pub fn zero_shot(
        &self,
        images: &[RgbImage],
        labels: &[&str],
        template: &str,
        top_k: usize,
        progress: &mut dyn FnMut(usize),
    ) -> Result<Vec<Vec<Prediction>>, VisionError> {
        if labels.is_empty() {
            return Err(VisionError::Unsupported(
                "zero-shot classification needs at least one label".into(),
            ));
        }
        if !template.contains("{}") {
            return Err(VisionError::Unsupported(format!(
                "the prompt template {template:?} has no {{}} for the label"
            )));
        }
        let prompts: Vec<String> = labels.iter().map(|l| template.replace("{}", l)).collect();
        let prompts: Vec<&str> = prompts.iter().map(String::as_str).collect();
        let texts = self.text_embeddings(&prompts)?;
        let images = self.image_embeddings(images, progress)?;
        Ok(self
            .logits(&images, &texts)
            .iter()
            .map(|row| super::classifier::top_k(row, labels, top_k))
            .collect())
    }

    fn image_graph(&self, x: &Tensor) -> Result<Tensor, VisionError> {
        let v = &self.vision;
        let h = v.pre_norm.apply(&v.embedding.forward(x)?)?;
        let h = v.encoder.forward(&h, None, false)?;
        let (b, d) = (h.shape()[0] as isize, h.shape()[2] as isize);
        let pooled = v.post_norm.apply(&h.narrow(1, 0, 1)?.reshape(&[b, d])?)?;
        Ok(v.projection.apply(&pooled)?.l2_normalize(-1, 1e-12)?)
    }

    fn text_graph(&self, batch: usize, len: usize) -> Result<Tensor, VisionError> {
        let t = &self.text;
        let d = t.hidden;
        let x = input(INPUTS_EMBEDS, &[batch, len, d], DType::F32)?;
        let mask = input(ATTENTION_MASK, &[batch, len], DType::F32)?;
        let additive = mask.sub_scalar(1.0)?.mul_scalar(-MASKED)?.reshape(&[
            batch as isize,
            1,
            1,
            len as isize,
        ])?;
        let h = t.encoder.forward(&x, Some(&additive), true)?;
        let pool = input(POOL_WEIGHTS, &[batch, 1, len], DType::F32)?;
        // The final LayerNorm is per token, so it commutes with picking the pooled token.
        let pooled = pool.matmul(&h)?.reshape(&[batch as isize, d as isize])?;
        let pooled = t.final_norm.apply(&pooled)?;
        Ok(t.projection.apply(&pooled)?.l2_normalize(-1, 1e-12)?)
    }
}
