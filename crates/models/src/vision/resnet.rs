//! ResNet-18/34/50/101/152 in torchvision's state_dict layout (`conv1`, `bn1`, `layer1…4`,
//! `fc`): basic blocks (18, 34) or bottlenecks with the stride on the 3×3 convolution (v1.5),
//! BatchNorm ε = 1e-5 folded into the convolutions.

use aneforge::graph::Pool2dParams;
use aneforge::Tensor;

use crate::weights::VarBuilder;

use super::layers::{
    fold_batch_norm, global_avg_pool, load_conv, load_linear, Conv, ConvShape, Linear, Padding,
};
use super::VisionError;

const BN_EPS: f64 = 1e-5;

struct Block {
    convs: Vec<Conv>,
    downsample: Option<Conv>,
}

pub struct ResNet {
    bottleneck: bool,
    depths: Vec<usize>,
    stem: Conv,
    blocks: Vec<Block>,
    fc: Linear,
}

/// The depth a stage layout names, for known layouts.
fn depth_of(bottleneck: bool, depths: &[usize]) -> Option<usize> {
    match (bottleneck, depths) {
        (false, [2, 2, 2, 2]) => Some(18),
        (false, [3, 4, 6, 3]) => Some(34),
        (true, [3, 4, 6, 3]) => Some(50),
        (true, [3, 4, 23, 3]) => Some(101),
        (true, [3, 8, 36, 3]) => Some(152),
        _ => None,
    }
}

impl ResNet {
    pub fn load_torchvision(vb: &VarBuilder) -> Result<Self, VisionError> {
        let bottleneck = vb.contains("layer1.0.conv3.weight");
        let depths: Vec<usize> = (1..=4)
            .map(|s| {
                (0..)
                    .take_while(|b| vb.contains(&format!("layer{s}.{b}.conv1.weight")))
                    .count()
            })
            .collect();
        if depths.contains(&0) {
            return Err(VisionError::Model {
                path: vb.source().describe().into(),
                message: format!("a ResNet needs blocks in all four stages; found {depths:?}"),
            });
        }
        let bn = |conv: Conv, name: &str| fold_batch_norm(conv, vb, name, BN_EPS);
        let stem = bn(
            load_conv(
                vb,
                "conv1",
                ConvShape {
                    cin: 3,
                    cout: 64,
                    kernel: 7,
                    stride: 2,
                    groups: 1,
                },
                false,
            )?,
            "bn1",
        )?;
        let expansion = if bottleneck { 4 } else { 1 };
        let mut in_ch = 64;
        let mut blocks = Vec::new();
        for (s, &n) in depths.iter().enumerate() {
            let width = 64 << s;
            let out_ch = width * expansion;
            for b in 0..n {
                let p = format!("layer{}.{b}", s + 1);
                let stride = if b == 0 && s > 0 { 2 } else { 1 };
                let conv = |i: usize, cin: usize, cout: usize, k: usize, st: usize| {
                    bn(
                        load_conv(
                            vb,
                            &format!("{p}.conv{i}"),
                            ConvShape {
                                cin,
                                cout,
                                kernel: k,
                                stride: st,
                                groups: 1,
                            },
                            false,
                        )?,
                        &format!("{p}.bn{i}"),
                    )
                };
                let convs = if bottleneck {
                    vec![
                        conv(1, in_ch, width, 1, 1)?,
                        conv(2, width, width, 3, stride)?,
                        conv(3, width, out_ch, 1, 1)?,
                    ]
                } else {
                    vec![
                        conv(1, in_ch, width, 3, stride)?,
                        conv(2, width, width, 3, 1)?,
                    ]
                };
                let downsample = if stride != 1 || in_ch != out_ch {
                    let c = load_conv(
                        vb,
                        &format!("{p}.downsample.0"),
                        ConvShape {
                            cin: in_ch,
                            cout: out_ch,
                            kernel: 1,
                            stride,
                            groups: 1,
                        },
                        false,
                    )?;
                    Some(bn(c, &format!("{p}.downsample.1"))?)
                } else {
                    None
                };
                blocks.push(Block { convs, downsample });
                in_ch = out_ch;
            }
        }
        let classes = vb.meta("fc.bias").map_or(1000, |m| m.shape[0]);
        let fc = load_linear(vb, "fc", in_ch, classes)?;
        Ok(ResNet {
            bottleneck,
            depths,
            stem,
            blocks,
            fc,
        })
    }

    pub fn name(&self) -> String {
        match depth_of(self.bottleneck, &self.depths) {
            Some(d) => format!("resnet-{d}"),
            None => format!("resnet (stages {:?})", self.depths),
        }
    }

    pub fn classes(&self) -> usize {
        self.fc.out_features()
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor, VisionError> {
        let mut x = self.stem.apply(x, Padding::Symmetric)?.relu()?;
        x = x.max_pool2d(Pool2dParams {
            kernel: [3, 3],
            stride: [2, 2],
            padding: [1, 1],
            ceil_mode: false,
        })?;
        for b in &self.blocks {
            let identity = match &b.downsample {
                Some(d) => d.apply(&x, Padding::Symmetric)?,
                None => x.clone(),
            };
            let mut y = x;
            let last = b.convs.len() - 1;
            for (i, c) in b.convs.iter().enumerate() {
                y = c.apply(&y, Padding::Symmetric)?;
                if i != last {
                    y = y.relu()?;
                }
            }
            x = y.add(&identity)?.relu()?;
        }
        self.fc.apply(&global_avg_pool(&x)?)
    }
}
