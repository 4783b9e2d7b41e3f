//! The tensors of an encoder checkpoint, found by family-specific names under a detected prefix,
//! each checked against the shape the config implies. A classification head is detected from the
//! names present.

use aneforge::HostArray as GraphArray;

use super::config::{EncoderConfig, Family};
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

/// An embedding table `[rows, dim]`.
#[derive(Clone, Debug)]
pub struct Table {
    pub array: GraphArray,
    pub rows: usize,
    pub dim: usize,
}

impl Table {
    /// Row `i`; `None` past the end.
    pub fn row(&self, i: usize) -> Option<&[f32]> {
        self.array
            .as_f32()
            .and_then(|d| d.get(i * self.dim..(i + 1) * self.dim))
    }
}

#[derive(Clone, Debug)]
pub struct LayerWeights {
    pub query: Linear,
    pub key: Linear,
    pub value: Linear,
    pub attention_out: Linear,
    pub attention_norm: Norm,
    pub ffn_in: Linear,
    pub ffn_out: Linear,
    pub ffn_norm: Norm,
}

#[derive(Clone, Debug)]
pub struct EncoderWeights {
    pub word_embeddings: Table,
    pub position_embeddings: Table,
    pub token_type_embeddings: Option<Table>,
    pub embedding_norm: Norm,
    pub layers: Vec<LayerWeights>,
    /// MPNet: `[buckets, heads]`.
    pub relative_attention_bias: Option<Table>,
}

/// A sequence-classification head over the first token's hidden state.
#[derive(Clone, Debug)]
pub enum ClassifierHead {
    /// BERT: `pooler.dense` + tanh, then `classifier`.
    BertPooler { pooler: Linear, classifier: Linear },
    /// RoBERTa, XLM-R, CamemBERT, MPNet: `classifier.dense` + tanh, then `classifier.out_proj`.
    DenseTanh { dense: Linear, out_proj: Linear },
    /// DistilBERT: `pre_classifier` + ReLU, then `classifier`.
    PreClassifierRelu {
        pre_classifier: Linear,
        classifier: Linear,
    },
}

impl ClassifierHead {
    pub fn num_labels(&self) -> usize {
        let last = match self {
            ClassifierHead::BertPooler { classifier, .. } => classifier,
            ClassifierHead::DenseTanh { out_proj, .. } => out_proj,
            ClassifierHead::PreClassifierRelu { classifier, .. } => classifier,
        };
        last.weight.shape()[0]
    }

    pub fn describe(&self) -> &'static str {
        match self {
            ClassifierHead::BertPooler { .. } => "pooler.dense + tanh + classifier (BERT)",
            ClassifierHead::DenseTanh { .. } => {
                "classifier.dense + tanh + classifier.out_proj (RoBERTa)"
            }
            ClassifierHead::PreClassifierRelu { .. } => {
                "pre_classifier + ReLU + classifier (DistilBERT)"
            }
        }
    }
}

fn to_graph(vb: &VarBuilder, name: &str, shape: &[usize]) -> Result<GraphArray, WeightError> {
    let host = vb.get(shape, name)?;
    let (shape, data) = host.into_parts();
    GraphArray::from_f32(&shape, data).map_err(|e| WeightError::BadTensor {
        name: vb.path(name),
        file: vb.meta(name).map(|m| m.file).unwrap_or_default(),
        reason: e.to_string(),
    })
}

fn linear(vb: &VarBuilder, name: &str, out: usize, inp: usize) -> Result<Linear, WeightError> {
    let vb = vb.pp(name);
    let weight = to_graph(&vb, "weight", &[out, inp])?;
    let bias = if vb.contains("bias") {
        Some(to_graph(&vb, "bias", &[out])?)
    } else {
        None
    };
    Ok(Linear { weight, bias })
}

/// Older checkpoints name layer-norm parameters `gamma`/`beta`; transformers renames them on load.
fn norm(vb: &VarBuilder, name: &str, dim: usize) -> Result<Norm, WeightError> {
    let vb = vb.pp(name);
    let (g, b) = if !vb.contains("weight") && vb.contains("gamma") {
        ("gamma", "beta")
    } else {
        ("weight", "bias")
    };
    Ok(Norm {
        gamma: to_graph(&vb, g, &[dim])?,
        beta: to_graph(&vb, b, &[dim])?,
    })
}

fn table(vb: &VarBuilder, name: &str, rows: usize, dim: usize) -> Result<Table, WeightError> {
    Ok(Table {
        array: to_graph(vb, name, &[rows, dim])?,
        rows,
        dim,
    })
}

const WORD_EMBEDDINGS: &str = "embeddings.word_embeddings.weight";

/// The prefix under which the encoder's tensors live: `""` for a bare model, `bert.`,
/// `roberta.`, `distilbert.`, `mpnet.` ... for a task model. The shortest prefix of a name ending
/// in `embeddings.word_embeddings.weight` wins.
pub fn encoder_prefix(root: &VarBuilder) -> Result<String, WeightError> {
    let names = root.source().names();
    let mut found: Vec<&str> = names
        .iter()
        .filter_map(|n| n.strip_suffix(WORD_EMBEDDINGS))
        .filter(|p| p.is_empty() || p.ends_with('.'))
        .collect();
    found.sort_by_key(|p| p.len());
    match found.first() {
        Some(p) => Ok(p.trim_end_matches('.').to_string()),
        None => Err(WeightError::MissingTensor {
            name: WORD_EMBEDDINGS.to_string(),
            source_desc: root.source().describe(),
            similar: crate::weights::similar_names(WORD_EMBEDDINGS, &names, 3),
        }),
    }
}

impl EncoderWeights {
    /// `vb` is scoped to the encoder prefix.
    pub fn load(vb: &VarBuilder, cfg: &EncoderConfig) -> Result<EncoderWeights, WeightError> {
        let h = cfg.hidden_size;
        let emb = vb.pp("embeddings");
        let word_embeddings = table(&emb, "word_embeddings.weight", cfg.vocab_size, h)?;
        let position_embeddings = table(
            &emb,
            "position_embeddings.weight",
            cfg.max_position_embeddings,
            h,
        )?;
        let token_type_embeddings = if cfg.type_vocab_size > 0 {
            Some(table(
                &emb,
                "token_type_embeddings.weight",
                cfg.type_vocab_size,
                h,
            )?)
        } else {
            None
        };
        let embedding_norm = norm(&emb, "LayerNorm", h)?;
        let f = cfg.intermediate_size;
        // `num_layers` comes from config.json: grow with the layers actually found rather than
        // reserving for a count no tensor has backed yet.
        let mut layers = Vec::new();
        for i in 0..cfg.num_layers {
            layers.push(match cfg.family {
                Family::DistilBert => {
                    let l = vb.pp(format!("transformer.layer.{i}"));
                    let a = l.pp("attention");
                    LayerWeights {
                        query: linear(&a, "q_lin", h, h)?,
                        key: linear(&a, "k_lin", h, h)?,
                        value: linear(&a, "v_lin", h, h)?,
                        attention_out: linear(&a, "out_lin", h, h)?,
                        attention_norm: norm(&l, "sa_layer_norm", h)?,
                        ffn_in: linear(&l, "ffn.lin1", f, h)?,
                        ffn_out: linear(&l, "ffn.lin2", h, f)?,
                        ffn_norm: norm(&l, "output_layer_norm", h)?,
                    }
                }
                Family::MpNet => {
                    let l = vb.pp(format!("encoder.layer.{i}"));
                    let a = l.pp("attention.attn");
                    LayerWeights {
                        query: linear(&a, "q", h, h)?,
                        key: linear(&a, "k", h, h)?,
                        value: linear(&a, "v", h, h)?,
                        attention_out: linear(&a, "o", h, h)?,
                        attention_norm: norm(&l, "attention.LayerNorm", h)?,
                        ffn_in: linear(&l, "intermediate.dense", f, h)?,
                        ffn_out: linear(&l, "output.dense", h, f)?,
                        ffn_norm: norm(&l, "output.LayerNorm", h)?,
                    }
                }
                _ => {
                    let l = vb.pp(format!("encoder.layer.{i}"));
                    let a = l.pp("attention.self");
                    LayerWeights {
                        query: linear(&a, "query", h, h)?,
                        key: linear(&a, "key", h, h)?,
                        value: linear(&a, "value", h, h)?,
                        attention_out: linear(&l, "attention.output.dense", h, h)?,
                        attention_norm: norm(&l, "attention.output.LayerNorm", h)?,
                        ffn_in: linear(&l, "intermediate.dense", f, h)?,
                        ffn_out: linear(&l, "output.dense", h, f)?,
                        ffn_norm: norm(&l, "output.LayerNorm", h)?,
                    }
                }
            });
        }
        let relative_attention_bias = match cfg.relative_attention_buckets {
            Some(buckets) => Some(table(
                vb,
                "encoder.relative_attention_bias.weight",
                buckets,
                cfg.num_heads,
            )?),
            None => None,
        };
        Ok(EncoderWeights {
            word_embeddings,
            position_embeddings,
            token_type_embeddings,
            embedding_norm,
            layers,
            relative_attention_bias,
        })
    }
}

/// The classification head found in the checkpoint, if any. `root` is unprefixed; `encoder` is
/// scoped to the encoder prefix (BERT's pooler lives there).
pub fn detect_head(
    root: &VarBuilder,
    encoder: &VarBuilder,
    cfg: &EncoderConfig,
) -> Result<Option<ClassifierHead>, WeightError> {
    let h = cfg.hidden_size;
    let labels = |vb: &VarBuilder, name: &str| -> Result<usize, WeightError> {
        let meta = vb.meta(name).ok_or_else(|| WeightError::MissingTensor {
            name: vb.path(name),
            source_desc: vb.source().describe(),
            similar: Vec::new(),
        })?;
        let found = meta.shape.clone();
        match (found.as_slice(), cfg.num_labels) {
            ([n, k], expected) if *k == h && *n > 0 && expected.is_none_or(|e| e == *n) => Ok(*n),
            _ => Err(WeightError::WrongShape {
                name: vb.path(name),
                file: meta.file,
                expected: vec![cfg.num_labels.unwrap_or(1), h],
                found,
            }),
        }
    };
    let head = if root.contains("classifier.out_proj.weight") {
        let n = labels(root, "classifier.out_proj.weight")?;
        ClassifierHead::DenseTanh {
            dense: linear(root, "classifier.dense", h, h)?,
            out_proj: linear(root, "classifier.out_proj", n, h)?,
        }
    } else if root.contains("pre_classifier.weight") {
        let n = labels(root, "classifier.weight")?;
        ClassifierHead::PreClassifierRelu {
            pre_classifier: linear(root, "pre_classifier", h, h)?,
            classifier: linear(root, "classifier", n, h)?,
        }
    } else if root.contains("classifier.weight") && encoder.contains("pooler.dense.weight") {
        let n = labels(root, "classifier.weight")?;
        ClassifierHead::BertPooler {
            pooler: linear(encoder, "pooler.dense", h, h)?,
            classifier: linear(root, "classifier", n, h)?,
        }
    } else {
        return Ok(None);
    };
    Ok(Some(head))
}
