//! ResNet-18/34/50/101/152 in torchvision's state_dict layout (`conv1`, `bn1`, `layer1…4`,
//! `fc`) or Hugging Face's `ResNetForImageClassification` (`microsoft/resnet-*`:
//! `resnet.embedder…`, `resnet.encoder.stages.S.layers.B.layer.I…`, `classifier.1`): basic
//! blocks (18, 34) or bottlenecks with the stride on the 3×3 convolution (v1.5), BatchNorm
//! ε = 1e-5 folded into the convolutions.

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

/// Whose tensor names a checkpoint uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    Torchvision,
    HuggingFace,
}

impl Layout {
    /// `(conv, norm)` prefixes of the stem.
    fn stem(self) -> (String, String) {
        match self {
            Layout::Torchvision => ("conv1".into(), "bn1".into()),
            Layout::HuggingFace => (
                "resnet.embedder.embedder.convolution".into(),
                "resnet.embedder.embedder.normalization".into(),
            ),
        }
    }

    /// `(conv, norm)` prefixes of convolution `i` (0-based) of block `b` in stage `s` (0-based).
    fn conv(self, s: usize, b: usize, i: usize) -> (String, String) {
        match self {
            Layout::Torchvision => (
                format!("layer{}.{b}.conv{}", s + 1, i + 1),
                format!("layer{}.{b}.bn{}", s + 1, i + 1),
            ),
            Layout::HuggingFace => {
                let p = format!("resnet.encoder.stages.{s}.layers.{b}.layer.{i}");
                (format!("{p}.convolution"), format!("{p}.normalization"))
            }
        }
    }

    fn shortcut(self, s: usize, b: usize) -> (String, String) {
        match self {
            Layout::Torchvision => (
                format!("layer{}.{b}.downsample.0", s + 1),
                format!("layer{}.{b}.downsample.1", s + 1),
            ),
            Layout::HuggingFace => {
                let p = format!("resnet.encoder.stages.{s}.layers.{b}.shortcut");
                (format!("{p}.convolution"), format!("{p}.normalization"))
            }
        }
    }

    fn fc(self) -> &'static str {
        match self {
            Layout::Torchvision => "fc",
            Layout::HuggingFace => "classifier.1",
        }
    }

    /// The layout whose stem `vb` holds.
    pub fn detect(vb: &VarBuilder) -> Option<Layout> {
        [Layout::Torchvision, Layout::HuggingFace]
            .into_iter()
            .find(|l| vb.contains(&format!("{}.weight", l.stem().0)))
    }
}

pub struct ResNet {
    pub layout: Layout,
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
    pub fn load(vb: &VarBuilder, layout: Layout) -> Result<Self, VisionError> {
        let has = |name: String| vb.contains(&format!("{name}.weight"));
        let bottleneck = has(layout.conv(0, 0, 2).0);
        let depths: Vec<usize> = (0..4)
            .map(|s| (0..).take_while(|&b| has(layout.conv(s, b, 0).0)).count())
            .collect();
        if depths.contains(&0) {
            return Err(VisionError::Model {
                path: vb.source().describe().into(),
                message: format!("a ResNet needs blocks in all four stages; found {depths:?}"),
            });
        }
        let bn = |conv: Conv, name: &str| fold_batch_norm(conv, vb, name, BN_EPS);
        let (stem_conv, stem_norm) = layout.stem();
        let stem = bn(
            load_conv(
                vb,
                &stem_conv,
                ConvShape {
                    cin: 3,
                    cout: 64,
                    kernel: 7,
                    stride: 2,
                    groups: 1,
                },
                false,
            )?,
            &stem_norm,
        )?;
        let expansion = if bottleneck { 4 } else { 1 };
        let mut in_ch = 64;
        let mut blocks = Vec::new();
        for (s, &n) in depths.iter().enumerate() {
            let width = 64 << s;
            let out_ch = width * expansion;
            for b in 0..n {
                let stride = if b == 0 && s > 0 { 2 } else { 1 };
                let conv = |i: usize, cin: usize, cout: usize, k: usize, st: usize| {
                    let (conv_name, norm_name) = layout.conv(s, b, i);
                    bn(
                        load_conv(
                            vb,
                            &conv_name,
                            ConvShape {
                                cin,
                                cout,
                                kernel: k,
                                stride: st,
                                groups: 1,
                            },
                            false,
                        )?,
                        &norm_name,
                    )
                };
                let convs = if bottleneck {
                    vec![
                        conv(0, in_ch, width, 1, 1)?,
                        conv(1, width, width, 3, stride)?,
                        conv(2, width, out_ch, 1, 1)?,
                    ]
                } else {
                    vec![
                        conv(0, in_ch, width, 3, stride)?,
                        conv(1, width, width, 3, 1)?,
                    ]
                };
                let downsample = if stride != 1 || in_ch != out_ch {
                    let (conv_name, norm_name) = layout.shortcut(s, b);
                    let c = load_conv(
                        vb,
                        &conv_name,
                        ConvShape {
                            cin: in_ch,
                            cout: out_ch,
                            kernel: 1,
                            stride,
                            groups: 1,
                        },
                        false,
                    )?;
                    Some(bn(c, &norm_name)?)
                } else {
                    None
                };
                blocks.push(Block { convs, downsample });
                in_ch = out_ch;
            }
        }
        let fc_name = layout.fc();
        let classes = vb
            .meta(&format!("{fc_name}.bias"))
            .map_or(1000, |m| m.shape[0]);
        let fc = load_linear(vb, fc_name, in_ch, classes)?;
        Ok(ResNet {
            layout,
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
