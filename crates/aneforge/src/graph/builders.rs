//! Builders for single ops: one method per operator, each checked by its shape rule.

use super::shape::{normalize_axes, normalize_axis};
use super::tensor::constant;
use super::{
    BinaryOp, CompareOp, DType, GraphError, HostArray, Op, PadMode, ReduceOp, Tensor, UnaryOp,
};

impl Tensor {
    pub fn unary(&self, op: UnaryOp) -> Result<Tensor, GraphError> {
        Tensor::from_op(Op::Unary(op), vec![self.clone()])
    }

    pub fn relu(&self) -> Result<Tensor, GraphError> {
        self.unary(UnaryOp::Relu)
    }
    pub fn gelu(&self) -> Result<Tensor, GraphError> {
        self.unary(UnaryOp::Gelu)
    }
    pub fn gelu_tanh(&self) -> Result<Tensor, GraphError> {
        self.unary(UnaryOp::GeluTanh)
    }
    pub fn silu(&self) -> Result<Tensor, GraphError> {
        self.unary(UnaryOp::Silu)
    }
    pub fn sigmoid(&self) -> Result<Tensor, GraphError> {
        self.unary(UnaryOp::Sigmoid)
    }
    pub fn tanh(&self) -> Result<Tensor, GraphError> {
        self.unary(UnaryOp::Tanh)
    }
    pub fn exp(&self) -> Result<Tensor, GraphError> {
        self.unary(UnaryOp::Exp)
    }
    pub fn log(&self) -> Result<Tensor, GraphError> {
        self.unary(UnaryOp::Log)
    }
    pub fn sqrt(&self) -> Result<Tensor, GraphError> {
        self.unary(UnaryOp::Sqrt)
    }
    pub fn rsqrt(&self) -> Result<Tensor, GraphError> {
        self.unary(UnaryOp::Rsqrt)
    }
    pub fn abs(&self) -> Result<Tensor, GraphError> {
        self.unary(UnaryOp::Abs)
    }
    pub fn neg(&self) -> Result<Tensor, GraphError> {
        self.unary(UnaryOp::Neg)
    }
    pub fn square(&self) -> Result<Tensor, GraphError> {
        self.unary(UnaryOp::Square)
    }
    pub fn sin(&self) -> Result<Tensor, GraphError> {
        self.unary(UnaryOp::Sin)
    }
    pub fn cos(&self) -> Result<Tensor, GraphError> {
        self.unary(UnaryOp::Cos)
    }
    pub fn erf(&self) -> Result<Tensor, GraphError> {
        self.unary(UnaryOp::Erf)
    }
    pub fn softplus(&self) -> Result<Tensor, GraphError> {
        self.unary(UnaryOp::Softplus)
    }
    pub fn floor(&self) -> Result<Tensor, GraphError> {
        self.unary(UnaryOp::Floor)
    }
    pub fn ceil(&self) -> Result<Tensor, GraphError> {
        self.unary(UnaryOp::Ceil)
    }
    pub fn round(&self) -> Result<Tensor, GraphError> {
        self.unary(UnaryOp::Round)
    }
    pub fn sign(&self) -> Result<Tensor, GraphError> {
        self.unary(UnaryOp::Sign)
    }

    pub fn clip(&self, min: f32, max: f32) -> Result<Tensor, GraphError> {
        Tensor::from_op(Op::Clip { min, max }, vec![self.clone()])
    }

    /// Per-tensor symmetric int8 quantize → dequantize with `scale` ([`Op::FakeQuant`]).
    pub fn fake_quant(&self, scale: f32) -> Result<Tensor, GraphError> {
        Tensor::from_op(Op::FakeQuant { scale }, vec![self.clone()])
    }

    pub fn leaky_relu(&self, alpha: f32) -> Result<Tensor, GraphError> {
        Tensor::from_op(Op::LeakyRelu { alpha }, vec![self.clone()])
    }

    pub fn elu(&self, alpha: f32) -> Result<Tensor, GraphError> {
        Tensor::from_op(Op::Elu { alpha }, vec![self.clone()])
    }

    pub fn binary(&self, op: BinaryOp, rhs: &Tensor) -> Result<Tensor, GraphError> {
        Tensor::from_op(Op::Binary(op), vec![self.clone(), rhs.clone()])
    }

    /// `self op value`, with `value` a scalar of this tensor's dtype.
    pub fn binary_scalar(&self, op: BinaryOp, value: f32) -> Result<Tensor, GraphError> {
        let s = self.scalar_like(op.name(), value)?;
        self.binary(op, &s)
    }

    pub fn add(&self, rhs: &Tensor) -> Result<Tensor, GraphError> {
        self.binary(BinaryOp::Add, rhs)
    }
    pub fn sub(&self, rhs: &Tensor) -> Result<Tensor, GraphError> {
        self.binary(BinaryOp::Sub, rhs)
    }
    pub fn mul(&self, rhs: &Tensor) -> Result<Tensor, GraphError> {
        self.binary(BinaryOp::Mul, rhs)
    }
    pub fn div(&self, rhs: &Tensor) -> Result<Tensor, GraphError> {
        self.binary(BinaryOp::Div, rhs)
    }
    pub fn pow(&self, rhs: &Tensor) -> Result<Tensor, GraphError> {
        self.binary(BinaryOp::Pow, rhs)
    }
    pub fn maximum(&self, rhs: &Tensor) -> Result<Tensor, GraphError> {
        self.binary(BinaryOp::Maximum, rhs)
    }
    pub fn minimum(&self, rhs: &Tensor) -> Result<Tensor, GraphError> {
        self.binary(BinaryOp::Minimum, rhs)
    }
    pub fn add_scalar(&self, v: f32) -> Result<Tensor, GraphError> {
        self.binary_scalar(BinaryOp::Add, v)
    }
    pub fn sub_scalar(&self, v: f32) -> Result<Tensor, GraphError> {
        self.binary_scalar(BinaryOp::Sub, v)
    }
    pub fn mul_scalar(&self, v: f32) -> Result<Tensor, GraphError> {
        self.binary_scalar(BinaryOp::Mul, v)
    }
    pub fn div_scalar(&self, v: f32) -> Result<Tensor, GraphError> {
        self.binary_scalar(BinaryOp::Div, v)
    }
    pub fn pow_scalar(&self, v: f32) -> Result<Tensor, GraphError> {
        self.binary_scalar(BinaryOp::Pow, v)
    }
    pub fn maximum_scalar(&self, v: f32) -> Result<Tensor, GraphError> {
        self.binary_scalar(BinaryOp::Maximum, v)
    }
    pub fn minimum_scalar(&self, v: f32) -> Result<Tensor, GraphError> {
        self.binary_scalar(BinaryOp::Minimum, v)
    }

    /// `1 / self`.
    pub fn recip(&self) -> Result<Tensor, GraphError> {
        self.scalar_like("recip", 1.0)?.div(self)
    }

    pub fn compare(&self, op: CompareOp, rhs: &Tensor) -> Result<Tensor, GraphError> {
        Tensor::from_op(Op::Compare(op), vec![self.clone(), rhs.clone()])
    }

    pub fn compare_scalar(&self, op: CompareOp, value: f32) -> Result<Tensor, GraphError> {
        let s = self.scalar_like(op.name(), value)?;
        self.compare(op, &s)
    }

    pub fn eq(&self, rhs: &Tensor) -> Result<Tensor, GraphError> {
        self.compare(CompareOp::Equal, rhs)
    }
    pub fn ne(&self, rhs: &Tensor) -> Result<Tensor, GraphError> {
        self.compare(CompareOp::NotEqual, rhs)
    }
    pub fn lt(&self, rhs: &Tensor) -> Result<Tensor, GraphError> {
        self.compare(CompareOp::Less, rhs)
    }
    pub fn le(&self, rhs: &Tensor) -> Result<Tensor, GraphError> {
        self.compare(CompareOp::LessEqual, rhs)
    }
    pub fn gt(&self, rhs: &Tensor) -> Result<Tensor, GraphError> {
        self.compare(CompareOp::Greater, rhs)
    }
    pub fn ge(&self, rhs: &Tensor) -> Result<Tensor, GraphError> {
        self.compare(CompareOp::GreaterEqual, rhs)
    }

    /// `self ? on_true : on_false` elementwise; `self` is the bool condition.
    pub fn select(&self, on_true: &Tensor, on_false: &Tensor) -> Result<Tensor, GraphError> {
        Tensor::from_op(
            Op::Select,
            vec![self.clone(), on_true.clone(), on_false.clone()],
        )
    }

    pub fn matmul(&self, rhs: &Tensor) -> Result<Tensor, GraphError> {
        self.matmul_t(rhs, false, false)
    }

    /// `y[n, k] = self[n, k] @ W_e^T` for `e = ids[n, k]`, `W_e` the `e`-th of `experts` row
    /// blocks of `weight[experts·out, in]`; `self` is `[N, K, in]` or `[N, 1, in]` (one row for
    /// every `k`), `ids` `[N, K]` i32; the result is `[N, K, out]`.
    pub fn linear_experts(
        &self,
        weight: &Tensor,
        ids: &Tensor,
        experts: usize,
    ) -> Result<Tensor, GraphError> {
        Tensor::from_op(
            Op::LinearExperts { experts },
            vec![self.clone(), weight.clone(), ids.clone()],
        )
    }

    /// Matrix product with the last two axes of either operand optionally transposed.
    pub fn matmul_t(
        &self,
        rhs: &Tensor,
        transpose_a: bool,
        transpose_b: bool,
    ) -> Result<Tensor, GraphError> {
        Tensor::from_op(
            Op::MatMul {
                transpose_a,
                transpose_b,
            },
            vec![self.clone(), rhs.clone()],
        )
    }

    pub fn reduce(
        &self,
        op: ReduceOp,
        axes: &[isize],
        keepdims: bool,
    ) -> Result<Tensor, GraphError> {
        let axes = normalize_axes(op.name(), axes, self.rank())?;
        Tensor::from_op(Op::Reduce { op, axes, keepdims }, vec![self.clone()])
    }

    pub fn sum(&self, axes: &[isize], keepdims: bool) -> Result<Tensor, GraphError> {
        self.reduce(ReduceOp::Sum, axes, keepdims)
    }
    pub fn mean(&self, axes: &[isize], keepdims: bool) -> Result<Tensor, GraphError> {
        self.reduce(ReduceOp::Mean, axes, keepdims)
    }
    pub fn max(&self, axes: &[isize], keepdims: bool) -> Result<Tensor, GraphError> {
        self.reduce(ReduceOp::Max, axes, keepdims)
    }
    pub fn min(&self, axes: &[isize], keepdims: bool) -> Result<Tensor, GraphError> {
        self.reduce(ReduceOp::Min, axes, keepdims)
    }

    /// Index of the first maximum along `axis`, as i32.
    pub fn argmax(&self, axis: isize, keepdims: bool) -> Result<Tensor, GraphError> {
        let axis = normalize_axis("argmax", axis, self.rank())?;
        Tensor::from_op(Op::ArgMax { axis, keepdims }, vec![self.clone()])
    }

    pub fn softmax(&self, axis: isize) -> Result<Tensor, GraphError> {
        let axis = normalize_axis("softmax", axis, self.rank())?;
        Tensor::from_op(Op::Softmax { axis }, vec![self.clone()])
    }

    /// Reshape; one entry may be `-1` and is inferred from the element count.
    pub fn reshape(&self, shape: &[isize]) -> Result<Tensor, GraphError> {
        let shape = resolve_reshape(self, shape)?;
        if shape == self.shape() {
            return Ok(self.clone());
        }
        Tensor::from_op(Op::Reshape { shape }, vec![self.clone()])
    }

    /// Output axis `i` is input axis `perm[i]`.
    pub fn transpose(&self, perm: &[usize]) -> Result<Tensor, GraphError> {
        if perm.iter().enumerate().all(|(i, &p)| i == p) && perm.len() == self.rank() {
            return Ok(self.clone());
        }
        Tensor::from_op(
            Op::Transpose {
                perm: perm.to_vec(),
            },
            vec![self.clone()],
        )
    }

    /// Exchanges two axes.
    pub fn swap_axes(&self, a: isize, b: isize) -> Result<Tensor, GraphError> {
        let r = self.rank();
        let (a, b) = (
            normalize_axis("swap_axes", a, r)?,
            normalize_axis("swap_axes", b, r)?,
        );
        let mut perm: Vec<usize> = (0..r).collect();
        perm.swap(a, b);
        self.transpose(&perm)
    }

    /// Removes the given size-1 axes (all size-1 axes when `axes` is empty).
    pub fn squeeze(&self, axes: &[isize]) -> Result<Tensor, GraphError> {
        let x = self.shape();
        let axes = if axes.is_empty() {
            (0..x.len()).filter(|&i| x[i] == 1).collect()
        } else {
            normalize_axes("squeeze", axes, x.len())?
        };
        if let Some(&a) = axes.iter().find(|&&a| x[a] != 1) {
            return Err(GraphError::shape(
                "squeeze",
                &[x],
                format!("axis {a} has size {}, not 1", x[a]),
            ));
        }
        let shape: Vec<isize> = (0..x.len())
            .filter(|i| !axes.contains(i))
            .map(|i| x[i] as isize)
            .collect();
        self.reshape(&shape)
    }

    /// Inserts size-1 axes; `axes` index the result.
    pub fn expand_dims(&self, axes: &[isize]) -> Result<Tensor, GraphError> {
        let out_rank = self.rank() + axes.len();
        let axes = normalize_axes("expand_dims", axes, out_rank)?;
        let mut src = self.shape().iter();
        let shape: Vec<isize> = (0..out_rank)
            .map(|i| {
                if axes.contains(&i) {
                    1
                } else {
                    src.next().map_or(1, |&d| d as isize)
                }
            })
            .collect();
        self.reshape(&shape)
    }

    /// Collapses axes `start..=end` into one.
    pub fn flatten(&self, start: isize, end: isize) -> Result<Tensor, GraphError> {
        let x = self.shape();
        let (s, e) = (
            normalize_axis("flatten", start, x.len())?,
            normalize_axis("flatten", end, x.len())?,
        );
        if s > e {
            return Err(GraphError::attribute(
                "flatten",
                format!("start axis {start} comes after end axis {end}"),
            ));
        }
        let mut shape: Vec<isize> = x[..s].iter().map(|&d| d as isize).collect();
        shape.push(x[s..=e].iter().product::<usize>() as isize);
        shape.extend(x[e + 1..].iter().map(|&d| d as isize));
        self.reshape(&shape)
    }

    /// NumPy `broadcast_to`.
    pub fn broadcast_to(&self, shape: &[usize]) -> Result<Tensor, GraphError> {
        let x = self.shape();
        let target = super::shape::broadcast("broadcast_to", x, shape)?;
        if target != shape {
            return Err(GraphError::shape(
                "broadcast_to",
                &[x, shape],
                "the operand does not broadcast to the requested shape",
            ));
        }
        if x == shape {
            return Ok(self.clone());
        }
        let lifted: Vec<usize> = std::iter::repeat_n(1, shape.len() - x.len())
            .chain(x.iter().copied())
            .collect();
        let reps: Vec<usize> = lifted.iter().zip(shape).map(|(&d, &t)| t / d).collect();
        let lifted: Vec<isize> = lifted.iter().map(|&d| d as isize).collect();
        self.reshape(&lifted)?.tile(&reps)
    }

    /// `x[begin..end; stride]` on every axis.
    pub fn slice(
        &self,
        begin: &[usize],
        end: &[usize],
        stride: &[usize],
    ) -> Result<Tensor, GraphError> {
        let whole = begin.len() == self.rank()
            && stride.len() == self.rank()
            && begin.iter().all(|&b| b == 0)
            && end == self.shape()
            && stride.iter().all(|&s| s == 1);
        if whole {
            return Ok(self.clone());
        }
        Tensor::from_op(
            Op::Slice {
                begin: begin.to_vec(),
                end: end.to_vec(),
                stride: stride.to_vec(),
            },
            vec![self.clone()],
        )
    }

    /// `len` elements of `axis` starting at `start`.
    pub fn narrow(&self, axis: isize, start: usize, len: usize) -> Result<Tensor, GraphError> {
        let a = normalize_axis("narrow", axis, self.rank())?;
        let mut begin = vec![0; self.rank()];
        let mut end = self.shape().to_vec();
        begin[a] = start;
        end[a] = start.saturating_add(len);
        self.slice(&begin, &end, &vec![1; self.rank()])
    }

    /// Splits `axis` into consecutive pieces of the given sizes.
    pub fn split(&self, sizes: &[usize], axis: isize) -> Result<Vec<Tensor>, GraphError> {
        let a = normalize_axis("split", axis, self.rank())?;
        let total = sizes.iter().try_fold(0usize, |acc, &n| acc.checked_add(n));
        if total != Some(self.shape()[a]) || sizes.contains(&0) {
            return Err(GraphError::shape(
                "split",
                &[self.shape()],
                format!("sizes {sizes:?} do not partition axis {a}"),
            ));
        }
        let mut start = 0;
        sizes
            .iter()
            .map(|&n| {
                let piece = self.narrow(a as isize, start, n);
                start += n;
                piece
            })
            .collect()
    }

    /// Splits `axis` into `n` equal pieces.
    pub fn chunk(&self, n: usize, axis: isize) -> Result<Vec<Tensor>, GraphError> {
        let a = normalize_axis("chunk", axis, self.rank())?;
        let d = self.shape()[a];
        if n == 0 || !d.is_multiple_of(n) {
            return Err(GraphError::shape(
                "chunk",
                &[self.shape()],
                format!("axis {a} of size {d} does not split into {n} equal pieces"),
            ));
        }
        self.split(&vec![d / n; n], axis)
    }

    /// The window of shape `size` starting at the runtime position `begin` (i32 `[rank]`).
    pub fn dynamic_slice(&self, begin: &Tensor, size: &[usize]) -> Result<Tensor, GraphError> {
        Tensor::from_op(
            Op::DynamicSlice {
                size: size.to_vec(),
            },
            vec![self.clone(), begin.clone()],
        )
    }

    /// `self` with the window at `begin` replaced by `update`.
    pub fn slice_update(&self, update: &Tensor, begin: &[usize]) -> Result<Tensor, GraphError> {
        Tensor::from_op(
            Op::SliceUpdate {
                begin: begin.to_vec(),
            },
            vec![self.clone(), update.clone()],
        )
    }

    /// `self` with the window at the runtime position `begin` (i32 `[rank]`) replaced by `update`.
    pub fn dynamic_slice_update(
        &self,
        update: &Tensor,
        begin: &Tensor,
    ) -> Result<Tensor, GraphError> {
        Tensor::from_op(
            Op::DynamicSliceUpdate,
            vec![self.clone(), update.clone(), begin.clone()],
        )
    }

    /// Pads every axis by `(before, after)`.
    pub fn pad(
        &self,
        pads: &[(usize, usize)],
        mode: PadMode,
        value: f32,
    ) -> Result<Tensor, GraphError> {
        Tensor::from_op(
            Op::Pad {
                pads: pads.to_vec(),
                mode,
                value,
            },
            vec![self.clone()],
        )
    }

    pub fn tile(&self, reps: &[usize]) -> Result<Tensor, GraphError> {
        if reps.iter().all(|&r| r == 1) && reps.len() == self.rank() {
            return Ok(self.clone());
        }
        Tensor::from_op(
            Op::Tile {
                reps: reps.to_vec(),
            },
            vec![self.clone()],
        )
    }

    /// Picks entries of `axis` by i32 `indices`; the result has `indices`' axes in place of `axis`.
    pub fn gather(&self, indices: &Tensor, axis: isize) -> Result<Tensor, GraphError> {
        let axis = normalize_axis("gather", axis, self.rank())?;
        Tensor::from_op(Op::Gather { axis }, vec![self.clone(), indices.clone()])
    }

    pub fn space_to_depth(&self, block: usize) -> Result<Tensor, GraphError> {
        Tensor::from_op(Op::SpaceToDepth { block }, vec![self.clone()])
    }

    pub fn depth_to_space(&self, block: usize) -> Result<Tensor, GraphError> {
        Tensor::from_op(Op::DepthToSpace { block }, vec![self.clone()])
    }

    pub fn cumsum(
        &self,
        axis: isize,
        exclusive: bool,
        reverse: bool,
    ) -> Result<Tensor, GraphError> {
        let axis = normalize_axis("cumsum", axis, self.rank())?;
        Tensor::from_op(
            Op::Cumsum {
                axis,
                exclusive,
                reverse,
            },
            vec![self.clone()],
        )
    }

    pub fn cast(&self, dtype: DType) -> Result<Tensor, GraphError> {
        if dtype == self.dtype() {
            return Ok(self.clone());
        }
        Tensor::from_op(Op::Cast { dtype }, vec![self.clone()])
    }

    /// Identity in the forward pass; no gradient flows through it.
    pub fn stop_gradient(&self) -> Result<Tensor, GraphError> {
        Tensor::from_op(Op::StopGradient, vec![self.clone()])
    }

    /// This value, computed only after every tensor of `after` (which it does not read): an
    /// ordering edge for the scheduler. Identity, gradient included.
    pub fn barrier(&self, after: &[Tensor]) -> Result<Tensor, GraphError> {
        let mut srcs = Vec::with_capacity(1 + after.len());
        srcs.push(self.clone());
        srcs.extend(after.iter().cloned());
        Tensor::from_op(Op::Barrier, srcs)
    }

    /// A scalar constant of this tensor's dtype.
    pub(crate) fn scalar_like(&self, op: &'static str, value: f32) -> Result<Tensor, GraphError> {
        match self.dtype() {
            DType::F32 => Ok(constant(HostArray::scalar_f32(value))),
            DType::I32 if value.fract() == 0.0 && value.abs() <= 16_777_216.0 => {
                Ok(constant(HostArray::scalar_i32(value as i32)))
            }
            d => Err(GraphError::dtype(
                op,
                &[d],
                format!("scalar {value} is not representable in the operand's dtype"),
            )),
        }
    }
}

/// Concatenation along `axis`.
pub fn concat(values: &[Tensor], axis: isize) -> Result<Tensor, GraphError> {
    let rank = values.first().map_or(0, |t| t.rank());
    let axis = normalize_axis("concat", axis, rank)?;
    if values.len() == 1 {
        return Ok(values[0].clone());
    }
    Tensor::from_op(Op::Concat { axis }, values.to_vec())
}

/// `cond ? on_true : on_false` elementwise, broadcast.
pub fn select(cond: &Tensor, on_true: &Tensor, on_false: &Tensor) -> Result<Tensor, GraphError> {
    cond.select(on_true, on_false)
}

fn resolve_reshape(x: &Tensor, shape: &[isize]) -> Result<Vec<usize>, GraphError> {
    let bad = |m: String| GraphError::shape("reshape", &[x.shape()], m);
    let mut infer_at = None;
    let mut known = 1usize;
    for (i, &d) in shape.iter().enumerate() {
        match d {
            -1 if infer_at.is_none() => infer_at = Some(i),
            d if d >= 1 => {
                known = known
                    .checked_mul(d as usize)
                    .ok_or_else(|| bad(format!("target {shape:?} overflows")))?
            }
            _ => {
                return Err(bad(format!(
                    "target {shape:?}: sizes must be >= 1 with at most one -1"
                )))
            }
        }
    }
    let mut out: Vec<usize> = shape.iter().map(|&d| d.max(0) as usize).collect();
    if let Some(i) = infer_at {
        if !x.len().is_multiple_of(known) {
            return Err(bad(format!("cannot infer the -1 in {shape:?}")));
        }
        out[i] = x.len() / known;
    }
    Ok(out)
}
