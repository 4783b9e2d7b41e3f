//! `compile` and `Program`: a compiled graph loaded into an engine (`aneforge::Model`), with the
//! engine's instance API. Executes release the GIL.

use std::sync::{Mutex, MutexGuard};

use aneforge::lower::PortSpec;
use aneforge::{CompileOptions, Model, Tensor as RsTensor};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::graph::Tensor;
use crate::{arrays, errors, options};

/// How `run` returns the outputs: as `compile` was given them.
pub(crate) enum Returned {
    One,
    List,
    Dict,
}

/// A compiled program loaded into an engine.
#[pyclass(module = "aneforge", frozen)]
pub struct Program {
    model: Mutex<Model>,
    returned: Returned,
    inputs: Vec<PortSpec>,
    outputs: Vec<PortSpec>,
    /// `(name, port)`: other names of ports (an imported ONNX model's tensor names, whose ports
    /// are those names made MIL identifiers). Ports are taken by either name and shown (`inputs`,
    /// `outputs`, `run`'s dict, `repr`) by the alias.
    aliases: Vec<(String, String)>,
}

fn port<'a>(ports: &'a [PortSpec], name: &str, what: &str) -> PyResult<&'a PortSpec> {
    ports.iter().find(|p| p.name == name).ok_or_else(|| {
        errors::invalid(format!(
            "no {what} named {name:?}; the program's {what}s are {:?}",
            ports.iter().map(|p| p.name.as_str()).collect::<Vec<_>>()
        ))
    })
}

impl Program {
    /// `model` as a Program whose `run` returns what `returned` says.
    pub(crate) fn new(model: Model, returned: Returned, aliases: Vec<(String, String)>) -> Program {
        let (inputs, outputs) = (model.inputs().to_vec(), model.outputs().to_vec());
        Program {
            model: Mutex::new(model),
            returned,
            inputs,
            outputs,
            aliases,
        }
    }

    /// The port `name` stands for: itself, or the port it is an alias of.
    fn port_name<'a>(&'a self, name: &'a str) -> &'a str {
        self.aliases
            .iter()
            .find(|(alias, _)| alias == name)
            .map_or(name, |(_, port)| port.as_str())
    }

    /// The name port `port` goes by outside: its alias, or itself.
    fn outside_name<'a>(&'a self, port: &'a str) -> &'a str {
        self.aliases
            .iter()
            .find(|(_, p)| p == port)
            .map_or(port, |(alias, _)| alias.as_str())
    }

    /// `{name: (shape, dtype)}` of `ports`, by the names they go by outside.
    fn describe<'py>(&self, py: Python<'py>, ports: &[PortSpec]) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for p in ports {
            d.set_item(
                self.outside_name(&p.name),
                (p.shape.clone(), arrays::numpy_name(p.dtype)),
            )?;
        }
        Ok(d)
    }

    fn lock(&self) -> MutexGuard<'_, Model> {
        self.model
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn feed(&self, given: &str, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let name = self.port_name(given);
        let spec = port(&self.inputs, name, "input")?;
        arrays::with_host_slice(
            value,
            &format!("input {given:?}"),
            spec.dtype,
            &spec.shape,
            |data| self.lock().set_input(name, data).map_err(errors::program),
        )
    }

    fn execute_released(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.lock().execute()).map_err(errors::program)
    }
}

#[pymethods]
impl Program {
    /// `{name: (shape, dtype)}` of the inputs.
    #[getter]
    fn inputs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.describe(py, &self.inputs)
    }

    /// `{name: (shape, dtype)}` of the outputs.
    #[getter]
    fn outputs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.describe(py, &self.outputs)
    }

    /// The MIL text of the program.
    #[getter]
    fn mil(&self) -> String {
        self.lock().mil_text().to_string()
    }

    /// Copies `value` (a NumPy array of the port's shape and dtype) into input `name`.
    fn set_input(&self, name: &str, value: &Bound<'_, PyAny>) -> PyResult<()> {
        self.feed(name, value)
    }

    /// Runs the program once (the GIL is released meanwhile).
    fn execute(&self, py: Python<'_>) -> PyResult<()> {
        self.execute_released(py)
    }

    /// A copy of output `name` as a NumPy array (the result's memory, not copied again).
    fn read_output<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        let name = self.port_name(name);
        let spec = port(&self.outputs, name, "output")?;
        let tensor = self.lock().read_output(name).map_err(errors::program)?;
        arrays::owned(py, tensor, &spec.shape)
    }

    /// Output `name`'s buffer itself as a read-only array (no copy): it shows the result of the
    /// latest execute and changes with the next one.
    fn output_view<'py>(slf: &Bound<'py, Self>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        let this = slf.get();
        let name = this.port_name(name);
        let spec = port(&this.outputs, name, "output")?;
        let model = this.lock();
        let view = model.output_view(name).map_err(errors::program)?;
        arrays::output_view(view, &spec.shape, slf.clone().into_any())
    }

    /// Input `name`'s buffer itself as a writable array (no copy): what is written there is what
    /// the next execute reads. Take views after `share_buffer`, which rebinds the input.
    fn input_view<'py>(slf: &Bound<'py, Self>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        let this = slf.get();
        let name = this.port_name(name);
        let spec = port(&this.inputs, name, "input")?;
        let mut model = this.lock();
        let view = model.input_view_mut(name).map_err(errors::program)?;
        arrays::input_view(view, &spec.shape, slf.clone().into_any())
    }

    /// Before the first execute: input `input` reads what output `output` wrote in the previous
    /// execute (state that stays in the engine, such as a KV cache or parameters).
    fn share_buffer(&self, output: &str, input: &str) -> PyResult<()> {
        let (output, input) = (self.port_name(output), self.port_name(input));
        self.lock()
            .share_buffer(output, input)
            .map_err(errors::program)
    }

    /// Sets the inputs (a dict, or keywords), executes, and returns the outputs as `compile`
    /// was given them: one array, a list, or a dict.
    #[pyo3(signature = (inputs = None, **kwargs))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        inputs: Option<&Bound<'py, PyDict>>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        for dict in [inputs, kwargs].into_iter().flatten() {
            for (k, v) in dict.iter() {
                self.feed(&k.extract::<String>()?, &v)?;
            }
        }
        self.execute_released(py)?;
        let mut arrays_out = Vec::with_capacity(self.outputs.len());
        for spec in &self.outputs {
            arrays_out.push(self.read_output(py, &spec.name)?);
        }
        match self.returned {
            Returned::One => Ok(arrays_out.remove(0)),
            Returned::List => Ok(PyList::new(py, arrays_out)?.into_any()),
            Returned::Dict => {
                let d = PyDict::new(py);
                for (spec, a) in self.outputs.iter().zip(arrays_out) {
                    d.set_item(self.outside_name(&spec.name), a)?;
                }
                Ok(d.into_any())
            }
        }
    }

    /// Writes the program directory (`model.mil`, `weights/weight.bin`), which `aneforge run`
    /// and `aneforge export` take.
    fn save(&self, path: std::path::PathBuf) -> PyResult<()> {
        self.lock().save(&path).map_err(errors::program)
    }

    fn __repr__(&self) -> String {
        let names = |ports: &[PortSpec]| {
            ports
                .iter()
                .map(|p| format!("{}{:?}", self.outside_name(&p.name), p.shape))
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            "Program(inputs=[{}], outputs=[{}])",
            names(&self.inputs),
            names(&self.outputs)
        )
    }
}

/// Compiles `outputs` (a Tensor, a list of Tensors named `output_0`, …, or a dict of names to
/// Tensors) for `target` (`"cpu"`, `"ane"`, or an ANE architecture such as `"h16"`) and loads it
/// into `engine` (`"cpu"`, `"ane"`, `"auto"`), as `aneforge compile` and `run` do.
#[pyfunction]
#[pyo3(signature = (outputs, *, target = None, engine = "cpu"))]
pub fn compile(
    py: Python<'_>,
    outputs: &Bound<'_, PyAny>,
    target: Option<&str>,
    engine: &str,
) -> PyResult<Program> {
    let (named, returned): (Vec<(String, RsTensor)>, Returned) =
        if let Ok(t) = outputs.cast::<Tensor>() {
            (
                vec![("output_0".into(), t.get().inner.clone())],
                Returned::One,
            )
        } else if let Ok(d) = outputs.cast::<PyDict>() {
            let mut v = Vec::new();
            for (k, t) in d.iter() {
                v.push((k.extract::<String>()?, t.extract::<Tensor>()?.inner));
            }
            (v, Returned::Dict)
        } else {
            let list: Vec<Tensor> = outputs.extract().map_err(|_| {
                errors::invalid("outputs: expected a Tensor, a list of Tensors or a dict of them")
            })?;
            (
                list.into_iter()
                    .enumerate()
                    .map(|(i, t)| (format!("output_{i}"), t.inner))
                    .collect(),
                Returned::List,
            )
        };
    if named.is_empty() {
        return Err(errors::invalid("outputs: at least one tensor is needed"));
    }
    let (engine, target) = options::select(py, engine, target)?;
    let options = CompileOptions {
        target,
        engine,
        ..CompileOptions::default()
    };
    let model = py
        .detach(|| {
            let refs: Vec<(&str, &RsTensor)> = named.iter().map(|(n, t)| (n.as_str(), t)).collect();
            aneforge::compile_named(&refs, &options)
        })
        .map_err(errors::program)?;
    Ok(Program::new(model, returned, Vec::new()))
}
