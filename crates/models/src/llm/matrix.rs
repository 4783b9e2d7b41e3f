//! A weight matrix `[rows, cols]` as a model stores it: dense f32, or GGUF blocks kept quantized.

use std::sync::Arc;

use aneforge::graph::{self, HostArray, Tensor};

use super::LlmError;
use crate::gguf::GgufFile;

#[derive(Clone, Debug)]
pub enum Matrix {
    Dense(HostArray),
}

impl Matrix {
    pub fn rows(&self) -> usize {
        match self {
            Matrix::Dense(a) => a.shape().first().copied().unwrap_or(0),
        }
    }

    pub fn cols(&self) -> usize {
        match self {
            Matrix::Dense(a) => a.shape().get(1).copied().unwrap_or(0),
        }
    }

    /// Bytes a program stores for this matrix.
    pub fn stored_bytes(&self) -> usize {
        match self {
            Matrix::Dense(a) => a.len() * 4,
        }
    }

    /// The quantized form of a GGUF tensor, or `None` when its type is not kept quantized.
    pub fn from_gguf_blocks(
        _file: &Arc<GgufFile>,
        _name: &str,
        _rows: usize,
        _cols: usize,
    ) -> Result<Option<Matrix>, LlmError> {
        Ok(None)
    }

    /// The graph constant holding this matrix.
    pub fn constant(&self) -> Result<Tensor, LlmError> {
        match self {
            Matrix::Dense(a) => Ok(graph::constant(a.clone())),
        }
    }

    /// Rows of all parts, in order (their column counts must agree).
    pub fn concat_rows(parts: &[Matrix]) -> Result<Matrix, LlmError> {
        let cols = parts.first().map_or(0, Matrix::cols);
        if parts.iter().any(|p| p.cols() != cols) {
            return Err(LlmError::Internal(format!(
                "concatenating matrices with column counts {:?}",
                parts.iter().map(Matrix::cols).collect::<Vec<_>>()
            )));
        }
        let rows: usize = parts.iter().map(Matrix::rows).sum();
        let mut data = Vec::with_capacity(rows * cols);
        for p in parts {
            match p {
                Matrix::Dense(a) => data.extend_from_slice(a.as_f32().unwrap_or(&[])),
            }
        }
        Ok(Matrix::Dense(HostArray::from_f32(&[rows, cols], data)?))
    }

    /// Row `r` of the result is row `perm[r]` of `self`.
    pub fn permute_rows(&self, perm: &[usize]) -> Result<Matrix, LlmError> {
        let (rows, cols) = (self.rows(), self.cols());
        if perm.len() != rows || perm.iter().any(|&p| p >= rows) {
            return Err(LlmError::Internal(format!(
                "row permutation of {} rows for {rows}",
                perm.len()
            )));
        }
        match self {
            Matrix::Dense(a) => {
                let v = a.as_f32().unwrap_or(&[]);
                let mut out = Vec::with_capacity(rows * cols);
                for &p in perm {
                    out.extend_from_slice(&v[p * cols..(p + 1) * cols]);
                }
                Ok(Matrix::Dense(HostArray::from_f32(&[rows, cols], out)?))
            }
        }
    }

    /// Row `r` as f32 (an embedding lookup on the host).
    pub fn row_f32(&self, r: usize, out: &mut [f32]) -> Result<(), LlmError> {
        let cols = self.cols();
        if r >= self.rows() || out.len() != cols {
            return Err(LlmError::TokenOutOfRange {
                id: r as u64,
                vocab: self.rows(),
            });
        }
        match self {
            Matrix::Dense(a) => {
                out.copy_from_slice(&a.as_f32().unwrap_or(&[])[r * cols..(r + 1) * cols]);
            }
        }
        Ok(())
    }
}
