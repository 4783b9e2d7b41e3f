//! `ImageClassifier`: `aneforge_models::vision::ImageClassifier` (`aneforge classify`) for image
//! files and NumPy RGB arrays.

use aneforge_models::vision::{
    load_image, ClassifierOptions, ImageClassifier as RsClassifier, Prediction, RgbImage,
    VisionError,
};
use numpy::{PyArrayMethods, PyReadonlyArray3, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::{errors, options};

/// An image given as a path to decode, or pixels already in memory.
enum ImageArg {
    Path(std::path::PathBuf),
    Pixels(RgbImage),
}

/// A `[height, width, 3]` uint8 RGB array (Pillow's `np.asarray(img.convert("RGB"))` layout).
fn pixels(array: &Bound<'_, PyUntypedArray>, what: &str) -> PyResult<RgbImage> {
    let shape = array.shape().to_vec();
    let dtype = array.dtype().to_string();
    let typed: PyReadonlyArray3<u8> = array
        .cast::<numpy::PyArray3<u8>>()
        .map_err(|_| {
            errors::invalid(format!(
                "{what}: expected a uint8 array of shape [height, width, 3], found {dtype} {shape:?}"
            ))
        })?
        .readonly();
    let view = typed.as_array();
    let (height, width, channels) = view.dim();
    if channels != 3 || height == 0 || width == 0 {
        return Err(errors::invalid(format!(
            "{what}: expected an RGB array of shape [height, width, 3], found {shape:?}"
        )));
    }
    Ok(RgbImage {
        width,
        height,
        pixels: view.iter().copied().collect(),
    })
}

fn image_arg(item: &Bound<'_, PyAny>, what: &str) -> PyResult<ImageArg> {
    if let Ok(array) = item.cast::<PyUntypedArray>() {
        return Ok(ImageArg::Pixels(pixels(array, what)?));
    }
    item.extract::<std::path::PathBuf>()
        .map(ImageArg::Path)
        .map_err(|_| {
            errors::invalid(format!(
                "{what}: expected a path or a uint8 [height, width, 3] array, found {}",
                item.get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ))
        })
}

/// `images` as a list: one image (a path or an array), or a sequence of them.
fn image_args(images: &Bound<'_, PyAny>) -> PyResult<(Vec<ImageArg>, bool)> {
    let one =
        images.cast::<PyUntypedArray>().is_ok() || images.extract::<std::path::PathBuf>().is_ok();
    if one {
        return Ok((vec![image_arg(images, "images")?], true));
    }
    let mut out = Vec::new();
    for (i, item) in images.try_iter()?.enumerate() {
        out.push(image_arg(&item?, &format!("images[{i}]"))?);
    }
    Ok((out, false))
}

fn prediction<'py>(py: Python<'py>, p: &Prediction) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("index", p.index)?;
    d.set_item("label", &p.label)?;
    d.set_item("probability", p.probability)?;
    d.set_item("logit", p.logit)?;
    Ok(d)
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
        if batch_size == 0 {
            return Err(errors::invalid("batch_size takes a count of at least 1"));
        }
        let (engine, target) = options::select(py, engine, target)?;
        let options = ClassifierOptions {
            target,
            engine,
            batch_size,
            ..ClassifierOptions::default()
        };
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
                let decoded = args
                    .into_iter()
                    .map(|a| match a {
                        ImageArg::Path(p) => load_image(&p).map_err(VisionError::from),
                        ImageArg::Pixels(img) => Ok(img),
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                self.inner.classify(&decoded, top_k, &mut |_| {})
            })
            .map_err(errors::vision)?;
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
