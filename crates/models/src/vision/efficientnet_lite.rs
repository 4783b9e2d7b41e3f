//! EfficientNet-Lite0…4 in the layout of `efficientnet-lite-pytorch` (`_conv_stem`, `_blocks.N`,
//! `_conv_head`, `_fc`): MBConv blocks without squeeze-excitation, ReLU6, TensorFlow SAME
//! padding, BatchNorm ε = 1e-3; stem (32) and head (1280) widths and the first and last stage
//! depths are not scaled.

use aneforge::Tensor;

use crate::weights::VarBuilder;

use super::layers::{
    fold_batch_norm, load_conv, load_linear, relu6, Conv, ConvShape, Linear, Padding,
};
use super::VisionError;

const BN_EPS: f64 = 1e-3;

/// `(repeats, kernel, stride, expand, in, out)` of the seven stages before scaling.
const STAGES: [(usize, usize, usize, usize, usize, usize); 7] = [
    (1, 3, 1, 1, 32, 16),
    (2, 3, 2, 6, 16, 24),
    (2, 5, 2, 6, 24, 40),
    (3, 3, 2, 6, 40, 80),
    (3, 5, 1, 6, 80, 112),
    (4, 5, 2, 6, 112, 192),
    (1, 3, 1, 6, 192, 320),
];

/// `(width, depth, resolution)` of Lite0…Lite4.
pub const VARIANTS: [(f64, f64, usize); 5] = [
    (1.0, 1.0, 224),
    (1.0, 1.1, 240),
    (1.1, 1.2, 260),
    (1.2, 1.4, 280),
    (1.4, 1.8, 300),
];

fn round_filters(filters: usize, width: f64) -> usize {
    let f = filters as f64 * width;
    let mut new = (((f + 4.0) as usize) / 8 * 8).max(8);
    if (new as f64) < 0.9 * f {
        new += 8;
    }
    new
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct BlockSpec {
    kernel: usize,
    stride: usize,
    expand: usize,
    input: usize,
    output: usize,
}

fn blocks(variant: usize) -> Vec<BlockSpec> {
    let (width, depth, _) = VARIANTS[variant];
    let mut out = Vec::new();
    for (i, &(r, k, s, e, inp, outp)) in STAGES.iter().enumerate() {
        let fixed = i == 0 || i == STAGES.len() - 1;
        let repeats = if fixed {
            r
        } else {
            (depth * r as f64).ceil() as usize
        };
        let input = if i == 0 {
            32
        } else {
            round_filters(inp, width)
        };
        let output = round_filters(outp, width);
        for j in 0..repeats {
            out.push(BlockSpec {
                kernel: k,
                stride: if j == 0 { s } else { 1 },
                expand: e,
                input: if j == 0 { input } else { output },
                output,
            });
        }
    }
    out
}

struct Block {
    spec: BlockSpec,
    expand: Option<Conv>,
    depthwise: Conv,
    project: Conv,
}

pub struct EfficientNetLite {
    pub variant: usize,
    stem: Conv,
    blocks: Vec<Block>,
    head: Conv,
    fc: Linear,
}

/// The expected `(name, shape)` of `_blocks.N._project_conv.weight` for the last block, the
/// tensor that tells the variants apart.
fn last_project(variant: usize) -> (String, Vec<usize>) {
    let b = blocks(variant);
    let last = b[b.len() - 1];
    (
        format!("_blocks.{}._project_conv.weight", b.len() - 1),
        vec![last.output, last.input * last.expand, 1, 1],
    )
}

impl EfficientNetLite {
    /// Which of Lite0…4 the checkpoint holds, from its block count and widths; Lite0 when none
    /// matches, so that loading names the first tensor that disagrees.
    pub fn detect(vb: &VarBuilder) -> usize {
        (0..VARIANTS.len())
            .find(|&v| {
                let (name, shape) = last_project(v);
                let next = format!("_blocks.{}._project_conv.weight", blocks(v).len());
                vb.meta(&name).is_some_and(|m| m.shape == shape) && !vb.contains(&next)
            })
            .unwrap_or(0)
    }

    pub fn load(vb: &VarBuilder, variant: usize, classes: usize) -> Result<Self, VisionError> {
        let bn = |conv: Conv, name: &str| fold_batch_norm(conv, vb, name, BN_EPS);
        let stem = bn(
            load_conv(
                vb,
                "_conv_stem",
                ConvShape {
                    cin: 3,
                    cout: 32,
                    kernel: 3,
                    stride: 2,
                    groups: 1,
                },
                false,
            )?,
            "_bn0",
        )?;
        let mut out_blocks = Vec::new();
        for (i, spec) in blocks(variant).into_iter().enumerate() {
            let p = format!("_blocks.{i}");
            let mid = spec.input * spec.expand;
            let expand = if spec.expand != 1 {
                let c = load_conv(
                    vb,
                    &format!("{p}._expand_conv"),
                    ConvShape {
                        cin: spec.input,
                        cout: mid,
                        kernel: 1,
                        stride: 1,
                        groups: 1,
                    },
                    false,
                )?;
                Some(bn(c, &format!("{p}._bn0"))?)
            } else {
                None
            };
            let dw = load_conv(
                vb,
                &format!("{p}._depthwise_conv"),
                ConvShape {
                    cin: mid,
                    cout: mid,
                    kernel: spec.kernel,
                    stride: spec.stride,
                    groups: mid,
                },
                false,
            )?;
            let project = load_conv(
                vb,
                &format!("{p}._project_conv"),
                ConvShape {
                    cin: mid,
                    cout: spec.output,
                    kernel: 1,
                    stride: 1,
                    groups: 1,
                },
                false,
            )?;
            out_blocks.push(Block {
                spec,
                expand,
                depthwise: bn(dw, &format!("{p}._bn1"))?,
                project: bn(project, &format!("{p}._bn2"))?,
            });
        }
        let last = out_blocks.last().map_or(32, |b| b.spec.output);
        let head = bn(
            load_conv(
                vb,
                "_conv_head",
                ConvShape {
                    cin: last,
                    cout: 1280,
                    kernel: 1,
                    stride: 1,
                    groups: 1,
                },
                false,
            )?,
            "_bn1",
        )?;
        let fc = load_linear(vb, "_fc", 1280, classes)?;
        Ok(EfficientNetLite {
            variant,
            stem,
            blocks: out_blocks,
            head,
            fc,
        })
    }

    /// The input resolution the variant was trained at.
    pub fn resolution(&self) -> usize {
        VARIANTS[self.variant].2
    }

    pub fn classes(&self) -> usize {
        self.fc.out_features()
    }

    /// Logits `[N, classes]` of `x[N, 3, H, W]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor, VisionError> {
        let mut x = relu6(&self.stem.apply(x, Padding::Same)?)?;
        for b in &self.blocks {
            let input = x.clone();
            if let Some(e) = &b.expand {
                x = relu6(&e.apply(&x, Padding::Same)?)?;
            }
            x = relu6(&b.depthwise.apply(&x, Padding::Same)?)?;
            x = b.project.apply(&x, Padding::Same)?;
            if b.spec.stride == 1 && b.spec.input == b.spec.output {
                x = x.add(&input)?;
            }
        }
        x = relu6(&self.head.apply(&x, Padding::Same)?)?;
        let pooled = super::layers::global_avg_pool(&x)?;
        self.fc.apply(&pooled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stage_depths_and_widths_follow_the_reference_rounding() {
        assert_eq!(blocks(0).len(), 16);
        assert_eq!(blocks(1).len(), 21);
        assert_eq!(blocks(2).len(), 21);
        assert_eq!(round_filters(16, 1.1), 16);
        assert_eq!(round_filters(24, 1.1), 24);
        assert_eq!(round_filters(40, 1.1), 48);
        assert_eq!(round_filters(320, 1.1), 352);
    }
}
