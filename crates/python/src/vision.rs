//! `ImageClassifier`: `aneforge_models::vision::ImageClassifier` (`aneforge classify`) for image
//! files and NumPy RGB arrays.

use aneforge_models::vision::{ImageClassifier as RsClassifier, Prediction};
use numpy::{PyArray4, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::images::{self, image_args};
use crate::{arrays, errors};

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

    /// The model's input tensors of `images` (its own resize, crop and normalisation), float32
    /// `[n, 3, H, W]`; `images` as `classify` takes them. All must preprocess to one size.
    fn preprocess<'py>(
        &self,
        py: Python<'py>,
        images: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (args, _) = image_args(images)?;
        let decoded = py.detach(|| images::decode(args)).map_err(errors::vision)?;
        let mut size = None;
        let mut data = Vec::new();
        for (i, img) in decoded.iter().enumerate() {
            let (h, w) = self.inner.preprocess.output_size(img.width, img.height);
            if *size.get_or_insert((h, w)) != (h, w) {
                return Err(errors::invalid(format!(
                    "images[{i}] preprocesses to {h}x{w}, images[0] to {}x{}; \
                     one array needs one size",
                    size.map_or(0, |s| s.0),
                    size.map_or(0, |s| s.1)
                )));
            }
            data.extend(self.inner.preprocess.tensor(img));
        }
        let (h, w) = size.unwrap_or((0, 0));
        arrays::shaped(py, data, &[decoded.len(), 3, h, w])
    }

    /// Logits of preprocessed inputs: `pixel_values` float32 `[n, 3, H, W]` (as `preprocess`
    /// makes them) → float32 `[n, classes]`, run in batches of the model's `batch_size`.
    fn logits<'py>(
        &self,
        py: Python<'py>,
        pixel_values: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let array = pixel_values.cast::<PyUntypedArray>().map_err(|_| {
            errors::invalid("pixel_values: expected a float32 numpy array [n, 3, height, width]")
        })?;
        let shape = array.shape().to_vec();
        let typed = array
            .cast::<PyArray4<f32>>()
            .map_err(|_| {
                errors::invalid(format!(
                    "pixel_values: expected float32 [n, 3, height, width], found {} {shape:?}",
                    array.dtype()
                ))
            })?
            .readonly();
        if shape[1] != 3 || shape[2] == 0 || shape[3] == 0 {
            return Err(errors::invalid(format!(
                "pixel_values: expected [n, 3, height, width], found {shape:?}"
            )));
        }
        let per = 3 * shape[2] * shape[3];
        let flat: Vec<f32> = typed.as_array().iter().copied().collect();
        let inputs: Vec<Vec<f32>> = flat.chunks(per).map(<[f32]>::to_vec).collect();
        let rows = py
            .detach(|| {
                self.inner
                    .logits_of(&inputs, (shape[2], shape[3]), &mut |_| {})
            })
            .map_err(errors::vision)?;
        let classes = self.inner.network().classes();
        arrays::matrix(py, rows.into_iter().flatten().collect(), shape[0], classes)
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
