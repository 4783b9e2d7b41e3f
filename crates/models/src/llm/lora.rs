//! LoRA adapters of a decoder in PEFT's layout: training them over a frozen base
//! ([`lora_model`]), saving and loading `adapter_model.safetensors` + `adapter_config.json`, and
//! merging them into the base weights (`W + (alpha / r) · B A`).
//!
//! Tensor names are PEFT's saved ones: `base_model.model.model.layers.N.<module>.lora_A.weight`
//! (`[r, in]`) and `...lora_B.weight` (`[out, r]`), with `<module>` one of
//! `self_attn.{q,k,v,o}_proj`, `mlp.{gate,up,down}_proj`. The adapter parameters carry these
//! names in training too (as ports: [`super::training::port_name`]).

use std::path::Path;

use aneforge::graph::{self, HostArray, Tensor};
use aneforge::train::NamedArray;

use super::block::{LayerLora, LoraPair};
use super::config::{Family, LlmConfig, MlpKind};
use super::training::TrainableModel;
use super::weights::ModelWeights;
use super::LlmError;

/// An adaptable projection of a layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proj {
    Q,
    K,
    V,
    O,
    Gate,
    Up,
    Down,
}

impl Proj {
    pub const ALL: [Proj; 7] = [
        Proj::Q,
        Proj::K,
        Proj::V,
        Proj::O,
        Proj::Gate,
        Proj::Up,
        Proj::Down,
    ];

    /// PEFT's `target_modules` name.
    pub fn module(self) -> &'static str {
        match self {
            Proj::Q => "q_proj",
            Proj::K => "k_proj",
            Proj::V => "v_proj",
            Proj::O => "o_proj",
            Proj::Gate => "gate_proj",
            Proj::Up => "up_proj",
            Proj::Down => "down_proj",
        }
    }

    fn path(self) -> &'static str {
        match self {
            Proj::Q => "self_attn.q_proj",
            Proj::K => "self_attn.k_proj",
            Proj::V => "self_attn.v_proj",
            Proj::O => "self_attn.o_proj",
            Proj::Gate => "mlp.gate_proj",
            Proj::Up => "mlp.up_proj",
            Proj::Down => "mlp.down_proj",
        }
    }

    /// `(out, in)` of this projection's weight.
    fn dims(self, cfg: &LlmConfig) -> (usize, usize) {
        let (d, hd, inter) = (cfg.hidden_size, cfg.head_dim, cfg.intermediate_size);
        match self {
            Proj::Q => (cfg.n_heads * hd, d),
            Proj::K | Proj::V => (cfg.n_kv_heads * hd, d),
            Proj::O => (d, cfg.n_heads * hd),
            Proj::Gate | Proj::Up => (inter, d),
            Proj::Down => (d, inter),
        }
    }

    fn slot(self, l: &mut LayerLora) -> &mut Option<LoraPair> {
        match self {
            Proj::Q => &mut l.q,
            Proj::K => &mut l.k,
            Proj::V => &mut l.v,
            Proj::O => &mut l.o,
            Proj::Gate => &mut l.gate,
            Proj::Up => &mut l.up,
            Proj::Down => &mut l.down,
        }
    }
}

/// Rank, scaling and targets of a set of adapters.
#[derive(Clone, Debug, PartialEq)]
pub struct LoraConfig {
    pub rank: usize,
    pub alpha: f32,
    pub targets: Vec<Proj>,
}

impl LoraConfig {
    /// `targets` as PEFT names them: module names (`q_proj,v_proj`) or `all-linear`.
    pub fn parse_targets(spec: &str) -> Result<Vec<Proj>, LlmError> {
        if spec == "all-linear" {
            return Ok(Proj::ALL.to_vec());
        }
        spec.split(',')
            .map(|m| {
                Proj::ALL
                    .into_iter()
                    .find(|p| p.module() == m.trim())
                    .ok_or_else(|| {
                        LlmError::Invalid(format!(
                            "unknown LoRA target module {m:?}; valid: all-linear or a list of {}",
                            Proj::ALL.map(Proj::module).join(", ")
                        ))
                    })
            })
            .collect()
    }

    /// PEFT's `lora_alpha / r`.
    pub fn scale(&self) -> f32 {
        self.alpha / self.rank as f32
    }
}

/// What every adapter tensor name starts with.
pub const ADAPTER_PREFIX: &str = "base_model.model.";

/// The PEFT name of layer `i`'s `proj` adapter matrix `which` (`lora_A` or `lora_B`).
pub fn tensor_name(i: usize, proj: Proj, which: &str) -> String {
    format!(
        "{ADAPTER_PREFIX}model.layers.{i}.{}.{which}.weight",
        proj.path()
    )
}

fn check_family(cfg: &LlmConfig, lc: &LoraConfig) -> Result<(), LlmError> {
    if cfg.family == Family::Gpt2 {
        return Err(LlmError::Invalid(
            "LoRA adapters are supported on Llama-style projections (q/k/v/o, gate/up/down); \
             GPT-2's fused c_attn is not"
                .into(),
        ));
    }
    if cfg.experts.is_some()
        && lc
            .targets
            .iter()
            .any(|p| matches!(p, Proj::Gate | Proj::Up | Proj::Down))
    {
        return Err(LlmError::Invalid(
            "LoRA targets gate_proj/up_proj/down_proj: this model's MLPs are mixtures of experts; \
             adapters are supported on its attention projections (q/k/v/o)"
                .into(),
        ));
    }
    if matches!(cfg.mlp, MlpKind::Plain(_)) && lc.targets.contains(&Proj::Gate) {
        return Err(LlmError::Invalid(
            "LoRA target gate_proj: this model's MLP has no gate".into(),
        ));
    }
    for &p in &lc.targets {
        let (out, inp) = p.dims(cfg);
        if lc.rank == 0 || lc.rank > out.min(inp) {
            return Err(LlmError::Invalid(format!(
                "LoRA rank {} for {} ({out} x {inp}): the rank must be between 1 and {}",
                lc.rank,
                p.module(),
                out.min(inp)
            )));
        }
    }
    Ok(())
}

/// PEFT's initial values in distribution, for [`lora_model`]'s `initial`: `lora_A` [r, in] by
/// `kaiming_uniform_(a = √5)`, i.e. uniform in `±1/√in` (drawn from a generator seeded with
/// `seed`, not torch's), `lora_B` zero.
pub fn peft_init(seed: u64) -> impl FnMut(&str, &[usize]) -> Result<Vec<f32>, LlmError> {
    use rand::{RngExt, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    move |name, shape| {
        let n = shape.iter().product();
        Ok(if name.contains("lora_A") {
            let bound = 1.0 / (shape[1] as f32).sqrt();
            (0..n).map(|_| rng.random_range(-bound..bound)).collect()
        } else {
            vec![0.0; n]
        })
    }
}

/// The base model frozen (its weights stay constants) with trainable adapters on `lc.targets`
/// of every layer; `initial(name, shape)` gives each adapter matrix's starting values.
pub fn lora_model(
    cfg: &LlmConfig,
    w: &ModelWeights,
    lc: &LoraConfig,
    mut initial: impl FnMut(&str, &[usize]) -> Result<Vec<f32>, LlmError>,
) -> Result<TrainableModel, LlmError> {
    check_family(cfg, lc)?;
    let mut params = Vec::new();
    let mut lora = Vec::with_capacity(cfg.n_layers);
    for i in 0..cfg.n_layers {
        let mut l = LayerLora {
            scale: lc.scale(),
            ..LayerLora::default()
        };
        for &p in &lc.targets {
            let (out, inp) = p.dims(cfg);
            let mut make = |which: &str, shape: [usize; 2]| -> Result<Tensor, LlmError> {
                let name = tensor_name(i, p, which);
                let values = initial(&name, &shape)?;
                if values.len() != shape[0] * shape[1] {
                    return Err(LlmError::Invalid(format!(
                        "LoRA tensor {name}: expected {shape:?} ({} values), got {}",
                        shape[0] * shape[1],
                        values.len()
                    )));
                }
                let port = super::training::port_name(&name);
                let t = graph::parameter(&port, HostArray::from_f32(&shape, values)?)?;
                params.push(t.clone());
                Ok(t)
            };
            let a = make("lora_A", [lc.rank, inp])?;
            let b = make("lora_B", [out, lc.rank])?;
            *p.slot(&mut l) = Some(LoraPair { a, b });
        }
        lora.push(l);
    }
    Ok(TrainableModel {
        weights: w.clone(),
        pos_embed: w.pos_embed.clone().map(graph::constant),
        lora,
        params,
    })
}

/// Writes `adapters` (PEFT names: [`super::training::checkpoint_tensors`] of [`lora_model`]'s
/// parameters) into `dir` as PEFT does:
/// `adapter_model.safetensors` and `adapter_config.json`, each written atomically.
pub fn save_adapter(
    dir: &Path,
    lc: &LoraConfig,
    adapters: &[NamedArray],
    base_model: &str,
) -> Result<(), LlmError> {
    let io = |what: &Path, e: std::io::Error| {
        LlmError::Invalid(format!("writing {}: {e}", what.display()))
    };
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    super::training::save_safetensors(&dir.join("adapter_model.safetensors"), adapters)?;
    let config = serde_json::json!({
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base_model,
        "r": lc.rank,
        "lora_alpha": lc.alpha,
        "lora_dropout": 0.0,
        "target_modules": lc.targets.iter().map(|p| p.module()).collect::<Vec<_>>(),
        "bias": "none",
        "fan_in_fan_out": false,
        "inference_mode": true,
        "init_lora_weights": true,
        "use_rslora": false,
        "use_dora": false,
        "modules_to_save": null,
        "rank_pattern": {},
        "alpha_pattern": {},
    });
    let text = serde_json::to_string_pretty(&config)
        .map_err(|e| LlmError::Internal(format!("adapter config: {e}")))?;
    let cfg_path = dir.join("adapter_config.json");
    aneforge::output::write_output(&cfg_path, text.as_bytes()).map_err(|e| io(&cfg_path, e))?;
    Ok(())
}

/// An adapter read from a PEFT directory.
pub struct Adapter {
    pub config: LoraConfig,
    pub tensors: Vec<NamedArray>,
}

/// Reads `dir/adapter_config.json` and `dir/adapter_model.safetensors` (f32 tensors).
pub fn load_adapter(dir: &Path) -> Result<Adapter, LlmError> {
    let cfg_path = dir.join("adapter_config.json");
    let bad = |p: &Path, m: String| LlmError::Invalid(format!("{}: {m}", p.display()));
    let text = std::fs::read_to_string(&cfg_path).map_err(|e| bad(&cfg_path, e.to_string()))?;
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| bad(&cfg_path, e.to_string()))?;
    if json["peft_type"].as_str() != Some("LORA") {
        return Err(bad(&cfg_path, "peft_type is not \"LORA\"".into()));
    }
    let rank = json["r"]
        .as_u64()
        .ok_or_else(|| bad(&cfg_path, "no integer \"r\"".into()))? as usize;
    let alpha = json["lora_alpha"]
        .as_f64()
        .ok_or_else(|| bad(&cfg_path, "no number \"lora_alpha\"".into()))? as f32;
    let targets = match &json["target_modules"] {
        serde_json::Value::String(s) => LoraConfig::parse_targets(s)?,
        serde_json::Value::Array(a) => {
            let names: Vec<&str> = a.iter().filter_map(|v| v.as_str()).collect();
            LoraConfig::parse_targets(&names.join(","))?
        }
        _ => return Err(bad(&cfg_path, "no \"target_modules\"".into())),
    };
    let path = dir.join("adapter_model.safetensors");
    let bytes = std::fs::read(&path).map_err(|e| bad(&path, e.to_string()))?;
    let st =
        safetensors::SafeTensors::deserialize(&bytes).map_err(|e| bad(&path, e.to_string()))?;
    let mut tensors = Vec::new();
    for (name, view) in st.tensors() {
        if view.dtype() != safetensors::tensor::Dtype::F32 {
            return Err(bad(
                &path,
                format!(
                    "tensor {name} is {:?}; only F32 adapters are read",
                    view.dtype()
                ),
            ));
        }
        let data = view
            .data()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        tensors.push((name, view.shape().to_vec(), data));
    }
    Ok(Adapter {
        config: LoraConfig {
            rank,
            alpha,
            targets,
        },
        tensors,
    })
}

/// `w` with `adapter` merged into its (dense) projection weights: `W + (alpha / r) · B A` on the
/// rows of each adapted projection inside the fused matrices.
pub fn merge(
    cfg: &LlmConfig,
    w: &ModelWeights,
    adapter: &Adapter,
) -> Result<ModelWeights, LlmError> {
    let lc = &adapter.config;
    check_family(cfg, lc)?;
    let get = |name: &str, shape: [usize; 2]| -> Result<&[f32], LlmError> {
        let (_, s, d) = adapter
            .tensors
            .iter()
            .find(|(n, _, _)| n == name)
            .ok_or_else(|| LlmError::Invalid(format!("the adapter has no tensor {name}")))?;
        if s[..] != shape {
            return Err(LlmError::Invalid(format!(
                "adapter tensor {name} has shape {s:?}, this model needs {shape:?}"
            )));
        }
        Ok(d)
    };
    let (h, kv, hd, inter) = (
        cfg.n_heads,
        cfg.n_kv_heads,
        cfg.head_dim,
        cfg.intermediate_size,
    );
    let mut out = w.clone();
    for (i, layer) in out.layers.iter_mut().enumerate() {
        for &p in &lc.targets {
            let (rows, inp) = p.dims(cfg);
            let a = get(&tensor_name(i, p, "lora_A"), [lc.rank, inp])?;
            let b = get(&tensor_name(i, p, "lora_B"), [rows, lc.rank])?;
            let (target, first_row) = match p {
                Proj::Q => (&mut layer.qkv, 0),
                Proj::K => (&mut layer.qkv, h * hd),
                Proj::V => (&mut layer.qkv, (h + kv) * hd),
                Proj::O => (&mut layer.o, 0),
                Proj::Gate => (&mut layer.up, 0),
                Proj::Up => (
                    &mut layer.up,
                    if matches!(cfg.mlp, MlpKind::Gated(_)) {
                        inter
                    } else {
                        0
                    },
                ),
                Proj::Down => (&mut layer.down, 0),
            };
            let base = target.constant_value().ok_or_else(|| {
                LlmError::Internal(format!("layer {i} {} is not a constant", p.module()))
            })?;
            if base.as_block_quantized().is_some() {
                return Err(LlmError::Invalid(format!(
                    "layer {i} {} is quantized; load the model with dense weights to merge a \
                     LoRA adapter",
                    p.module()
                )));
            }
            let mut values = base
                .data()
                .values_f32()?
                .ok_or_else(|| {
                    LlmError::Internal(format!("layer {i} {} is not float", p.module()))
                })?
                .to_vec();
            let shape = base.shape().to_vec();
            let scale = lc.scale();
            for r in 0..rows {
                let row = &mut values[(first_row + r) * inp..(first_row + r + 1) * inp];
                for k in 0..lc.rank {
                    let coef = scale * b[r * lc.rank + k];
                    if coef != 0.0 {
                        for (v, av) in row.iter_mut().zip(&a[k * inp..(k + 1) * inp]) {
                            *v += coef * av;
                        }
                    }
                }
            }
            *target = graph::constant(HostArray::from_f32(&shape, values)?);
        }
    }
    Ok(out)
}

/// The full checkpoint tensors of `w` with `adapter` merged ([`merge`]), under the family's
/// Hugging Face names ([`super::training::checkpoint_tensors`]).
pub fn merged_tensors(
    cfg: &LlmConfig,
    w: &ModelWeights,
    adapter: &Adapter,
) -> Result<Vec<NamedArray>, LlmError> {
    use super::training::{checkpoint_tensors, initial_params, trainable};
    let merged = trainable(cfg, &merge(cfg, w, adapter)?)?;
    checkpoint_tensors(cfg, initial_params(&merged)?)
}
