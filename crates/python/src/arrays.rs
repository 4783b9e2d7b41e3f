//! NumPy arrays in and out of ports.
//!
//! In: a C-contiguous array of the port's dtype is read in place (its memory is copied once,
//! into the port); any other layout is made contiguous first, and Python sequences are converted
//! with the port's dtype. The shape must be the port's. Out: an owned result becomes the array's
//! memory without a copy (`Vec` → `ndarray`), and views are arrays over the port buffers
//! themselves, kept alive by the program object they came from.

use aneforge::engine::{BufferMut, BufferRef, HostSlice, HostTensor};
use aneforge::DType;
use half::f16;
use numpy::ndarray::{ArrayViewD, ArrayViewMutD, IxDyn};
use numpy::{
    Element, IntoPyArray, PyArray, PyArrayDescrMethods, PyArrayDyn, PyArrayMethods, PyUntypedArray,
    PyUntypedArrayMethods,
};
use pyo3::prelude::*;
use pyo3::types::PyAny;

use crate::errors;

/// NumPy's name for a graph dtype.
pub fn numpy_name(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "float32",
        DType::I32 => "int32",
        DType::Bool => "bool",
        DType::F16 => "float16",
        DType::I8 => "int8",
    }
}

/// `value` as a C-contiguous array: arrays as they are when already contiguous, anything else
/// through `numpy.ascontiguousarray` (sequences get `dtype`).
fn contiguous<'py>(
    value: &Bound<'py, PyAny>,
    dtype: DType,
) -> PyResult<Bound<'py, PyUntypedArray>> {
    let py = value.py();
    if let Ok(array) = value.cast::<PyUntypedArray>() {
        if array.is_c_contiguous() {
            return Ok(array.clone());
        }
        let numpy = py.import("numpy")?;
        return Ok(numpy
            .call_method1("ascontiguousarray", (array,))?
            .cast_into::<PyUntypedArray>()?);
    }
    let numpy = py.import("numpy")?;
    let converted = numpy
        .call_method1("ascontiguousarray", (value, numpy_name(dtype)))
        .map_err(|e| {
            errors::invalid(format!(
                "expected a numpy array (or a sequence convertible to {}): {e}",
                numpy_name(dtype)
            ))
        })?;
    Ok(converted.cast_into::<PyUntypedArray>()?)
}

fn slice_of<'a, T: Element>(array: &'a Bound<'_, PyUntypedArray>) -> PyResult<&'a [T]> {
    let typed = array.cast::<PyArrayDyn<T>>()?;
    // SAFETY: the slice is used while the GIL is held and before control returns to Python, so
    // no Python code can resize or write the array meanwhile.
    unsafe { typed.as_slice() }.map_err(|e| errors::invalid(e.to_string()))
}

/// Calls `feed` with `value`'s data as the host slice for a port of `dtype` and `shape`, named
/// `what` in errors. Float ports take float32 or float16 arrays; int32 and bool ports take their
/// own dtype.
pub fn with_host_slice<R>(
    value: &Bound<'_, PyAny>,
    what: &str,
    dtype: DType,
    shape: &[usize],
    feed: impl FnOnce(HostSlice<'_>) -> PyResult<R>,
) -> PyResult<R> {
    let array = contiguous(value, dtype)?;
    if array.shape() != shape {
        return Err(errors::invalid(format!(
            "{what}: shape {:?}, expected {shape:?}",
            array.shape()
        )));
    }
    let given = array.dtype();
    let py = value.py();
    let is = |d: Bound<'_, numpy::PyArrayDescr>| given.is_equiv_to(&d);
    match dtype {
        DType::F32 if is(numpy::dtype::<f32>(py)) => feed(HostSlice::F32(slice_of::<f32>(&array)?)),
        DType::F32 if is(numpy::dtype::<f16>(py)) => feed(HostSlice::F16(slice_of::<f16>(&array)?)),
        DType::I32 if is(numpy::dtype::<i32>(py)) => feed(HostSlice::I32(slice_of::<i32>(&array)?)),
        DType::Bool if is(numpy::dtype::<bool>(py)) => {
            feed(HostSlice::Bool(slice_of::<bool>(&array)?))
        }
        _ => Err(errors::invalid(format!(
            "{what}: dtype {given}, expected {}{} (convert with .astype(numpy.{}))",
            numpy_name(dtype),
            if dtype == DType::F32 {
                " or float16"
            } else {
                ""
            },
            numpy_name(dtype)
        ))),
    }
}

/// `data` as an array of `shape` (its element count), without a copy.
pub fn shaped<'py, T: Element>(
    py: Python<'py>,
    data: Vec<T>,
    shape: &[usize],
) -> PyResult<Bound<'py, PyAny>> {
    let flat = data.into_pyarray(py);
    Ok(flat.reshape(shape.to_vec())?.into_any())
}

/// An owned result as an array of `shape`; the vector becomes the array's memory (no copy).
pub fn owned<'py>(
    py: Python<'py>,
    tensor: HostTensor,
    shape: &[usize],
) -> PyResult<Bound<'py, PyAny>> {
    match tensor {
        HostTensor::F32(v) => shaped(py, v, shape),
        HostTensor::F16(v) => shaped(py, v, shape),
        HostTensor::I32(v) => shaped(py, v, shape),
        HostTensor::I8(v) => shaped(py, v, shape),
        HostTensor::U8(v) => shaped(py, v, shape),
        HostTensor::Bool(v) => shaped(py, v, shape),
    }
}

/// An f32 result of `rows × dim` as a 2-D array, without a copy.
pub fn matrix(
    py: Python<'_>,
    data: Vec<f32>,
    rows: usize,
    dim: usize,
) -> PyResult<Bound<'_, PyAny>> {
    shaped(py, data, &[rows, dim])
}

fn view_of<'py, T: Element>(
    data: &[T],
    shape: &[usize],
    owner: Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let view = ArrayViewD::from_shape(IxDyn(shape), data)
        .map_err(|e| errors::invalid(format!("port view of shape {shape:?}: {e}")))?;
    // SAFETY: `data` is a port buffer owned by the program object `owner`; the engine allocates
    // port buffers once per program and frees them only when the program is dropped, which the
    // array's reference to `owner` prevents.
    let array = unsafe { PyArray::borrow_from_array(&view, owner) };
    array.readwrite().make_nonwriteable();
    Ok(array.into_any())
}

fn view_mut_of<'py, T: Element>(
    data: &mut [T],
    shape: &[usize],
    owner: Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let view = ArrayViewMutD::from_shape(IxDyn(shape), data)
        .map_err(|e| errors::invalid(format!("port view of shape {shape:?}: {e}")))?;
    // SAFETY: as in `view_of`; the array is writable because the buffer is an input the program
    // reads on its next execute.
    Ok(unsafe { PyArray::borrow_from_array(&view, owner) }.into_any())
}

/// A read-only array over an output port's buffer.
pub fn output_view<'py>(
    buffer: BufferRef<'_>,
    shape: &[usize],
    owner: Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    match buffer {
        BufferRef::F32(v) => view_of(v, shape, owner),
        BufferRef::F16(v) => view_of(v, shape, owner),
        BufferRef::I32(v) => view_of(v, shape, owner),
        BufferRef::I8(v) => view_of(v, shape, owner),
        BufferRef::U8(v) => view_of(v, shape, owner),
        BufferRef::Bool(v) => view_of(v, shape, owner),
    }
}

/// A writable array over an input port's buffer.
pub fn input_view<'py>(
    buffer: BufferMut<'_>,
    shape: &[usize],
    owner: Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    match buffer {
        BufferMut::F32(v) => view_mut_of(v, shape, owner),
        BufferMut::F16(v) => view_mut_of(v, shape, owner),
        BufferMut::I32(v) => view_mut_of(v, shape, owner),
        BufferMut::I8(v) => view_mut_of(v, shape, owner),
        BufferMut::U8(v) => view_mut_of(v, shape, owner),
        BufferMut::Bool(v) => view_mut_of(v, shape, owner),
    }
}
