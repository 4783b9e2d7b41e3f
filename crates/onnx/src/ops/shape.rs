//! Layout and shape ops: `Reshape`, `Transpose`, `Concat`, `Split`, `Slice`, `Squeeze`,
//! `Unsqueeze`, `Flatten`, `Expand`, `Pad`, `Gather`, `Cast`, `Tile`, `DepthToSpace`,
//! `SpaceToDepth`, `CumSum`, and the shape arithmetic that folds on the host (`Shape`, `Size`,
//! `Constant`, `ConstantOfShape`, `Range`). Every op here also folds when its inputs are
//! constants, so shape subgraphs never reach the program.

use super::{one, tensor, Importer};
use crate::error::{invalid, unsupported, OpResult};
use crate::float_format::FloatFormat;
use crate::fold::{broadcast_shape, strides};
use crate::node::{axes, axis, to_usize, Node};
use crate::value::{const_from_proto, graph_dtype, Const, Data, Value};
use aneforge::graph::{concat as graph_concat, scalar, PadMode};
use aneforge::{DType, Tensor};

pub const OPS: &[(&str, Importer)] = &[
    ("Identity", |n| one(n.input(0)?.clone())),
    ("Dropout", dropout),
    ("Constant", constant),
    ("Shape", shape),
    ("Size", size),
    ("ConstantOfShape", constant_of_shape),
    ("Range", range),
    ("Reshape", reshape),
    ("Flatten", flatten),
    ("Squeeze", squeeze),
    ("Unsqueeze", unsqueeze),
    ("Transpose", transpose),
    ("Concat", concat),
    ("Split", split),
    ("Slice", slice),
    ("Expand", expand),
    ("Tile", tile),
    ("Pad", pad),
    ("Gather", gather),
    ("Cast", |n| cast(n, n.attr_i("to", 0) as i32)),
    ("CastLike", cast_like),
    ("DepthToSpace", depth_to_space),
    ("SpaceToDepth", |n| {
        let b = n.attr_i("blocksize", 0);
        if b <= 0 {
            return invalid("blocksize must be positive");
        }
        tensor(n.tensor(0)?.space_to_depth(b as usize)?)
    }),
    ("CumSum", cumsum),
    ("Trilu", trilu),
    ("GatherElements", gather_elements),
    ("GatherND", gather_nd),
    ("ScatterElements", scatter_elements),
    ("Scatter", scatter_elements),
    ("ScatterND", scatter_nd),
    ("CenterCropPad", center_crop_pad),
    ("Compress", compress),
    ("Col2Im", col2im),
    ("ReverseSequence", reverse_sequence),
];

/// The slices of the input (flattened when no `axis` is given) along `axis` whose entry of the
/// constant 1-D `condition` is true; entries past the condition's end are dropped.
fn compress(n: &Node) -> OpResult<Vec<Value>> {
    let condition = n.konst(1)?;
    if condition.shape.len() != 1 {
        return invalid(format!("condition of shape {:?} (1-D)", condition.shape));
    }
    let x = n.tensor(0)?;
    let (x, a) = match n.attr("axis") {
        Some(_) => {
            let a = axis(n.attr_i("axis", 0), x.rank())?;
            (x, a)
        }
        None => (x.reshape(&[-1])?, 0),
    };
    let dim = x.shape()[a];
    if condition.len() > dim {
        return invalid(format!(
            "condition of length {} for an axis of size {dim}",
            condition.len()
        ));
    }
    let kept: Vec<i64> = (0..condition.len())
        .filter(|&i| condition.data.f64_at(i) != 0.0)
        .map(|i| i as i64)
        .collect();
    if kept.is_empty() {
        return unsupported("an empty result (no condition entry is true)");
    }
    let index = Const::ints(vec![kept.len()], kept)?.to_tensor()?;
    tensor(x.gather(&index, a as isize)?)
}

/// `data` with update `k` written to flat position `targets[k]`, replacing the element
/// (`reduction` "none": the last update of a position wins) or combined with it ("add", "mul",
/// "max", "min", in update order). Round `r` applies, at once, the `r`-th update of every
/// position that has one: a constant-index gather of the updates, the combination and a select.
fn scatter_flat(n: &Node, targets: &[usize]) -> OpResult<Vec<Value>> {
    let reduction = n.attr_s("reduction", "none");
    let combine: Combine = match reduction.as_str() {
        "none" => |_, u| Ok(u.clone()),
        "add" => Tensor::add,
        "mul" => Tensor::mul,
        "max" => Tensor::maximum,
        "min" => Tensor::minimum,
        other => return invalid(format!("reduction {other:?}")),
    };
    let targets: Vec<Option<usize>> = targets.iter().map(|&t| Some(t)).collect();
    tensor(scatter(n.tensor(0)?, &n.tensor(2)?, &targets, combine)?)
}

pub(super) type Combine = fn(&Tensor, &Tensor) -> Result<Tensor, aneforge::GraphError>;

/// `y` with element `k` of `updates` (flattened) combined into flat position `targets[k]`
/// (none: dropped), in update order (see [`scatter_flat`]).
pub(super) fn scatter(
    mut y: Tensor,
    updates: &Tensor,
    targets: &[Option<usize>],
    combine: Combine,
) -> OpResult<Tensor> {
    let updates = updates.reshape(&[-1])?;
    let len = y.len();
    let shape = y.shape().to_vec();
    let mut rounds: Vec<(Vec<i64>, Vec<bool>)> = Vec::new();
    let mut seen = vec![0usize; len];
    for (k, t) in targets.iter().enumerate() {
        let Some(t) = *t else { continue };
        let r = seen[t];
        seen[t] += 1;
        if rounds.len() == r {
            rounds.push((vec![0; len], vec![false; len]));
        }
        rounds[r].0[t] = k as i64;
        rounds[r].1[t] = true;
    }
    for (source, hit) in rounds {
        let picked = updates.gather(&Const::ints(shape.clone(), source)?.to_tensor()?, 0)?;
        let mask = Const::new(shape.clone(), Data::Bool(hit))?.to_tensor()?;
        y = mask.select(&combine(&y, &picked)?, &y)?;
    }
    Ok(y)
}

/// `Col2Im(input [N, C·∏block, L], image_shape, block_shape)`: every column entry added into
/// the image position its block offset and block position select (strides, dilations, pads);
/// entries landing in the padding are dropped.
fn col2im(n: &Node) -> OpResult<Vec<Value>> {
    let x = n.tensor(0)?;
    let image = to_usize(&n.konst(1)?.to_i64s()?, "image_shape")?;
    let block = to_usize(&n.konst(2)?.to_i64s()?, "block_shape")?;
    let m = image.len();
    let list = |name: &str, default: usize, len: usize| -> OpResult<Vec<usize>> {
        match n.attr_ints(name) {
            Some(v) if v.len() == len => to_usize(&v, name),
            Some(v) => invalid(format!("{name} has {} values, {len} expected", v.len())),
            None => Ok(vec![default; len]),
        }
    };
    let (strides_, dilations, pads) = (
        list("strides", 1, m)?,
        list("dilations", 1, m)?,
        list("pads", 0, 2 * m)?,
    );
    let k: usize = block.iter().product();
    if block.len() != m || x.rank() != 3 || k == 0 || x.shape()[1] % k != 0 {
        return invalid(format!(
            "input {:?} for image {image:?} and block {block:?}",
            x.shape()
        ));
    }
    let counts: Vec<usize> = (0..m)
        .map(|d| {
            let span = dilations[d] * (block[d] - 1) + 1;
            (image[d] + pads[d] + pads[d + m]).saturating_sub(span) / strides_[d].max(1) + 1
        })
        .collect();
    let (batch, channels, l) = (x.shape()[0], x.shape()[1] / k, x.shape()[2]);
    if counts.iter().product::<usize>() != l {
        return invalid(format!(
            "{l} blocks, the image, block, strides, dilations and pads give {counts:?}"
        ));
    }
    let pixels: usize = image.iter().product();
    let (block_st, count_st, image_st) = (strides(&block), strides(&counts), strides(&image));
    let mut targets = Vec::with_capacity(x.len());
    for b in 0..batch {
        for c in 0..channels {
            for o in 0..k {
                for p in 0..l {
                    let mut flat = 0;
                    let mut inside = true;
                    for d in 0..m {
                        let pos = (p / count_st[d] % counts[d]) * strides_[d]
                            + (o / block_st[d] % block[d]) * dilations[d];
                        match pos.checked_sub(pads[d]).filter(|&q| q < image[d]) {
                            Some(q) => flat += q * image_st[d],
                            None => inside = false,
                        }
                    }
                    targets.push(inside.then_some((b * channels + c) * pixels + flat));
                }
            }
        }
    }
    let mut shape = vec![batch, channels];
    shape.extend(&image);
    let zeros = Const::new(shape.clone(), Data::F32(vec![0.0; shape.iter().product()]))?;
    tensor(scatter(zeros.to_tensor()?, &x, &targets, Tensor::add)?)
}

fn scatter_elements(n: &Node) -> OpResult<Vec<Value>> {
    let shape = n.input(0)?.shape().to_vec();
    let indices = n.konst(1)?;
    let a = axis(n.attr_i("axis", 0), shape.len())?;
    if indices.shape.len() != shape.len() {
        return invalid("data and indices differ in rank");
    }
    let dim = shape[a] as i64;
    let (data_strides, idx_strides) = (strides(&shape), strides(&indices.shape));
    let mut targets = Vec::with_capacity(indices.len());
    for (f, &i) in indices.to_i64s()?.iter().enumerate() {
        let i = if i < 0 { i + dim } else { i };
        if i < 0 || i >= dim {
            return invalid(format!(
                "index {i} is out of range for axis {a} of size {dim}"
            ));
        }
        let pos: usize = (0..shape.len())
            .map(|k| {
                let c = if k == a {
                    i as usize
                } else {
                    f / idx_strides[k] % indices.shape[k]
                };
                c * data_strides[k]
            })
            .sum();
        targets.push(pos);
    }
    scatter_flat(n, &targets)
}

fn scatter_nd(n: &Node) -> OpResult<Vec<Value>> {
    let shape = n.input(0)?.shape().to_vec();
    let indices = n.konst(1)?;
    let Some(&k) = indices.shape.last() else {
        return invalid("indices must have rank >= 1");
    };
    if k == 0 || k > shape.len() {
        return invalid(format!(
            "index tuples of {k} for data of rank {}",
            shape.len()
        ));
    }
    let data_strides = strides(&shape);
    let inner: usize = shape[k..].iter().product();
    let mut targets = Vec::new();
    for tuple in indices.to_i64s()?.chunks(k) {
        let mut base = 0;
        for (j, &i) in tuple.iter().enumerate() {
            let dim = shape[j] as i64;
            let i = if i < 0 { i + dim } else { i };
            if i < 0 || i >= dim {
                return invalid(format!(
                    "index {i} is out of range for axis {j} of size {dim}"
                ));
            }
            base += i as usize * data_strides[j];
        }
        targets.extend(base..base + inner);
    }
    scatter_flat(n, &targets)
}

fn center_crop_pad(n: &Node) -> OpResult<Vec<Value>> {
    let x = n.tensor(0)?;
    let target = to_usize(&n.konst(1)?.to_i64s()?, "size")?;
    let r = x.rank();
    let list = match n.attr_ints("axes") {
        Some(l) => l
            .iter()
            .map(|&a| axis(a, r))
            .collect::<OpResult<Vec<_>>>()?,
        None => (0..r).collect(),
    };
    if list.len() != target.len() {
        return invalid(format!("{} sizes for {} axes", target.len(), list.len()));
    }
    let mut begin = vec![0usize; r];
    let mut end = x.shape().to_vec();
    let mut pads = vec![(0usize, 0usize); r];
    for (&a, &t) in list.iter().zip(&target) {
        let d = x.shape()[a];
        if t < d {
            begin[a] = (d - t) / 2;
            end[a] = begin[a] + t;
        } else if t > d {
            let before = (t - d) / 2;
            pads[a] = (before, t - d - before);
        }
    }
    let y = x.slice(&begin, &end, &vec![1; r])?;
    if pads.iter().all(|&p| p == (0, 0)) {
        return tensor(y);
    }
    let dtype = y.dtype();
    tensor(
        y.cast(DType::F32)?
            .pad(&pads, PadMode::Constant, 0.0)?
            .cast(dtype)?,
    )
}

/// Picks the elements at flat positions `flat` of `x`, as an array of `shape`: on the host for
/// a constant, else one gather from the flattened tensor.
fn take_flat(x: &Value, flat: Vec<usize>, shape: Vec<usize>) -> OpResult<Vec<Value>> {
    match x {
        Value::Const(c) => one(Value::Const(c.take(&flat, shape)?)),
        Value::Tensor(t) => {
            let idx = Const::ints(shape, flat.iter().map(|&i| i as i64).collect())?.to_tensor()?;
            tensor(t.reshape(&[-1])?.gather(&idx, 0)?)
        }
    }
}

fn gather_elements(n: &Node) -> OpResult<Vec<Value>> {
    let x = n.input(0)?;
    let indices = n.konst(1)?;
    let r = x.rank();
    if indices.shape.len() != r {
        return invalid("data and indices differ in rank");
    }
    let a = axis(n.attr_i("axis", 0), r)?;
    let dim = x.shape()[a] as i64;
    let in_strides = strides(x.shape());
    let out_strides = strides(&indices.shape);
    let idx = indices.to_i64s()?;
    let mut flat = Vec::with_capacity(idx.len());
    for (f, &i) in idx.iter().enumerate() {
        let i = if i < 0 { i + dim } else { i };
        if i < 0 || i >= dim {
            return invalid(format!(
                "index {i} is out of range for axis {a} of size {dim}"
            ));
        }
        let mut pos = 0;
        for k in 0..r {
            let coord = if k == a {
                i as usize
            } else {
                f / out_strides[k] % indices.shape[k]
            };
            pos += coord * in_strides[k];
        }
        flat.push(pos);
    }
    take_flat(x, flat, indices.shape.clone())
}

/// `ReverseSequence`: for each batch entry `b`, its first `sequence_lens[b]` steps along the
/// time axis in reverse order (a constant permutation of the elements).
fn reverse_sequence(n: &Node) -> OpResult<Vec<Value>> {
    let x = n.input(0)?;
    let lens = n.konst(1)?.to_i64s()?;
    let r = x.rank();
    let (batch_axis, time_axis) = (
        axis(n.attr_i("batch_axis", 1), r)?,
        axis(n.attr_i("time_axis", 0), r)?,
    );
    let shape = x.shape().to_vec();
    if batch_axis == time_axis || lens.len() != shape[batch_axis] {
        return invalid(format!(
            "{} sequence lengths, batch axis {batch_axis}, time axis {time_axis}, shape {shape:?}",
            lens.len()
        ));
    }
    let st = strides(&shape);
    let steps = shape[time_axis] as i64;
    let mut flat = Vec::with_capacity(x.shape().iter().product());
    for f in 0..shape.iter().product::<usize>() {
        let b = f / st[batch_axis] % shape[batch_axis];
        let t = (f / st[time_axis] % shape[time_axis]) as i64;
        let len = lens[b];
        if !(0..=steps).contains(&len) {
            return invalid(format!("sequence length {len} for {steps} steps"));
        }
        let from = if t < len { len - 1 - t } else { t };
        flat.push((f as i64 + (from - t) * st[time_axis] as i64) as usize);
    }
    take_flat(x, flat, shape)
}

fn gather_nd(n: &Node) -> OpResult<Vec<Value>> {
    let x = n.input(0)?;
    let indices = n.konst(1)?;
    let b =
        usize::try_from(n.attr_i("batch_dims", 0)).or_else(|_| invalid("negative batch_dims"))?;
    let Some((&k, lead)) = indices.shape.split_last() else {
        return invalid("indices must have rank >= 1");
    };
    if k == 0 || b + k > x.rank() || b >= indices.shape.len() || lead[..b] != x.shape()[..b] {
        return invalid(format!(
            "indices of shape {:?} with batch_dims {b} for data of shape {:?}",
            indices.shape,
            x.shape()
        ));
    }
    // the first `b` axes pair up: tuple t of batch g indexes data[g] from axis b on
    let in_strides = strides(x.shape());
    let batch_size: usize = x.shape()[b..].iter().product();
    let batches: usize = x.shape()[..b].iter().product();
    let inner: usize = x.shape()[b + k..].iter().product();
    let idx = indices.to_i64s()?;
    let per_batch = idx.len() / k / batches.max(1);
    let mut flat = Vec::with_capacity(idx.len() / k * inner);
    for (t, tuple) in idx.chunks(k).enumerate() {
        let mut base = t / per_batch.max(1) * batch_size;
        for (j, &i) in tuple.iter().enumerate() {
            let dim = x.shape()[b + j] as i64;
            let i = if i < 0 { i + dim } else { i };
            if i < 0 || i >= dim {
                return invalid(format!(
                    "index {i} is out of range for axis {} of size {dim}",
                    b + j
                ));
            }
            base += i as usize * in_strides[b + j];
        }
        flat.extend(base..base + inner);
    }
    let mut shape = lead.to_vec();
    shape.extend(&x.shape()[b + k..]);
    take_flat(x, flat, shape)
}

fn isize_shape(s: &[usize]) -> Vec<isize> {
    s.iter().map(|&d| d as isize).collect()
}

/// Reshapes a value (host or graph) to a fully known shape.
fn reshape_value(v: &Value, shape: Vec<usize>) -> OpResult<Value> {
    match v {
        Value::Const(c) => Ok(Value::Const(c.reshaped(shape)?)),
        Value::Tensor(t) => Ok(Value::Tensor(t.reshape(&isize_shape(&shape))?)),
    }
}

/// Rearranges a value by a gather of flat indices computed from shapes alone (host path), or
/// by the graph op `build` (graph path).
fn permute_value(
    v: &Value,
    out_shape: Vec<usize>,
    index: impl Fn(&[usize]) -> usize,
    build: impl FnOnce(&aneforge::Tensor) -> OpResult<aneforge::Tensor>,
) -> OpResult<Value> {
    match v {
        Value::Const(c) => {
            let n: usize = out_shape.iter().product();
            let st = strides(&out_shape);
            let mut coord = vec![0; out_shape.len()];
            let idx: Vec<usize> = (0..n)
                .map(|flat| {
                    for k in 0..out_shape.len() {
                        coord[k] = flat / st[k] % out_shape[k];
                    }
                    index(&coord)
                })
                .collect();
            Ok(Value::Const(c.take(&idx, out_shape)?))
        }
        Value::Tensor(t) => Ok(Value::Tensor(build(t)?)),
    }
}

fn dropout(n: &Node) -> OpResult<Vec<Value>> {
    let scalar_at = |i: usize| -> OpResult<Option<f32>> {
        match n.opt(i) {
            None => Ok(None),
            Some(_) => Ok(n.konst(i)?.to_f32s().first().copied()),
        }
    };
    if n.opset >= 12 && scalar_at(2)?.is_some_and(|t| t != 0.0) {
        // training: elements drop at random with probability `ratio`; only 0 is deterministic
        if scalar_at(1)?.unwrap_or(0.5) != 0.0 {
            return unsupported("training mode with a non-zero ratio (random)");
        }
    }
    let x = n.input(0)?.clone();
    let mask = Value::Const(Const::new(
        x.shape().to_vec(),
        Data::Bool(vec![true; x.shape().iter().product()]),
    )?);
    Ok(vec![x, mask])
}

fn constant(n: &Node) -> OpResult<Vec<Value>> {
    if let Some(c) = n.attr_tensor("value")? {
        return one(Value::Const(c));
    }
    if let Some(a) = n.attr("value_float").and_then(|a| a.f) {
        return one(Value::Const(Const::new(vec![], Data::F32(vec![a]))?));
    }
    if let Some(a) = n.attr("value_int").and_then(|a| a.i) {
        return one(Value::Const(Const::ints(vec![], vec![a])?));
    }
    if let Some(v) = n.attr_floats("value_floats") {
        return one(Value::Const(Const::new(vec![v.len()], Data::F32(v))?));
    }
    if let Some(v) = n.attr_ints("value_ints") {
        return one(Value::Const(Const::ints(vec![v.len()], v)?));
    }
    unsupported("a Constant without a dense tensor, float or int value")
}

fn shape(n: &Node) -> OpResult<Vec<Value>> {
    let dims: Vec<i64> = n.input(0)?.shape().iter().map(|&d| d as i64).collect();
    let r = dims.len() as i64;
    let clamp = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
    let start = clamp(n.attr_i("start", 0));
    let end = clamp(n.attr_i("end", r));
    let picked = dims[start..end.max(start)].to_vec();
    one(Value::Const(Const::ints(vec![picked.len()], picked)?))
}

fn size(n: &Node) -> OpResult<Vec<Value>> {
    let count = n.input(0)?.shape().iter().product::<usize>() as i64;
    one(Value::Const(Const::ints(vec![], vec![count])?))
}

fn constant_of_shape(n: &Node) -> OpResult<Vec<Value>> {
    let dims = to_usize(&n.konst(0)?.to_i64s()?, "dimension")?;
    let count: usize = dims.iter().product();
    let fill = match n.attr("value").and_then(|a| a.t.as_ref()) {
        Some(t) => const_from_proto(t).map_err(crate::error::OpError::Invalid)?,
        None => Const::new(vec![1], Data::F32(vec![0.0]))?,
    };
    if fill.len() != 1 {
        return invalid("value must hold one element");
    }
    let data = match &fill.data {
        Data::F32(v) => Data::F32(vec![v[0]; count]),
        Data::Int(v) => Data::Int(vec![v[0]; count]),
        Data::Bool(v) => Data::Bool(vec![v[0]; count]),
    };
    one(Value::Const(Const::new(dims, data)?))
}

fn range(n: &Node) -> OpResult<Vec<Value>> {
    let (s, l, d) = (n.konst(0)?, n.konst(1)?, n.konst(2)?);
    let (start, limit, delta) = (s.data.f64_at(0), l.data.f64_at(0), d.data.f64_at(0));
    if delta == 0.0 {
        return invalid("delta is zero");
    }
    let count = ((limit - start) / delta).ceil().max(0.0) as usize;
    let values = (0..count).map(|i| start + i as f64 * delta);
    let data = match s.data {
        Data::Int(_) => Data::Int(values.map(|x| x as i64).collect()),
        _ => Data::F32(values.map(|x| x as f32).collect()),
    };
    one(Value::Const(Const::new(vec![count], data)?))
}

fn reshape(n: &Node) -> OpResult<Vec<Value>> {
    let x = n.input(0)?;
    let target = if n.opset < 5 {
        n.attr_ints("shape").unwrap_or_default()
    } else {
        n.konst(1)?.to_i64s()?
    };
    let allow_zero = n.attr_i("allowzero", 0) != 0;
    let total: usize = x.shape().iter().product();
    let mut dims: Vec<Option<usize>> = Vec::with_capacity(target.len());
    for (i, &d) in target.iter().enumerate() {
        dims.push(match d {
            -1 => None,
            0 if !allow_zero => Some(*x.shape().get(i).ok_or_else(|| {
                crate::error::OpError::Invalid(format!("0 at axis {i} copies no input axis"))
            })?),
            d if d >= 0 => Some(d as usize),
            d => return invalid(format!("target dimension {d}")),
        });
    }
    let known: usize = dims.iter().flatten().product();
    let free = dims.iter().filter(|d| d.is_none()).count();
    let shape: Vec<usize> = match free {
        0 => dims.into_iter().flatten().collect(),
        1 if known > 0 && total.is_multiple_of(known) => dims
            .into_iter()
            .map(|d| d.unwrap_or(total / known))
            .collect(),
        _ => return invalid(format!("cannot reshape {:?} to {target:?}", x.shape())),
    };
    if shape.iter().product::<usize>() != total {
        return invalid(format!("cannot reshape {:?} to {target:?}", x.shape()));
    }
    one(reshape_value(x, shape)?)
}

fn flatten(n: &Node) -> OpResult<Vec<Value>> {
    let x = n.input(0)?;
    let r = x.rank();
    let a = n.attr_i("axis", 1);
    let a = if a < 0 { a + r as i64 } else { a };
    if a < 0 || a > r as i64 {
        return invalid(format!("axis {a} for rank {r}"));
    }
    let a = a as usize;
    let rows: usize = x.shape()[..a].iter().product();
    let cols: usize = x.shape()[a..].iter().product();
    one(reshape_value(x, vec![rows, cols])?)
}

fn listed_axes(n: &Node, attr_before: i64) -> OpResult<Option<Vec<i64>>> {
    if n.opset < attr_before {
        Ok(n.attr_ints("axes"))
    } else {
        n.opt_ints(1)
    }
}

fn squeeze(n: &Node) -> OpResult<Vec<Value>> {
    let x = n.input(0)?;
    let shape = x.shape();
    let drop = match listed_axes(n, 13)? {
        Some(list) if !list.is_empty() => axes(&list, shape.len())?,
        _ => (0..shape.len()).filter(|&i| shape[i] == 1).collect(),
    };
    if let Some(&a) = drop.iter().find(|&&a| shape[a] != 1) {
        return invalid(format!("axis {a} has size {}, not 1", shape[a]));
    }
    let out: Vec<usize> = (0..shape.len())
        .filter(|i| !drop.contains(i))
        .map(|i| shape[i])
        .collect();
    one(reshape_value(x, out)?)
}

fn unsqueeze(n: &Node) -> OpResult<Vec<Value>> {
    let x = n.input(0)?;
    let list = listed_axes(n, 13)?.unwrap_or_default();
    let out_rank = x.rank() + list.len();
    let ax = axes(&list, out_rank)?;
    if ax.len() != list.len() {
        return invalid(format!("repeated axes in {list:?}"));
    }
    let mut src = x.shape().iter();
    let out: Vec<usize> = (0..out_rank)
        .map(|i| {
            if ax.contains(&i) {
                1
            } else {
                src.next().copied().unwrap_or(1)
            }
        })
        .collect();
    one(reshape_value(x, out)?)
}

fn transpose(n: &Node) -> OpResult<Vec<Value>> {
    let x = n.input(0)?;
    let r = x.rank();
    let perm = match n.attr_ints("perm") {
        Some(p) => to_usize(&p, "perm entry")?,
        None => (0..r).rev().collect(),
    };
    let mut seen = perm.clone();
    seen.sort_unstable();
    if seen != (0..r).collect::<Vec<_>>() {
        return invalid(format!("perm {perm:?} is not a permutation of 0..{r}"));
    }
    let out_shape: Vec<usize> = perm.iter().map(|&p| x.shape()[p]).collect();
    let in_strides = strides(x.shape());
    let p2 = perm.clone();
    one(permute_value(
        x,
        out_shape,
        |c| c.iter().zip(&p2).map(|(&ci, &p)| ci * in_strides[p]).sum(),
        |t| Ok(t.transpose(&perm)?),
    )?)
}

fn concat(n: &Node) -> OpResult<Vec<Value>> {
    let parts: Vec<&Value> = n.inputs.iter().flatten().collect();
    let first = parts
        .first()
        .ok_or(crate::error::OpError::Invalid("no inputs".into()))?;
    let a = axis(n.attr_i("axis", 0), first.rank())?;
    if n.all_const() {
        let consts: Vec<&Const> = parts.iter().filter_map(|v| v.as_const()).collect();
        let mut shape = consts[0].shape.clone();
        shape[a] = consts
            .iter()
            .map(|c| c.shape.get(a).copied().unwrap_or(0))
            .sum();
        let outer: usize = shape[..a].iter().product();
        let mut data_f = Vec::new();
        let mut data_i = Vec::new();
        let mut data_b = Vec::new();
        for o in 0..outer {
            for c in &consts {
                if c.shape.len() != shape.len() {
                    return invalid("inputs of different ranks");
                }
                let inner: usize = c.shape[a..].iter().product();
                let range = o * inner..(o + 1) * inner;
                match &c.data {
                    Data::F32(v) => data_f.extend_from_slice(&v[range]),
                    Data::Int(v) => data_i.extend_from_slice(&v[range]),
                    Data::Bool(v) => data_b.extend_from_slice(&v[range]),
                }
            }
        }
        let data = match consts[0].data {
            Data::F32(_) => Data::F32(data_f),
            Data::Int(_) => Data::Int(data_i),
            Data::Bool(_) => Data::Bool(data_b),
        };
        return one(Value::Const(Const::new(shape, data)?));
    }
    let tensors = parts
        .iter()
        .filter(|v| !v.shape().contains(&0))
        .map(|v| v.to_tensor())
        .collect::<OpResult<Vec<_>>>()?;
    tensor(graph_concat(&tensors, a as isize)?)
}

fn split(n: &Node) -> OpResult<Vec<Value>> {
    let x = n.input(0)?;
    let a = axis(n.attr_i("axis", 0), x.rank())?;
    let dim = x.shape()[a];
    let listed = if n.opset >= 13 {
        n.opt_ints(1)?
    } else {
        n.attr_ints("split")
    };
    let outputs = n.proto.output.len();
    let sizes: Vec<usize> = match listed {
        Some(v) if !v.is_empty() => to_usize(&v, "split size")?,
        _ => {
            let parts = if n.opset >= 18 {
                n.attr_i("num_outputs", outputs as i64).max(1) as usize
            } else {
                outputs
            };
            let chunk = dim.div_ceil(parts.max(1));
            (0..parts)
                .map(|i| chunk.min(dim.saturating_sub(i * chunk)))
                .collect()
        }
    };
    if sizes.iter().sum::<usize>() != dim {
        return invalid(format!(
            "sizes {sizes:?} do not partition axis {a} of size {dim}"
        ));
    }
    let mut start = 0;
    let mut out = Vec::new();
    for &len in &sizes {
        let mut begin = vec![0usize; x.rank()];
        let mut end = x.shape().to_vec();
        begin[a] = start;
        end[a] = start + len;
        out.push(take_window(x, &begin, &end, &vec![1; x.rank()])?);
        start += len;
    }
    Ok(out)
}

/// `x[begin..end; step]` with positive steps, on the host or in the graph.
fn take_window(x: &Value, begin: &[usize], end: &[usize], step: &[usize]) -> OpResult<Value> {
    let out_shape: Vec<usize> = (0..begin.len())
        .map(|i| (end[i].saturating_sub(begin[i])).div_ceil(step[i]))
        .collect();
    let in_strides = strides(x.shape());
    match x {
        Value::Const(_) => permute_value(
            x,
            out_shape,
            |c| {
                c.iter()
                    .enumerate()
                    .map(|(k, &ci)| (begin[k] + ci * step[k]) * in_strides[k])
                    .sum()
            },
            |t| Ok(t.clone()),
        ),
        Value::Tensor(t) => {
            if out_shape.contains(&0) {
                return unsupported("a slice with no elements");
            }
            Ok(Value::Tensor(t.slice(begin, end, step)?))
        }
    }
}

fn slice(n: &Node) -> OpResult<Vec<Value>> {
    let x = n.input(0)?;
    let r = x.rank();
    let (starts, ends, list, steps) = if n.opset < 10 {
        (
            n.attr_ints("starts").unwrap_or_default(),
            n.attr_ints("ends").unwrap_or_default(),
            n.attr_ints("axes"),
            None,
        )
    } else {
        (
            n.konst(1)?.to_i64s()?,
            n.konst(2)?.to_i64s()?,
            n.opt_ints(3)?,
            n.opt_ints(4)?,
        )
    };
    let list = list.unwrap_or_else(|| (0..starts.len() as i64).collect());
    let steps = steps.unwrap_or_else(|| vec![1; starts.len()]);
    if ends.len() != starts.len() || list.len() != starts.len() || steps.len() != starts.len() {
        return invalid("starts, ends, axes and steps differ in length");
    }
    let mut begin = vec![0i64; r];
    let mut end: Vec<i64> = x.shape().iter().map(|&d| d as i64).collect();
    let mut step = vec![1i64; r];
    for k in 0..starts.len() {
        let a = axis(list[k], r)?;
        let dim = x.shape()[a] as i64;
        let s = steps[k];
        if s == 0 {
            return invalid("a step is zero");
        }
        let norm = |v: i64| if v < 0 { v + dim } else { v };
        let (b, e) = (norm(starts[k]), norm(ends[k].clamp(-i64::MAX, i64::MAX)));
        if s > 0 {
            begin[a] = b.clamp(0, dim);
            end[a] = e.clamp(0, dim);
        } else {
            begin[a] = b.clamp(0, dim - 1);
            end[a] = e.clamp(-1, dim - 1);
        }
        step[a] = s;
    }
    if step.iter().all(|&s| s > 0) {
        let b = to_usize(&begin, "start")?;
        let e: Vec<usize> = end
            .iter()
            .zip(&b)
            .map(|(&e, &b)| (e.max(0) as usize).max(b))
            .collect();
        let s = to_usize(&step, "step")?;
        return one(take_window(x, &b, &e, &s)?);
    }
    let out_shape: Vec<usize> = (0..r)
        .map(|k| {
            let span = end[k] - begin[k];
            if (span > 0) == (step[k] > 0) && span != 0 {
                ((span.abs() + step[k].abs() - 1) / step[k].abs()) as usize
            } else {
                0
            }
        })
        .collect();
    if let Value::Tensor(t) = x {
        // one constant-index gather per axis that is not taken whole in order
        if out_shape.contains(&0) {
            return unsupported(format!("an empty slice (shape {out_shape:?})"));
        }
        let mut y = t.clone();
        for (k, &len) in out_shape.iter().enumerate() {
            if step[k] == 1 && begin[k] == 0 && len == t.shape()[k] {
                continue;
            }
            let picks: Vec<i64> = (0..len as i64).map(|i| begin[k] + i * step[k]).collect();
            y = y.gather(&Const::ints(vec![len], picks)?.to_tensor()?, k as isize)?;
        }
        return tensor(y);
    }
    let in_strides = strides(x.shape());
    one(permute_value(
        x,
        out_shape,
        |c| {
            c.iter()
                .enumerate()
                .map(|(k, &ci)| (begin[k] + ci as i64 * step[k]) as usize * in_strides[k])
                .sum()
        },
        |t| Ok(t.clone()),
    )?)
}

fn expand(n: &Node) -> OpResult<Vec<Value>> {
    let x = n.input(0)?;
    let target = to_usize(&n.konst(1)?.to_i64s()?, "dimension")?;
    let shape = broadcast_shape(x.shape(), &target)?;
    match x {
        Value::Const(c) => one(Value::Const(c.broadcast_to(&shape)?)),
        Value::Tensor(t) => tensor(t.broadcast_to(&shape)?),
    }
}

fn tile(n: &Node) -> OpResult<Vec<Value>> {
    let x = n.input(0)?;
    let reps = to_usize(&n.konst(1)?.to_i64s()?, "repeat")?;
    if reps.len() != x.rank() {
        return invalid(format!("{} repeats for rank {}", reps.len(), x.rank()));
    }
    let out_shape: Vec<usize> = x.shape().iter().zip(&reps).map(|(d, r)| d * r).collect();
    let in_shape = x.shape().to_vec();
    let in_strides = strides(&in_shape);
    one(permute_value(
        x,
        out_shape,
        |c| {
            c.iter()
                .enumerate()
                .map(|(k, &ci)| ci % in_shape[k] * in_strides[k])
                .sum()
        },
        |t| Ok(t.tile(&reps)?),
    )?)
}

fn pad(n: &Node) -> OpResult<Vec<Value>> {
    let x = n.tensor(0)?;
    let r = x.rank();
    let (pads, value) = if n.opset < 11 {
        (
            n.attr_ints("pads").unwrap_or_default(),
            n.attr_f("value", 0.0),
        )
    } else {
        let value = match n.opt(2) {
            Some(_) => n.konst(2)?.to_f32s().first().copied().unwrap_or(0.0),
            None => 0.0,
        };
        (n.konst(1)?.to_i64s()?, value)
    };
    let list = if n.opset >= 18 { n.opt_ints(3)? } else { None };
    let list = match list {
        Some(l) => l
            .iter()
            .map(|&a| axis(a, r))
            .collect::<OpResult<Vec<_>>>()?,
        None => (0..r).collect(),
    };
    if pads.len() != 2 * list.len() {
        return invalid(format!("{} pads for {} axes", pads.len(), list.len()));
    }
    if pads.iter().any(|&p| p < 0) {
        return unsupported("negative pads (cropping)");
    }
    let mut full = vec![(0usize, 0usize); r];
    let k = list.len();
    for (i, &a) in list.iter().enumerate() {
        full[a] = (pads[i] as usize, pads[i + k] as usize);
    }
    let mode = match n.attr_s("mode", "constant").as_str() {
        "constant" => PadMode::Constant,
        "reflect" => PadMode::Reflect,
        "edge" => PadMode::Replicate,
        "wrap" => {
            // circular: output position p along an axis reads (p − before) mod length
            let mut y = x;
            for (a, &(before, after)) in full.iter().enumerate() {
                let len = y.shape()[a];
                if before + after == 0 {
                    continue;
                }
                let picks: Vec<i64> = (0..len + before + after)
                    .map(|p| (p as i64 - before as i64).rem_euclid(len as i64))
                    .collect();
                let index = Const::ints(vec![picks.len()], picks)?.to_tensor()?;
                y = y.gather(&index, a as isize)?;
            }
            return tensor(y);
        }
        other => return unsupported(format!("mode {other:?}")),
    };
    if x.dtype() == DType::F32 {
        return tensor(x.pad(&full, mode, value)?);
    }
    // integers and bools pad as floats (exact below 2^24) and convert back
    let dtype = x.dtype();
    tensor(x.cast(DType::F32)?.pad(&full, mode, value)?.cast(dtype)?)
}

fn gather(n: &Node) -> OpResult<Vec<Value>> {
    let x = n.input(0)?;
    let a = axis(n.attr_i("axis", 0), x.rank())?;
    let dim = x.shape()[a] as i64;
    match n.input(1)? {
        Value::Const(ic) => {
            let idx: Vec<i64> = ic
                .to_i64s()?
                .into_iter()
                .map(|i| if i < 0 { i + dim } else { i })
                .collect();
            if let Some(bad) = idx.iter().find(|&&i| i < 0 || i >= dim) {
                return invalid(format!(
                    "index {bad} is out of range for axis {a} of size {dim}"
                ));
            }
            let mut out_shape = x.shape()[..a].to_vec();
            out_shape.extend(&ic.shape);
            out_shape.extend(&x.shape()[a + 1..]);
            if let Value::Const(c) = x {
                let outer: usize = x.shape()[..a].iter().product();
                let inner: usize = x.shape()[a + 1..].iter().product();
                let mut flat = Vec::with_capacity(outer * idx.len() * inner);
                for o in 0..outer {
                    for &i in &idx {
                        let base = (o * dim as usize + i as usize) * inner;
                        flat.extend(base..base + inner);
                    }
                }
                return one(Value::Const(c.take(&flat, out_shape)?));
            }
            let indices = Const::ints(ic.shape.clone(), idx)?.to_tensor()?;
            tensor(x.to_tensor()?.gather(&indices, a as isize)?)
        }
        Value::Tensor(i) => {
            if let (Some(host), Value::Const(table), 0) = (n.host_gathers, x, a) {
                if let (Data::F32(_), Some(indices_port)) = (&table.data, fed_input(i)) {
                    return host_gather(host, table, i, indices_port);
                }
            }
            tensor(x.to_tensor()?.gather(i, a as isize)?)
        }
    }
}

/// The fed input an index tensor is (possibly through a cast).
fn fed_input(t: &aneforge::Tensor) -> Option<String> {
    match t.op() {
        aneforge::graph::Op::Input { name } => Some(name.clone()),
        aneforge::graph::Op::Cast { .. } => t.srcs().first().and_then(fed_input),
        _ => None,
    }
}

fn host_gather(
    host: &std::cell::RefCell<Vec<crate::HostGather>>,
    table: &Const,
    indices: &aneforge::Tensor,
    indices_port: String,
) -> OpResult<Vec<Value>> {
    let mut shape = indices.shape().to_vec();
    shape.extend(&table.shape[1..]);
    let mut list = host.borrow_mut();
    let port = format!("{indices_port}__gathered_{}", list.len());
    let t = aneforge::graph::input(&port, &shape, DType::F32)?;
    list.push(crate::HostGather {
        port,
        indices_port,
        table: table.clone(),
        shape,
    });
    tensor(t)
}

fn cast_const(c: &Const, to: DType) -> Const {
    let n = c.len();
    let data = match to {
        // the importer builds f32, i32 and bool values only; storage types convert alike
        DType::F32 | DType::F16 => Data::F32(c.to_f32s()),
        DType::I32 | DType::I8 => {
            Data::Int((0..n).map(|i| c.data.f64_at(i).trunc() as i64).collect())
        }
        DType::Bool => Data::Bool((0..n).map(|i| c.data.f64_at(i) != 0.0).collect()),
    };
    Const {
        shape: c.shape.clone(),
        data,
        elem_type: 0,
    }
}

fn cast(n: &Node, to: i32) -> OpResult<Vec<Value>> {
    use crate::proto::tensor_proto::DataType as D;
    if let Some(format) = FloatFormat::of(to) {
        let x = n.input(0)?.to_tensor()?;
        let x = if x.dtype() == DType::F32 {
            x
        } else {
            x.cast(DType::F32)?
        };
        return tensor(format.round(&x, n.attr_i("saturate", 1) != 0)?);
    }
    let int4 = match D::try_from(to) {
        Ok(D::Int4) => Some((-8.0, 7.0)),
        Ok(D::Uint4) => Some((0.0, 15.0)),
        _ => None,
    };
    if let Some((lo, hi)) = int4 {
        // floats round half to even, then every value saturates to the 4-bit range
        let t = n.input(0)?.to_tensor()?;
        let t = match t.dtype() {
            DType::F32 | DType::F16 => t
                .round()?
                .maximum_scalar(lo)?
                .minimum(&scalar(hi))?
                .cast(DType::I32)?,
            DType::I32 | DType::I8 => {
                let bound = |v: f32| Const::ints(vec![], vec![v as i64])?.to_tensor();
                t.maximum(&bound(lo)?)?.minimum(&bound(hi)?)?
            }
            DType::Bool => t.cast(DType::I32)?,
        };
        return tensor(t);
    }
    let Some(dtype) = graph_dtype(to) else {
        return unsupported(format!("cast to {}", crate::value::elem_type_name(to)));
    };
    match n.input(0)? {
        Value::Const(c) => one(Value::Const(cast_const(c, dtype))),
        Value::Tensor(t) => {
            if t.dtype() == dtype {
                return one(Value::Tensor(t.clone()));
            }
            tensor(t.cast(dtype)?)
        }
    }
}

fn cast_like(n: &Node) -> OpResult<Vec<Value>> {
    let declared = n.input_types.get(1).copied().unwrap_or(0);
    let declared = match n.input(1)? {
        Value::Const(c) if c.elem_type != 0 => c.elem_type,
        _ => declared,
    };
    if graph_dtype(declared) == Some(n.input(1)?.dtype()) {
        return cast(n, declared);
    }
    let code = match n.input(1)?.dtype() {
        DType::F32 => 1,
        DType::I32 => 7,
        DType::Bool => 9,
        DType::F16 => 10,
        DType::I8 => 3,
    };
    cast(n, code)
}

fn depth_to_space(n: &Node) -> OpResult<Vec<Value>> {
    let b = n.attr_i("blocksize", 0);
    if b <= 0 {
        return invalid("blocksize must be positive");
    }
    let x = n.tensor(0)?;
    match n.attr_s("mode", "DCR").as_str() {
        "DCR" => tensor(x.depth_to_space(b as usize)?),
        "CRD" => {
            let s = x.shape();
            if s.len() != 4 {
                return invalid(format!("expected [N, C, H, W], got {s:?}"));
            }
            let (bn, c, h, w, b) = (
                s[0] as isize,
                s[1] as isize,
                s[2] as isize,
                s[3] as isize,
                b as isize,
            );
            let y = x
                .reshape(&[bn * c / (b * b), b, b, h, w])?
                .transpose(&[0, 3, 1, 4, 2])?;
            // [N·C/b², H, b, W, b] folds N into the first axis to stay within rank 5
            tensor(y.reshape(&[bn, c / (b * b), h * b, w * b])?)
        }
        other => invalid(format!("mode {other:?}")),
    }
}

fn cumsum(n: &Node) -> OpResult<Vec<Value>> {
    let x = n.tensor(0)?;
    let a = axis(
        n.konst(1)?.to_i64s()?.first().copied().unwrap_or(0),
        x.rank(),
    )?;
    let exclusive = n.attr_i("exclusive", 0) != 0;
    let reverse = n.attr_i("reverse", 0) != 0;
    tensor(x.cumsum(a as isize, exclusive, reverse)?)
}

fn trilu(n: &Node) -> OpResult<Vec<Value>> {
    let x = n.tensor(0)?;
    if x.rank() < 2 {
        return invalid(format!("expected rank >= 2, got {:?}", x.shape()));
    }
    let k = match n.opt(1) {
        Some(_) => n.konst(1)?.to_i64s()?.first().copied().unwrap_or(0),
        None => 0,
    };
    let upper = n.attr_i("upper", 1) != 0;
    let (rows, cols) = (x.shape()[x.rank() - 2], x.shape()[x.rank() - 1]);
    let keep: Vec<bool> = (0..rows * cols)
        .map(|f| {
            let (i, j) = ((f / cols) as i64, (f % cols) as i64);
            if upper {
                j - i >= k
            } else {
                j - i <= k
            }
        })
        .collect();
    let mask = Const::new(vec![rows, cols], Data::Bool(keep))?.to_tensor()?;
    let zero = match x.dtype() {
        DType::F32 | DType::F16 => aneforge::graph::scalar(0.0),
        DType::I32 | DType::I8 => aneforge::graph::constant(aneforge::HostArray::scalar_i32(0)),
        DType::Bool => aneforge::graph::constant(aneforge::HostArray::from_bool(&[], vec![false])?),
    };
    tensor(mask.select(&x, &zero)?)
}
