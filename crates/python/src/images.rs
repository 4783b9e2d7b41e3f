//! Images from Python: paths to decode or uint8 `[height, width, 3]` RGB arrays, shared by the
//! image models (`vision`, `clip`).

use aneforge_models::vision::{load_image, ClassifierOptions, RgbImage, VisionError};
use numpy::{PyArrayMethods, PyReadonlyArray3, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;

use crate::{errors, options};

/// The options of an image model from its constructor's arguments (engine and target as the
/// CLI takes them).
pub fn model_options(
    py: Python<'_>,
    engine: &str,
    target: Option<&str>,
    batch_size: usize,
    matmul_precision: &str,
) -> PyResult<ClassifierOptions> {
    if batch_size == 0 {
        return Err(errors::invalid("batch_size takes a count of at least 1"));
    }
    let (engine, target) = options::select(py, engine, target)?;
    Ok(ClassifierOptions {
        matmul: options::matmul(matmul_precision, engine, &target)?,
        target,
        engine,
        batch_size,
        ..ClassifierOptions::default()
    })
}

/// An image given as a path to decode, or pixels already in memory.
pub enum ImageArg {
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
pub fn image_args(images: &Bound<'_, PyAny>) -> PyResult<(Vec<ImageArg>, bool)> {
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

/// Decodes the paths; arrays pass as they are. Runs without the GIL.
pub fn decode(args: Vec<ImageArg>) -> Result<Vec<RgbImage>, VisionError> {
    args.into_iter()
        .map(|a| match a {
            ImageArg::Path(p) => load_image(&p).map_err(VisionError::from),
            ImageArg::Pixels(img) => Ok(img),
        })
        .collect()
}
