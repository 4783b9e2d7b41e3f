//! `ImageClassifier`: `aneforge_models::vision::ImageClassifier` (`aneforge classify`) for image
//! files and NumPy RGB arrays.

use aneforge_models::vision::{ImageClassifier as RsClassifier, Prediction};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::errors;
use crate::images::{self, image_args};

fn prediction<'py>(py: Python<'py>, p: &Prediction) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("index", p.index)?;
    d.set_item("label", &p.label)?;
    d.set_item("probability", p.probability)?;
    d.set_item("logit", p.logit)?;
    Ok(d)
}

/// Each image's predictions as a list of dicts; one image (`single`) gives its list alone.
pub fn predictions_of<'py>(
    py: Python<'py>,
    predictions: &[Vec<Prediction>],
    single: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let lists = predictions
        .iter()
        .map(|preds| {
            let items = preds
                .iter()
                .map(|p| prediction(py, p))
                .collect::<PyResult<Vec<_>>>()?;
            PyList::new(py, items)
        })
        .collect::<PyResult<Vec<_>>>()?;
    if single {
        return Ok(lists
            .into_iter()
            .next()
            .map_or_else(|| PyList::empty(py).into_any(), Bound::into_any));
    }
    Ok(PyList::new(py, lists)?.into_any())
}

/// An image classifier (EfficientNet-Lite, ResNet, MobileNetV2/V3, HF ViT and DeiT),
/// loaded and compiled as `aneforge classify -m MODEL` does.
#[pyclass(module = "aneforge", frozen)]
pub struct ImageClassifier {
    inner: RsClassifier,
}

#[pymethods]
impl ImageClassifier {
    #[new]
    #[pyo3(signature = (model, *, engine = "cpu", target = None, batch_size = 8))]
    fn new(
        py: Python<'_>,
        model: &str,
        engine: &str,
        target: Option<&str>,
        batch_size: usize,
    ) -> PyResult<Self> {
        let options = images::model_options(py, engine, target, batch_size)?;
        let model = model.to_string();
        let inner = py
            .detach(move || RsClassifier::load(&model, options))
            .map_err(errors::vision)?;
        Ok(ImageClassifier { inner })
    }

    /// The `top_k` most probable classes of each image, most probable first, as dicts with
    /// `index`, `label`, `probability` and `logit`. `images`: a path, a uint8 `[H, W, 3]` RGB
    /// array, or a list of them; one image gives one list, a list gives a list of lists.
    #[pyo3(signature = (images, top_k = 5))]
    fn classify<'py>(
        &self,
        py: Python<'py>,
        images: &Bound<'py, PyAny>,
        top_k: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        if top_k == 0 {
            return Err(errors::invalid("top_k takes a count of at least 1"));
        }
        let (args, single) = image_args(images)?;
        let predictions = py
            .detach(|| {
                let decoded = images::decode(args)?;
                self.inner.classify(&decoded, top_k, &mut |_| {})
            })
            .map_err(errors::vision)?;
        predictions_of(py, &predictions, single)
    }

    /// The class names, by class index.
    #[getter]
    fn labels(&self) -> Vec<String> {
        self.inner.labels().to_vec()
    }

    fn __repr__(&self) -> String {
        format!(
            "ImageClassifier({}, classes={})",
            self.inner.network().name(),
            self.inner.labels().len()
        )
    }
}
