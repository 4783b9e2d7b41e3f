//! A naive f64 evaluator of graph nodes, written from the op definitions (NumPy/PyTorch
//! semantics the graph documents), independent of the engine and of the legalizer: rewritten
//! graphs must evaluate to what the originals evaluate to.

#![allow(dead_code)]

use aneforge::graph::topo_order;
use aneforge::graph::{
    BinaryOp, CompareOp, DType, HostData, NodeId, Op, ReduceOp, Tensor, UnaryOp,
};
use std::collections::HashMap;

#[derive(Clone, Debug, PartialEq)]
pub struct V {
    pub shape: Vec<usize>,
    pub data: Vec<f64>,
}

fn numel(s: &[usize]) -> usize {
    s.iter().product()
}

fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for a in (0..shape.len()).rev() {
        idx[a] = i % shape[a];
        i /= shape[a];
    }
    idx
}

impl V {
    pub fn new(shape: &[usize], data: Vec<f64>) -> V {
        assert_eq!(numel(shape), data.len());
        V {
            shape: shape.to_vec(),
            data,
        }
    }

    fn from_fn(shape: &[usize], f: impl Fn(&[usize]) -> f64) -> V {
        let data = (0..numel(shape)).map(|i| f(&unravel(i, shape))).collect();
        V::new(shape, data)
    }

    fn at(&self, idx: &[usize]) -> f64 {
        let mut flat = 0;
        for (a, &i) in idx.iter().enumerate() {
            flat = flat * self.shape[a] + i;
        }
        self.data[flat]
    }

    /// Element at an index of a broadcast result shape.
    fn at_b(&self, out: &[usize]) -> f64 {
        let off = out.len() - self.shape.len();
        let idx: Vec<usize> = self
            .shape
            .iter()
            .enumerate()
            .map(|(a, &d)| if d == 1 { 0 } else { out[a + off] })
            .collect();
        self.at(&idx)
    }

    fn map(&self, f: impl Fn(f64) -> f64) -> V {
        V::new(&self.shape, self.data.iter().map(|&x| f(x)).collect())
    }
}

fn bshape(a: &[usize], b: &[usize]) -> Vec<usize> {
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
            da.max(db)
        })
        .collect()
}

fn zip(a: &V, b: &V, f: impl Fn(f64, f64) -> f64) -> V {
    let s = bshape(&a.shape, &b.shape);
    V::from_fn(&s, |o| f(a.at_b(o), b.at_b(o)))
}

fn erf(x: f64) -> f64 {
    libm::erf(x)
}

fn round_half_even(x: f64) -> f64 {
    let r = x.round();
    if (x - x.trunc()).abs() == 0.5 {
        2.0 * (x / 2.0).round()
    } else {
        r
    }
}

fn unary(u: UnaryOp, x: f64) -> f64 {
    use UnaryOp::*;
    match u {
        Relu => x.max(0.0),
        Gelu => 0.5 * x * (1.0 + erf(x / 2f64.sqrt())),
        GeluTanh => {
            0.5 * x
                * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3))).tanh())
        }
        Silu => x / (1.0 + (-x).exp()),
        Sigmoid => 1.0 / (1.0 + (-x).exp()),
        Tanh => x.tanh(),
        Exp => x.exp(),
        Log => x.ln(),
        Sqrt => x.sqrt(),
        Rsqrt => 1.0 / x.sqrt(),
        Abs => x.abs(),
        Neg => -x,
        Square => x * x,
        Sin => x.sin(),
        Cos => x.cos(),
        Erf => erf(x),
        Softplus => x.max(0.0) + (-x.abs()).exp().ln_1p(),
        Floor => x.floor(),
        Ceil => x.ceil(),
        Round => round_half_even(x),
        Sign => {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                0.0
            }
        }
    }
}

fn matmul(a: &V, b: &V, ta: bool, tb: bool) -> V {
    let (ra, rb) = (a.shape.len(), b.shape.len());
    let (m, k) = if ta {
        (a.shape[ra - 1], a.shape[ra - 2])
    } else {
        (a.shape[ra - 2], a.shape[ra - 1])
    };
    let n = if tb { b.shape[rb - 2] } else { b.shape[rb - 1] };
    let batch = bshape(&a.shape[..ra - 2], &b.shape[..rb - 2]);
    let mut out_shape = batch.clone();
    out_shape.extend([m, n]);
    V::from_fn(&out_shape, |o| {
        let (bi, i, j) = (&o[..o.len() - 2], o[o.len() - 2], o[o.len() - 1]);
        let mut s = 0.0;
        for p in 0..k {
            let mut ia: Vec<usize> = bi[bi.len() - (ra - 2)..]
                .iter()
                .zip(&a.shape[..ra - 2])
                .map(|(&x, &d)| if d == 1 { 0 } else { x })
                .collect();
            ia.extend(if ta { [p, i] } else { [i, p] });
            let mut ib: Vec<usize> = bi[bi.len() - (rb - 2)..]
                .iter()
                .zip(&b.shape[..rb - 2])
                .map(|(&x, &d)| if d == 1 { 0 } else { x })
                .collect();
            ib.extend(if tb { [j, p] } else { [p, j] });
            s += a.at(&ia) * b.at(&ib);
        }
        s
    })
}

fn reduce(x: &V, axes: &[usize], keep: bool, init: f64, f: impl Fn(f64, f64) -> f64) -> V {
    let kept: Vec<usize> = x
        .shape
        .iter()
        .enumerate()
        .map(|(a, &d)| if axes.contains(&a) { 1 } else { d })
        .collect();
    let mut out = V::new(&kept, vec![init; numel(&kept)]);
    for i in 0..x.data.len() {
        let idx = unravel(i, &x.shape);
        let ko: Vec<usize> = idx
            .iter()
            .enumerate()
            .map(|(a, &v)| if axes.contains(&a) { 0 } else { v })
            .collect();
        let mut flat = 0;
        for (a, &v) in ko.iter().enumerate() {
            flat = flat * kept[a] + v;
        }
        out.data[flat] = f(out.data[flat], x.data[i]);
    }
    if !keep {
        out.shape = x
            .shape
            .iter()
            .enumerate()
            .filter(|(a, _)| !axes.contains(a))
            .map(|(_, &d)| d)
            .collect();
    }
    out
}

fn host(d: &HostData) -> Vec<f64> {
    match d {
        HostData::F32(v) => v.iter().map(|&x| f64::from(x)).collect(),
        HostData::I32(v) => v.iter().map(|&x| f64::from(x)).collect(),
        HostData::Bool(v) => v.iter().map(|&x| f64::from(u8::from(x))).collect(),
        HostData::BlockQuantized(_) | HostData::Deferred(_) => d
            .values_f32()
            .unwrap()
            .unwrap()
            .iter()
            .map(|&x| f64::from(x))
            .collect(),
    }
}

/// Evaluates `outputs` with inputs fed by name (bools as 0/1, ints as integers).
pub fn eval(outputs: &[Tensor], feeds: &HashMap<String, V>) -> Vec<V> {
    let mut vals: HashMap<NodeId, V> = HashMap::new();
    for node in topo_order(outputs) {
        let s: Vec<&V> = node.srcs().iter().map(|t| &vals[&t.id()]).collect();
        let v = eval_node(&node, &s, feeds);
        assert_eq!(v.shape, node.shape(), "{node:?}");
        vals.insert(node.id(), v);
    }
    outputs.iter().map(|o| vals[&o.id()].clone()).collect()
}

fn eval_node(node: &Tensor, s: &[&V], feeds: &HashMap<String, V>) -> V {
    let sh = node.shape();
    match node.op() {
        Op::Input { name } => feeds
            .get(name)
            .unwrap_or_else(|| panic!("no feed for {name}"))
            .clone(),
        Op::Parameter { init, .. } | Op::Constant(init) => V::new(init.shape(), host(init.data())),
        Op::Unary(u) => s[0].map(|x| unary(*u, x)),
        Op::Clip { min, max } => s[0].map(|x| x.max(f64::from(*min)).min(f64::from(*max))),
        Op::LeakyRelu { alpha } => s[0].map(|x| if x >= 0.0 { x } else { f64::from(*alpha) * x }),
        Op::Elu { alpha } => s[0].map(|x| {
            if x > 0.0 {
                x
            } else {
                f64::from(*alpha) * x.exp_m1()
            }
        }),
        Op::Binary(b) => zip(s[0], s[1], |a, c| match b {
            BinaryOp::Add => a + c,
            BinaryOp::Sub => a - c,
            BinaryOp::Mul => a * c,
            BinaryOp::Div => a / c,
            BinaryOp::Pow => a.powf(c),
            BinaryOp::Maximum => a.max(c),
            BinaryOp::Minimum => a.min(c),
        }),
        Op::Compare(c) => zip(s[0], s[1], |a, b| {
            let r = match c {
                CompareOp::Equal => a == b,
                CompareOp::NotEqual => a != b,
                CompareOp::Less => a < b,
                CompareOp::LessEqual => a <= b,
                CompareOp::Greater => a > b,
                CompareOp::GreaterEqual => a >= b,
            };
            f64::from(u8::from(r))
        }),
        Op::Select => V::from_fn(sh, |o| {
            if s[0].at_b(o) != 0.0 {
                s[1].at_b(o)
            } else {
                s[2].at_b(o)
            }
        }),
        Op::MatMul {
            transpose_a,
            transpose_b,
        } => matmul(s[0], s[1], *transpose_a, *transpose_b),
        Op::Linear { .. } => {
            let y = matmul(s[0], s[1], false, true);
            match s.get(2) {
                Some(b) => zip(&y, b, |a, c| a + c),
                None => y,
            }
        }
        Op::Conv { attrs, .. } => {
            let (x, w) = (s[0], s[1]);
            let g = attrs.groups;
            let cin_g = w.shape[1];
            let cout_g = w.shape[0] / g;
            let k = &w.shape[2..];
            V::from_fn(sh, |o| {
                let (n, oc) = (o[0], o[1]);
                let grp = oc / cout_g;
                let mut acc = s.get(2).map_or(0.0, |b| b.data[oc]);
                for ci in 0..cin_g {
                    let c = grp * cin_g + ci;
                    let kn: usize = k.iter().product();
                    for kk in 0..kn {
                        let kidx = unravel(kk, k);
                        let mut xi = vec![n, c];
                        let mut inside = true;
                        for d in 0..k.len() {
                            let p = (o[2 + d] * attrs.strides[d] + kidx[d] * attrs.dilations[d])
                                as isize
                                - attrs.pads[d].0 as isize;
                            if p < 0 || p >= x.shape[2 + d] as isize {
                                inside = false;
                                break;
                            }
                            xi.push(p as usize);
                        }
                        if inside {
                            let mut wi = vec![oc, ci];
                            wi.extend(&kidx);
                            acc += x.at(&xi) * w.at(&wi);
                        }
                    }
                }
                acc
            })
        }
        Op::Reduce { op, axes, keepdims } => {
            let x = s[0];
            match op {
                ReduceOp::Sum => reduce(x, axes, *keepdims, 0.0, |a, b| a + b),
                ReduceOp::Prod => reduce(x, axes, *keepdims, 1.0, |a, b| a * b),
                ReduceOp::Max => reduce(x, axes, *keepdims, f64::NEG_INFINITY, f64::max),
                ReduceOp::Min => reduce(x, axes, *keepdims, f64::INFINITY, f64::min),
                ReduceOp::Mean => {
                    let n: usize = axes.iter().map(|&a| x.shape[a]).product();
                    reduce(x, axes, *keepdims, 0.0, |a, b| a + b).map(|v| v / n as f64)
                }
            }
        }
        Op::ArgMax { axis, .. } => {
            let x = s[0];
            let n = x.shape[*axis];
            let kept: Vec<usize> = x
                .shape
                .iter()
                .enumerate()
                .map(|(a, &d)| if a == *axis { 1 } else { d })
                .collect();
            let r = V::from_fn(&kept, |o| {
                let mut best = (f64::NEG_INFINITY, 0usize);
                for i in 0..n {
                    let mut idx = o.to_vec();
                    idx[*axis] = i;
                    let v = x.at(&idx);
                    if v > best.0 {
                        best = (v, i);
                    }
                }
                best.1 as f64
            });
            V::new(sh, r.data)
        }
        Op::Softmax { axis } => {
            let x = s[0];
            let m = reduce(x, &[*axis], true, f64::NEG_INFINITY, f64::max);
            let e = zip(x, &m, |a, b| (a - b).exp());
            let z = reduce(&e, &[*axis], true, 0.0, |a, b| a + b);
            zip(&e, &z, |a, b| a / b)
        }
        Op::Reshape { .. } | Op::StopGradient | Op::Barrier => V::new(sh, s[0].data.clone()),
        Op::FakeQuant { scale } => s[0].map(|x| {
            let s = f64::from(*scale);
            let q = f64::from((x / s) as f32).round_ties_even();
            q.clamp(-128.0, 127.0) * s
        }),
        Op::Cast { dtype } => s[0].map(|x| match dtype {
            DType::F32 => x,
            DType::I32 => x.trunc(),
            DType::Bool => f64::from(u8::from(x != 0.0)),
            DType::F16 => half::f16::from_f64(x).to_f64(),
            DType::I8 => x.trunc().clamp(-128.0, 127.0),
        }),
        Op::Transpose { perm } => V::from_fn(sh, |o| {
            let mut idx = vec![0; o.len()];
            for (i, &p) in perm.iter().enumerate() {
                idx[p] = o[i];
            }
            s[0].at(&idx)
        }),
        Op::Concat { axis } => V::from_fn(sh, |o| {
            let mut off = o[*axis];
            for v in s {
                if off < v.shape[*axis] {
                    let mut idx = o.to_vec();
                    idx[*axis] = off;
                    return v.at(&idx);
                }
                off -= v.shape[*axis];
            }
            unreachable!()
        }),
        Op::Slice { begin, stride, .. } => V::from_fn(sh, |o| {
            let idx: Vec<usize> = o
                .iter()
                .enumerate()
                .map(|(a, &i)| begin[a] + i * stride[a])
                .collect();
            s[0].at(&idx)
        }),
        Op::DynamicSlice { .. } => {
            let b: Vec<usize> = s[1].data.iter().map(|&v| v as usize).collect();
            V::from_fn(sh, |o| {
                let idx: Vec<usize> = o.iter().zip(&b).map(|(i, b)| i + b).collect();
                s[0].at(&idx)
            })
        }
        Op::SliceUpdate { begin } => update(s[0], s[1], begin),
        Op::DynamicSliceUpdate => {
            let b: Vec<usize> = s[2].data.iter().map(|&v| v as usize).collect();
            update(s[0], s[1], &b)
        }
        Op::Tile { .. } => V::from_fn(sh, |o| {
            let idx: Vec<usize> = o.iter().zip(&s[0].shape).map(|(i, d)| i % d).collect();
            s[0].at(&idx)
        }),
        Op::Gather { axis } => {
            let (x, ix) = (s[0], s[1]);
            let r = ix.shape.len();
            V::from_fn(sh, |o| {
                let pick = ix.at(&o[*axis..*axis + r]) as usize;
                let mut idx = o[..*axis].to_vec();
                idx.push(pick);
                idx.extend(&o[*axis + r..]);
                x.at(&idx)
            })
        }
        Op::SpaceToDepth { block } => {
            let (b, c) = (*block, s[0].shape[1]);
            V::from_fn(sh, |o| {
                let (blk, ci) = (o[1] / c, o[1] % c);
                s[0].at(&[o[0], ci, o[2] * b + blk / b, o[3] * b + blk % b])
            })
        }
        Op::Cumsum {
            axis,
            exclusive,
            reverse,
        } => V::from_fn(sh, |o| {
            let n = sh[*axis];
            let k = o[*axis];
            (0..n)
                .filter(|&j| match (reverse, exclusive) {
                    (false, false) => j <= k,
                    (false, true) => j < k,
                    (true, false) => j >= k,
                    (true, true) => j > k,
                })
                .map(|j| {
                    let mut idx = o.to_vec();
                    idx[*axis] = j;
                    s[0].at(&idx)
                })
                .sum()
        }),
        Op::Sdpa {
            scale,
            causal,
            has_mask,
        } => {
            let (q, k, v) = (s[0], s[1], s[2]);
            let r = q.shape.len();
            let e = q.shape[r - 1];
            let (l, sl) = (q.shape[r - 2], k.shape[r - 2]);
            let scale = scale.map_or(1.0 / (e as f64).sqrt(), f64::from);
            let mut sc = matmul(q, k, false, true).map(|x| x * scale);
            if *has_mask {
                let m = s[3];
                let bool_mask = node.srcs()[3].dtype() == DType::Bool;
                sc = zip(&sc, m, |a, mv| {
                    if bool_mask {
                        if mv != 0.0 {
                            a
                        } else {
                            f64::NEG_INFINITY
                        }
                    } else {
                        a + mv
                    }
                });
            }
            if *causal {
                let sc_shape = sc.shape.clone();
                sc = V::from_fn(&sc_shape, |o| {
                    let (i, j) = (o[o.len() - 2], o[o.len() - 1]);
                    if j + l <= i + sl {
                        sc.at(o)
                    } else {
                        f64::NEG_INFINITY
                    }
                });
            }
            let m = reduce(&sc, &[r - 1], true, f64::NEG_INFINITY, f64::max);
            let ex = zip(&sc, &m, |a, b| (a - b).exp());
            let z = reduce(&ex, &[r - 1], true, 0.0, |a, b| a + b);
            matmul(&zip(&ex, &z, |a, b| a / b), v, false, false)
        }
        op => panic!("test evaluator: {} is not implemented", op.name()),
    }
}

fn update(x: &V, u: &V, begin: &[usize]) -> V {
    let mut out = x.clone();
    for i in 0..u.data.len() {
        let idx = unravel(i, &u.shape);
        let mut flat = 0;
        for (a, &v) in idx.iter().enumerate() {
            flat = flat * x.shape[a] + v + begin[a];
        }
        out.data[flat] = u.data[i];
    }
    out
}

/// Max |a − b| over two evaluations of the same shape.
pub fn max_diff(a: &V, b: &V) -> f64 {
    assert_eq!(a.shape, b.shape);
    a.data
        .iter()
        .zip(&b.data)
        .map(|(x, y)| if x == y { 0.0 } else { (x - y).abs() })
        .fold(0.0, f64::max)
}
