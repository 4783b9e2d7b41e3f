//! An f64 interpreter for graphs, built on the op-suite's naive reference functions: it evaluates
//! forward graphs for finite differences and backward graphs to check the VJP rules in exact
//! arithmetic, independently of lowering and the engine.

#![allow(dead_code)]

use crate::common::reference::{self as r, Nd};
use aneforge::graph::{
    BinaryOp, CompareOp, DType, HostData, NodeId, Op, PadMode, PoolKind, ReduceOp, Tensor, UnaryOp,
    UpsampleMode,
};
use std::collections::HashMap;

/// Values for `input` leaves (by name) and overrides for `parameter` leaves (by name).
#[derive(Clone, Default)]
pub struct Env {
    pub inputs: HashMap<String, Nd>,
    pub params: HashMap<String, Nd>,
}

pub fn host(data: &HostData, shape: &[usize]) -> Nd {
    let v: Vec<f64> = match data {
        HostData::F32(v) => v.iter().map(|&x| f64::from(x)).collect(),
        HostData::I32(v) => v.iter().map(|&x| f64::from(x)).collect(),
        HostData::Bool(v) => v.iter().map(|&x| f64::from(u8::from(x))).collect(),
        HostData::BlockQuantized(_) | HostData::Deferred(_) => data
            .values_f32()
            .unwrap()
            .unwrap()
            .iter()
            .map(|&x| f64::from(x))
            .collect(),
    };
    Nd::new(shape, v)
}

/// Evaluates `outputs` in f64.
pub fn eval(outputs: &[Tensor], env: &Env) -> Vec<Nd> {
    let order = aneforge::graph::topo_order(outputs);
    let mut vals: HashMap<NodeId, Nd> = HashMap::new();
    for node in &order {
        let s: Vec<&Nd> = node.srcs().iter().map(|t| &vals[&t.id()]).collect();
        let v = eval_node(node, &s, env);
        assert_eq!(v.shape, node.shape(), "interpreter: {node:?}");
        vals.insert(node.id(), v);
    }
    outputs.iter().map(|o| vals[&o.id()].clone()).collect()
}

fn unary(op: UnaryOp) -> fn(f64) -> f64 {
    match op {
        UnaryOp::Relu => |x| x.max(0.0),
        UnaryOp::Gelu => r::gelu,
        UnaryOp::GeluTanh => r::gelu_tanh,
        UnaryOp::Silu => |x| x * r::sigmoid(x),
        UnaryOp::Sigmoid => r::sigmoid,
        UnaryOp::Tanh => f64::tanh,
        UnaryOp::Exp => f64::exp,
        UnaryOp::Log => f64::ln,
        UnaryOp::Sqrt => f64::sqrt,
        UnaryOp::Rsqrt => |x| 1.0 / x.sqrt(),
        UnaryOp::Abs => f64::abs,
        UnaryOp::Neg => |x| -x,
        UnaryOp::Square => |x| x * x,
        UnaryOp::Sin => f64::sin,
        UnaryOp::Cos => f64::cos,
        UnaryOp::Erf => r::erf,
        UnaryOp::Softplus => r::softplus,
        UnaryOp::Floor => f64::floor,
        UnaryOp::Ceil => f64::ceil,
        UnaryOp::Round => r::round_half_even,
        UnaryOp::Sign => r::sign,
    }
}

fn binary(op: BinaryOp) -> fn(f64, f64) -> f64 {
    match op {
        BinaryOp::Add => |a, b| a + b,
        BinaryOp::Sub => |a, b| a - b,
        BinaryOp::Mul => |a, b| a * b,
        BinaryOp::Div => |a, b| a / b,
        BinaryOp::Pow => f64::powf,
        BinaryOp::Maximum => f64::max,
        BinaryOp::Minimum => f64::min,
    }
}

fn compare(op: CompareOp) -> fn(f64, f64) -> bool {
    match op {
        CompareOp::Equal => |a, b| a == b,
        CompareOp::NotEqual => |a, b| a != b,
        CompareOp::Less => |a, b| a < b,
        CompareOp::LessEqual => |a, b| a <= b,
        CompareOp::Greater => |a, b| a > b,
        CompareOp::GreaterEqual => |a, b| a >= b,
    }
}

fn ints(x: &Nd) -> Vec<i32> {
    x.data.iter().map(|&v| v as i32).collect()
}

fn eval_node(node: &Tensor, s: &[&Nd], env: &Env) -> Nd {
    match node.op() {
        Op::Input { name } => env
            .inputs
            .get(name)
            .unwrap_or_else(|| panic!("interpreter: no value for input {name}"))
            .clone(),
        Op::Constant(a) => host(a.data(), a.shape()),
        Op::Parameter { name, init } => env
            .params
            .get(name)
            .cloned()
            .unwrap_or_else(|| host(init.data(), init.shape())),
        Op::Unary(u) => s[0].map(unary(*u)),
        Op::Clip { min, max } => s[0].map(|x| x.max(f64::from(*min)).min(f64::from(*max))),
        Op::LeakyRelu { alpha } => {
            let a = f64::from(*alpha);
            s[0].map(|x| if x > 0.0 { x } else { a * x })
        }
        Op::Elu { alpha } => {
            let a = f64::from(*alpha);
            s[0].map(|x| if x > 0.0 { x } else { a * (x.exp() - 1.0) })
        }
        Op::Binary(b) => r::zip(s[0], s[1], binary(*b)),
        Op::Compare(c) => {
            let f = compare(*c);
            r::zip(s[0], s[1], |a, b| f64::from(u8::from(f(a, b))))
        }
        Op::Select => r::select(s[0], s[1], s[2]),
        Op::MatMul {
            transpose_a,
            transpose_b,
        } => r::matmul(s[0], s[1], *transpose_a, *transpose_b),
        Op::Linear { .. } => r::linear(s[0], s[1], s.get(2).copied()),
        Op::LinearExperts { experts } => {
            let ids: Vec<i32> = s[2].data.iter().map(|&v| v as i32).collect();
            r::linear_experts(s[0], s[1], &ids, s[2].shape[1], *experts)
        }
        Op::Conv { attrs, .. } => r::conv(
            s[0],
            s[1],
            s.get(2).copied(),
            &r::Conv {
                strides: &attrs.strides,
                pads: &attrs.pads,
                dilations: &attrs.dilations,
                groups: attrs.groups,
            },
        ),
        Op::ConvTranspose {
            attrs,
            output_padding,
            ..
        } => r::conv_transpose(
            s[0],
            s[1],
            s.get(2).copied(),
            &r::Conv {
                strides: &attrs.strides,
                pads: &attrs.pads,
                dilations: &attrs.dilations,
                groups: attrs.groups,
            },
            output_padding,
        ),
        Op::Pool(p) => {
            let kind = match p.kind {
                PoolKind::Max => r::PoolRef::Max,
                PoolKind::Avg { count_pad } => r::PoolRef::Avg { count_pad },
            };
            r::pool(s[0], kind, &p.kernel, &p.strides, &p.pads, p.ceil_mode)
        }
        Op::Upsample {
            mode,
            scale_h,
            scale_w,
        } => match mode {
            UpsampleMode::Nearest => r::upsample_nearest(s[0], *scale_h, *scale_w),
            UpsampleMode::Bilinear { align_corners } => {
                r::upsample_bilinear(s[0], *scale_h, *scale_w, *align_corners)
            }
        },
        Op::Reduce {
            op: ReduceOp::Prod,
            axes,
            ..
        } => prod_keep(s[0], axes).reshape(node.shape()),
        Op::Reduce { op, axes, .. } => {
            let kind = match op {
                ReduceOp::Sum => r::ReduceRef::Sum,
                ReduceOp::Mean => r::ReduceRef::Mean,
                ReduceOp::Max => r::ReduceRef::Max,
                ReduceOp::Min => r::ReduceRef::Min,
                ReduceOp::Prod => unreachable!("handled above"),
            };
            r::reduce_keep(s[0], axes, &kind).reshape(node.shape())
        }
        Op::ArgMax { axis, .. } => r::argmax_keep(s[0], *axis).reshape(node.shape()),
        Op::Softmax { axis } => r::softmax(s[0], *axis),
        Op::LayerNorm {
            axes,
            eps,
            has_gamma,
            has_beta,
        } => {
            let mut rest = s[1..].iter();
            let gamma = if *has_gamma {
                rest.next().copied()
            } else {
                None
            };
            let beta = if *has_beta {
                rest.next().copied()
            } else {
                None
            };
            r::layer_norm(s[0], axes, gamma, beta, f64::from(*eps))
        }
        Op::BatchNorm {
            eps,
            has_gamma,
            has_beta,
        } => {
            let c = s[0].shape[1];
            let ones = Nd::new(&[c], vec![1.0; c]);
            let zeros = Nd::new(&[c], vec![0.0; c]);
            let mut rest = s[3..].iter();
            let gamma = if *has_gamma {
                rest.next().copied()
            } else {
                None
            };
            let beta = if *has_beta {
                rest.next().copied()
            } else {
                None
            };
            r::batch_norm(
                s[0],
                s[1],
                s[2],
                gamma.unwrap_or(&ones),
                beta.unwrap_or(&zeros),
                f64::from(*eps),
            )
        }
        Op::Reshape { shape } => s[0].reshape(shape),
        Op::Transpose { perm } => r::transpose(s[0], perm),
        Op::Concat { axis } => r::concat(s, *axis),
        Op::Slice { begin, end, stride } => r::slice(s[0], begin, end, stride),
        Op::DynamicSlice { size } => {
            let begin: Vec<usize> = ints(s[1]).iter().map(|&b| b as usize).collect();
            let end: Vec<usize> = begin.iter().zip(size).map(|(b, n)| b + n).collect();
            r::slice(s[0], &begin, &end, &vec![1; size.len()])
        }
        Op::SliceUpdate { begin } => r::slice_update(s[0], s[1], begin),
        Op::DynamicSliceUpdate => {
            let begin: Vec<usize> = ints(s[2]).iter().map(|&b| b as usize).collect();
            r::slice_update(s[0], s[1], &begin)
        }
        Op::Pad { pads, mode, value } => {
            let mode = match mode {
                PadMode::Constant => r::PadRef::Constant(f64::from(*value)),
                PadMode::Reflect => r::PadRef::Reflect,
                PadMode::Replicate => r::PadRef::Replicate,
            };
            r::pad(s[0], pads, &mode)
        }
        Op::Tile { reps } => r::tile(s[0], reps),
        Op::Gather { axis } => {
            let d = s[0].shape[*axis] as i32;
            let idx: Vec<i32> = ints(s[1])
                .into_iter()
                .map(|i| if i < 0 { i + d } else { i })
                .collect();
            r::gather(s[0], &idx, &s[1].shape, *axis)
        }
        Op::SpaceToDepth { block } => r::space_to_depth(s[0], *block),
        Op::DepthToSpace { block } => r::depth_to_space(s[0], *block),
        Op::Cumsum {
            axis,
            exclusive,
            reverse,
        } => r::cumsum(s[0], *axis, *exclusive, *reverse),
        Op::Cast { dtype } => match dtype {
            DType::F32 => s[0].clone(),
            DType::I32 => s[0].map(f64::trunc),
            DType::Bool => s[0].map(|x| f64::from(u8::from(x != 0.0))),
            DType::F16 => s[0].map(|x| half::f16::from_f64(x).to_f64()),
            DType::I8 => s[0].map(|x| x.trunc().clamp(-128.0, 127.0)),
        },
        Op::Sdpa {
            scale,
            causal,
            has_mask,
        } => {
            let (add, keep) = match (has_mask, s.get(3)) {
                (true, Some(m)) if node.srcs()[3].dtype() == DType::Bool => (None, Some(*m)),
                (true, Some(m)) => (Some(*m), None),
                _ => (None, None),
            };
            r::sdpa(s[0], s[1], s[2], add, keep, *causal, scale.map(f64::from))
        }
        Op::StopGradient | Op::Barrier => s[0].clone(),
        Op::FakeQuant { scale } => s[0].map(|x| r::fake_quant(x, *scale)),
    }
}

/// The product over `axes`, keeping them as size-1 axes.
fn prod_keep(x: &Nd, axes: &[usize]) -> Nd {
    let shape: Vec<usize> = x
        .shape
        .iter()
        .enumerate()
        .map(|(i, &d)| if axes.contains(&i) { 1 } else { d })
        .collect();
    let mut out = Nd::new(&shape, vec![1.0; shape.iter().product()]);
    for (i, &v) in x.data.iter().enumerate() {
        let mut idx = r::unravel(i, &x.shape);
        for &a in axes {
            idx[a] = 0;
        }
        let s = r::strides(&shape);
        let at: usize = idx.iter().zip(&s).map(|(a, b)| a * b).sum();
        out.data[at] *= v;
    }
    out
}
