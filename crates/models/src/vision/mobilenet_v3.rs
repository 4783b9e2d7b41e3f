//! MobileNetV3 Large and Small in torchvision's state_dict layout (`features.N`, `classifier.0`,
//! `classifier.3`): inverted residuals with squeeze-excitation (hard-sigmoid gate) and
//! hard-swish, BatchNorm ε = 1e-3 folded into the convolutions.

use aneforge::Tensor;

use crate::weights::VarBuilder;

use super::layers::{
    fold_batch_norm, global_avg_pool, load_conv, load_linear, relu6, Conv, ConvShape, Linear,
    Padding,
};
use super::VisionError;

const BN_EPS: f64 = 1e-3;

/// `(in, kernel, expanded, out, squeeze-excite, hard-swish, stride)` per block.
type BlockRow = (usize, usize, usize, usize, bool, bool, usize);

const LARGE: [BlockRow; 15] = [
    (16, 3, 16, 16, false, false, 1),
    (16, 3, 64, 24, false, false, 2),
    (24, 3, 72, 24, false, false, 1),
    (24, 5, 72, 40, true, false, 2),
    (40, 5, 120, 40, true, false, 1),
    (40, 5, 120, 40, true, false, 1),
    (40, 3, 240, 80, false, true, 2),
    (80, 3, 200, 80, false, true, 1),
    (80, 3, 184, 80, false, true, 1),
    (80, 3, 184, 80, false, true, 1),
    (80, 3, 480, 112, true, true, 1),
    (112, 3, 672, 112, true, true, 1),
    (112, 5, 672, 160, true, true, 2),
    (160, 5, 960, 160, true, true, 1),
    (160, 5, 960, 160, true, true, 1),
];

const SMALL: [BlockRow; 11] = [
    (16, 3, 16, 16, true, false, 2),
    (16, 3, 72, 24, false, false, 2),
    (24, 3, 88, 24, false, false, 1),
    (24, 5, 96, 40, true, true, 2),
    (40, 5, 240, 40, true, true, 1),
    (40, 5, 240, 40, true, true, 1),
    (40, 5, 120, 48, true, true, 1),
    (48, 5, 144, 48, true, true, 1),
    (48, 5, 288, 96, true, true, 2),
    (96, 5, 576, 96, true, true, 1),
    (96, 5, 576, 96, true, true, 1),
];

/// torchvision's `_make_divisible(v, 8)`.
fn make_divisible(v: usize) -> usize {
    let f = v as f64;
    let mut new = (((f + 4.0) as usize) / 8 * 8).max(8);
    if (new as f64) < 0.9 * f {
        new += 8;
    }
    new
}

struct SqueezeExcite {
    fc1: Conv,
    fc2: Conv,
}

struct Block {
    row: BlockRow,
    expand: Option<Conv>,
    depthwise: Conv,
    se: Option<SqueezeExcite>,
    project: Conv,
}

pub struct MobileNetV3 {
    large: bool,
    stem: Conv,
    blocks: Vec<Block>,
    last: Conv,
    hidden: Linear,
    fc: Linear,
}

fn hardswish(x: &Tensor) -> Result<Tensor, VisionError> {
    Ok(x.mul(&relu6(&x.add_scalar(3.0)?)?.mul_scalar(1.0 / 6.0)?)?)
}

fn activation(x: &Tensor, hard_swish: bool) -> Result<Tensor, VisionError> {
    if hard_swish {
        hardswish(x)
    } else {
        Ok(x.relu()?)
    }
}

impl MobileNetV3 {
    pub fn load_torchvision(vb: &VarBuilder) -> Result<Self, VisionError> {
        let large = vb.contains(&format!("features.{}.block.0.0.weight", SMALL.len() + 1));
        let rows: &[BlockRow] = if large { &LARGE } else { &SMALL };
        let bn = |conv: Conv, name: &str| fold_batch_norm(conv, vb, name, BN_EPS);
        let stem = bn(
            load_conv(
                vb,
                "features.0.0",
                ConvShape {
                    cin: 3,
                    cout: 16,
                    kernel: 3,
                    stride: 2,
                    groups: 1,
                },
                false,
            )?,
            "features.0.1",
        )?;
        let mut blocks = Vec::new();
        for (i, &row) in rows.iter().enumerate() {
            let (cin, k, exp, cout, se, _, stride) = row;
            let p = format!("features.{}.block", i + 1);
            let mut at = 0;
            let expand = if exp != cin {
                let c = load_conv(
                    vb,
                    &format!("{p}.{at}.0"),
                    ConvShape {
                        cin,
                        cout: exp,
                        kernel: 1,
                        stride: 1,
                        groups: 1,
                    },
                    false,
                )?;
                let c = bn(c, &format!("{p}.{at}.1"))?;
                at += 1;
                Some(c)
            } else {
                None
            };
            let dw = load_conv(
                vb,
                &format!("{p}.{at}.0"),
                ConvShape {
                    cin: exp,
                    cout: exp,
                    kernel: k,
                    stride,
                    groups: exp,
                },
                false,
            )?;
            let depthwise = bn(dw, &format!("{p}.{at}.1"))?;
            at += 1;
            let se = if se {
                let sq = make_divisible(exp / 4);
                let s = SqueezeExcite {
                    fc1: load_conv(
                        vb,
                        &format!("{p}.{at}.fc1"),
                        ConvShape {
                            cin: exp,
                            cout: sq,
                            kernel: 1,
                            stride: 1,
                            groups: 1,
                        },
                        true,
                    )?,
                    fc2: load_conv(
                        vb,
                        &format!("{p}.{at}.fc2"),
                        ConvShape {
                            cin: sq,
                            cout: exp,
                            kernel: 1,
                            stride: 1,
                            groups: 1,
                        },
                        true,
                    )?,
                };
                at += 1;
                Some(s)
            } else {
                None
            };
            let pr = load_conv(
                vb,
                &format!("{p}.{at}.0"),
                ConvShape {
                    cin: exp,
                    cout,
                    kernel: 1,
                    stride: 1,
                    groups: 1,
                },
                false,
            )?;
            let project = bn(pr, &format!("{p}.{at}.1"))?;
            blocks.push(Block {
                row,
                expand,
                depthwise,
                se,
                project,
            });
        }
        let n = rows.len() + 1;
        let last_in = rows[rows.len() - 1].3;
        let last_out = 6 * last_in;
        let last = bn(
            load_conv(
                vb,
                &format!("features.{n}.0"),
                ConvShape {
                    cin: last_in,
                    cout: last_out,
                    kernel: 1,
                    stride: 1,
                    groups: 1,
                },
                false,
            )?,
            &format!("features.{n}.1"),
        )?;
        let hidden_size = if large { 1280 } else { 1024 };
        let hidden = load_linear(vb, "classifier.0", last_out, hidden_size)?;
        let classes = vb.meta("classifier.3.bias").map_or(1000, |m| m.shape[0]);
        let fc = load_linear(vb, "classifier.3", hidden_size, classes)?;
        Ok(MobileNetV3 {
            large,
            stem,
            blocks,
            last,
            hidden,
            fc,
        })
    }

    pub fn name(&self) -> String {
        if self.large {
            "mobilenet-v3-large".into()
        } else {
            "mobilenet-v3-small".into()
        }
    }

    pub fn classes(&self) -> usize {
        self.fc.out_features()
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor, VisionError> {
        let mut x = hardswish(&self.stem.apply(x, Padding::Symmetric)?)?;
        for b in &self.blocks {
            let (cin, _, _, cout, _, hs, stride) = b.row;
            let input = x.clone();
            if let Some(e) = &b.expand {
                x = activation(&e.apply(&x, Padding::Symmetric)?, hs)?;
            }
            x = activation(&b.depthwise.apply(&x, Padding::Symmetric)?, hs)?;
            if let Some(se) = &b.se {
                let s = x.mean(&[2, 3], true)?;
                let s = se.fc1.apply(&s, Padding::Symmetric)?.relu()?;
                let s = se.fc2.apply(&s, Padding::Symmetric)?;
                let gate = relu6(&s.add_scalar(3.0)?)?.mul_scalar(1.0 / 6.0)?;
                x = x.mul(&gate)?;
            }
            x = b.project.apply(&x, Padding::Symmetric)?;
            if stride == 1 && cin == cout {
                x = x.add(&input)?;
            }
        }
        x = hardswish(&self.last.apply(&x, Padding::Symmetric)?)?;
        let h = hardswish(&self.hidden.apply(&global_avg_pool(&x)?)?)?;
        self.fc.apply(&h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn squeeze_widths_follow_torchvision() {
        assert_eq!(make_divisible(72 / 4), 24);
        assert_eq!(make_divisible(120 / 4), 32);
        assert_eq!(make_divisible(16 / 4), 8);
        assert_eq!(make_divisible(960 / 4), 240);
    }
}
