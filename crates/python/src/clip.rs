//! `CLIPModel`: `aneforge_models::vision::ClipModel` (`aneforge classify` with `--labels`):
//! image and text embeddings and zero-shot classification.

use aneforge_models::vision::ClipModel as RsClip;
use pyo3::prelude::*;

use crate::encoders::strings;
use crate::images::{self, image_args};
use crate::vision::predictions_of;
use crate::{arrays, errors};

/// Rows of equal width as one `[rows, dim]` array, or the one row as `[dim]` (`single`).
fn embeddings<'py>(
    py: Python<'py>,
    rows: Vec<Vec<f32>>,
    dim: usize,
    single: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let n = rows.len();
    let data: Vec<f32> = rows.into_iter().flatten().collect();
    let matrix = arrays::matrix(py, data, n, dim)?;
    if single {
        return matrix.get_item(0);
    }
    Ok(matrix)
}

/// A CLIP model (Hugging Face `CLIPModel` safetensors), loaded and compiled as
/// `aneforge classify -m MODEL --labels ...` does.
#[pyclass(module = "aneforge", frozen, name = "CLIPModel")]
pub struct ClipModel {
    inner: RsClip,
}

#[pymethods]
impl ClipModel {
    #[new]
    #[pyo3(signature = (model, *, engine = "cpu", target = None, batch_size = 8, matmul_precision = "f32"))]
    fn new(
        py: Python<'_>,
        model: &str,
        engine: &str,
        target: Option<&str>,
        batch_size: usize,
        matmul_precision: &str,
    ) -> PyResult<Self> {
        let options = images::model_options(py, engine, target, batch_size, matmul_precision)?;
        let model = model.to_string();
        let inner = py
            .detach(move || RsClip::load(&model, options))
            .map_err(errors::vision)?;
        Ok(ClipModel { inner })
    }

    /// L2-normalised image embeddings, float32 `[n, dim]` (`[dim]` for one image). `images`: a
    /// path, a uint8 `[H, W, 3]` RGB array, or a list of them.
    fn encode_image<'py>(
        &self,
        py: Python<'py>,
        images: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (args, single) = image_args(images)?;
        let rows = py
            .detach(|| {
                let decoded = images::decode(args)?;
                self.inner.image_embeddings(&decoded, &mut |_| {})
            })
            .map_err(errors::vision)?;
        embeddings(py, rows, self.inner.dimension(), single)
    }

    /// L2-normalised text embeddings, float32 `[n, dim]` (`[dim]` for one string); texts longer
    /// than the model's positions are truncated.
    fn encode_text<'py>(
        &self,
        py: Python<'py>,
        texts: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (texts, single) = strings(texts, "texts")?;
        let rows = py
            .detach(|| {
                let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
                self.inner.text_embeddings(&refs)
            })
            .map_err(errors::vision)?;
        embeddings(py, rows, self.inner.dimension(), single)
    }

    /// Zero-shot classification, as `aneforge classify --labels --template`: each label put into
    /// `template` (its `{}` replaced by the label), the `top_k` labels of each image by the
    /// softmax of `logits_per_image`, as dicts with `index` (into `labels`), `label`,
    /// `probability` and `logit`. One image gives one list, a list gives a list of lists.
    #[pyo3(signature = (images, labels, *, template = "{}", top_k = 5))]
    fn classify<'py>(
        &self,
        py: Python<'py>,
        images: &Bound<'py, PyAny>,
        labels: &Bound<'py, PyAny>,
        template: &str,
        top_k: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        if top_k == 0 {
            return Err(errors::invalid("top_k takes a count of at least 1"));
        }
        let (labels, _) = strings(labels, "labels")?;
        let (args, single) = image_args(images)?;
        let predictions = py
            .detach(|| {
                let decoded = images::decode(args)?;
                let refs: Vec<&str> = labels.iter().map(String::as_str).collect();
                self.inner
                    .zero_shot(&decoded, &refs, template, top_k, &mut |_| {})
            })
            .map_err(errors::vision)?;
        predictions_of(py, &predictions, single)
    }

    /// `exp(logit_scale)`: the factor between embedding dot products and `logits_per_image`.
    #[getter]
    fn logit_scale(&self) -> f64 {
        self.inner.logit_scale()
    }

    /// The width of both towers' embeddings.
    #[getter]
    fn dimension(&self) -> usize {
        self.inner.dimension()
    }

    fn __repr__(&self) -> String {
        format!("CLIPModel(dim={})", self.inner.dimension())
    }
}
