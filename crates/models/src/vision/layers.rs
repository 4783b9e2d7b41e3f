//! Convolutions with their BatchNorm folded in on the host (`w·γ/√(σ²+ε)`, `β − μ·γ/√(σ²+ε)`,
//! computed in f64), linear layers, and the graph pieces the CNN families share.

use aneforge::graph::{constant, ConvAttrs};
use aneforge::{HostArray as GraphArray, Tensor};

use crate::weights::VarBuilder;

use super::VisionError;

/// A convolution ready for the graph: `weight[O, I/groups, KH, KW]`, `bias[O]`.
#[derive(Clone, Debug)]
pub struct Conv {
    pub weight: GraphArray,
    pub bias: Option<GraphArray>,
    pub out_channels: usize,
    pub kernel: (usize, usize),
    pub stride: usize,
    pub groups: usize,
}

/// How a convolution pads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Padding {
    /// `k / 2` on every side (torchvision).
    Symmetric,
    /// TensorFlow's SAME: total `max((⌈i/s⌉−1)·s + k − i, 0)`, the smaller half before.
    Same,
    /// No padding (patch embeddings).
    Valid,
}

pub(crate) fn graph_array(shape: &[usize], data: Vec<f32>) -> Result<GraphArray, VisionError> {
    Ok(GraphArray::from_f32(shape, data)?)
}

/// A square convolution's channels, kernel, stride and groups.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvShape {
    pub cin: usize,
    pub cout: usize,
    pub kernel: usize,
    pub stride: usize,
    pub groups: usize,
}

/// Reads `{prefix}.weight` (`[out, in/groups, k, k]`) and, when `bias`, `{prefix}.bias`.
pub fn load_conv(
    vb: &VarBuilder,
    prefix: &str,
    c: ConvShape,
    bias: bool,
) -> Result<Conv, VisionError> {
    let ConvShape {
        cin: in_channels,
        cout: out_channels,
        kernel,
        stride,
        groups,
    } = c;
    let shape = [out_channels, in_channels / groups, kernel, kernel];
    let w = vb.get(&shape, &format!("{prefix}.weight"))?;
    let b = if bias {
        let b = vb.get(&[out_channels], &format!("{prefix}.bias"))?;
        Some(graph_array(&[out_channels], b.into_data())?)
    } else {
        None
    };
    Ok(Conv {
        weight: graph_array(&shape, w.into_data())?,
        bias: b,
        out_channels,
        kernel: (kernel, kernel),
        stride,
        groups,
    })
}

/// `conv` followed by the BatchNorm at `bn` (`weight`, `bias`, `running_mean`, `running_var`),
/// folded into one convolution with a bias.
pub fn fold_batch_norm(
    conv: Conv,
    vb: &VarBuilder,
    bn: &str,
    eps: f64,
) -> Result<Conv, VisionError> {
    let o = conv.out_channels;
    let get = |name: &str| vb.get(&[o], &format!("{bn}.{name}")).map(|a| a.into_data());
    let (gamma, beta, mean, var) = (
        get("weight")?,
        get("bias")?,
        get("running_mean")?,
        get("running_var")?,
    );
    let w = conv.weight.as_f32().unwrap_or_default();
    let per_out = w.len() / o;
    let mut weight = vec![0f32; w.len()];
    let mut bias = vec![0f32; o];
    let old_bias = conv.bias.as_ref().and_then(|b| b.as_f32());
    for c in 0..o {
        let scale = f64::from(gamma[c]) / (f64::from(var[c]) + eps).sqrt();
        for i in 0..per_out {
            weight[c * per_out + i] = (f64::from(w[c * per_out + i]) * scale) as f32;
        }
        let b0 = old_bias.map_or(0.0, |b| f64::from(b[c]));
        bias[c] = (f64::from(beta[c]) + (b0 - f64::from(mean[c])) * scale) as f32;
    }
    Ok(Conv {
        weight: graph_array(conv.weight.shape(), weight)?,
        bias: Some(graph_array(&[o], bias)?),
        ..conv
    })
}

fn same_pads(input: usize, kernel: usize, stride: usize) -> (usize, usize) {
    let out = input.div_ceil(stride);
    let total = ((out - 1) * stride + kernel).saturating_sub(input);
    (total / 2, total - total / 2)
}

impl Conv {
    /// The convolution applied to `x[N, C, H, W]`.
    pub fn apply(&self, x: &Tensor, padding: Padding) -> Result<Tensor, VisionError> {
        let (h, w) = (x.shape()[2], x.shape()[3]);
        let (kh, kw) = self.kernel;
        let pads = match padding {
            Padding::Symmetric => vec![(kh / 2, kh / 2), (kw / 2, kw / 2)],
            Padding::Same => vec![same_pads(h, kh, self.stride), same_pads(w, kw, self.stride)],
            Padding::Valid => vec![(0, 0), (0, 0)],
        };
        let attrs = ConvAttrs {
            strides: vec![self.stride, self.stride],
            pads,
            dilations: vec![1, 1],
            groups: self.groups,
        };
        let bias = self.bias.clone().map(constant);
        Ok(x.conv(&constant(self.weight.clone()), bias.as_ref(), attrs)?)
    }
}

/// A fully connected layer: `weight[out, in]`, `bias[out]` (absent in CLIP's projections).
#[derive(Clone, Debug)]
pub struct Linear {
    pub weight: GraphArray,
    pub bias: Option<GraphArray>,
}

/// `{prefix}.weight` `[out, in]` and `{prefix}.bias` `[out]`.
pub fn load_linear(
    vb: &VarBuilder,
    prefix: &str,
    in_features: usize,
    out_features: usize,
) -> Result<Linear, VisionError> {
    let mut l = load_linear_no_bias(vb, prefix, in_features, out_features)?;
    let b = vb.get(&[out_features], &format!("{prefix}.bias"))?;
    l.bias = Some(graph_array(&[out_features], b.into_data())?);
    Ok(l)
}

/// `{prefix}.weight` `[out, in]` alone.
pub fn load_linear_no_bias(
    vb: &VarBuilder,
    prefix: &str,
    in_features: usize,
    out_features: usize,
) -> Result<Linear, VisionError> {
    let w = vb.get(&[out_features, in_features], &format!("{prefix}.weight"))?;
    Ok(Linear {
        weight: graph_array(&[out_features, in_features], w.into_data())?,
        bias: None,
    })
}

impl Linear {
    pub fn apply(&self, x: &Tensor) -> Result<Tensor, VisionError> {
        let bias = self.bias.clone().map(constant);
        Ok(x.linear(&constant(self.weight.clone()), bias.as_ref())?)
    }

    /// The weight and bias as graph constants.
    pub fn constants(&self) -> (Tensor, Option<Tensor>) {
        (
            constant(self.weight.clone()),
            self.bias.clone().map(constant),
        )
    }

    pub fn out_features(&self) -> usize {
        self.weight.shape()[0]
    }
}

/// Layer normalisation over the last axis: `gamma`, `beta` `[dim]`.
#[derive(Clone, Debug)]
pub struct LayerNorm {
    pub gamma: GraphArray,
    pub beta: GraphArray,
    pub eps: f32,
}

/// `{prefix}.weight` and `{prefix}.bias`, both `[dim]`.
pub fn load_layer_norm(
    vb: &VarBuilder,
    prefix: &str,
    dim: usize,
    eps: f32,
) -> Result<LayerNorm, VisionError> {
    let g = vb.get(&[dim], &format!("{prefix}.weight"))?;
    let b = vb.get(&[dim], &format!("{prefix}.bias"))?;
    Ok(LayerNorm {
        gamma: graph_array(&[dim], g.into_data())?,
        beta: graph_array(&[dim], b.into_data())?,
        eps,
    })
}

impl LayerNorm {
    pub fn apply(&self, x: &Tensor) -> Result<Tensor, VisionError> {
        Ok(x.layer_norm(
            &[-1],
            Some(&constant(self.gamma.clone())),
            Some(&constant(self.beta.clone())),
            self.eps,
        )?)
    }
}

/// Global average pooling: `[N, C, H, W]` → `[N, C]`.
pub fn global_avg_pool(x: &Tensor) -> Result<Tensor, VisionError> {
    Ok(x.mean(&[2, 3], false)?)
}

pub fn relu6(x: &Tensor) -> Result<Tensor, VisionError> {
    Ok(x.clip(0.0, 6.0)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_padding_puts_the_odd_pixel_after() {
        assert_eq!(same_pads(224, 3, 2), (0, 1));
        assert_eq!(same_pads(112, 3, 1), (1, 1));
        assert_eq!(same_pads(112, 5, 2), (1, 2));
        assert_eq!(same_pads(7, 1, 1), (0, 0));
    }
}
