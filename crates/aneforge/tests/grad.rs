//! Gradient checks: for every differentiable op, `loss = Σ op(params)·R` (R a random constant) is
//! differentiated with `autograd::backward`, and the gradient graph is checked twice —
//! (1) evaluated in f64 by an independent interpreter and compared with central finite
//! differences of the forward graph in f64 (this checks the VJP rule itself), and
//! (2) compiled for the CPU target (fp32) and run on the CPU engine, compared with the f64 values
//! (this checks that backward graphs lower and run).

mod common;
#[path = "grad_support/eval.rs"]
mod eval;

use aneforge::autograd::{self, GradOptions};
use aneforge::engine::HostSlice;
use aneforge::graph::{
    self, concat, constant, input, parameter, sdpa, Conv1dParams, Conv2dParams, ConvAttrs,
    ConvTranspose2dParams, DType, HostArray, Op, PadMode, Pool2dParams, PoolAttrs, PoolKind,
    Tensor, UnaryOp,
};
use aneforge::{compile_named, AneArch, CompileOptions, Target};
use common::{compare, Nd};
use eval::Env;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// Finite differences are taken at this many elements per parameter at most.
const FD_SAMPLES: usize = 24;
const FD_STEP: f64 = 1e-5;

enum Fed {
    F32(Vec<f32>),
    I32(Vec<i32>),
    Bool(Vec<bool>),
}

struct Check {
    name: String,
    rng: StdRng,
    params: Vec<Tensor>,
    env: Env,
    fed: Vec<(String, Fed)>,
    ane: bool,
}

impl Check {
    fn new(name: &str, seed: u64) -> Check {
        Check {
            name: name.to_string(),
            rng: StdRng::seed_from_u64(seed),
            params: Vec::new(),
            env: Env::default(),
            fed: Vec::new(),
            ane: false,
        }
    }

    fn uniform(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| self.rng.random_range(lo..hi)).collect()
    }

    fn param_data(&mut self, name: &str, shape: &[usize], data: Vec<f32>) -> Tensor {
        let p = parameter(name, HostArray::from_f32(shape, data).unwrap()).unwrap();
        self.params.push(p.clone());
        p
    }

    /// A differentiable leaf with data uniform in `[lo, hi)`.
    fn param(&mut self, name: &str, shape: &[usize], lo: f32, hi: f32) -> Tensor {
        let data = self.uniform(shape.iter().product(), lo, hi);
        self.param_data(name, shape, data)
    }

    fn input_f32(&mut self, name: &str, shape: &[usize], lo: f32, hi: f32) -> Tensor {
        let data = self.uniform(shape.iter().product(), lo, hi);
        self.env.inputs.insert(
            name.into(),
            Nd::new(shape, data.iter().map(|&v| f64::from(v)).collect()),
        );
        self.fed.push((name.into(), Fed::F32(data)));
        input(name, shape, DType::F32).unwrap()
    }

    fn input_i32(&mut self, name: &str, shape: &[usize], data: Vec<i32>) -> Tensor {
        self.env.inputs.insert(
            name.into(),
            Nd::new(shape, data.iter().map(|&v| f64::from(v)).collect()),
        );
        self.fed.push((name.into(), Fed::I32(data)));
        input(name, shape, DType::I32).unwrap()
    }

    fn input_bool(&mut self, name: &str, shape: &[usize], data: Vec<bool>) -> Tensor {
        self.env.inputs.insert(
            name.into(),
            Nd::new(
                shape,
                data.iter().map(|&v| f64::from(u8::from(v))).collect(),
            ),
        );
        self.fed.push((name.into(), Fed::Bool(data)));
        input(name, shape, DType::Bool).unwrap()
    }

    /// Also lower the gradient program for the ANE target (fp16) and run it on the CPU engine.
    fn with_ane(&mut self) -> &mut Check {
        self.ane = true;
        self
    }

    /// Checks the gradients of `Σ y·R` with respect to every parameter.
    fn run(&mut self, y: &Tensor) {
        let weights = self.uniform(y.len(), -1.0, 1.0);
        let r = constant(HostArray::from_f32(y.shape(), weights).unwrap());
        let axes: Vec<isize> = (0..y.rank() as isize).collect();
        let prod = y.mul(&r).unwrap();
        let loss = if axes.is_empty() {
            prod
        } else {
            prod.sum(&axes, false).unwrap()
        };
        self.run_loss(&loss, &GradOptions::default());
    }

    fn run_loss(&mut self, loss: &Tensor, options: &GradOptions) {
        let label = self.name.clone();
        let grads = autograd::backward_with(loss, &self.params, options)
            .unwrap_or_else(|e| panic!("{label}: backward: {e}"));
        let analytic = eval::eval(&grads, &self.env);
        self.check_finite_differences(loss, &analytic);
        self.check_engine(loss, &grads, &analytic, Target::Cpu, (2e-5, 2e-4));
        if self.ane {
            self.check_engine(
                loss,
                &grads,
                &analytic,
                Target::Ane(AneArch::default()),
                (3e-2, 3e-2),
            );
        }
    }

    fn check_finite_differences(&mut self, loss: &Tensor, analytic: &[Nd]) {
        let outputs = [loss.clone()];
        for (p, grad) in self.params.clone().iter().zip(analytic) {
            let Op::Parameter { name, init } = p.op() else {
                unreachable!()
            };
            let base = eval::host(init.data(), init.shape());
            let n = base.data.len();
            let picks: Vec<usize> = if n <= FD_SAMPLES {
                (0..n).collect()
            } else {
                (0..FD_SAMPLES)
                    .map(|_| self.rng.random_range(0..n))
                    .collect()
            };
            let scale = grad.data.iter().fold(1.0f64, |m, v| m.max(v.abs()));
            for i in picks {
                let at = |delta: f64| {
                    let mut v = base.clone();
                    v.data[i] += delta;
                    let mut env = self.env.clone();
                    env.params.insert(name.clone(), v);
                    eval::eval(&outputs, &env)[0].data[0]
                };
                let numeric = (at(FD_STEP) - at(-FD_STEP)) / (2.0 * FD_STEP);
                let err = (numeric - grad.data[i]).abs();
                assert!(
                    err <= 1e-6 * scale + 1e-5 * numeric.abs(),
                    "{}: d loss / d {name}[{i}]: rule {} vs finite difference {numeric} (error {err:.2e})",
                    self.name,
                    grad.data[i]
                );
            }
        }
    }

    fn check_engine(
        &self,
        loss: &Tensor,
        grads: &[Tensor],
        analytic: &[Nd],
        target: Target,
        (atol, rtol): (f64, f64),
    ) {
        let label = format!("{} [{target}]", self.name);
        let names: Vec<String> = (0..grads.len()).map(|i| format!("grad_{i}")).collect();
        let mut named: Vec<(&str, &Tensor)> = vec![("loss", loss)];
        named.extend(names.iter().map(|n| n.as_str()).zip(grads));
        let options = CompileOptions {
            target,
            ..CompileOptions::default()
        };
        let mut model = compile_named(&named, &options)
            .unwrap_or_else(|e| panic!("{label}: compiling the gradient program: {e}"));
        let feeds: Vec<(&str, HostSlice<'_>)> = self
            .fed
            .iter()
            .filter(|(n, _)| model.input_names().contains(&n.as_str()))
            .map(|(n, f)| {
                let s = match f {
                    Fed::F32(v) => HostSlice::F32(v),
                    Fed::I32(v) => HostSlice::I32(v),
                    Fed::Bool(v) => HostSlice::Bool(v),
                };
                (n.as_str(), s)
            })
            .collect();
        let out = model
            .run_f32(&feeds)
            .unwrap_or_else(|e| panic!("{label}: running: {e}"));
        for (i, want) in analytic.iter().enumerate() {
            let got: Vec<f64> = out[i + 1].iter().map(|&v| f64::from(v)).collect();
            compare(
                &format!("{label} gradient {i}"),
                &got,
                want,
                atol,
                rtol,
                model.mil_text(),
            );
        }
    }
}

fn conv_attrs(
    stride: &[usize],
    pads: &[(usize, usize)],
    dil: &[usize],
    groups: usize,
) -> ConvAttrs {
    ConvAttrs {
        strides: stride.to_vec(),
        pads: pads.to_vec(),
        dilations: dil.to_vec(),
        groups,
    }
}

#[test]
fn unary_ops() {
    for (i, op) in UnaryOp::ALL.iter().enumerate() {
        let (lo, hi) = match op {
            UnaryOp::Log | UnaryOp::Sqrt | UnaryOp::Rsqrt => (0.3, 2.0),
            _ => (-2.0, 2.0),
        };
        let mut c = Check::new(&format!("unary-{}", op.name()), 100 + i as u64);
        let x = c.param("x", &[3, 5], lo, hi);
        c.run(&x.unary(*op).unwrap());
    }
}

#[test]
fn parametric_elementwise() {
    let mut c = Check::new("clip", 200);
    let x = c.param("x", &[4, 6], -2.0, 2.0);
    c.with_ane().run(&x.clip(-0.7, 0.9).unwrap());
    let mut c = Check::new("leaky_relu", 201);
    let x = c.param("x", &[4, 6], -2.0, 2.0);
    c.run(&x.leaky_relu(0.1).unwrap());
    let mut c = Check::new("elu", 202);
    let x = c.param("x", &[4, 6], -2.0, 2.0);
    c.run(&x.elu(0.7).unwrap());
}

#[test]
fn binary_ops_with_broadcasting() {
    use aneforge::graph::BinaryOp::*;
    let shapes: [(&[usize], &[usize]); 3] = [
        (&[2, 3, 4], &[3, 1]),
        (&[4], &[2, 3, 4]),
        (&[2, 1, 3], &[1, 4, 1]),
    ];
    for (i, op) in [Add, Sub, Mul, Div, Pow, Maximum, Minimum]
        .iter()
        .enumerate()
    {
        for (j, (sa, sb)) in shapes.iter().enumerate() {
            let mut c = Check::new(
                &format!("binary-{}-{j}", op.name()),
                300 + (i * 10 + j) as u64,
            );
            let (lo, hi) = match op {
                Pow => (0.5, 2.0),
                _ => (-2.0, 2.0),
            };
            let a = c.param("a", sa, lo, hi);
            let b = match op {
                Div => c.param("b", sb, 0.5, 2.0),
                Pow => c.param("b", sb, -1.5, 1.5),
                _ => c.param("b", sb, -2.0, 2.0),
            };
            c.run(&a.binary(*op, &b).unwrap());
        }
    }
    // the same operand twice: contributions accumulate
    let mut c = Check::new("binary-self", 399);
    let a = c.param("a", &[3, 4], -2.0, 2.0);
    c.run(&a.mul(&a).unwrap().add(&a).unwrap());
}

#[test]
fn select_with_broadcasting() {
    let mut c = Check::new("select", 400);
    let cond: Vec<bool> = (0..12).map(|i| i % 3 != 1).collect();
    let m = c.input_bool("m", &[3, 4], cond);
    let a = c.param("a", &[2, 3, 4], -1.0, 1.0);
    let b = c.param("b", &[4], -1.0, 1.0);
    c.run(&m.select(&a, &b).unwrap());
}

#[test]
fn matmul_transposes_and_batches() {
    for (i, (ta, tb)) in [(false, false), (false, true), (true, false), (true, true)]
        .into_iter()
        .enumerate()
    {
        let mut c = Check::new(&format!("matmul-{ta}-{tb}"), 500 + i as u64);
        let sa: Vec<usize> = if ta {
            vec![2, 1, 4, 3]
        } else {
            vec![2, 1, 3, 4]
        };
        let sb: Vec<usize> = if tb { vec![3, 5, 4] } else { vec![3, 4, 5] };
        let a = c.param("a", &sa, -1.0, 1.0);
        let b = c.param("b", &sb, -1.0, 1.0);
        c.with_ane().run(&a.matmul_t(&b, ta, tb).unwrap());
    }
}

#[test]
fn linear_layers() {
    for (i, xs) in [vec![5usize], vec![3, 5], vec![2, 3, 5], vec![2, 1, 2, 5]]
        .iter()
        .enumerate()
    {
        let mut c = Check::new(&format!("linear-{i}"), 600 + i as u64);
        let x = c.param("x", xs, -1.0, 1.0);
        let w = c.param("w", &[4, 5], -1.0, 1.0);
        let b = c.param("b", &[4], -1.0, 1.0);
        c.run(&x.linear(&w, Some(&b)).unwrap());
    }
    let mut c = Check::new("linear-no-bias", 610);
    let x = c.param("x", &[3, 5], -1.0, 1.0);
    let w = c.param("w", &[4, 5], -1.0, 1.0);
    c.with_ane().run(&x.linear(&w, None).unwrap());
}

#[test]
fn conv2d_stride_padding_groups() {
    struct C {
        x: [usize; 4],
        o: usize,
        k: [usize; 2],
        stride: [usize; 2],
        pad: [usize; 2],
        dil: [usize; 2],
        groups: usize,
    }
    let cases = [
        C {
            x: [2, 3, 6, 5],
            o: 4,
            k: [3, 3],
            stride: [1, 1],
            pad: [1, 1],
            dil: [1, 1],
            groups: 1,
        },
        C {
            x: [2, 4, 7, 6],
            o: 6,
            k: [3, 2],
            stride: [2, 2],
            pad: [1, 0],
            dil: [1, 1],
            groups: 2,
        },
        C {
            x: [1, 4, 9, 8],
            o: 4,
            k: [3, 3],
            stride: [2, 3],
            pad: [2, 1],
            dil: [2, 1],
            groups: 4,
        },
        C {
            x: [2, 2, 5, 5],
            o: 3,
            k: [1, 1],
            stride: [1, 1],
            pad: [0, 0],
            dil: [1, 1],
            groups: 1,
        },
        C {
            x: [1, 3, 8, 8],
            o: 2,
            k: [2, 2],
            stride: [2, 2],
            pad: [0, 0],
            dil: [1, 1],
            groups: 1,
        },
        C {
            x: [1, 2, 7, 7],
            o: 2,
            k: [3, 3],
            stride: [3, 3],
            pad: [0, 0],
            dil: [1, 1],
            groups: 1,
        },
    ];
    for (i, cs) in cases.iter().enumerate() {
        let mut c = Check::new(&format!("conv2d-{i}"), 700 + i as u64);
        let x = c.param("x", &cs.x, -1.0, 1.0);
        let w = c.param(
            "w",
            &[cs.o, cs.x[1] / cs.groups, cs.k[0], cs.k[1]],
            -1.0,
            1.0,
        );
        let b = c.param("b", &[cs.o], -1.0, 1.0);
        let p = Conv2dParams {
            stride: cs.stride,
            padding: cs.pad,
            dilation: cs.dil,
            groups: cs.groups,
        };
        let y = x.conv2d(&w, Some(&b), p).unwrap();
        if i == 0 {
            c.with_ane();
        }
        c.run(&y);
    }
    let mut c = Check::new("conv2d-asymmetric", 720);
    let x = c.param("x", &[1, 2, 5, 6], -1.0, 1.0);
    let w = c.param("w", &[3, 2, 2, 3], -1.0, 1.0);
    let y = x
        .conv(&w, None, conv_attrs(&[2, 1], &[(0, 1), (2, 1)], &[1, 1], 1))
        .unwrap();
    c.run(&y);
    let mut c = Check::new("conv1d", 721);
    let x = c.param("x", &[2, 4, 9], -1.0, 1.0);
    let w = c.param("w", &[6, 2, 3], -1.0, 1.0);
    let p = Conv1dParams {
        stride: 2,
        padding: 1,
        dilation: 1,
        groups: 2,
    };
    c.run(&x.conv1d(&w, None, p).unwrap());
}

#[test]
fn conv_transpose2d() {
    let cases: [([usize; 4], usize, [usize; 2], ConvTranspose2dParams); 3] = [
        (
            [2, 3, 4, 3],
            2,
            [3, 3],
            ConvTranspose2dParams {
                stride: [2, 2],
                padding: [1, 1],
                output_padding: [1, 0],
                dilation: [1, 1],
                groups: 1,
            },
        ),
        (
            [1, 4, 3, 3],
            3,
            [2, 2],
            ConvTranspose2dParams {
                stride: [1, 2],
                padding: [0, 0],
                output_padding: [0, 0],
                dilation: [1, 1],
                groups: 2,
            },
        ),
        (
            [1, 2, 3, 4],
            2,
            [3, 2],
            ConvTranspose2dParams {
                stride: [2, 1],
                padding: [1, 0],
                output_padding: [0, 0],
                dilation: [2, 1],
                groups: 1,
            },
        ),
    ];
    for (i, (xs, og, k, p)) in cases.iter().enumerate() {
        let mut c = Check::new(&format!("conv_transpose-{i}"), 800 + i as u64);
        let x = c.param("x", xs, -1.0, 1.0);
        let w = c.param("w", &[xs[1], *og, k[0], k[1]], -1.0, 1.0);
        let b = c.param("b", &[og * p.groups], -1.0, 1.0);
        c.run(&x.conv_transpose2d(&w, Some(&b), *p).unwrap());
    }
}

#[test]
fn pooling() {
    type PoolCase = (PoolKind, [usize; 2], [usize; 2], [usize; 2], bool);
    let pools: [PoolCase; 7] = [
        (PoolKind::Max, [2, 2], [2, 2], [0, 0], false),
        (PoolKind::Max, [3, 3], [2, 2], [1, 1], false),
        (PoolKind::Max, [3, 2], [1, 2], [1, 0], true),
        (
            PoolKind::Avg { count_pad: true },
            [2, 2],
            [2, 2],
            [0, 0],
            false,
        ),
        (
            PoolKind::Avg { count_pad: true },
            [3, 3],
            [2, 2],
            [1, 1],
            true,
        ),
        (
            PoolKind::Avg { count_pad: false },
            [3, 3],
            [2, 2],
            [1, 1],
            false,
        ),
        (
            PoolKind::Avg { count_pad: false },
            [2, 3],
            [2, 2],
            [1, 1],
            true,
        ),
    ];
    for (i, (kind, k, s, p, ceil)) in pools.iter().enumerate() {
        let mut c = Check::new(&format!("pool-{i}"), 900 + i as u64);
        let x = c.param("x", &[2, 3, 7, 6], -1.0, 1.0);
        let attrs = PoolAttrs {
            kind: *kind,
            kernel: k.to_vec(),
            strides: s.to_vec(),
            pads: p.iter().map(|&v| (v, v)).collect(),
            ceil_mode: *ceil,
        };
        if i == 1 {
            c.with_ane();
        }
        c.run(&x.pool(attrs).unwrap());
    }
    let mut c = Check::new("pool-1d", 920);
    let x = c.param("x", &[2, 3, 9], -1.0, 1.0);
    c.run(&x.max_pool1d(3, 2, 1).unwrap());
    let mut c = Check::new("pool-2d-helper", 921);
    let x = c.param("x", &[1, 2, 4, 4], -1.0, 1.0);
    c.run(&x.avg_pool2d(Pool2dParams::new([2, 2]), true).unwrap());
}

#[test]
fn upsampling() {
    let mut c = Check::new("upsample-nearest", 1000);
    let x = c.param("x", &[2, 3, 3, 4], -1.0, 1.0);
    c.with_ane().run(&x.upsample_nearest2d(2, 3).unwrap());
    for (i, align) in [false, true].into_iter().enumerate() {
        let mut c = Check::new(&format!("upsample-bilinear-{align}"), 1001 + i as u64);
        let x = c.param("x", &[1, 2, 3, 4], -1.0, 1.0);
        c.run(&x.upsample_bilinear2d(2, 2, align).unwrap());
    }
}

#[test]
fn reductions() {
    let cases: [(&[isize], bool); 4] = [
        (&[1], false),
        (&[0, 2], true),
        (&[-1], true),
        (&[0, 1, 2], false),
    ];
    for (i, (axes, keep)) in cases.iter().enumerate() {
        let mut c = Check::new(&format!("reduce-sum-{i}"), 1100 + i as u64);
        let x = c.param("x", &[3, 4, 5], -1.0, 1.0);
        c.run(&x.sum(axes, *keep).unwrap());
        let mut c = Check::new(&format!("reduce-mean-{i}"), 1110 + i as u64);
        let x = c.param("x", &[3, 4, 5], -1.0, 1.0);
        c.run(&x.mean(axes, *keep).unwrap());
        let mut c = Check::new(&format!("reduce-max-{i}"), 1120 + i as u64);
        let x = c.param("x", &[3, 4, 5], -1.0, 1.0);
        c.run(&x.max(axes, *keep).unwrap());
        let mut c = Check::new(&format!("reduce-min-{i}"), 1130 + i as u64);
        let x = c.param("x", &[3, 4, 5], -1.0, 1.0);
        c.run(&x.min(axes, *keep).unwrap());
        let mut c = Check::new(&format!("reduce-prod-{i}"), 1140 + i as u64);
        let x = c.param("x", &[3, 4, 5], 0.5, 1.5);
        c.run(
            &x.reduce(aneforge::graph::ReduceOp::Prod, axes, *keep)
                .unwrap(),
        );
    }
}

/// Products with zeros: exactly one zero in a row passes the product of the others to it; two
/// zeros give zero gradients everywhere in that row.
#[test]
fn product_with_zeros() {
    let mut c = Check::new("reduce-prod-zeros", 1150);
    let data = vec![
        0.5, 0.0, 1.5, 2.0, // one zero
        0.0, 1.0, 0.0, 3.0, // two zeros
        1.1, 0.9, 1.2, 0.8, // none
    ];
    let x = c.param_data("x", &[3, 4], data.clone());
    let y = x
        .reduce(aneforge::graph::ReduceOp::Prod, &[1], false)
        .unwrap();
    let weights = [0.7f32, -1.3, 0.4];
    let r = constant(HostArray::from_f32(&[3], weights.to_vec()).unwrap());
    let loss = y.mul(&r).unwrap().sum(&[0], false).unwrap();
    let grads = autograd::backward(&loss, &c.params.clone()).unwrap();
    // d/dx[i][j] = r[i] · Π_{k≠j} x[i][k], by direct products in f64
    let want = Nd::from_fn(&[3, 4], |ij| {
        let others: f64 = (0..4)
            .filter(|&k| k != ij[1])
            .map(|k| f64::from(data[ij[0] * 4 + k]))
            .product();
        f64::from(weights[ij[0]]) * others
    });
    let got = eval::eval(&grads, &c.env).remove(0);
    compare("prod zeros", &got.data, &want, 1e-7, 1e-6, "");
    c.check_engine(&loss, &grads, &[want], Target::Cpu, (1e-6, 1e-5));
}

#[test]
fn softmax_and_compositions() {
    for axis in [0isize, 1, -1] {
        let mut c = Check::new(
            &format!("softmax-{axis}"),
            1200 + axis.unsigned_abs() as u64,
        );
        let x = c.param("x", &[3, 4, 5], -2.0, 2.0);
        c.run(&x.softmax(axis).unwrap());
    }
    let mut c = Check::new("log_softmax", 1210);
    let x = c.param("x", &[4, 7], -3.0, 3.0);
    c.with_ane().run(&x.log_softmax(-1).unwrap());
    let mut c = Check::new("l2_normalize", 1211);
    let x = c.param("x", &[3, 6], -1.0, 1.0);
    c.run(&x.l2_normalize(-1, 1e-6).unwrap());
    let mut c = Check::new("rms_norm", 1212);
    let x = c.param("x", &[2, 3, 8], -1.0, 1.0);
    let w = c.param("w", &[8], 0.5, 1.5);
    c.run(&x.rms_norm(Some(&w), 1e-5).unwrap());
}

#[test]
fn normalizations_with_affine_parameters() {
    let mut c = Check::new("layer_norm-last", 1300);
    let x = c.param("x", &[2, 3, 6], -1.0, 1.0);
    let gamma = c.param("gamma", &[6], 0.5, 1.5);
    let beta = c.param("beta", &[6], -0.5, 0.5);
    c.with_ane().run(
        &x.layer_norm(&[-1], Some(&gamma), Some(&beta), 1e-5)
            .unwrap(),
    );
    let mut c = Check::new("layer_norm-two-axes", 1301);
    let x = c.param("x", &[2, 3, 4], -1.0, 1.0);
    let gamma = c.param("gamma", &[3, 4], 0.5, 1.5);
    c.run(&x.layer_norm(&[1, 2], Some(&gamma), None, 1e-5).unwrap());
    let mut c = Check::new("layer_norm-plain", 1302);
    let x = c.param("x", &[4, 5], -1.0, 1.0);
    c.run(&x.layer_norm(&[0], None, None, 1e-3).unwrap());
    let mut c = Check::new("group_norm", 1303);
    let x = c.param("x", &[2, 6, 3, 3], -1.0, 1.0);
    let gamma = c.param("gamma", &[6], 0.5, 1.5);
    let beta = c.param("beta", &[6], -0.5, 0.5);
    c.run(&x.group_norm(3, Some(&gamma), Some(&beta), 1e-5).unwrap());
    let mut c = Check::new("batch_norm", 1304);
    let x = c.param("x", &[3, 4, 2, 3], -1.0, 1.0);
    let mean = c.param("mean", &[4], -0.5, 0.5);
    let var = c.param("var", &[4], 0.5, 1.5);
    let gamma = c.param("gamma", &[4], 0.5, 1.5);
    let beta = c.param("beta", &[4], -0.5, 0.5);
    c.run(
        &x.batch_norm(&mean, &var, Some(&gamma), Some(&beta), 1e-5)
            .unwrap(),
    );
    // training-mode batch norm, composed from batch statistics
    let mut c = Check::new("batch_norm-batch-statistics", 1305);
    let x = c.param("x", &[4, 3, 2, 2], -1.0, 1.0);
    let mean = x.mean(&[0, 2, 3], false).unwrap();
    let var = x
        .sub(&mean.reshape(&[1, 3, 1, 1]).unwrap())
        .unwrap()
        .square()
        .unwrap()
        .mean(&[0, 2, 3], false)
        .unwrap();
    c.run(&x.batch_norm(&mean, &var, None, None, 1e-5).unwrap());
}

#[test]
fn layout_ops() {
    let mut c = Check::new("reshape-transpose", 1400);
    let x = c.param("x", &[2, 3, 4], -1.0, 1.0);
    c.with_ane().run(
        &x.reshape(&[4, 6])
            .unwrap()
            .transpose(&[1, 0])
            .unwrap()
            .reshape(&[3, 2, 4])
            .unwrap()
            .transpose(&[2, 0, 1])
            .unwrap(),
    );
    let mut c = Check::new("concat", 1401);
    let a = c.param("a", &[2, 3, 4], -1.0, 1.0);
    let b = c.param("b", &[2, 1, 4], -1.0, 1.0);
    let d = c.param("d", &[2, 2, 4], -1.0, 1.0);
    c.run(&concat(&[a.clone(), b, d, a], 1).unwrap());
    let mut c = Check::new("slice-strided", 1402);
    let x = c.param("x", &[5, 7, 6], -1.0, 1.0);
    c.run(&x.slice(&[1, 0, 2], &[5, 7, 5], &[2, 3, 1]).unwrap());
    let mut c = Check::new("split-chunk", 1403);
    let x = c.param("x", &[4, 6], -1.0, 1.0);
    let parts = x.chunk(3, 1).unwrap();
    c.run(&parts[2].mul(&parts[0]).unwrap());
    for (i, mode) in [PadMode::Constant, PadMode::Reflect, PadMode::Replicate]
        .into_iter()
        .enumerate()
    {
        let mut c = Check::new(&format!("pad-{}", mode.name()), 1410 + i as u64);
        let x = c.param("x", &[2, 4, 5], -1.0, 1.0);
        c.run(&x.pad(&[(0, 0), (2, 1), (1, 3)], mode, 0.5).unwrap());
    }
    let mut c = Check::new("tile", 1420);
    let x = c.param("x", &[2, 1, 3], -1.0, 1.0);
    c.run(&x.tile(&[2, 3, 2]).unwrap());
    let mut c = Check::new("broadcast_to", 1421);
    let x = c.param("x", &[3, 1], -1.0, 1.0);
    c.run(&x.broadcast_to(&[2, 3, 4]).unwrap());
    let mut c = Check::new("space_depth", 1422);
    let x = c.param("x", &[1, 2, 4, 6], -1.0, 1.0);
    let s2d = x.space_to_depth(2).unwrap();
    c.run(&s2d.mul(&s2d).unwrap());
    let mut c = Check::new("depth_space", 1423);
    let x = c.param("x", &[1, 8, 2, 3], -1.0, 1.0);
    c.run(&x.depth_to_space(2).unwrap());
    for (i, (ex, rev)) in [(false, false), (true, false), (false, true), (true, true)]
        .into_iter()
        .enumerate()
    {
        let mut c = Check::new(&format!("cumsum-{ex}-{rev}"), 1430 + i as u64);
        let x = c.param("x", &[3, 5], -1.0, 1.0);
        c.run(&x.cumsum(1, ex, rev).unwrap());
    }
    let mut c = Check::new("slice_update", 1440);
    let x = c.param("x", &[3, 6, 2], -1.0, 1.0);
    let u = c.param("u", &[2, 2, 2], -1.0, 1.0);
    c.run(&x.slice_update(&u, &[1, 3, 0]).unwrap());
}

#[test]
fn gather_rows() {
    let mut c = Check::new("gather-axis0", 1500);
    let table = c.param("table", &[6, 4], -1.0, 1.0);
    let idx = c.input_i32("idx", &[2, 3], vec![1, 5, 1, 0, -1, 3]);
    c.run(&table.gather(&idx, 0).unwrap());
    let mut c = Check::new("gather-axis1", 1501);
    let x = c.param("x", &[2, 5, 3], -1.0, 1.0);
    let idx = c.input_i32("idx", &[4], vec![4, 0, 0, 2]);
    c.run(&x.gather(&idx, 1).unwrap());
}

#[test]
fn linear_experts() {
    // one shared row per token, and one row per choice with an expert chosen twice
    for (i, (kx, ids)) in [(1, vec![2, 0, 1, 1]), (2, vec![1, 1, 0, 2])]
        .into_iter()
        .enumerate()
    {
        let mut c = Check::new(&format!("linear_experts-{i}"), 1550 + i as u64);
        let x = c.param("x", &[2, kx, 5], -1.0, 1.0);
        let w = c.param("w", &[3 * 4, 5], -1.0, 1.0);
        let ids = c.input_i32("ids", &[2, 2], ids);
        c.run(&x.linear_experts(&w, &ids, 3).unwrap());
    }
}

#[test]
fn attention() {
    for (i, (causal, scale)) in [(false, None), (true, None), (true, Some(0.3f32))]
        .into_iter()
        .enumerate()
    {
        let mut c = Check::new(&format!("sdpa-{causal}-{scale:?}"), 1600 + i as u64);
        let q = c.param("q", &[2, 2, 4, 3], -1.0, 1.0);
        let k = c.param("k", &[2, 2, 5, 3], -1.0, 1.0);
        let v = c.param("v", &[2, 2, 5, 4], -1.0, 1.0);
        if i == 1 {
            c.with_ane();
        }
        c.run(&sdpa(&q, &k, &v, None, causal, scale).unwrap());
    }
    let mut c = Check::new("sdpa-float-mask", 1610);
    let q = c.param("q", &[2, 3, 4], -1.0, 1.0);
    let k = c.param("k", &[2, 5, 4], -1.0, 1.0);
    let v = c.param("v", &[2, 5, 2], -1.0, 1.0);
    let m = c.param("m", &[3, 5], -1.0, 1.0);
    c.run(&sdpa(&q, &k, &v, Some(&m), true, None).unwrap());
    let mut c = Check::new("sdpa-bool-mask", 1611);
    let q = c.param("q", &[2, 3, 4], -1.0, 1.0);
    let k = c.param("k", &[2, 5, 4], -1.0, 1.0);
    let v = c.param("v", &[2, 5, 2], -1.0, 1.0);
    let keep: Vec<bool> = (0..15).map(|j| j % 5 == 0 || j % 3 != 0).collect();
    let m = c.input_bool("keep", &[3, 5], keep);
    c.run(&sdpa(&q, &k, &v, Some(&m), false, None).unwrap());
    let mut c = Check::new("mha", 1612);
    let x = c.param("x", &[2, 4, 6], -1.0, 1.0);
    let weights = graph::AttentionWeights {
        wq: c.param("wq", &[6, 6], -0.5, 0.5),
        wk: c.param("wk", &[3, 6], -0.5, 0.5),
        wv: c.param("wv", &[3, 6], -0.5, 0.5),
        wo: c.param("wo", &[6, 6], -0.5, 0.5),
        bq: None,
        bk: None,
        bv: None,
        bo: None,
        num_heads: 2,
        num_kv_heads: 1,
    };
    c.run(&graph::mha(&x, &x, &weights, None, true).unwrap());
}

#[test]
fn losses() {
    let mut c = Check::new("softmax_cross_entropy", 1700);
    let logits = c.param("logits", &[2, 3, 5], -3.0, 3.0);
    let targets = c.input_i32("targets", &[2, 3], vec![0, 4, 2, 2, 1, 3]);
    let loss = autograd::softmax_cross_entropy(&logits, &targets).unwrap();
    c.with_ane().run_loss(&loss, &GradOptions::default());
    let mut c = Check::new("softmax_cross_entropy-large-logits", 1701);
    let logits = c.param("logits", &[4, 3], 60.0, 90.0);
    let targets = c.input_i32("targets", &[4], vec![0, 1, 2, 1]);
    let loss = autograd::softmax_cross_entropy(&logits, &targets).unwrap();
    c.run_loss(&loss, &GradOptions::default());
    let mut c = Check::new("mse", 1702);
    let p = c.param("p", &[3, 4], -1.0, 1.0);
    let t = c.input_f32("t", &[3, 4], -1.0, 1.0);
    let loss = autograd::mse(&p, &t).unwrap();
    c.run_loss(&loss, &GradOptions::default());
}

#[test]
fn stop_gradient_and_frontier() {
    // d/dx Σ x·sg(x)·r = x·r: only the direct factor carries gradient.
    let mut c = Check::new("stop_gradient", 1800);
    let x = c.param("x", &[3, 4], -1.0, 1.0);
    let r = constant(HostArray::from_f32(&[3, 4], c.uniform(12, -1.0, 1.0)).unwrap());
    let loss = x
        .mul(&x.stop_gradient().unwrap())
        .unwrap()
        .mul(&r)
        .unwrap()
        .sum(&[0, 1], false)
        .unwrap();
    let grads = autograd::backward(&loss, std::slice::from_ref(&x)).unwrap();
    let want = eval::eval(&[x.mul(&r).unwrap()], &c.env).remove(0);
    compare(
        "stop_gradient",
        &eval::eval(&grads, &c.env)[0].data,
        &want,
        0.0,
        1e-12,
        "",
    );
    c.check_engine(&loss, &grads, &[want], Target::Cpu, (1e-6, 1e-6));
    // Σ w·h with h = tanh(w) and a frontier at h: w's gradient is h (the direct path only).
    let mut c = Check::new("frontier", 1801);
    let w = c.param("w", &[5], -1.0, 1.0);
    let h = w.tanh().unwrap();
    let loss = w.mul(&h).unwrap().sum(&[0], false).unwrap();
    let grads = autograd::backward_with(
        &loss,
        std::slice::from_ref(&w),
        &GradOptions {
            seed: None,
            frontier: vec![h.clone()],
            ..GradOptions::default()
        },
    )
    .unwrap();
    let got = eval::eval(&grads, &c.env);
    let want = eval::eval(&[h], &c.env);
    compare("frontier", &got[0].data, &want[0], 0.0, 1e-12, "");
    // integer paths carry no gradient
    let mut c = Check::new("cast-int", 1802);
    let x = c.param("x", &[4], -3.0, 3.0);
    let y = x
        .cast(DType::I32)
        .unwrap()
        .cast(DType::F32)
        .unwrap()
        .add(&x.mul_scalar(2.0).unwrap())
        .unwrap();
    c.run(&y);
}

#[test]
fn seed_scales_the_gradient() {
    let mut c = Check::new("seed", 1900);
    let x = c.param("x", &[3], -1.0, 1.0);
    let loss = x.square().unwrap().sum(&[0], false).unwrap();
    let seed = constant(HostArray::scalar_f32(8.0));
    let scaled = autograd::backward_with(
        &loss,
        std::slice::from_ref(&x),
        &GradOptions {
            seed: Some(seed),
            ..GradOptions::default()
        },
    )
    .unwrap();
    let plain = autograd::backward(&loss, &[x]).unwrap();
    let (s, p) = (
        eval::eval(&scaled, &c.env).remove(0),
        eval::eval(&plain, &c.env).remove(0),
    );
    let want = p.map(|v| v * 8.0);
    compare("seed", &s.data, &want, 0.0, 1e-12, "");
}

#[test]
fn unreachable_parameters_get_zeros_and_bad_losses_are_rejected() {
    let a = parameter("a", HostArray::from_f32(&[2], vec![1.0, 2.0]).unwrap()).unwrap();
    let b = parameter("b", HostArray::from_f32(&[2, 2], vec![1.0; 4]).unwrap()).unwrap();
    let loss = a.sum(&[0], false).unwrap();
    let grads = autograd::backward(&loss, &[a.clone(), b.clone()]).unwrap();
    let got = eval::eval(&grads, &Env::default());
    assert_eq!(got[1].data, vec![0.0; 4]);
    assert_eq!(got[0].data, vec![1.0; 2]);
    let err = autograd::backward(&a, std::slice::from_ref(&a)).unwrap_err();
    assert!(err.to_string().contains("single f32 value"), "{err}");
    let idx = input("idx", &[2], DType::I32).unwrap();
    let err = autograd::backward(&loss, &[idx]).unwrap_err();
    assert!(err.to_string().contains("i32"), "{err}");
}

#[test]
fn dynamic_slices_in_f64() {
    // The engine check needs runtime slice positions (see `dynamic_slices_on_the_engine`).
    let mut c = Check::new("dynamic_slice", 2000);
    let x = c.param("x", &[2, 5, 3], -1.0, 1.0);
    let pos = c.input_i32("pos", &[3], vec![1, 2, 0]);
    let y = x.dynamic_slice(&pos, &[1, 2, 3]).unwrap();
    let weights = c.uniform(y.len(), -1.0, 1.0);
    let r = constant(HostArray::from_f32(y.shape(), weights).unwrap());
    let loss = y.mul(&r).unwrap().sum(&[0, 1, 2], false).unwrap();
    let grads = autograd::backward(&loss, &c.params.clone()).unwrap();
    let analytic = eval::eval(&grads, &c.env);
    c.check_finite_differences(&loss, &analytic);
    let mut c = Check::new("dynamic_slice_update", 2001);
    let x = c.param("x", &[2, 5, 3], -1.0, 1.0);
    let u = c.param("u", &[1, 2, 3], -1.0, 1.0);
    let pos = c.input_i32("pos", &[3], vec![1, 3, 0]);
    let y = x.dynamic_slice_update(&u, &pos).unwrap();
    let weights = c.uniform(y.len(), -1.0, 1.0);
    let r = constant(HostArray::from_f32(y.shape(), weights).unwrap());
    let loss = y.mul(&r).unwrap().sum(&[0, 1, 2], false).unwrap();
    let grads = autograd::backward(&loss, &c.params.clone()).unwrap();
    let analytic = eval::eval(&grads, &c.env);
    c.check_finite_differences(&loss, &analytic);
}

#[test]
#[ignore = "aneforge-cpu rejects a runtime slice_by_size/slice_update begin; run with --ignored"]
fn dynamic_slices_on_the_engine() {
    let mut c = Check::new("dynamic_slice-engine", 2002);
    let x = c.param("x", &[2, 5, 3], -1.0, 1.0);
    let u = c.param("u", &[1, 2, 3], -1.0, 1.0);
    let pos = c.input_i32("pos", &[3], vec![1, 3, 0]);
    let y = x
        .dynamic_slice_update(&u, &pos)
        .unwrap()
        .dynamic_slice(&pos, &[1, 2, 3])
        .unwrap();
    c.run(&y);
}

#[test]
fn every_op_has_a_rule() {
    // Building a VJP for a node of each differentiable op kind must not fail for lack of a rule;
    // the checks above cover each kind numerically. This guards the dispatch against new variants.
    let x = parameter(
        "x",
        HostArray::from_f32(&[1, 2, 4, 4], vec![0.5; 32]).unwrap(),
    )
    .unwrap();
    let pool = x
        .pool(PoolAttrs {
            kind: PoolKind::Max,
            kernel: vec![2, 2],
            strides: vec![2, 2],
            pads: vec![(0, 0), (0, 0)],
            ceil_mode: false,
        })
        .unwrap();
    let loss = pool.sum(&[0, 1, 2, 3], false).unwrap();
    assert_eq!(autograd::backward(&loss, &[x]).unwrap().len(), 1);
    assert!(!autograd::is_differentiable(&Op::StopGradient));
}

/// One pre-norm block of width `d` over `t` rows: RMSNorm, single-head causal-free attention,
/// residual, RMSNorm, GELU MLP of width `f`, residual.
fn block(c: &mut Check, h: &Tensor, i: usize, f: usize) -> Tensor {
    let d = h.shape()[1];
    let g1 = c.param(&format!("g1_{i}"), &[d], 0.8, 1.2);
    let wq = c.param(&format!("wq_{i}"), &[d, d], -0.4, 0.4);
    let wv = c.param(&format!("wv_{i}"), &[d, d], -0.4, 0.4);
    let g2 = c.param(&format!("g2_{i}"), &[d], 0.8, 1.2);
    let w1 = c.param(&format!("w1_{i}"), &[f, d], -0.4, 0.4);
    let w2 = c.param(&format!("w2_{i}"), &[d, f], -0.4, 0.4);
    let n = h.rms_norm(Some(&g1), 1e-5).unwrap();
    let q = n.linear(&wq, None).unwrap();
    let scores = q.matmul_t(&n, false, true).unwrap().softmax(-1).unwrap();
    let att = scores.matmul(&n.linear(&wv, None).unwrap()).unwrap();
    let h = h.add(&att).unwrap();
    let m = h
        .rms_norm(Some(&g2), 1e-5)
        .unwrap()
        .linear(&w1, None)
        .unwrap()
        .gelu()
        .unwrap()
        .linear(&w2, None)
        .unwrap();
    h.add(&m).unwrap()
}

/// `blocks` blocks over an input `[t, d]`; the loss `Σ out·R` and one segment per block.
fn stack(
    c: &mut Check,
    t: usize,
    d: usize,
    f: usize,
    blocks: usize,
) -> (Tensor, Vec<autograd::Segment>) {
    let x = c.input_f32("x", &[t, d], -1.0, 1.0);
    let mut h = x;
    let mut segments = Vec::new();
    for i in 0..blocks {
        let out = block(c, &h, i, f);
        segments.push(autograd::Segment::new(vec![h], vec![out.clone()]));
        h = out;
    }
    let r = c.uniform(t * d, -1.0, 1.0);
    let r = constant(HostArray::from_f32(&[t, d], r).unwrap());
    let loss = h.mul(&r).unwrap().sum(&[0, 1], false).unwrap();
    (loss, segments)
}

/// The CPU program of `[loss, grads...]` planned with or without the engine's fusions: its
/// outputs on `c`'s feeds and parameters' initial values, and the bytes of its activation arena.
fn run_gradients(c: &Check, loss: &Tensor, grads: &[Tensor], fuse: bool) -> (Vec<Vec<f32>>, usize) {
    let names: Vec<String> = (0..grads.len()).map(|i| format!("grad_{i}")).collect();
    let mut named: Vec<(&str, &Tensor)> = vec![("loss", loss)];
    named.extend(names.iter().map(|n| n.as_str()).zip(grads));
    let model = compile_named(&named, &CompileOptions::default()).unwrap();
    let blobs = model.artifact().blob_store().unwrap();
    let options = aneforge_cpu::CompileOptions {
        fuse,
        ..aneforge_cpu::CompileOptions::default()
    };
    let plan = aneforge_cpu::compile(model.program(), "main", &blobs, &options).unwrap();
    let mut instance = plan.instantiate();
    for (n, f) in &c.fed {
        let Fed::F32(v) = f else {
            unreachable!("the stack feeds f32 only")
        };
        instance.set_input(n, HostSlice::F32(v)).unwrap();
    }
    for p in &c.params {
        let Op::Parameter { name, init } = p.op() else {
            unreachable!()
        };
        instance
            .set_input(name, HostSlice::F32(init.as_f32().unwrap()))
            .unwrap();
    }
    instance.execute().unwrap();
    let out = std::iter::once("loss")
        .chain(names.iter().map(String::as_str))
        .map(|n| instance.read_output_f32(n).unwrap())
        .collect();
    (out, plan.arena_bytes())
}

#[test]
fn recomputed_segments_give_the_gradients_of_the_kept_forward() {
    let mut c = Check::new("recompute", 2100);
    let (loss, segments) = stack(&mut c, 6, 8, 16, 2);
    // the recomputing backward against finite differences and on the CPU and ANE targets
    c.with_ane().run_loss(
        &loss,
        &GradOptions {
            recompute: segments.clone(),
            ..GradOptions::default()
        },
    );
    // and against the kept forward's gradients, both planned for the CPU engine without its
    // fusions, which otherwise fuse the forward differently once the backward no longer reads
    // its intermediates (f32 rounding, a few 1e-6 of the gradients)
    let (kept, recomputed) = kept_and_recomputed(&loss, &c.params, segments);
    let (want, _) = run_gradients(&c, &loss, &kept, false);
    let (got, _) = run_gradients(&c, &loss, &recomputed, false);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let w = Nd::new(&[w.len()], w.iter().map(|&v| f64::from(v)).collect());
        let g: Vec<f64> = g.iter().map(|&v| f64::from(v)).collect();
        compare(&format!("recompute output {i}"), &g, &w, 1e-6, 1e-6, "");
    }
}

/// The gradient graphs of `loss` with the forward kept and with `segments` recomputed.
fn kept_and_recomputed(
    loss: &Tensor,
    params: &[Tensor],
    segments: Vec<autograd::Segment>,
) -> (Vec<Tensor>, Vec<Tensor>) {
    let kept = autograd::backward(loss, params).unwrap();
    let recomputed = autograd::backward_with(
        loss,
        params,
        &GradOptions {
            recompute: segments,
            ..GradOptions::default()
        },
    )
    .unwrap();
    (kept, recomputed)
}

#[test]
fn recomputation_runs_in_the_backward_and_frees_each_segment() {
    // Six blocks whose MLP activations are 16x the width of the residual stream: a step that
    // keeps the forward holds every block's activations at once, one that recomputes holds the
    // block inputs and one block's activations.
    let mut c = Check::new("recompute-arena", 2101);
    let blocks = 6;
    let (loss, segments) = stack(&mut c, 64, 8, 128, blocks);
    let (kept, recomputed) = kept_and_recomputed(&loss, &c.params, segments);
    let (_, kept_arena) = run_gradients(&c, &loss, &kept, true);
    let (_, recomputed_arena) = run_gradients(&c, &loss, &recomputed, true);
    eprintln!("activation arena: kept {kept_arena} bytes, recomputed {recomputed_arena} bytes");
    assert!(
        recomputed_arena * 3 < kept_arena,
        "recomputing {blocks} blocks should cut the arena well below a third of {kept_arena} \
         bytes, got {recomputed_arena}"
    );
}

#[test]
fn bad_segments_are_refused_by_name() {
    use autograd::{AutogradError, Segment, SegmentProblem as P};
    let x = parameter("x", HostArray::from_f32(&[2, 3], vec![0.5; 6]).unwrap()).unwrap();
    let w = parameter("w", HostArray::from_f32(&[2, 3], vec![0.25; 6]).unwrap()).unwrap();
    let a = x.tanh().unwrap();
    let b = a.mul(&w).unwrap();
    let c = b.exp().unwrap();
    let d = c.add(&a).unwrap();
    let loss = d.sum(&[0, 1], false).unwrap();
    let unrelated = w.sin().unwrap();
    let refused = |segments: Vec<Segment>| -> (usize, P) {
        let options = GradOptions {
            recompute: segments,
            ..GradOptions::default()
        };
        match autograd::backward_with(&loss, &[x.clone(), w.clone()], &options) {
            Err(e @ AutogradError::Segment { .. }) => {
                let text = e.to_string();
                let AutogradError::Segment { index, problem } = e else {
                    unreachable!()
                };
                assert_eq!(text, format!("recompute segment {index}: {problem}"));
                (index, problem)
            }
            other => panic!("expected a segment error, got {other:?}"),
        }
    };
    let seg = |i: &[&Tensor], o: &[&Tensor]| {
        Segment::new(
            i.iter().map(|t| (*t).clone()).collect(),
            o.iter().map(|t| (*t).clone()).collect(),
        )
    };
    assert!(matches!(
        refused(vec![seg(&[], &[&c])]),
        (0, P::Empty("inputs"))
    ));
    assert!(matches!(
        refused(vec![seg(&[&a], &[])]),
        (0, P::Empty("outputs"))
    ));
    let (i, p) = refused(vec![seg(&[&a], &[&c]), seg(&[&unrelated], &[&d])]);
    assert!(
        i == 1 && matches!(&p, P::NotInGraph { role: "input", .. }),
        "{p}"
    );
    assert!(p.to_string().contains("sin"), "{p}");
    let (_, p) = refused(vec![seg(&[&a], &[&a])]);
    assert!(matches!(p, P::InputIsOutput { .. }), "{p}");
    // `w` is a source of the segment but not a path from its input to its output
    let (_, p) = refused(vec![seg(&[&a], &[&w.exp().unwrap()])]);
    assert!(matches!(p, P::NotInGraph { role: "output", .. }), "{p}");
    let (_, p) = refused(vec![seg(&[&b], &[&a])]);
    assert!(matches!(p, P::OutputIndependent { .. }), "{p}");
    let (_, p) = refused(vec![seg(&[&a, &x], &[&c])]);
    assert!(matches!(p, P::InputUnused { .. }), "{p}");
    let (i, p) = refused(vec![seg(&[&a], &[&c]), seg(&[&b], &[&d])]);
    assert!(i == 1 && matches!(p, P::Overlap { other: 0, .. }), "{p}");
    // `a` feeds `d` outside the segment [x → b]: its cotangent would skip the recomputation
    let (_, p) = refused(vec![seg(&[&x], &[&b])]);
    assert!(matches!(&p, P::Escapes { .. }), "{p}");
    assert!(
        p.to_string().contains("tanh") && p.to_string().contains("add"),
        "{p}"
    );
    // the same segments, well formed, give the plain gradients' graph a recomputation
    let ok = GradOptions {
        recompute: vec![seg(&[&a], &[&c]), seg(&[&c], &[&d])],
        ..GradOptions::default()
    };
    assert_eq!(
        autograd::backward_with(&loss, &[x.clone(), w.clone()], &ok)
            .unwrap()
            .len(),
        2
    );
}
