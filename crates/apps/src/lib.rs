//! Demo applications trained from scratch with aneforge's [`Trainer`](aneforge::train::Trainer):
//! a character-level language model ([`char_lm`], `aneforge demo`) and small CNN image classifiers
//! ([`classifier`]: `aneforge train-digits` on the 8×8 handwritten digits, `aneforge
//! train-fashion` on Fashion-MNIST), with their datasets ([`data`], [`images`], [`idx`]).

pub mod char_lm;
pub mod classifier;
pub mod data;
pub mod idx;
pub mod images;
