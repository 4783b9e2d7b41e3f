//! Neural-network builders: convolution, pooling and resizing front ends, and compositions
//! (normalisations, attention) that lower to native MIL ops where one exists.

use super::op::{ConvAttrs, PoolAttrs, PoolKind, UpsampleMode};
use super::shape::{normalize_axes, normalize_axis};
use super::tensor::constant;
use super::{GraphError, HostArray, Op, Tensor};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv1dParams {
    pub stride: usize,
    pub padding: usize,
    pub dilation: usize,
    pub groups: usize,
}

impl Default for Conv1dParams {
    fn default() -> Self {
        Conv1dParams {
            stride: 1,
            padding: 0,
            dilation: 1,
            groups: 1,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2dParams {
    pub stride: [usize; 2],
    pub padding: [usize; 2],
    pub dilation: [usize; 2],
    pub groups: usize,
}

impl Default for Conv2dParams {
    fn default() -> Self {
        Conv2dParams {
            stride: [1, 1],
            padding: [0, 0],
            dilation: [1, 1],
            groups: 1,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvTranspose2dParams {
    pub stride: [usize; 2],
    pub padding: [usize; 2],
    pub output_padding: [usize; 2],
    pub dilation: [usize; 2],
    pub groups: usize,
}

impl Default for ConvTranspose2dParams {
    fn default() -> Self {
        ConvTranspose2dParams {
            stride: [1, 1],
            padding: [0, 0],
            output_padding: [0, 0],
            dilation: [1, 1],
            groups: 1,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pool2dParams {
    pub kernel: [usize; 2],
    pub stride: [usize; 2],
    pub padding: [usize; 2],
    pub ceil_mode: bool,
}

impl Pool2dParams {
    /// Window `kernel`, stride equal to the window, no padding.
    pub fn new(kernel: [usize; 2]) -> Pool2dParams {
        Pool2dParams {
            kernel,
            stride: kernel,
            padding: [0, 0],
            ceil_mode: false,
        }
    }
}

/// Weights of one attention block (`Linear` layouts: `[out, in]`).
#[derive(Clone, Debug)]
pub struct AttentionWeights {
    pub wq: Tensor,
    pub wk: Tensor,
    pub wv: Tensor,
    pub wo: Tensor,
    pub bq: Option<Tensor>,
    pub bk: Option<Tensor>,
    pub bv: Option<Tensor>,
    pub bo: Option<Tensor>,
    pub num_heads: usize,
    /// Fewer key/value heads than query heads gives grouped-query attention.
    pub num_kv_heads: usize,
}

fn sym(p: &[usize]) -> Vec<(usize, usize)> {
    p.iter().map(|&v| (v, v)).collect()
}

impl Tensor {
    /// Convolution over `[N, C, L]` or `[N, C, H, W]` with explicit (possibly asymmetric) padding.
    pub fn conv(
        &self,
        weight: &Tensor,
        bias: Option<&Tensor>,
        attrs: ConvAttrs,
    ) -> Result<Tensor, GraphError> {
        let mut srcs = vec![self.clone(), weight.clone()];
        srcs.extend(bias.cloned());
        Tensor::from_op(
            Op::Conv {
                attrs,
                has_bias: bias.is_some(),
            },
            srcs,
        )
    }

    /// PyTorch `conv1d`: `self[N, C, L]`, `weight[O, C/groups, K]`.
    pub fn conv1d(
        &self,
        weight: &Tensor,
        bias: Option<&Tensor>,
        p: Conv1dParams,
    ) -> Result<Tensor, GraphError> {
        let attrs = ConvAttrs {
            strides: vec![p.stride],
            pads: sym(&[p.padding]),
            dilations: vec![p.dilation],
            groups: p.groups,
        };
        self.conv(weight, bias, attrs)
    }

    /// PyTorch `conv2d`: `self[N, C, H, W]`, `weight[O, C/groups, KH, KW]`.
    pub fn conv2d(
        &self,
        weight: &Tensor,
        bias: Option<&Tensor>,
        p: Conv2dParams,
    ) -> Result<Tensor, GraphError> {
        let attrs = ConvAttrs {
            strides: p.stride.to_vec(),
            pads: sym(&p.padding),
            dilations: p.dilation.to_vec(),
            groups: p.groups,
        };
        self.conv(weight, bias, attrs)
    }

    /// PyTorch `conv_transpose2d`: `self[N, C, H, W]`, `weight[C, O/groups, KH, KW]`.
    pub fn conv_transpose2d(
        &self,
        weight: &Tensor,
        bias: Option<&Tensor>,
        p: ConvTranspose2dParams,
    ) -> Result<Tensor, GraphError> {
        let attrs = ConvAttrs {
            strides: p.stride.to_vec(),
            pads: sym(&p.padding),
            dilations: p.dilation.to_vec(),
            groups: p.groups,
        };
        let mut srcs = vec![self.clone(), weight.clone()];
        srcs.extend(bias.cloned());
        Tensor::from_op(
            Op::ConvTranspose {
                attrs,
                output_padding: p.output_padding.to_vec(),
                has_bias: bias.is_some(),
            },
            srcs,
        )
    }

    pub fn pool(&self, attrs: PoolAttrs) -> Result<Tensor, GraphError> {
        Tensor::from_op(Op::Pool(attrs), vec![self.clone()])
    }

    pub fn max_pool2d(&self, p: Pool2dParams) -> Result<Tensor, GraphError> {
        self.pool(pool2d(PoolKind::Max, p))
    }

    /// `count_include_pad` as in PyTorch: padded zeros count in the divisor.
    pub fn avg_pool2d(
        &self,
        p: Pool2dParams,
        count_include_pad: bool,
    ) -> Result<Tensor, GraphError> {
        self.pool(pool2d(
            PoolKind::Avg {
                count_pad: count_include_pad,
            },
            p,
        ))
    }

    pub fn max_pool1d(
        &self,
        kernel: usize,
        stride: usize,
        padding: usize,
    ) -> Result<Tensor, GraphError> {
        self.pool(pool1d(PoolKind::Max, kernel, stride, padding))
    }

    pub fn avg_pool1d(
        &self,
        kernel: usize,
        stride: usize,
        padding: usize,
        count_include_pad: bool,
    ) -> Result<Tensor, GraphError> {
        let kind = PoolKind::Avg {
            count_pad: count_include_pad,
        };
        self.pool(pool1d(kind, kernel, stride, padding))
    }

    pub fn upsample_nearest2d(&self, scale_h: usize, scale_w: usize) -> Result<Tensor, GraphError> {
        Tensor::from_op(
            Op::Upsample {
                mode: UpsampleMode::Nearest,
                scale_h,
                scale_w,
            },
            vec![self.clone()],
        )
    }

    pub fn upsample_bilinear2d(
        &self,
        scale_h: usize,
        scale_w: usize,
        align_corners: bool,
    ) -> Result<Tensor, GraphError> {
        Tensor::from_op(
            Op::Upsample {
                mode: UpsampleMode::Bilinear { align_corners },
                scale_h,
                scale_w,
            },
            vec![self.clone()],
        )
    }

    /// The `k` largest values along the last axis, largest first, and their indices (i32); of
    /// equal values the lower index comes first. Built from `k` rounds of argmax, each masking the
    /// pick below the row's minimum.
    pub fn top_k(&self, k: usize) -> Result<(Tensor, Tensor), GraphError> {
        let n = self.shape().last().copied().unwrap_or(0);
        if self.rank() == 0 || k == 0 || k > n {
            return Err(GraphError::shape(
                "top_k",
                &[self.shape()],
                format!("k = {k} must be in 1..={n} (the last axis)"),
            ));
        }
        let mut ramp_shape = vec![1; self.rank()];
        ramp_shape[self.rank() - 1] = n;
        let ramp = constant(HostArray::from_i32(
            &ramp_shape,
            (0..n as i32).collect::<Vec<_>>(),
        )?);
        let below = self.min(&[-1], true)?.add_scalar(-1.0)?;
        let (mut values, mut indices) = (Vec::with_capacity(k), Vec::with_capacity(k));
        let mut rest = self.clone();
        for round in 0..k {
            let i = rest.argmax(-1, true)?;
            values.push(rest.max(&[-1], true)?);
            if round + 1 < k {
                rest = ramp.eq(&i)?.select(&below, &rest)?;
            }
            indices.push(i);
        }
        let cat = |v: Vec<Tensor>| match v.len() {
            1 => Ok(v[0].clone()),
            _ => super::concat(&v, -1),
        };
        Ok((cat(values)?, cat(indices)?))
    }

    /// `self @ weight^T + bias` with `weight[out, in]`.
    pub fn linear(&self, weight: &Tensor, bias: Option<&Tensor>) -> Result<Tensor, GraphError> {
        let mut srcs = vec![self.clone(), weight.clone()];
        srcs.extend(bias.cloned());
        Tensor::from_op(
            Op::Linear {
                has_bias: bias.is_some(),
            },
            srcs,
        )
    }

    /// Normalises over `axes` to zero mean and unit variance, then scales and shifts.
    pub fn layer_norm(
        &self,
        axes: &[isize],
        gamma: Option<&Tensor>,
        beta: Option<&Tensor>,
        eps: f32,
    ) -> Result<Tensor, GraphError> {
        let axes = normalize_axes("layer_norm", axes, self.rank())?;
        let mut srcs = vec![self.clone()];
        srcs.extend(gamma.cloned());
        srcs.extend(beta.cloned());
        Tensor::from_op(
            Op::LayerNorm {
                axes,
                eps,
                has_gamma: gamma.is_some(),
                has_beta: beta.is_some(),
            },
            srcs,
        )
    }

    /// `x · rsqrt(mean(x², last axis) + eps) · weight`.
    pub fn rms_norm(&self, weight: Option<&Tensor>, eps: f32) -> Result<Tensor, GraphError> {
        let ms = self.square()?.mean(&[-1], true)?;
        let normed = self.mul(&ms.add_scalar(eps)?.rsqrt()?)?;
        match weight {
            Some(w) => normed.mul(w),
            None => Ok(normed),
        }
    }

    /// `self · gamma + beta` for a `layer_norm` result normalised over `axes`: the operands
    /// `[gamma?, beta?]` (as `layer_norm` takes them, shaped like the normalised axes) broadcast
    /// along the other axes.
    pub fn layer_norm_affine(
        &self,
        axes: &[usize],
        has_gamma: bool,
        has_beta: bool,
        operands: &[Tensor],
    ) -> Result<Tensor, GraphError> {
        let full: Vec<isize> = (0..self.rank())
            .map(|i| {
                if axes.contains(&i) {
                    self.shape()[i] as isize
                } else {
                    1
                }
            })
            .collect();
        let mut out = self.clone();
        let mut rest = operands.iter();
        if has_gamma {
            if let Some(g) = rest.next() {
                out = out.mul(&g.reshape(&full)?)?;
            }
        }
        if has_beta {
            if let Some(b) = rest.next() {
                out = out.add(&b.reshape(&full)?)?;
            }
        }
        Ok(out)
    }

    /// Group normalisation of `[N, C, *S]` with per-channel `gamma[C]`, `beta[C]`.
    pub fn group_norm(
        &self,
        groups: usize,
        gamma: Option<&Tensor>,
        beta: Option<&Tensor>,
        eps: f32,
    ) -> Result<Tensor, GraphError> {
        let x = self.shape();
        if x.len() < 2 || groups == 0 || !x[1].is_multiple_of(groups) {
            return Err(GraphError::shape(
                "group_norm",
                &[x],
                format!("expected [N, C, ...] with C divisible by {groups} groups"),
            ));
        }
        let grouped = self.reshape(&[x[0] as isize, groups as isize, -1])?;
        let normed = grouped.layer_norm(&[2], None, None, eps)?;
        let back = normed.reshape(&x.iter().map(|&d| d as isize).collect::<Vec<_>>())?;
        let mut per_channel = vec![x[1] as isize];
        per_channel.extend(std::iter::repeat_n(1, x.len() - 2));
        let mut out = back;
        if let Some(g) = gamma {
            out = out.mul(&g.reshape(&per_channel)?)?;
        }
        if let Some(b) = beta {
            out = out.add(&b.reshape(&per_channel)?)?;
        }
        Ok(out)
    }

    /// Inference batch normalisation of `[N, C, *S]` with running statistics.
    pub fn batch_norm(
        &self,
        mean: &Tensor,
        var: &Tensor,
        gamma: Option<&Tensor>,
        beta: Option<&Tensor>,
        eps: f32,
    ) -> Result<Tensor, GraphError> {
        let mut srcs = vec![self.clone(), mean.clone(), var.clone()];
        srcs.extend(gamma.cloned());
        srcs.extend(beta.cloned());
        Tensor::from_op(
            Op::BatchNorm {
                eps,
                has_gamma: gamma.is_some(),
                has_beta: beta.is_some(),
            },
            srcs,
        )
    }

    /// `x / max(‖x‖₂ over axis, eps)`, as PyTorch `F.normalize`.
    pub fn l2_normalize(&self, axis: isize, eps: f32) -> Result<Tensor, GraphError> {
        let axis = normalize_axis("l2_normalize", axis, self.rank())? as isize;
        let norm = self.square()?.sum(&[axis], true)?.sqrt()?;
        self.div(&norm.maximum_scalar(eps)?)
    }

    pub fn log_softmax(&self, axis: isize) -> Result<Tensor, GraphError> {
        let axis = normalize_axis("log_softmax", axis, self.rank())? as isize;
        let shifted = self.sub(&self.max(&[axis], true)?.stop_gradient()?)?;
        let lse = shifted.exp()?.sum(&[axis], true)?.log()?;
        shifted.sub(&lse)
    }
}

fn pool2d(kind: PoolKind, p: Pool2dParams) -> PoolAttrs {
    PoolAttrs {
        kind,
        kernel: p.kernel.to_vec(),
        strides: p.stride.to_vec(),
        pads: sym(&p.padding),
        ceil_mode: p.ceil_mode,
    }
}

fn pool1d(kind: PoolKind, kernel: usize, stride: usize, padding: usize) -> PoolAttrs {
    PoolAttrs {
        kind,
        kernel: vec![kernel],
        strides: vec![stride],
        pads: vec![(padding, padding)],
        ceil_mode: false,
    }
}

/// Scaled dot-product attention: `softmax(q k^T · scale + mask) v` over `q[*B, L, E]`,
/// `k[*B, S, E]`, `v[*B, S, Ev]`; `scale` defaults to `1/sqrt(E)`. A bool mask keeps `true`
/// positions; an f32 mask is added to the scores. `causal` lets query `i` see keys
/// `j <= i + S - L`.
pub fn sdpa(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    causal: bool,
    scale: Option<f32>,
) -> Result<Tensor, GraphError> {
    let mut srcs = vec![q.clone(), k.clone(), v.clone()];
    srcs.extend(mask.cloned());
    Tensor::from_op(
        Op::Sdpa {
            scale,
            causal,
            has_mask: mask.is_some(),
        },
        srcs,
    )
}

/// Multi-head attention over `x_q[B, L, D]` and `x_kv[B, S, D]` (self-attention when they are the
/// same tensor); `mask` as in [`sdpa`], broadcast over heads.
pub fn mha(
    x_q: &Tensor,
    x_kv: &Tensor,
    w: &AttentionWeights,
    mask: Option<&Tensor>,
    causal: bool,
) -> Result<Tensor, GraphError> {
    let (h, hkv) = (w.num_heads, w.num_kv_heads);
    let (xq, xkv) = (x_q.shape(), x_kv.shape());
    if xq.len() != 3 || xkv.len() != 3 || h == 0 || hkv == 0 || h % hkv != 0 {
        return Err(GraphError::shape(
            "mha",
            &[xq, xkv],
            format!("expected [B, L, D] inputs and {h} heads divisible by {hkv} kv heads"),
        ));
    }
    let q = x_q.linear(&w.wq, w.bq.as_ref())?;
    let k = x_kv.linear(&w.wk, w.bk.as_ref())?;
    let v = x_kv.linear(&w.wv, w.bv.as_ref())?;
    let heads = |t: &Tensor, n: usize| -> Result<Tensor, GraphError> {
        let s = t.shape();
        if !s[2].is_multiple_of(n) {
            return Err(GraphError::shape(
                "mha",
                &[s],
                format!("projection width {} is not divisible by {n} heads", s[2]),
            ));
        }
        t.reshape(&[
            s[0] as isize,
            s[1] as isize,
            n as isize,
            (s[2] / n) as isize,
        ])?
        .transpose(&[0, 2, 1, 3])
    };
    let repeat = |t: Tensor| -> Result<Tensor, GraphError> {
        if hkv == h {
            return Ok(t);
        }
        let s: Vec<isize> = t.shape().iter().map(|&d| d as isize).collect();
        t.reshape(&[s[0], s[1], 1, s[2], s[3]])?
            .tile(&[1, 1, h / hkv, 1, 1])?
            .reshape(&[s[0], h as isize, s[2], s[3]])
    };
    let q = heads(&q, h)?;
    let k = repeat(heads(&k, hkv)?)?;
    let v = repeat(heads(&v, hkv)?)?;
    let mask = match mask {
        Some(m) if m.rank() == 3 => Some(m.expand_dims(&[1])?),
        other => other.cloned(),
    };
    let o = sdpa(&q, &k, &v, mask.as_ref(), causal, None)?;
    let s = o.shape().to_vec();
    let merged = o
        .transpose(&[0, 2, 1, 3])?
        .reshape(&[s[0] as isize, s[2] as isize, -1])?;
    merged.linear(&w.wo, w.bo.as_ref())
}

/// A causal mask as an f32 additive constant `[L, S]`: 0 where query `i` may see key `j`
/// (`j <= i + S - L`), `-30000` elsewhere — far below any score yet finite in fp16.
pub fn causal_additive_mask(l: usize, s: usize) -> Result<Tensor, GraphError> {
    let data: Vec<f32> = (0..l)
        .flat_map(|i| (0..s).map(move |j| if j + l <= i + s { 0.0 } else { MASKED }))
        .collect();
    Ok(constant(HostArray::from_f32(&[l, s], data)?))
}

/// The additive score for a masked-out attention position.
pub const MASKED: f32 = -30000.0;
