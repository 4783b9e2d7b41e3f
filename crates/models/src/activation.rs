//! The feed-forward activations of every model family, by their transformers names.

use aneforge::graph::{GraphError, Tensor};

/// The feed-forward activation (`hidden_act`, `activation`, `activation_function`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Activation {
    /// Exact (erf) GELU: `gelu`, `gelu_python`.
    Gelu,
    /// tanh-approximated GELU: `gelu_new`, `gelu_pytorch_tanh`, `gelu_fast`, `gelu_tanh`.
    GeluTanh,
    Relu,
    /// `silu` / `swish`.
    Silu,
    /// `quick_gelu` (OpenAI CLIP): `x · sigmoid(1.702 x)`.
    QuickGelu,
}

impl Activation {
    /// Every name [`Activation::parse`] accepts.
    pub const NAMES: [(&'static str, Activation); 10] = [
        ("gelu", Activation::Gelu),
        ("gelu_python", Activation::Gelu),
        ("gelu_new", Activation::GeluTanh),
        ("gelu_pytorch_tanh", Activation::GeluTanh),
        ("gelu_fast", Activation::GeluTanh),
        ("gelu_tanh", Activation::GeluTanh),
        ("relu", Activation::Relu),
        ("silu", Activation::Silu),
        ("swish", Activation::Silu),
        ("quick_gelu", Activation::QuickGelu),
    ];

    pub fn parse(name: &str) -> Option<Activation> {
        Self::NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, a)| a)
    }

    /// The supported names, comma-separated, for error messages.
    pub fn supported() -> String {
        let names: Vec<&str> = Self::NAMES.iter().map(|(n, _)| *n).collect();
        names.join(", ")
    }

    pub fn apply(self, x: &Tensor) -> Result<Tensor, GraphError> {
        match self {
            Activation::Gelu => x.gelu(),
            Activation::GeluTanh => x.gelu_tanh(),
            Activation::Relu => x.relu(),
            Activation::Silu => x.silu(),
            Activation::QuickGelu => x.mul(&x.mul_scalar(1.702)?.sigmoid()?),
        }
    }
}
