//! `Tensor`: a lazy graph node (`aneforge::Tensor`) with Python operators. Operands may be
//! tensors, Python numbers (scalar ops) or NumPy arrays (constants).

use aneforge::graph::{self, CompareOp, HostArray};
use aneforge::{DType, Tensor as RsTensor};
use numpy::{
    PyArrayDescrMethods, PyArrayDyn, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods,
};
use pyo3::prelude::*;
use pyo3::types::{PyFloat, PyInt, PyTuple};

use crate::arrays::numpy_name;
use crate::errors;

/// A node of a lazy tensor graph: an input, a constant, or an op on other tensors.
#[pyclass(module = "aneforge", frozen, from_py_object)]
#[derive(Clone)]
pub struct Tensor {
    pub inner: RsTensor,
}

fn wrap(r: Result<RsTensor, aneforge::GraphError>) -> PyResult<Tensor> {
    r.map(|inner| Tensor { inner }).map_err(errors::graph)
}

pub fn parse_dtype(name: &str) -> PyResult<DType> {
    match name {
        "float32" | "f32" => Ok(DType::F32),
        "int32" | "i32" => Ok(DType::I32),
        "bool" => Ok(DType::Bool),
        other => Err(errors::invalid(format!(
            "dtype {other:?}: expected float32, int32 or bool"
        ))),
    }
}

/// A NumPy array (or anything `numpy.asarray` takes) as a host array: floating types become
/// float32, integer types int32 (values must fit), bools stay bools.
fn host_array(value: &Bound<'_, PyAny>) -> PyResult<HostArray> {
    let py = value.py();
    let numpy = py.import("numpy")?;
    let array = numpy
        .call_method1("ascontiguousarray", (value,))?
        .cast_into::<PyUntypedArray>()?;
    let shape = array.shape().to_vec();
    let kind = array.dtype().kind();
    let as_type = |name: &str| -> PyResult<Bound<'_, PyUntypedArray>> {
        Ok(array
            .call_method1("astype", (name,))?
            .cast_into::<PyUntypedArray>()?)
    };
    let result = match kind {
        b'f' => {
            let a = as_type("float32")?;
            let typed = a.cast::<PyArrayDyn<f32>>()?.readonly();
            HostArray::from_f32(&shape, typed.as_slice()?.to_vec())
        }
        b'i' | b'u' => {
            let a = as_type("int32")?;
            let fits: bool = numpy.call_method1("array_equal", (&a, &array))?.extract()?;
            if !fits {
                return Err(errors::invalid(format!(
                    "constant of dtype {}: values do not fit int32",
                    array.dtype()
                )));
            }
            let typed = a.cast::<PyArrayDyn<i32>>()?.readonly();
            HostArray::from_i32(&shape, typed.as_slice()?.to_vec())
        }
        b'b' => {
            let typed = array.cast::<PyArrayDyn<bool>>()?.readonly();
            HostArray::from_bool(&shape, typed.as_slice()?.to_vec())
        }
        _ => {
            return Err(errors::invalid(format!(
                "constant of dtype {}: expected a float, integer or bool array",
                array.dtype()
            )))
        }
    };
    result.map_err(errors::graph)
}

/// The right-hand operand of an operator.
enum Operand {
    Tensor(RsTensor),
    Scalar(f32),
}

fn operand(value: &Bound<'_, PyAny>) -> PyResult<Operand> {
    if let Ok(t) = value.cast::<Tensor>() {
        return Ok(Operand::Tensor(t.get().inner.clone()));
    }
    if value.is_instance_of::<PyFloat>() || value.is_instance_of::<PyInt>() {
        return Ok(Operand::Scalar(value.extract::<f64>()? as f32));
    }
    Ok(Operand::Tensor(graph::constant(host_array(value)?)))
}

fn axes(value: Option<&Bound<'_, PyAny>>, rank: usize) -> PyResult<Vec<isize>> {
    match value {
        None => Ok((0..rank as isize).collect()),
        Some(v) if v.is_instance_of::<PyInt>() => Ok(vec![v.extract()?]),
        Some(v) => v.extract(),
    }
}

impl Tensor {
    /// Elementwise comparison (a bool tensor). `==` and `!=` keep Python's identity meaning, so
    /// tensors stay usable as dict keys.
    fn compare(&self, op: CompareOp, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        wrap(match operand(other)? {
            Operand::Tensor(t) => self.inner.compare(op, &t),
            Operand::Scalar(v) => self.inner.compare_scalar(op, v),
        })
    }
}

#[pymethods]
impl Tensor {
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.inner.shape())
    }

    #[getter]
    fn dtype(&self) -> &'static str {
        numpy_name(self.inner.dtype())
    }

    #[getter]
    fn ndim(&self) -> usize {
        self.inner.rank()
    }

    fn __repr__(&self) -> String {
        format!(
            "Tensor({}, shape={:?}, dtype={})",
            self.inner.op().name(),
            self.inner.shape(),
            numpy_name(self.inner.dtype())
        )
    }

    fn __add__(&self, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        wrap(match operand(other)? {
            Operand::Tensor(t) => self.inner.add(&t),
            Operand::Scalar(v) => self.inner.add_scalar(v),
        })
    }

    fn __radd__(&self, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        wrap(match operand(other)? {
            Operand::Tensor(t) => t.add(&self.inner),
            Operand::Scalar(v) => self.inner.add_scalar(v),
        })
    }

    fn __sub__(&self, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        wrap(match operand(other)? {
            Operand::Tensor(t) => self.inner.sub(&t),
            Operand::Scalar(v) => self.inner.sub_scalar(v),
        })
    }

    fn __rsub__(&self, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        wrap(match operand(other)? {
            Operand::Tensor(t) => t.sub(&self.inner),
            Operand::Scalar(v) => graph::scalar(v).sub(&self.inner),
        })
    }

    fn __mul__(&self, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        wrap(match operand(other)? {
            Operand::Tensor(t) => self.inner.mul(&t),
            Operand::Scalar(v) => self.inner.mul_scalar(v),
        })
    }

    fn __rmul__(&self, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        self.__mul__(other)
    }

    fn __truediv__(&self, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        wrap(match operand(other)? {
            Operand::Tensor(t) => self.inner.div(&t),
            Operand::Scalar(v) => self.inner.div_scalar(v),
        })
    }

    fn __rtruediv__(&self, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        wrap(match operand(other)? {
            Operand::Tensor(t) => t.div(&self.inner),
            Operand::Scalar(v) => graph::scalar(v).div(&self.inner),
        })
    }

    fn __pow__(
        &self,
        other: &Bound<'_, PyAny>,
        modulo: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Tensor> {
        if modulo.is_some() {
            return Err(errors::invalid("pow with a modulus is not a tensor op"));
        }
        wrap(match operand(other)? {
            Operand::Tensor(t) => self.inner.pow(&t),
            Operand::Scalar(v) => self.inner.pow_scalar(v),
        })
    }

    fn __matmul__(&self, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        match operand(other)? {
            Operand::Tensor(t) => wrap(self.inner.matmul(&t)),
            Operand::Scalar(_) => Err(errors::invalid("matmul needs a tensor or array operand")),
        }
    }

    fn __rmatmul__(&self, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        match operand(other)? {
            Operand::Tensor(t) => wrap(t.matmul(&self.inner)),
            Operand::Scalar(_) => Err(errors::invalid("matmul needs a tensor or array operand")),
        }
    }

    fn __lt__(&self, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        self.compare(CompareOp::Less, other)
    }

    fn __le__(&self, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        self.compare(CompareOp::LessEqual, other)
    }

    fn __gt__(&self, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        self.compare(CompareOp::Greater, other)
    }

    fn __ge__(&self, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        self.compare(CompareOp::GreaterEqual, other)
    }

    fn __neg__(&self) -> PyResult<Tensor> {
        wrap(self.inner.neg())
    }

    fn __abs__(&self) -> PyResult<Tensor> {
        wrap(self.inner.abs())
    }

    fn matmul(&self, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        self.__matmul__(other)
    }

    fn maximum(&self, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        wrap(match operand(other)? {
            Operand::Tensor(t) => self.inner.maximum(&t),
            Operand::Scalar(v) => self.inner.maximum_scalar(v),
        })
    }

    fn minimum(&self, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        wrap(match operand(other)? {
            Operand::Tensor(t) => self.inner.minimum(&t),
            Operand::Scalar(v) => self.inner.minimum_scalar(v),
        })
    }

    fn relu(&self) -> PyResult<Tensor> {
        wrap(self.inner.relu())
    }

    fn gelu(&self) -> PyResult<Tensor> {
        wrap(self.inner.gelu())
    }

    fn silu(&self) -> PyResult<Tensor> {
        wrap(self.inner.silu())
    }

    fn sigmoid(&self) -> PyResult<Tensor> {
        wrap(self.inner.sigmoid())
    }

    fn tanh(&self) -> PyResult<Tensor> {
        wrap(self.inner.tanh())
    }

    fn exp(&self) -> PyResult<Tensor> {
        wrap(self.inner.exp())
    }

    fn log(&self) -> PyResult<Tensor> {
        wrap(self.inner.log())
    }

    fn sqrt(&self) -> PyResult<Tensor> {
        wrap(self.inner.sqrt())
    }

    fn abs(&self) -> PyResult<Tensor> {
        wrap(self.inner.abs())
    }

    fn clip(&self, min: f32, max: f32) -> PyResult<Tensor> {
        wrap(self.inner.clip(min, max))
    }

    #[pyo3(signature = (axis = -1))]
    fn softmax(&self, axis: isize) -> PyResult<Tensor> {
        wrap(self.inner.softmax(axis))
    }

    #[pyo3(signature = (axis = None, keepdims = false))]
    fn sum(&self, axis: Option<&Bound<'_, PyAny>>, keepdims: bool) -> PyResult<Tensor> {
        wrap(self.inner.sum(&axes(axis, self.inner.rank())?, keepdims))
    }

    #[pyo3(signature = (axis = None, keepdims = false))]
    fn mean(&self, axis: Option<&Bound<'_, PyAny>>, keepdims: bool) -> PyResult<Tensor> {
        wrap(self.inner.mean(&axes(axis, self.inner.rank())?, keepdims))
    }

    #[pyo3(signature = (axis = None, keepdims = false))]
    fn max(&self, axis: Option<&Bound<'_, PyAny>>, keepdims: bool) -> PyResult<Tensor> {
        wrap(self.inner.max(&axes(axis, self.inner.rank())?, keepdims))
    }

    #[pyo3(signature = (axis = None, keepdims = false))]
    fn min(&self, axis: Option<&Bound<'_, PyAny>>, keepdims: bool) -> PyResult<Tensor> {
        wrap(self.inner.min(&axes(axis, self.inner.rank())?, keepdims))
    }

    /// New shape; one dimension may be -1.
    #[pyo3(signature = (*shape))]
    fn reshape(&self, shape: &Bound<'_, PyTuple>) -> PyResult<Tensor> {
        let dims: Vec<isize> = if shape.len() == 1 && !shape.get_item(0)?.is_instance_of::<PyInt>()
        {
            shape.get_item(0)?.extract()?
        } else {
            shape.extract()?
        };
        wrap(self.inner.reshape(&dims))
    }

    /// Axes in a new order (reversed without arguments, as NumPy).
    #[pyo3(signature = (*axes))]
    fn transpose(&self, axes: &Bound<'_, PyTuple>) -> PyResult<Tensor> {
        let perm: Vec<usize> = if axes.is_empty() {
            (0..self.inner.rank()).rev().collect()
        } else if axes.len() == 1 && !axes.get_item(0)?.is_instance_of::<PyInt>() {
            axes.get_item(0)?.extract()?
        } else {
            axes.extract()?
        };
        wrap(self.inner.transpose(&perm))
    }

    #[getter(T)]
    fn t(&self) -> PyResult<Tensor> {
        wrap(
            self.inner
                .transpose(&(0..self.inner.rank()).rev().collect::<Vec<_>>()),
        )
    }

    fn astype(&self, dtype: &str) -> PyResult<Tensor> {
        wrap(self.inner.cast(parse_dtype(dtype)?))
    }
}

/// A program input port named `name` (a MIL identifier) of `shape` and `dtype`.
#[pyfunction]
#[pyo3(signature = (name, shape, dtype = "float32"))]
pub fn input(name: &str, shape: Vec<usize>, dtype: &str) -> PyResult<Tensor> {
    wrap(graph::input(name, &shape, parse_dtype(dtype)?))
}

/// Data baked into the program (a NumPy array or anything `numpy.asarray` takes).
#[pyfunction]
pub fn constant(value: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    Ok(Tensor {
        inner: graph::constant(host_array(value)?),
    })
}

/// Tensors joined along `axis`.
#[pyfunction]
#[pyo3(signature = (tensors, axis = 0))]
pub fn concat(tensors: Vec<Tensor>, axis: isize) -> PyResult<Tensor> {
    let inner: Vec<RsTensor> = tensors.into_iter().map(|t| t.inner).collect();
    wrap(graph::concat(&inner, axis))
}

/// `on_true` where `cond` holds, `on_false` elsewhere (broadcast).
#[pyfunction]
#[pyo3(name = "where")]
pub fn where_(
    cond: &Tensor,
    on_true: &Bound<'_, PyAny>,
    on_false: &Bound<'_, PyAny>,
) -> PyResult<Tensor> {
    let as_tensor = |v: &Bound<'_, PyAny>| -> PyResult<RsTensor> {
        Ok(match operand(v)? {
            Operand::Tensor(t) => t,
            Operand::Scalar(s) => graph::scalar(s),
        })
    };
    wrap(graph::select(
        &cond.inner,
        &as_tensor(on_true)?,
        &as_tensor(on_false)?,
    ))
}
