//! Demo applications trained from scratch with aneforge's [`Trainer`](aneforge::train::Trainer):
//! a character-level language model ([`char_lm`], `aneforge demo`) and a small CNN on the 8×8
//! handwritten digits ([`digits`], `aneforge train-digits`), with their datasets ([`data`]).

pub mod char_lm;
pub mod data;
pub mod digits;
