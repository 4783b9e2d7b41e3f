//! ONNX import: a `ModelProto` (with its external data) becomes aneforge graph tensors, which
//! compile to one MIL program like any other graph.
//!
//! ```no_run
//! let model = aneforge_onnx::read_model("model.onnx".as_ref())?;
//! let imported = aneforge_onnx::import_model(&model, &Default::default())?;
//! # Ok::<(), aneforge_onnx::OnnxError>(())
//! ```

mod error;
mod float_format;
mod fold;
mod import;
mod node;
mod ops;
pub mod proto;
mod read;
mod value;

pub use error::OnnxError;
pub use import::{
    import_model, model_opset, HostGather, ImportOptions, Imported, ImportedInput, ImportedOutput,
    OPSETS,
};
pub use ops::supported_ops;
pub use read::{decode_model, read_model};
pub use value::{const_from_proto, Const, Data};

/// Reads and imports the model at `path`.
pub fn import_file(path: &std::path::Path, options: &ImportOptions) -> Result<Imported, OnnxError> {
    import_model(&read_model(path)?, options)
}
