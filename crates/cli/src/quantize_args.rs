//! `--quantize w8a8 --calibration FILE.npy [--min-cosine X]`, shared by `compile` and `import`:
//! the calibration file read and checked against the graph's one input.

use aneforge::engine::HostTensor;
use aneforge::graph::{topo_order, Op, Tensor};
use aneforge::{Calibration, Quantize, W8A8};
use anyhow::{bail, Context};
use std::path::PathBuf;

#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum QuantizeMode {
    /// fp16 activations (no activation quantization)
    #[default]
    None,
    /// int8 activations and weights
    W8a8,
}

#[derive(clap::Args, Clone, Debug, Default)]
pub struct QuantizeArgs {
    /// Activation quantization: none, or w8a8 (int8 activations with per-tensor scales
    /// calibrated on --calibration, int8 weights per output channel; A16+/M4 targets), refused
    /// when an output's cosine similarity to the fp16 program is below --min-cosine.
    #[arg(long, value_enum, default_value_t = QuantizeMode::None)]
    pub quantize: QuantizeMode,
    /// Calibration inputs for --quantize w8a8: a float32 (or float64) .npy of shape [N, *input
    /// shape] (N samples) or the input's shape (one sample); the graph must have one input.
    #[arg(long, value_name = "FILE.npy")]
    pub calibration: Option<PathBuf>,
    /// Least cosine similarity of each output to the fp16 program (--quantize w8a8; default
    /// 0.99).
    #[arg(long, value_name = "X")]
    pub min_cosine: Option<f64>,
}

impl QuantizeArgs {
    /// The quantization these flags ask for, for a graph with `outputs`.
    pub fn resolve(&self, outputs: &[&Tensor]) -> anyhow::Result<Quantize> {
        match self.quantize {
            QuantizeMode::None => {
                if self.calibration.is_some() {
                    bail!("--calibration is only used with --quantize w8a8");
                }
                if self.min_cosine.is_some() {
                    bail!("--min-cosine is only used with --quantize w8a8");
                }
                Ok(Quantize::None)
            }
            QuantizeMode::W8a8 => {
                let Some(path) = &self.calibration else {
                    bail!("--quantize w8a8 needs --calibration FILE.npy (sample inputs)");
                };
                let calibration = read_calibration(path, outputs)
                    .with_context(|| format!("--calibration {}", path.display()))?;
                let mut w = W8A8::new(calibration);
                if let Some(c) = self.min_cosine {
                    if !(c.is_finite() && c > -1.0 && c <= 1.0) {
                        bail!("--min-cosine {c}: expected a cosine in (-1, 1]");
                    }
                    w.min_cosine = c;
                }
                Ok(Quantize::W8A8(w))
            }
        }
    }
}

fn read_calibration(path: &std::path::Path, outputs: &[&Tensor]) -> anyhow::Result<Calibration> {
    let roots: Vec<Tensor> = outputs.iter().map(|t| (*t).clone()).collect();
    let inputs: Vec<(String, Vec<usize>)> = topo_order(&roots)
        .iter()
        .filter_map(|t| match t.op() {
            Op::Input { name } => Some((name.clone(), t.shape().to_vec())),
            _ => None,
        })
        .collect();
    let [(name, shape)] = inputs.as_slice() else {
        let names: Vec<&str> = inputs.iter().map(|(n, _)| n.as_str()).collect();
        bail!(
            "a calibration file feeds a graph with one input; this graph has {} ({})",
            inputs.len(),
            names.join(", ")
        );
    };
    let (got, tensor) = crate::run::read_npy(path)?;
    let HostTensor::F32(values) = tensor else {
        bail!("expected float32 or float64 data");
    };
    let count = if got == *shape {
        1
    } else if got.len() == shape.len() + 1 && got[1..] == shape[..] && got[0] > 0 {
        got[0]
    } else {
        bail!(
            "shape {got:?} does not fit input '{name}' of shape {shape:?}: expected {shape:?} (one sample) or [N, {}] (N samples)",
            shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    };
    Ok(Calibration::stacked(name, count, &values)?)
}
