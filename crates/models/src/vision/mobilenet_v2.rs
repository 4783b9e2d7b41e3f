//! MobileNetV2 in torchvision's state_dict layout (`features.N`, `classifier.1`): inverted
//! residuals (1×1 expansion, 3×3 depthwise, 1×1 linear projection) with ReLU6, BatchNorm ε = 1e-5
//! folded into the convolutions. Channel widths are read from the tensors, so any width
//! multiplier loads; the block strides are the architecture's.

use aneforge::Tensor;

use crate::weights::VarBuilder;

use super::layers::{
    fold_batch_norm, global_avg_pool, load_conv, load_linear, relu6, Conv, ConvShape, Linear,
    Padding,
};
use super::VisionError;

const BN_EPS: f64 = 1e-5;

/// `(repeats, first stride)` of the seven stages; 17 blocks in all.
const STAGES: [(usize, usize); 7] = [(1, 1), (2, 2), (3, 2), (4, 2), (3, 1), (3, 2), (1, 1)];

struct Block {
    expand: Option<Conv>,
    depthwise: Conv,
    project: Conv,
    residual: bool,
}

pub struct MobileNetV2 {
    stem: Conv,
    blocks: Vec<Block>,
    last: Conv,
    fc: Linear,
}

fn out_channels(vb: &VarBuilder, name: &str) -> Result<usize, VisionError> {
    vb.meta(name)
        .map(|m| m.shape[0])
        .ok_or_else(|| VisionError::Unsupported(format!("{name} is missing")))
}

impl MobileNetV2 {
    /// Whether the checkpoint is torchvision's MobileNetV2.
    pub fn detect(vb: &VarBuilder) -> bool {
        vb.contains("features.1.conv.0.0.weight") && vb.contains("classifier.1.weight")
    }

    pub fn load_torchvision(vb: &VarBuilder) -> Result<Self, VisionError> {
        let bn = |conv: Conv, name: &str| fold_batch_norm(conv, vb, name, BN_EPS);
        let square = |cin, cout, kernel, stride, groups| ConvShape {
            cin,
            cout,
            kernel,
            stride,
            groups,
        };
        let stem_out = out_channels(vb, "features.0.0.weight")?;
        let stem = bn(
            load_conv(vb, "features.0.0", square(3, stem_out, 3, 2, 1), false)?,
            "features.0.1",
        )?;
        let strides: Vec<usize> = STAGES
            .iter()
            .flat_map(|&(n, s)| (0..n).map(move |i| if i == 0 { s } else { 1 }))
            .collect();
        let found = (1..)
            .take_while(|i| vb.contains(&format!("features.{i}.conv.0.0.weight")))
            .count();
        if found != strides.len() {
            return Err(VisionError::Unsupported(format!(
                "{}: {found} inverted-residual blocks, MobileNetV2 has {}",
                vb.source().describe(),
                strides.len()
            )));
        }
        let mut cin = stem_out;
        let mut blocks = Vec::with_capacity(strides.len());
        for (i, &stride) in strides.iter().enumerate() {
            let p = format!("features.{}.conv", i + 1);
            let first = vb
                .meta(&format!("{p}.0.0.weight"))
                .map(|m| m.shape)
                .unwrap_or_default();
            // With expansion the block starts with a 1×1 convolution; without, the depthwise one.
            let expands = first.get(2) == Some(&1);
            let (expand, at) = if expands {
                let hidden = first[0];
                let c = load_conv(vb, &format!("{p}.0.0"), square(cin, hidden, 1, 1, 1), false)?;
                (Some(bn(c, &format!("{p}.0.1"))?), 1)
            } else {
                (None, 0)
            };
            let hidden = expand.as_ref().map_or(cin, |c| c.out_channels);
            let dw = load_conv(
                vb,
                &format!("{p}.{at}.0"),
                square(hidden, hidden, 3, stride, hidden),
                false,
            )?;
            let depthwise = bn(dw, &format!("{p}.{at}.1"))?;
            let cout = out_channels(vb, &format!("{p}.{}.weight", at + 1))?;
            let pr = load_conv(
                vb,
                &format!("{p}.{}", at + 1),
                square(hidden, cout, 1, 1, 1),
                false,
            )?;
            let project = bn(pr, &format!("{p}.{}", at + 2))?;
            blocks.push(Block {
                expand,
                depthwise,
                project,
                residual: stride == 1 && cin == cout,
            });
            cin = cout;
        }
        let n = strides.len() + 1;
        let last_out = out_channels(vb, &format!("features.{n}.0.weight"))?;
        let last = bn(
            load_conv(
                vb,
                &format!("features.{n}.0"),
                square(cin, last_out, 1, 1, 1),
                false,
            )?,
            &format!("features.{n}.1"),
        )?;
        let classes = out_channels(vb, "classifier.1.weight")?;
        let fc = load_linear(vb, "classifier.1", last_out, classes)?;
        Ok(MobileNetV2 {
            stem,
            blocks,
            last,
            fc,
        })
    }

    pub fn name(&self) -> String {
        "mobilenet-v2".into()
    }

    pub fn classes(&self) -> usize {
        self.fc.out_features()
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor, VisionError> {
        let mut x = relu6(&self.stem.apply(x, Padding::Symmetric)?)?;
        for b in &self.blocks {
            let input = x.clone();
            if let Some(e) = &b.expand {
                x = relu6(&e.apply(&x, Padding::Symmetric)?)?;
            }
            x = relu6(&b.depthwise.apply(&x, Padding::Symmetric)?)?;
            x = b.project.apply(&x, Padding::Symmetric)?;
            if b.residual {
                x = x.add(&input)?;
            }
        }
        x = relu6(&self.last.apply(&x, Padding::Symmetric)?)?;
        self.fc.apply(&global_avg_pool(&x)?)
    }
}
