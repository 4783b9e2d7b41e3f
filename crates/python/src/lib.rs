//! The `aneforge` Python package's native module (`aneforge._aneforge`): thin bindings over the
//! library crates. Graphs and programs (`graph`, `program`), sentence encoders and rerankers
//! (`encoders`), decoder LLMs (`llm`), image classifiers (`vision`), CLIP (`clip`), images from Python (`images`), speech recognition
//! (`whisper`), ONNX import (`onnx`); engine and target choice as on the CLI (`options`); NumPy
//! interop (`arrays`); Rust errors as Python exceptions (`errors`).

mod arrays;
mod clip;
mod encoders;
mod errors;
mod graph;
mod images;
mod llm;
mod onnx;
mod options;
mod program;
mod vision;
mod whisper;

use pyo3::prelude::*;

#[pymodule]
fn _aneforge(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("AneforgeError", py.get_type::<errors::AneforgeError>())?;
    m.add(
        "InvalidInputError",
        py.get_type::<errors::InvalidInputError>(),
    )?;
    m.add(
        "ModelNotFoundError",
        py.get_type::<errors::ModelNotFoundError>(),
    )?;
    m.add_class::<graph::Tensor>()?;
    m.add_class::<program::Program>()?;
    m.add_class::<encoders::SentenceTransformer>()?;
    m.add_class::<encoders::CrossEncoder>()?;
    m.add_class::<llm::PyLlm>()?;
    m.add_class::<llm::Generation>()?;
    m.add_class::<vision::ImageClassifier>()?;
    m.add_class::<whisper::Whisper>()?;
    m.add_class::<clip::ClipModel>()?;
    m.add_function(wrap_pyfunction!(graph::input, m)?)?;
    m.add_function(wrap_pyfunction!(graph::constant, m)?)?;
    m.add_function(wrap_pyfunction!(graph::concat, m)?)?;
    m.add_function(wrap_pyfunction!(graph::where_, m)?)?;
    m.add_function(wrap_pyfunction!(program::compile, m)?)?;
    m.add_function(wrap_pyfunction!(onnx::import_onnx, m)?)?;
    m.add_function(wrap_pyfunction!(options::set_num_threads, m)?)?;
    m.add_function(wrap_pyfunction!(options::num_threads, m)?)?;
    Ok(())
}
