//! Prefix-scoped access to a [`TensorSource`]: `vb.pp("encoder.layer.0").get(&[384, 384], "attention.self.query.weight")`.

use std::path::Path;
use std::sync::Arc;

use super::{DeferredTensor, HostArray, SafeTensorsFiles, TensorMeta, TensorSource, WeightError};

#[derive(Clone)]
pub struct VarBuilder {
    source: Arc<dyn TensorSource>,
    prefix: String,
}

impl std::fmt::Debug for VarBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VarBuilder")
            .field("source", &self.source.describe())
            .field("prefix", &self.prefix)
            .finish()
    }
}

impl VarBuilder {
    pub fn new(source: Arc<dyn TensorSource>) -> Self {
        VarBuilder {
            source,
            prefix: String::new(),
        }
    }

    /// Over memory-mapped safetensors files (see [`SafeTensorsFiles::open_files`]).
    pub fn from_safetensors<P: AsRef<Path>>(paths: &[P]) -> Result<Self, WeightError> {
        Ok(Self::new(Arc::new(SafeTensorsFiles::open_files(paths)?)))
    }

    /// Over the checkpoint of a model directory (see [`SafeTensorsFiles::open_dir`]).
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self, WeightError> {
        Ok(Self::new(Arc::new(SafeTensorsFiles::open_dir(dir)?)))
    }

    /// A builder whose names are `prefix.name` relative to this one.
    pub fn pp(&self, prefix: impl AsRef<str>) -> Self {
        VarBuilder {
            source: Arc::clone(&self.source),
            prefix: self.path(prefix.as_ref()),
        }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    pub fn source(&self) -> &Arc<dyn TensorSource> {
        &self.source
    }

    /// The full tensor name for `name` under this builder's prefix.
    pub fn path(&self, name: &str) -> String {
        match (self.prefix.is_empty(), name.is_empty()) {
            (true, _) => name.to_string(),
            (false, true) => self.prefix.clone(),
            (false, false) => format!("{}.{name}", self.prefix),
        }
    }

    pub fn contains(&self, name: &str) -> bool {
        self.source.meta(&self.path(name)).is_some()
    }

    pub fn meta(&self, name: &str) -> Option<TensorMeta> {
        self.source.meta(&self.path(name))
    }

    /// The tensor as f32, checked to have exactly `shape`.
    pub fn get(&self, shape: &[usize], name: &str) -> Result<HostArray<f32>, WeightError> {
        let full = self.path(name);
        self.check_shape(&full, shape)?;
        self.source.read_f32(&full)
    }

    /// The tensor as f32, whatever its shape.
    /// Tensor `name` of `shape`, to be read when a program is compiled (see [`DeferredTensor`]);
    /// `None` when the source cannot read it in parts (then [`VarBuilder::get`] it).
    pub fn get_deferred(
        &self,
        shape: &[usize],
        name: &str,
    ) -> Result<Option<DeferredTensor>, WeightError> {
        let full = self.path(name);
        self.check_shape(&full, shape)?;
        Ok(DeferredTensor::new(&self.source, &full))
    }

    pub fn get_any(&self, name: &str) -> Result<HostArray<f32>, WeightError> {
        self.source.read_f32(&self.path(name))
    }

    /// An integer tensor as i64, checked to have exactly `shape`.
    pub fn get_i64(&self, shape: &[usize], name: &str) -> Result<HostArray<i64>, WeightError> {
        let full = self.path(name);
        self.check_shape(&full, shape)?;
        self.source.read_i64(&full)
    }

    fn check_shape(&self, full: &str, expected: &[usize]) -> Result<(), WeightError> {
        let meta = self
            .source
            .meta(full)
            .ok_or_else(|| WeightError::MissingTensor {
                name: full.to_string(),
                source_desc: self.source.describe(),
                similar: super::similar_names(full, &self.source.names(), 3),
            })?;
        if meta.shape != expected {
            return Err(WeightError::WrongShape {
                name: full.to_string(),
                file: meta.file,
                expected: expected.to_vec(),
                found: meta.shape,
            });
        }
        Ok(())
    }
}
