//! `DFT` and `STFT` as products with constant cosine and sine matrices. Signals are ONNX's
//! layout: a trailing axis of 1 (real) or 2 (real, imaginary) components.

use super::{tensor, Importer};
use crate::error::{invalid, unsupported, OpResult};
use crate::node::{axis, Node};
use crate::value::{Const, Data, Value};
use aneforge::graph::concat;
use aneforge::{DType, Tensor};

pub const OPS: &[(&str, Importer)] = &[
    ("DFT", dft),
    ("STFT", stft),
    ("MelWeightMatrix", mel_weight_matrix),
];

/// `MelWeightMatrix`: `[dft_length / 2 + 1, num_mel_bins]` triangular filters between mel-spaced
/// bin edges, folded on the host from its constant scalar inputs as ONNX's reference computes
/// them (edges floored to whole bins).
fn mel_weight_matrix(n: &Node) -> OpResult<Vec<Value>> {
    let scalar_at = |i: usize| -> OpResult<f64> {
        let c = n.konst(i)?;
        if c.len() != 1 {
            return invalid(format!("input {i} holds {} values (a scalar)", c.len()));
        }
        Ok(c.data.f64_at(0))
    };
    let (mels, dft_length, rate) = (scalar_at(0)?, scalar_at(1)?, scalar_at(2)?);
    let (low, high) = (scalar_at(3)?, scalar_at(4)?);
    if mels < 1.0 || dft_length < 1.0 || rate <= 0.0 {
        return invalid(format!(
            "num_mel_bins {mels}, dft_length {dft_length}, sample_rate {rate}"
        ));
    }
    let (mels, bins) = (mels as usize, (dft_length as usize) / 2 + 1);
    let to_mel = |hz: f64| 2595.0 * (hz / 700.0).ln_1p() / std::f64::consts::LN_10;
    let (low_mel, high_mel) = (to_mel(low), to_mel(high));
    let step = (high_mel - low_mel) / (mels + 2) as f64;
    let edges: Vec<i64> = (0..mels + 2)
        .map(|i| {
            let hz =
                700.0 * (((i as f64 * step + low_mel) / 2595.0) * std::f64::consts::LN_10).exp_m1();
            ((dft_length + 1.0) * hz / rate).floor() as i64
        })
        .collect();
    let mut out = vec![0f32; bins * mels];
    let mut set = |j: i64, i: usize, v: f64| -> OpResult<()> {
        match usize::try_from(j).ok().filter(|&j| j < bins) {
            Some(j) => {
                out[j * mels + i] = v as f32;
                Ok(())
            }
            None => invalid(format!("mel edge {j} beyond {bins} spectrogram bins")),
        }
    };
    for i in 0..mels {
        let (left, center, right) = (edges[i], edges[i + 1], edges[i + 2]);
        if center == left {
            set(center, i, 1.0)?;
        } else {
            for j in left..=center {
                set(j, i, (j - left) as f64 / (center - left) as f64)?;
            }
        }
        for j in center..right {
            set(j, i, (right - j) as f64 / (right - center) as f64)?;
        }
    }
    Ok(vec![Value::Const(Const::new(
        vec![bins, mels],
        Data::F32(out),
    )?)])
}

fn dft(n: &Node) -> OpResult<Vec<Value>> {
    let x = n.tensor(0)?;
    let r = x.rank();
    let a = if n.opset >= 20 {
        match n.opt(2) {
            Some(_) => n.konst(2)?.to_i64s()?.first().copied().unwrap_or(-2),
            None => -2,
        }
    } else {
        n.attr_i("axis", 1)
    };
    let a = axis(a, r)?;
    if r < 2 || a == r - 1 {
        return invalid(format!(
            "axis {a} of a rank-{r} signal (the last axis holds the components)"
        ));
    }
    let length = match n.opt(1) {
        Some(_) => {
            let l = n.konst(1)?.to_i64s()?.first().copied().unwrap_or(0);
            usize::try_from(l)
                .ok()
                .filter(|&l| l > 0)
                .ok_or_else(|| crate::error::OpError::Invalid(format!("dft_length {l}")))?
        }
        None => x.shape()[a],
    };
    let onesided = n.attr_i("onesided", 0) != 0;
    let inverse = n.attr_i("inverse", 0) != 0;
    if onesided && inverse {
        return unsupported("an inverse one-sided DFT");
    }
    tensor(transform(&x, a, length, onesided, inverse, None)?)
}

/// The DFT of `x` along axis `a` over `length` points (the signal truncated or zero-padded),
/// optionally weighted by `window` (one value per input point), keeping `length / 2 + 1`
/// frequencies when `onesided`; the inverse divides by `length`.
fn transform(
    x: &Tensor,
    a: usize,
    length: usize,
    onesided: bool,
    inverse: bool,
    window: Option<&[f32]>,
) -> OpResult<Tensor> {
    let r = x.rank();
    let comps = x.shape()[r - 1];
    if !(1..=2).contains(&comps) {
        return invalid(format!("{comps} components (1 or 2)"));
    }
    let points = x.shape()[a];
    let freqs = if onesided { length / 2 + 1 } else { length };
    // [.., comps, points]: the other axes first, then the components, then the signal
    let mut perm: Vec<usize> = (0..r - 1).filter(|&d| d != a).collect();
    perm.extend([r - 1, a]);
    let xt = x.transpose(&perm)?;
    let component = |c: usize| -> OpResult<Tensor> {
        let pick = Const::ints(vec![1], vec![c as i64])?.to_tensor()?;
        Ok(xt.gather(&pick, (r - 2) as isize)?)
    };
    let sign = if inverse { 1.0 } else { -1.0 };
    let scale = if inverse { 1.0 / length as f64 } else { 1.0 };
    let matrix = |f: fn(f64) -> f64, factor: f64| -> OpResult<Tensor> {
        let mut m = vec![0f32; points * freqs];
        for p in 0..points.min(length) {
            let w = window.map_or(1.0, |w| f64::from(w[p]));
            for k in 0..freqs {
                let turn = ((p * k) % length) as f64 / length as f64;
                m[p * freqs + k] =
                    (f(2.0 * std::f64::consts::PI * turn) * factor * scale * w) as f32;
            }
        }
        Const::new(vec![points, freqs], Data::F32(m))?.to_tensor()
    };
    // e^{±iθ} = cos θ ± i sin θ: re' = re·cos − sign·im·sin, im' = im·cos + sign·re·sin
    let cos = matrix(f64::cos, 1.0)?;
    let sin = matrix(f64::sin, sign)?;
    let re = component(0)?;
    let (mut out_re, mut out_im) = (re.matmul(&cos)?, re.matmul(&sin)?);
    if comps == 2 {
        let im = component(1)?;
        out_re = out_re.sub(&im.matmul(&sin)?)?;
        out_im = out_im.add(&im.matmul(&cos)?)?;
    }
    let y = concat(&[out_re, out_im], (r - 2) as isize)?;
    // back to ONNX's layout: the frequencies at axis `a`, the components last
    let mut inverse_perm = vec![0; r];
    let mut from: Vec<usize> = (0..r - 1).filter(|&d| d != a).collect();
    from.extend([r - 1, a]);
    for (pos, &d) in from.iter().enumerate() {
        inverse_perm[d] = pos;
    }
    Ok(y.transpose(&inverse_perm)?)
}

/// `STFT(signal [batch, length, comps], frame_step, window?, frame_length?)`: frames of
/// `frame_length` samples every `frame_step`, each weighted by the window and transformed:
/// `[batch, frames, frequencies, 2]`.
fn stft(n: &Node) -> OpResult<Vec<Value>> {
    let x = n.tensor(0)?;
    if x.rank() != 3 {
        return invalid(format!(
            "signal of shape {:?} ([batch, length, 1 or 2])",
            x.shape()
        ));
    }
    let step = n.konst(1)?.to_i64s()?.first().copied().unwrap_or(0);
    let window: Option<Vec<f32>> = match n.opt(2) {
        Some(_) => Some(n.konst(2)?.to_f32s()),
        None => None,
    };
    let frame = match (n.opt(3), &window) {
        (Some(_), _) => n.konst(3)?.to_i64s()?.first().copied().unwrap_or(0),
        (None, Some(w)) => w.len() as i64,
        (None, None) => return invalid("neither a window nor a frame length"),
    };
    let length = x.shape()[1] as i64;
    if step <= 0 || frame <= 0 || frame > length {
        return invalid(format!(
            "frame_step {step} and frame_length {frame} for a signal of length {length}"
        ));
    }
    if window.as_ref().is_some_and(|w| w.len() as i64 != frame) {
        return invalid("the window length differs from the frame length");
    }
    let frames = (length - frame) / step + 1;
    let index: Vec<i64> = (0..frames)
        .flat_map(|f| (0..frame).map(move |p| f * step + p))
        .collect();
    let (frames, frame) = (frames as usize, frame as usize);
    let index = Const::ints(vec![frames, frame], index)?.to_tensor()?;
    // [batch, frames, frame, comps]
    let framed = x.gather(&index, 1)?;
    if framed.dtype() != DType::F32 {
        return unsupported(format!("{} signals", framed.dtype()));
    }
    let onesided = n.attr_i("onesided", 1) != 0;
    tensor(transform(
        &framed,
        2,
        frame,
        onesided,
        false,
        window.as_deref(),
    )?)
}
