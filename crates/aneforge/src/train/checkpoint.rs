//! Training checkpoints as safetensors files, written atomically.
//!
//! Layout (all tensors little-endian F32, row-major):
//! - `param.<name>`: each trainable parameter;
//! - `optim.<name>.<state>`: each optimizer state tensor (`m`, `v` for Adam/AdamW, `momentum`
//!   for SGD with momentum);
//! - header metadata (strings): `format` = `aneforge-checkpoint`, `version` = `1`, `step` (optimizer
//!   steps taken), `optimizer` (`sgd`, `adam`, `adamw`), `data_position` (opaque to the trainer:
//!   where the data stream resumes), `loss_scale` and `loss_scale_good_steps` (with loss scaling),
//!   `param_order` (the parameter names, comma-separated, in the trainer's order), and any caller
//!   metadata under `meta.<key>`.

use safetensors::tensor::Dtype;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

const FORMAT: &str = "aneforge-checkpoint";
const VERSION: &str = "1";

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("checkpoint {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("checkpoint {path}: not a valid safetensors file: {message}")]
    Format { path: PathBuf, message: String },
    #[error("checkpoint {path}: {message}")]
    Content { path: PathBuf, message: String },
}

/// A named f32 array: `(name, shape, values)`.
pub type NamedArray = (String, Vec<usize>, Vec<f32>);

/// One optimizer state tensor of one parameter.
#[derive(Clone, Debug, PartialEq)]
pub struct StateTensor {
    pub param: String,
    pub state: String,
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

/// Everything needed to resume training exactly.
#[derive(Clone, Debug, PartialEq)]
pub struct Checkpoint {
    pub step: u64,
    pub optimizer: String,
    pub params: Vec<NamedArray>,
    pub state: Vec<StateTensor>,
    /// `(scale, finite steps since the last change)`.
    pub loss_scale: Option<(f32, u32)>,
    pub data_position: String,
    /// Caller metadata (model configuration, seeds, ...).
    pub metadata: BTreeMap<String, String>,
}

/// What a checkpoint file holds besides the values: [`Checkpoint::save`] and
/// [`super::Trainer::save_checkpoint`] write through it, so both write the same file.
pub(crate) struct Layout<'a> {
    pub step: u64,
    pub optimizer: &'a str,
    /// `(name, shape)` of each parameter.
    pub params: Vec<(&'a str, &'a [usize])>,
    /// `(parameter, state, shape)` of each optimizer state tensor.
    pub state: Vec<(&'a str, &'a str, &'a [usize])>,
    pub loss_scale: Option<(f32, u32)>,
    pub data_position: &'a str,
    pub metadata: &'a BTreeMap<String, String>,
}

impl Layout<'_> {
    /// Writes the file to `path` with [`crate::output::write_safetensors_f32_with`]: streamed,
    /// and atomically (a uniquely named sibling temporary file renamed into place) when `path` is
    /// a regular file. `values(i)` gives tensor `i`: the parameters in order, then the state
    /// tensors in order.
    pub fn write<'v>(
        &self,
        path: &Path,
        values: impl FnMut(usize) -> std::io::Result<std::borrow::Cow<'v, [f32]>>,
    ) -> Result<(), CheckpointError> {
        let io = |source| CheckpointError::Io {
            path: path.to_path_buf(),
            source,
        };
        let names: Vec<String> = self
            .params
            .iter()
            .map(|(name, _)| format!("param.{name}"))
            .chain(
                self.state
                    .iter()
                    .map(|(param, state, _)| format!("optim.{param}.{state}")),
            )
            .collect();
        let shapes = self
            .params
            .iter()
            .map(|&(_, shape)| shape)
            .chain(self.state.iter().map(|&(_, _, shape)| shape));
        let tensors: Vec<(&str, &[usize])> = names.iter().map(String::as_str).zip(shapes).collect();
        let mut meta: HashMap<String, String> = HashMap::new();
        meta.insert("format".into(), FORMAT.into());
        meta.insert("version".into(), VERSION.into());
        meta.insert("step".into(), self.step.to_string());
        meta.insert("optimizer".into(), self.optimizer.to_string());
        meta.insert("data_position".into(), self.data_position.to_string());
        let order: Vec<&str> = self.params.iter().map(|&(n, _)| n).collect();
        meta.insert("param_order".into(), order.join(","));
        if let Some((scale, good)) = self.loss_scale {
            meta.insert("loss_scale".into(), scale.to_string());
            meta.insert("loss_scale_good_steps".into(), good.to_string());
        }
        for (k, v) in self.metadata {
            meta.insert(format!("meta.{k}"), v.clone());
        }
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        std::fs::create_dir_all(&dir).map_err(io)?;
        crate::output::write_safetensors_f32_with(path, &tensors, meta, values).map_err(io)
    }
}

impl Checkpoint {
    /// Writes the checkpoint to `path`, streamed, and atomically (a uniquely named sibling
    /// temporary file renamed into place) when `path` is a regular file.
    pub fn save(&self, path: &Path) -> Result<(), CheckpointError> {
        let arrays: Vec<(&str, &[usize], &[f32])> = self
            .params
            .iter()
            .map(|(name, shape, data)| (name.as_str(), shape.as_slice(), data.as_slice()))
            .chain(
                self.state
                    .iter()
                    .map(|s| (s.param.as_str(), s.shape.as_slice(), s.data.as_slice())),
            )
            .collect();
        if let Some((name, shape, data)) = arrays
            .iter()
            .find(|(_, shape, data)| shape.iter().product::<usize>() != data.len())
        {
            return Err(CheckpointError::Content {
                path: path.to_path_buf(),
                message: format!(
                    "tensor {name}: shape {shape:?} does not hold its {} values",
                    data.len()
                ),
            });
        }
        let layout = Layout {
            step: self.step,
            optimizer: &self.optimizer,
            params: self
                .params
                .iter()
                .map(|(name, shape, _)| (name.as_str(), shape.as_slice()))
                .collect(),
            state: self
                .state
                .iter()
                .map(|s| (s.param.as_str(), s.state.as_str(), s.shape.as_slice()))
                .collect(),
            loss_scale: self.loss_scale,
            data_position: &self.data_position,
            metadata: &self.metadata,
        };
        layout.write(path, |i| Ok(std::borrow::Cow::Borrowed(arrays[i].2)))
    }

    /// Reads a checkpoint written by [`Checkpoint::save`].
    pub fn load(path: &Path) -> Result<Checkpoint, CheckpointError> {
        let bytes = std::fs::read(path).map_err(|source| CheckpointError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Checkpoint::from_bytes(&bytes, path)
    }

    /// Parses checkpoint bytes; `path` names the source in errors.
    pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<Checkpoint, CheckpointError> {
        let content = |message: String| CheckpointError::Content {
            path: path.to_path_buf(),
            message,
        };
        let tensors =
            safetensors::SafeTensors::deserialize(bytes).map_err(|e| CheckpointError::Format {
                path: path.to_path_buf(),
                message: e.to_string(),
            })?;
        let (_, header) = safetensors::SafeTensors::read_metadata(bytes).map_err(|e| {
            CheckpointError::Format {
                path: path.to_path_buf(),
                message: e.to_string(),
            }
        })?;
        let meta = header.metadata().clone().unwrap_or_default();
        let get = |k: &str| {
            meta.get(k)
                .cloned()
                .ok_or_else(|| content(format!("metadata key {k:?} is missing")))
        };
        if get("format")? != FORMAT {
            return Err(content(format!(
                "metadata format is {:?}, expected {FORMAT:?}",
                meta.get("format")
            )));
        }
        let version = get("version")?;
        if version != VERSION {
            return Err(content(format!(
                "version {version} is not supported (expected {VERSION})"
            )));
        }
        let step: u64 = get("step")?
            .parse()
            .map_err(|_| content("metadata step is not an integer".into()))?;
        let loss_scale = match (meta.get("loss_scale"), meta.get("loss_scale_good_steps")) {
            (Some(s), Some(g)) => Some((
                s.parse::<f32>()
                    .map_err(|_| content(format!("loss_scale {s:?} is not a number")))?,
                g.parse().map_err(|_| {
                    content(format!("loss_scale_good_steps {g:?} is not an integer"))
                })?,
            )),
            _ => None,
        };
        if let Some((scale, _)) = loss_scale {
            if !(scale.is_finite() && scale > 0.0) {
                return Err(content(format!(
                    "loss_scale {scale} is not a finite positive number"
                )));
            }
        }
        let mut names: Vec<String> = tensors.names().into_iter().map(str::to_string).collect();
        names.sort();
        let mut params = Vec::new();
        let mut state = Vec::new();
        for name in names {
            let view = tensors
                .tensor(&name)
                .map_err(|e| content(format!("tensor {name}: {e}")))?;
            if view.dtype() != Dtype::F32 {
                return Err(content(format!(
                    "tensor {name} is {:?}, expected F32",
                    view.dtype()
                )));
            }
            let data: Vec<f32> = view
                .data()
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            if let Some(i) = data.iter().position(|x| !x.is_finite()) {
                return Err(content(format!(
                    "tensor {name} holds a non-finite value ({}) at index {i}; training from it \
                     would only produce NaN",
                    data[i]
                )));
            }
            let shape = view.shape().to_vec();
            if let Some(p) = name.strip_prefix("param.") {
                params.push((p.to_string(), shape, data));
            } else if let Some(rest) = name.strip_prefix("optim.") {
                let (param, st) = rest.rsplit_once('.').ok_or_else(|| {
                    content(format!("tensor {name}: expected optim.<param>.<state>"))
                })?;
                state.push(StateTensor {
                    param: param.to_string(),
                    state: st.to_string(),
                    shape,
                    data,
                });
            } else {
                return Err(content(format!(
                    "tensor {name}: expected a param. or optim. prefix"
                )));
            }
        }
        if let Some(order) = meta.get("param_order") {
            let rank: HashMap<&str, usize> =
                order.split(',').enumerate().map(|(i, n)| (n, i)).collect();
            let key = |n: &str| rank.get(n).copied().unwrap_or(usize::MAX);
            params.sort_by_key(|(n, _, _)| key(n));
            state.sort_by_key(|t| key(&t.param));
        }
        let metadata = meta
            .iter()
            .filter_map(|(k, v)| k.strip_prefix("meta.").map(|k| (k.to_string(), v.clone())))
            .collect();
        Ok(Checkpoint {
            step,
            optimizer: get("optimizer")?,
            params,
            state,
            loss_scale,
            data_position: get("data_position")?,
            metadata,
        })
    }
}
