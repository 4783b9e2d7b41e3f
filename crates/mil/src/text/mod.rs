//! MIL text: [`print`] a [`crate::Program`] as `model.mil`, [`parse`] it back.

pub mod float;
mod lexer;
mod parser;
mod printer;

pub use parser::parse;
pub use printer::print;
pub(crate) use printer::value_type as value_type_string;

/// A syntax error in MIL text, with the 1-based line and column (in characters) where it was
/// found.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
#[error("line {line}, column {column}: {message}")]
pub struct ParseError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}
