//! Naive f64 reference implementations of every graph op, written from the op definitions
//! (PyTorch / NumPy semantics where the graph follows them), independent of the engine.

#![allow(dead_code)]

#[derive(Clone, Debug, PartialEq)]
pub struct Nd {
    pub shape: Vec<usize>,
    pub data: Vec<f64>,
}

pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

pub fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for a in (0..shape.len()).rev() {
        idx[a] = i % shape[a];
        i /= shape[a];
    }
    idx
}

pub fn broadcast_shape(a: &[usize], b: &[usize]) -> Vec<usize> {
    let r = a.len().max(b.len());
    (0..r)
        .map(|i| {
            let da = if i + a.len() >= r {
                a[i + a.len() - r]
            } else {
                1
            };
            let db = if i + b.len() >= r {
                b[i + b.len() - r]
            } else {
                1
            };
            assert!(da == db || da == 1 || db == 1, "reference: {a:?} vs {b:?}");
            da.max(db)
        })
        .collect()
}

impl Nd {
    pub fn new(shape: &[usize], data: Vec<f64>) -> Nd {
        assert_eq!(numel(shape), data.len());
        Nd {
            shape: shape.to_vec(),
            data,
        }
    }

    pub fn from_fn(shape: &[usize], f: impl Fn(&[usize]) -> f64) -> Nd {
        let data = (0..numel(shape)).map(|i| f(&unravel(i, shape))).collect();
        Nd::new(shape, data)
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    pub fn at(&self, idx: &[usize]) -> f64 {
        let s = strides(&self.shape);
        self.data[idx.iter().zip(&s).map(|(i, s)| i * s).sum::<usize>()]
    }

    /// Element at an index of a broadcast result shape (right-aligned, size-1 axes repeat).
    pub fn at_broadcast(&self, out_idx: &[usize]) -> f64 {
        let off = out_idx.len() - self.shape.len();
        let idx: Vec<usize> = self
            .shape
            .iter()
            .enumerate()
            .map(|(i, &d)| if d == 1 { 0 } else { out_idx[off + i] })
            .collect();
        self.at(&idx)
    }

    pub fn map(&self, f: impl Fn(f64) -> f64) -> Nd {
        Nd::new(&self.shape, self.data.iter().map(|&v| f(v)).collect())
    }

    pub fn reshape(&self, shape: &[usize]) -> Nd {
        Nd::new(shape, self.data.clone())
    }
}

pub fn zip(a: &Nd, b: &Nd, f: impl Fn(f64, f64) -> f64) -> Nd {
    let shape = broadcast_shape(&a.shape, &b.shape);
    Nd::from_fn(&shape, |i| f(a.at_broadcast(i), b.at_broadcast(i)))
}

pub fn select(c: &Nd, a: &Nd, b: &Nd) -> Nd {
    let shape = broadcast_shape(&c.shape, &broadcast_shape(&a.shape, &b.shape));
    Nd::from_fn(&shape, |i| {
        if c.at_broadcast(i) != 0.0 {
            a.at_broadcast(i)
        } else {
            b.at_broadcast(i)
        }
    })
}

pub fn erf(x: f64) -> f64 {
    libm::erf(x)
}

pub fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2))
}

pub fn gelu_tanh(x: f64) -> f64 {
    let c = (2.0 / std::f64::consts::PI).sqrt();
    0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
}

pub fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

pub fn softplus(x: f64) -> f64 {
    if x > 30.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

pub fn round_half_even(x: f64) -> f64 {
    let r = x.round();
    if (x - x.trunc()).abs() == 0.5 {
        2.0 * (x / 2.0).round()
    } else {
        r
    }
}

/// MIL `quantize` (int8, no zero point) then `dequantize` in fp32: the quotient rounded to f32,
/// rounded half to even, clamped to [−128, 127], times the scale.
pub fn fake_quant(x: f64, scale: f32) -> f64 {
    let s = f64::from(scale);
    let q = f64::from((x / s) as f32);
    round_half_even(q).clamp(-128.0, 127.0) * s
}

pub fn sign(x: f64) -> f64 {
    if x > 0.0 {
        1.0
    } else if x < 0.0 {
        -1.0
    } else {
        0.0
    }
}

pub fn transpose(x: &Nd, perm: &[usize]) -> Nd {
    let shape: Vec<usize> = perm.iter().map(|&p| x.shape[p]).collect();
    Nd::from_fn(&shape, |o| {
        let mut idx = vec![0; perm.len()];
        for (i, &p) in perm.iter().enumerate() {
            idx[p] = o[i];
        }
        x.at(&idx)
    })
}

fn swap_last(x: &Nd) -> Nd {
    let r = x.rank();
    let mut perm: Vec<usize> = (0..r).collect();
    perm.swap(r - 2, r - 1);
    transpose(x, &perm)
}

pub fn matmul(a: &Nd, b: &Nd, ta: bool, tb: bool) -> Nd {
    let a = if ta { swap_last(a) } else { a.clone() };
    let b = if tb { swap_last(b) } else { b.clone() };
    let (ra, rb) = (a.rank(), b.rank());
    let (m, k, n) = (a.shape[ra - 2], a.shape[ra - 1], b.shape[rb - 1]);
    assert_eq!(k, b.shape[rb - 2]);
    let mut shape = broadcast_shape(&a.shape[..ra - 2], &b.shape[..rb - 2]);
    shape.extend([m, n]);
    let r = shape.len();
    Nd::from_fn(&shape, |o| {
        let mut ia: Vec<usize> = o[r - ra..].to_vec();
        let mut ib: Vec<usize> = o[r - rb..].to_vec();
        for (i, d) in a.shape[..ra - 2].iter().enumerate() {
            if *d == 1 {
                ia[i] = 0;
            }
        }
        for (i, d) in b.shape[..rb - 2].iter().enumerate() {
            if *d == 1 {
                ib[i] = 0;
            }
        }
        (0..k)
            .map(|kk| {
                ia[ra - 2] = o[r - 2];
                ia[ra - 1] = kk;
                ib[rb - 2] = kk;
                ib[rb - 1] = o[r - 1];
                a.at(&ia) * b.at(&ib)
            })
            .sum()
    })
}

pub fn linear(x: &Nd, w: &Nd, b: Option<&Nd>) -> Nd {
    let y = if x.rank() == 1 {
        matmul(&x.reshape(&[1, x.shape[0]]), w, false, true).reshape(&[w.shape[0]])
    } else {
        matmul(x, w, false, true)
    };
    match b {
        Some(b) => zip(&y, b, |p, q| p + q),
        None => y,
    }
}

/// `y[n, k] = x[n, k or 0] @ W_e^T` with `W_e` rows `e·out..(e+1)·out` of `w`, `e = ids[n·K + k]`,
/// summed over every expert with a 0/1 weight: the dense evaluation the sparse op must match.
pub fn linear_experts(x: &Nd, w: &Nd, ids: &[i32], k: usize, experts: usize) -> Nd {
    let (n, kx, inner) = (x.shape[0], x.shape[1], x.shape[2]);
    let out = w.shape[0] / experts;
    Nd::from_fn(&[n, k, out], |o| {
        let (b, j, r) = (o[0], o[1], o[2]);
        let xr = if kx == 1 { 0 } else { j };
        (0..experts)
            .map(|e| {
                let chosen = f64::from(u8::from(ids[b * k + j] as usize == e));
                let dot: f64 = (0..inner)
                    .map(|c| x.at(&[b, xr, c]) * w.at(&[e * out + r, c]))
                    .sum();
                chosen * dot
            })
            .sum()
    })
}

/// The `k` largest values of each row of `x[N, E]` and their indices, largest first, the lower
/// index first among equals (a stable sort).
pub fn top_k(x: &Nd, k: usize) -> (Nd, Vec<i32>) {
    let (n, e) = (x.shape[0], x.shape[1]);
    let (mut values, mut ids) = (Vec::new(), Vec::new());
    for b in 0..n {
        let mut order: Vec<usize> = (0..e).collect();
        order.sort_by(|&i, &j| x.at(&[b, j]).total_cmp(&x.at(&[b, i])));
        for &i in &order[..k] {
            values.push(x.at(&[b, i]));
            ids.push(i as i32);
        }
    }
    (Nd::new(&[n, k], values), ids)
}

/// 2-D view of a 1-D spatial operand: `[N, C, L]` → `[N, C, 1, L]`.
fn lift(x: &Nd) -> Nd {
    if x.rank() == 3 {
        x.reshape(&[x.shape[0], x.shape[1], 1, x.shape[2]])
    } else {
        x.clone()
    }
}

pub struct Conv<'a> {
    pub strides: &'a [usize],
    pub pads: &'a [(usize, usize)],
    pub dilations: &'a [usize],
    pub groups: usize,
}

fn lift2<T: Copy>(v: &[T], one: T) -> [T; 2] {
    if v.len() == 1 {
        [one, v[0]]
    } else {
        [v[0], v[1]]
    }
}

pub fn conv(x: &Nd, w: &Nd, b: Option<&Nd>, p: &Conv) -> Nd {
    let one_d = x.rank() == 3;
    let (x, w) = (lift(x), lift(w));
    let s = lift2(p.strides, 1);
    let d = lift2(p.dilations, 1);
    let pd = lift2(p.pads, (0, 0));
    let (n, c, h, wd) = (x.shape[0], x.shape[1], x.shape[2], x.shape[3]);
    let (o, cg, kh, kw) = (w.shape[0], w.shape[1], w.shape[2], w.shape[3]);
    let og = o / p.groups;
    assert_eq!(cg * p.groups, c);
    let oh = (h + pd[0].0 + pd[0].1 - d[0] * (kh - 1) - 1) / s[0] + 1;
    let ow = (wd + pd[1].0 + pd[1].1 - d[1] * (kw - 1) - 1) / s[1] + 1;
    let out = Nd::from_fn(&[n, o, oh, ow], |i| {
        let (ni, oi, y, xx) = (i[0], i[1], i[2], i[3]);
        let g = oi / og;
        let mut acc = b.map_or(0.0, |b| b.data[oi]);
        for ci in 0..cg {
            for a in 0..kh {
                for bb in 0..kw {
                    let iy = (y * s[0] + a * d[0]) as isize - pd[0].0 as isize;
                    let ix = (xx * s[1] + bb * d[1]) as isize - pd[1].0 as isize;
                    if iy < 0 || ix < 0 || iy >= h as isize || ix >= wd as isize {
                        continue;
                    }
                    acc +=
                        x.at(&[ni, g * cg + ci, iy as usize, ix as usize]) * w.at(&[oi, ci, a, bb]);
                }
            }
        }
        acc
    });
    if one_d {
        out.reshape(&[n, o, ow])
    } else {
        out
    }
}

/// PyTorch `conv_transpose2d` (weight `[C, O/groups, KH, KW]`).
pub fn conv_transpose(x: &Nd, w: &Nd, b: Option<&Nd>, p: &Conv, output_padding: &[usize]) -> Nd {
    let one_d = x.rank() == 3;
    let (x, w) = (lift(x), lift(w));
    let s = lift2(p.strides, 1);
    let d = lift2(p.dilations, 1);
    let pd = lift2(p.pads, (0, 0));
    let op = lift2(output_padding, 0);
    let (n, c, h, wd) = (x.shape[0], x.shape[1], x.shape[2], x.shape[3]);
    let (og, kh, kw) = (w.shape[1], w.shape[2], w.shape[3]);
    let cg = c / p.groups;
    let o = og * p.groups;
    let oh = (h - 1) * s[0] + d[0] * (kh - 1) + 1 + op[0] - pd[0].0 - pd[0].1;
    let ow = (wd - 1) * s[1] + d[1] * (kw - 1) + 1 + op[1] - pd[1].0 - pd[1].1;
    let mut out = Nd::from_fn(&[n, o, oh, ow], |i| b.map_or(0.0, |b| b.data[i[1]]));
    let os = strides(&out.shape);
    for ni in 0..n {
        for ci in 0..c {
            let g = ci / cg;
            for iy in 0..h {
                for ix in 0..wd {
                    let v = x.at(&[ni, ci, iy, ix]);
                    for oo in 0..og {
                        for a in 0..kh {
                            for bb in 0..kw {
                                let y = (iy * s[0] + a * d[0]) as isize - pd[0].0 as isize;
                                let xx = (ix * s[1] + bb * d[1]) as isize - pd[1].0 as isize;
                                if y < 0 || xx < 0 || y >= oh as isize || xx >= ow as isize {
                                    continue;
                                }
                                let oc = g * og + oo;
                                let at = ni * os[0] + oc * os[1] + y as usize * os[2] + xx as usize;
                                out.data[at] += v * w.at(&[ci, oo, a, bb]);
                            }
                        }
                    }
                }
            }
        }
    }
    if one_d {
        out.reshape(&[n, o, ow])
    } else {
        out
    }
}

pub enum PoolRef {
    Max,
    Avg { count_pad: bool },
}

/// PyTorch pooling (`ceil_mode` only with windows that start inside the padded input).
pub fn pool(
    x: &Nd,
    kind: PoolRef,
    kernel: &[usize],
    strides: &[usize],
    pads: &[(usize, usize)],
    ceil_mode: bool,
) -> Nd {
    let one_d = x.rank() == 3;
    let x = lift(x);
    let k = lift2(kernel, 1);
    let s = lift2(strides, 1);
    let pd = lift2(pads, (0, 0));
    let (n, c, h, wd) = (x.shape[0], x.shape[1], x.shape[2], x.shape[3]);
    let size = |len: usize, k: usize, s: usize, p: (usize, usize)| {
        let padded = len + p.0 + p.1;
        let mut o = if ceil_mode {
            (padded - k).div_ceil(s) + 1
        } else {
            (padded - k) / s + 1
        };
        if ceil_mode && (o - 1) * s >= len + p.0 {
            o -= 1;
        }
        o
    };
    let oh = size(h, k[0], s[0], pd[0]);
    let ow = size(wd, k[1], s[1], pd[1]);
    let out = Nd::from_fn(&[n, c, oh, ow], |i| {
        let y0 = (i[2] * s[0]) as isize - pd[0].0 as isize;
        let x0 = (i[3] * s[1]) as isize - pd[1].0 as isize;
        let mut acc: f64 = match kind {
            PoolRef::Max => f64::NEG_INFINITY,
            PoolRef::Avg { .. } => 0.0,
        };
        let mut valid = 0usize;
        let mut in_padded = 0usize;
        for a in 0..k[0] as isize {
            for b in 0..k[1] as isize {
                let (y, xx) = (y0 + a, x0 + b);
                let inside_pad = y < (h + pd[0].1) as isize && xx < (wd + pd[1].1) as isize;
                if inside_pad {
                    in_padded += 1;
                }
                if y < 0 || xx < 0 || y >= h as isize || xx >= wd as isize {
                    continue;
                }
                valid += 1;
                let v = x.at(&[i[0], i[1], y as usize, xx as usize]);
                match kind {
                    PoolRef::Max => acc = acc.max(v),
                    PoolRef::Avg { .. } => acc += v,
                }
            }
        }
        match kind {
            PoolRef::Max => acc,
            PoolRef::Avg { count_pad: true } => acc / in_padded as f64,
            PoolRef::Avg { count_pad: false } => acc / valid as f64,
        }
    });
    if one_d {
        out.reshape(&[n, c, ow])
    } else {
        out
    }
}

pub fn upsample_nearest(x: &Nd, sh: usize, sw: usize) -> Nd {
    let s = &x.shape;
    Nd::from_fn(&[s[0], s[1], s[2] * sh, s[3] * sw], |i| {
        x.at(&[i[0], i[1], i[2] / sh, i[3] / sw])
    })
}

/// PyTorch `interpolate(mode="bilinear")` with integer scale factors.
pub fn upsample_bilinear(x: &Nd, sh: usize, sw: usize, align_corners: bool) -> Nd {
    let s = &x.shape;
    let (h, w) = (s[2], s[3]);
    let (oh, ow) = (h * sh, w * sw);
    let src = |o: usize, in_len: usize, out_len: usize, scale: usize| -> (usize, usize, f64) {
        let pos = if align_corners {
            if out_len > 1 {
                o as f64 * (in_len - 1) as f64 / (out_len - 1) as f64
            } else {
                0.0
            }
        } else {
            ((o as f64 + 0.5) / scale as f64 - 0.5).max(0.0)
        };
        let i0 = (pos.floor() as usize).min(in_len - 1);
        let i1 = (i0 + 1).min(in_len - 1);
        (i0, i1, pos - i0 as f64)
    };
    Nd::from_fn(&[s[0], s[1], oh, ow], |i| {
        let (y0, y1, fy) = src(i[2], h, oh, sh);
        let (x0, x1, fx) = src(i[3], w, ow, sw);
        let v = |y, xx| x.at(&[i[0], i[1], y, xx]);
        (1.0 - fy) * ((1.0 - fx) * v(y0, x0) + fx * v(y0, x1))
            + fy * ((1.0 - fx) * v(y1, x0) + fx * v(y1, x1))
    })
}

pub enum ReduceRef {
    Sum,
    Mean,
    Max,
    Min,
}

/// Reduces over `axes` with the result keeping size-1 axes; callers squeeze as needed.
pub fn reduce_keep(x: &Nd, axes: &[usize], kind: &ReduceRef) -> Nd {
    let shape: Vec<usize> = x
        .shape
        .iter()
        .enumerate()
        .map(|(i, &d)| if axes.contains(&i) { 1 } else { d })
        .collect();
    let count: usize = axes.iter().map(|&a| x.shape[a]).product();
    let inner: Vec<usize> = axes.iter().map(|&a| x.shape[a]).collect();
    Nd::from_fn(&shape, |o| {
        let vals = (0..count).map(|j| {
            let sub = unravel(j, &inner);
            let mut idx = o.to_vec();
            for (k, &a) in axes.iter().enumerate() {
                idx[a] = sub[k];
            }
            x.at(&idx)
        });
        match kind {
            ReduceRef::Sum => vals.sum(),
            ReduceRef::Mean => vals.sum::<f64>() / count as f64,
            ReduceRef::Max => vals.fold(f64::NEG_INFINITY, f64::max),
            ReduceRef::Min => vals.fold(f64::INFINITY, f64::min),
        }
    })
}

pub fn drop_axes(shape: &[usize], axes: &[usize]) -> Vec<usize> {
    shape
        .iter()
        .enumerate()
        .filter(|(i, _)| !axes.contains(i))
        .map(|(_, &d)| d)
        .collect()
}

pub fn argmax_keep(x: &Nd, axis: usize) -> Nd {
    let mut shape = x.shape.clone();
    shape[axis] = 1;
    Nd::from_fn(&shape, |o| {
        let mut idx = o.to_vec();
        let mut best = (0, f64::NEG_INFINITY);
        for j in 0..x.shape[axis] {
            idx[axis] = j;
            let v = x.at(&idx);
            if v > best.1 {
                best = (j, v);
            }
        }
        best.0 as f64
    })
}

pub fn softmax(x: &Nd, axis: usize) -> Nd {
    let m = reduce_keep(x, &[axis], &ReduceRef::Max);
    let e = zip(x, &m, |a, b| (a - b).exp());
    let s = reduce_keep(&e, &[axis], &ReduceRef::Sum);
    zip(&e, &s, |a, b| a / b)
}

pub fn log_softmax(x: &Nd, axis: usize) -> Nd {
    softmax(x, axis).map(f64::ln)
}

pub fn layer_norm(x: &Nd, axes: &[usize], gamma: Option<&Nd>, beta: Option<&Nd>, eps: f64) -> Nd {
    let mean = reduce_keep(x, axes, &ReduceRef::Mean);
    let centered = zip(x, &mean, |a, b| a - b);
    let var = reduce_keep(&centered.map(|v| v * v), axes, &ReduceRef::Mean);
    let normed = zip(&centered, &var, |a, v| a / (v + eps).sqrt());
    let full: Vec<usize> = (0..x.rank())
        .map(|i| if axes.contains(&i) { x.shape[i] } else { 1 })
        .collect();
    let mut out = normed;
    if let Some(g) = gamma {
        out = zip(&out, &g.reshape(&full), |a, b| a * b);
    }
    if let Some(b) = beta {
        out = zip(&out, &b.reshape(&full), |a, b| a + b);
    }
    out
}

pub fn rms_norm(x: &Nd, w: Option<&Nd>, eps: f64) -> Nd {
    let last = x.rank() - 1;
    let ms = reduce_keep(&x.map(|v| v * v), &[last], &ReduceRef::Mean);
    let out = zip(x, &ms, |a, m| a / (m + eps).sqrt());
    match w {
        Some(w) => zip(&out, w, |a, b| a * b),
        None => out,
    }
}

pub fn per_channel(v: &Nd, rank: usize) -> Nd {
    let mut shape = vec![v.shape[0]];
    shape.extend(std::iter::repeat_n(1, rank - 2));
    v.reshape(&shape)
}

pub fn group_norm(x: &Nd, groups: usize, gamma: &Nd, beta: &Nd, eps: f64) -> Nd {
    let n = x.shape[0];
    let grouped = x.reshape(&[n, groups, numel(&x.shape) / n / groups]);
    let normed = layer_norm(&grouped, &[2], None, None, eps).reshape(&x.shape);
    let g = per_channel(gamma, x.rank());
    let b = per_channel(beta, x.rank());
    zip(&zip(&normed, &g, |a, b| a * b), &b, |a, b| a + b)
}

pub fn batch_norm(x: &Nd, mean: &Nd, var: &Nd, gamma: &Nd, beta: &Nd, eps: f64) -> Nd {
    let r = x.rank();
    let (m, v, g, b) = (
        per_channel(mean, r),
        per_channel(var, r),
        per_channel(gamma, r),
        per_channel(beta, r),
    );
    let scale = zip(&v, &g, |v, g| g / (v + eps).sqrt());
    let centered = zip(x, &m, |a, b| a - b);
    zip(&zip(&centered, &scale, |a, s| a * s), &b, |a, b| a + b)
}

pub fn l2_normalize(x: &Nd, axis: usize, eps: f64) -> Nd {
    let ss = reduce_keep(&x.map(|v| v * v), &[axis], &ReduceRef::Sum);
    zip(x, &ss, |a, s| a / s.sqrt().max(eps))
}

pub fn concat(xs: &[&Nd], axis: usize) -> Nd {
    let mut shape = xs[0].shape.clone();
    shape[axis] = xs.iter().map(|x| x.shape[axis]).sum();
    Nd::from_fn(&shape, |o| {
        let mut idx = o.to_vec();
        for x in xs {
            if idx[axis] < x.shape[axis] {
                return x.at(&idx);
            }
            idx[axis] -= x.shape[axis];
        }
        unreachable!()
    })
}

pub fn slice(x: &Nd, begin: &[usize], end: &[usize], stride: &[usize]) -> Nd {
    let shape: Vec<usize> = (0..x.rank())
        .map(|i| (end[i] - begin[i]).div_ceil(stride[i]))
        .collect();
    Nd::from_fn(&shape, |o| {
        let idx: Vec<usize> = (0..o.len()).map(|i| begin[i] + o[i] * stride[i]).collect();
        x.at(&idx)
    })
}

pub fn slice_update(x: &Nd, u: &Nd, begin: &[usize]) -> Nd {
    Nd::from_fn(&x.shape, |o| {
        let inside = (0..o.len()).all(|i| o[i] >= begin[i] && o[i] < begin[i] + u.shape[i]);
        if inside {
            let idx: Vec<usize> = (0..o.len()).map(|i| o[i] - begin[i]).collect();
            u.at(&idx)
        } else {
            x.at(o)
        }
    })
}

pub enum PadRef {
    Constant(f64),
    Reflect,
    Replicate,
}

pub fn pad(x: &Nd, pads: &[(usize, usize)], mode: &PadRef) -> Nd {
    let shape: Vec<usize> = x
        .shape
        .iter()
        .zip(pads)
        .map(|(&d, &(b, a))| d + b + a)
        .collect();
    Nd::from_fn(&shape, |o| {
        let mut idx = Vec::with_capacity(o.len());
        for (i, &oi) in o.iter().enumerate() {
            let d = x.shape[i] as isize;
            let p = oi as isize - pads[i].0 as isize;
            let j = if (0..d).contains(&p) {
                p
            } else {
                match mode {
                    PadRef::Constant(v) => return *v,
                    PadRef::Replicate => p.clamp(0, d - 1),
                    PadRef::Reflect => {
                        if p < 0 {
                            -p
                        } else {
                            2 * (d - 1) - p
                        }
                    }
                }
            };
            idx.push(j as usize);
        }
        x.at(&idx)
    })
}

pub fn tile(x: &Nd, reps: &[usize]) -> Nd {
    let shape: Vec<usize> = x.shape.iter().zip(reps).map(|(d, r)| d * r).collect();
    Nd::from_fn(&shape, |o| {
        let idx: Vec<usize> = o.iter().zip(&x.shape).map(|(i, d)| i % d).collect();
        x.at(&idx)
    })
}

pub fn gather(x: &Nd, indices: &[i32], idx_shape: &[usize], axis: usize) -> Nd {
    let mut shape = x.shape[..axis].to_vec();
    shape.extend(idx_shape);
    shape.extend(&x.shape[axis + 1..]);
    let ir = idx_shape.len();
    let is = strides(idx_shape);
    Nd::from_fn(&shape, |o| {
        let flat: usize = (0..ir).map(|k| o[axis + k] * is[k]).sum();
        let mut idx = o[..axis].to_vec();
        idx.push(indices[flat] as usize);
        idx.extend(&o[axis + ir..]);
        x.at(&idx)
    })
}

/// TensorFlow ordering on NCHW (MIL's `space_to_depth`):
/// `out[n, (i·b + j)·C + c, h, w] = x[n, c, h·b + i, w·b + j]`.
pub fn space_to_depth(x: &Nd, b: usize) -> Nd {
    let s = &x.shape;
    let c = s[1];
    Nd::from_fn(&[s[0], c * b * b, s[2] / b, s[3] / b], |o| {
        let (blk, ci) = (o[1] / c, o[1] % c);
        let (i, j) = (blk / b, blk % b);
        x.at(&[o[0], ci, o[2] * b + i, o[3] * b + j])
    })
}

/// Inverse of [`space_to_depth`]: `out[n, c, h·b + i, w·b + j] = x[n, (i·b + j)·C' + c, h, w]`.
pub fn depth_to_space(x: &Nd, b: usize) -> Nd {
    let s = &x.shape;
    let c = s[1] / (b * b);
    Nd::from_fn(&[s[0], c, s[2] * b, s[3] * b], |o| {
        let (i, j) = (o[2] % b, o[3] % b);
        x.at(&[o[0], (i * b + j) * c + o[1], o[2] / b, o[3] / b])
    })
}

pub fn cumsum(x: &Nd, axis: usize, exclusive: bool, reverse: bool) -> Nd {
    Nd::from_fn(&x.shape, |o| {
        let n = x.shape[axis];
        let k = o[axis];
        let range: Vec<usize> = match (reverse, exclusive) {
            (false, false) => (0..=k).collect(),
            (false, true) => (0..k).collect(),
            (true, false) => (k..n).collect(),
            (true, true) => (k + 1..n).collect(),
        };
        let mut idx = o.to_vec();
        range
            .into_iter()
            .map(|j| {
                idx[axis] = j;
                x.at(&idx)
            })
            .sum()
    })
}

/// `softmax(q kᵀ · scale + mask) v`; `keep` (bool mask, 1 = keep) and `add` (additive) broadcast
/// to the scores; causal keeps `j <= i + S - L`.
pub fn sdpa(
    q: &Nd,
    k: &Nd,
    v: &Nd,
    add: Option<&Nd>,
    keep: Option<&Nd>,
    causal: bool,
    scale: Option<f64>,
) -> Nd {
    let r = q.rank();
    let (l, e, s) = (q.shape[r - 2], q.shape[r - 1], k.shape[r - 2]);
    let scale = scale.unwrap_or(1.0 / (e as f64).sqrt());
    let scores = matmul(q, k, false, true).map(|x| x * scale);
    let scores = Nd::from_fn(&scores.shape, |i| {
        let (qi, kj) = (i[r - 2], i[r - 1]);
        let masked = (causal && kj + l > qi + s) || keep.is_some_and(|m| m.at_broadcast(i) == 0.0);
        if masked {
            f64::NEG_INFINITY
        } else {
            scores.at(i) + add.map_or(0.0, |m| m.at_broadcast(i))
        }
    });
    matmul(&softmax(&scores, r - 1), v, false, false)
}

/// Naive einsum: loops over every assignment of the summed labels.
pub fn einsum(equation: &str, ops: &[&Nd]) -> Nd {
    let (lhs, out) = equation.split_once("->").unwrap();
    let ins: Vec<Vec<char>> = lhs.split(',').map(|s| s.chars().collect()).collect();
    let out: Vec<char> = out.chars().collect();
    let mut size = std::collections::BTreeMap::new();
    for (labels, x) in ins.iter().zip(ops) {
        for (&l, &d) in labels.iter().zip(&x.shape) {
            let e = size.entry(l).or_insert(d);
            *e = (*e).max(d);
        }
    }
    let summed: Vec<char> = size.keys().copied().filter(|l| !out.contains(l)).collect();
    let out_shape: Vec<usize> = out.iter().map(|l| size[l]).collect();
    let sum_shape: Vec<usize> = summed.iter().map(|l| size[l]).collect();
    Nd::from_fn(&out_shape, |o| {
        (0..numel(&sum_shape))
            .map(|j| {
                let sj = unravel(j, &sum_shape);
                let val = |l: char| -> usize {
                    if let Some(p) = out.iter().position(|&m| m == l) {
                        o[p]
                    } else {
                        sj[summed.iter().position(|&m| m == l).unwrap()]
                    }
                };
                ins.iter()
                    .zip(ops)
                    .map(|(labels, x)| {
                        let idx: Vec<usize> = labels
                            .iter()
                            .zip(&x.shape)
                            .map(|(&l, &d)| if d == 1 { 0 } else { val(l) })
                            .collect();
                        x.at(&idx)
                    })
                    .product::<f64>()
            })
            .sum()
    })
}
