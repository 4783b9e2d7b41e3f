//! aneforge-mil: the program format layer.
//!
//! A program is a [`Program`] (MIL text, `model.mil`) plus the blob files its `BLOBFILE` literals
//! reference (`weights/weight.bin`). This crate knows nothing of graphs or engines.

pub mod ast;
pub mod blob;
pub mod bounded;
pub mod encode;
pub mod mlpackage;
pub mod ops;
pub mod program_dir;
pub mod text;
pub mod validate;

pub use ast::*;
pub use blob::{BlobError, BlobFile, BlobWriter};
pub use program_dir::{ProgramDir, ProgramDirError, Summary, WEIGHTS_PATH};
pub use text::{parse, print, ParseError};
pub use validate::{validate, validate_with_blobs, ValidationError, ValidationErrors};

/// `tensor<fp16, [2, 3]>` / `fp16` (scalar) spelling of a tensor type, as MIL text writes it.
pub fn ty_string(ty: &TensorType) -> String {
    if ty.is_scalar() {
        return ty.dtype.name().to_string();
    }
    let dims: Vec<String> = ty
        .shape
        .iter()
        .map(|d| match d {
            Dim::Fixed(n) => n.to_string(),
            Dim::Symbol(s) => s.clone(),
        })
        .collect();
    format!("tensor<{}, [{}]>", ty.dtype.name(), dims.join(", "))
}
