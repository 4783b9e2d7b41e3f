//! Ops whose output shape depends on input values (`NonZero`, `Unique`, `NonMaxSuppression`):
//! a compiled program has static shapes, so their inputs must be constants and they fold on the
//! host.

use super::Importer;
use crate::error::{invalid, OpResult};
use crate::fold::strides;
use crate::node::{axis, Node};
use crate::value::{Const, Data, Value};
use std::cmp::Ordering;

pub const OPS: &[(&str, Importer)] = &[
    ("NonZero", non_zero),
    ("Unique", unique),
    ("NonMaxSuppression", non_max_suppression),
];

fn ints(shape: Vec<usize>, v: Vec<i64>) -> OpResult<Value> {
    Ok(Value::Const(Const::ints(shape, v)?))
}

/// The coordinates of the non-zero elements, `[rank, count]`, in row-major order.
fn non_zero(n: &Node) -> OpResult<Vec<Value>> {
    let x = n.konst(0)?;
    let st = strides(&x.shape);
    let hits: Vec<usize> = (0..x.len()).filter(|&i| x.data.f64_at(i) != 0.0).collect();
    let rank = x.shape.len();
    let mut out = vec![0i64; rank * hits.len()];
    for (j, &flat) in hits.iter().enumerate() {
        for d in 0..rank {
            out[d * hits.len() + j] = (flat / st[d] % x.shape[d]) as i64;
        }
    }
    Ok(vec![ints(vec![rank, hits.len()], out)?])
}

/// `Unique`: the distinct elements (or slices along `axis`), sorted or in order of first
/// occurrence, with the index of each first occurrence, the inverse map and the counts.
fn unique(n: &Node) -> OpResult<Vec<Value>> {
    let x = n.konst(0)?;
    let sorted = n.attr_i("sorted", 1) != 0;
    // the slices compared: whole elements (flattened) or sub-tensors along `axis`
    let (outer, len, inner, a) = match n.attr("axis") {
        Some(_) => {
            let a = axis(n.attr_i("axis", 0), x.shape.len())?;
            let outer: usize = x.shape[..a].iter().product();
            (
                outer,
                x.shape[a],
                x.shape[a + 1..].iter().product(),
                Some(a),
            )
        }
        None => (1, x.len(), 1, None),
    };
    let slice = |s: usize| -> Vec<f64> {
        (0..outer)
            .flat_map(|o| (0..inner).map(move |i| (o, i)))
            .map(|(o, i)| x.data.f64_at((o * len + s) * inner + i))
            .collect()
    };
    let slices: Vec<Vec<f64>> = (0..len).map(slice).collect();
    let cmp = |p: &Vec<f64>, q: &Vec<f64>| -> Ordering {
        p.iter()
            .zip(q)
            .map(|(a, b)| a.total_cmp(b))
            .find(|o| *o != Ordering::Equal)
            .unwrap_or(Ordering::Equal)
    };
    let mut firsts: Vec<usize> = Vec::new();
    let mut inverse = vec![0usize; len];
    for s in 0..len {
        match firsts
            .iter()
            .position(|&f| cmp(&slices[f], &slices[s]) == Ordering::Equal)
        {
            Some(u) => inverse[s] = u,
            None => {
                inverse[s] = firsts.len();
                firsts.push(s);
            }
        }
    }
    let mut order: Vec<usize> = (0..firsts.len()).collect();
    if sorted {
        order.sort_by(|&p, &q| cmp(&slices[firsts[p]], &slices[firsts[q]]));
    }
    let mut rank_of = vec![0usize; firsts.len()];
    for (r, &u) in order.iter().enumerate() {
        rank_of[u] = r;
    }
    let mut counts = vec![0i64; firsts.len()];
    for &u in &inverse {
        counts[rank_of[u]] += 1;
    }
    let k = firsts.len();
    let picked: Vec<usize> = order.iter().map(|&u| firsts[u]).collect();
    let (shape, values) = match a {
        None => (
            vec![k],
            picked
                .iter()
                .map(|&s| x.data.f64_at(s))
                .collect::<Vec<f64>>(),
        ),
        Some(a) => {
            let mut shape = x.shape.clone();
            shape[a] = k;
            let mut v = Vec::with_capacity(outer * k * inner);
            for o in 0..outer {
                for &s in &picked {
                    for i in 0..inner {
                        v.push(x.data.f64_at((o * len + s) * inner + i));
                    }
                }
            }
            (shape, v)
        }
    };
    let data = match &x.data {
        Data::F32(_) => Data::F32(values.iter().map(|&v| v as f32).collect()),
        Data::Int(_) => Data::Int(values.iter().map(|&v| v as i64).collect()),
        Data::Bool(_) => Data::Bool(values.iter().map(|&v| v != 0.0).collect()),
    };
    let mut y = Const::new(shape, data)?;
    y.elem_type = x.elem_type;
    Ok(vec![
        Value::Const(y),
        ints(vec![k], picked.iter().map(|&s| s as i64).collect())?,
        ints(
            vec![len],
            inverse.iter().map(|&u| rank_of[u] as i64).collect(),
        )?,
        ints(vec![k], counts)?,
    ])
}

/// `NonMaxSuppression`: per batch and class, boxes by descending score (above the threshold),
/// each kept unless it overlaps a kept one by more than the IoU threshold, at most
/// `max_output_boxes_per_class`; rows `[batch, class, box]`.
fn non_max_suppression(n: &Node) -> OpResult<Vec<Value>> {
    let boxes = n.konst(0)?;
    let scores = n.konst(1)?;
    let max_out = match n.opt(2) {
        Some(_) => n.konst(2)?.to_i64s()?.first().copied().unwrap_or(0).max(0) as usize,
        None => 0,
    };
    let iou_max = match n.opt(3) {
        Some(_) => n.konst(3)?.data.f64_at(0),
        None => 0.0,
    };
    let score_min = match n.opt(4) {
        Some(_) => Some(n.konst(4)?.data.f64_at(0)),
        None => None,
    };
    let center = n.attr_i("center_point_box", 0) != 0;
    let three = |c: &Const, what: &str| -> OpResult<[usize; 3]> {
        c.shape
            .as_slice()
            .try_into()
            .or_else(|_| invalid(format!("{what} of shape {:?} (3-D)", c.shape)))
    };
    let [b, m, four] = three(boxes, "boxes")?;
    let [sb, c, sm] = three(scores, "scores")?;
    if four != 4 || sb != b || sm != m {
        return invalid(format!(
            "boxes {:?} and scores {:?} do not fit [batch, boxes, 4] and [batch, classes, boxes]",
            boxes.shape, scores.shape
        ));
    }
    // corners (y1, x1, y2, x2) with y1 <= y2 and x1 <= x2
    let corners = |bi: usize, i: usize| -> [f64; 4] {
        let v: Vec<f64> = (0..4)
            .map(|k| boxes.data.f64_at((bi * m + i) * 4 + k))
            .collect();
        if center {
            let (xc, yc, w, h) = (v[0], v[1], v[2], v[3]);
            [yc - h / 2.0, xc - w / 2.0, yc + h / 2.0, xc + w / 2.0]
        } else {
            [
                v[0].min(v[2]),
                v[1].min(v[3]),
                v[0].max(v[2]),
                v[1].max(v[3]),
            ]
        }
    };
    let iou = |p: [f64; 4], q: [f64; 4]| -> f64 {
        let h = (p[2].min(q[2]) - p[0].max(q[0])).max(0.0);
        let w = (p[3].min(q[3]) - p[1].max(q[1])).max(0.0);
        let inter = h * w;
        let union = (p[2] - p[0]) * (p[3] - p[1]) + (q[2] - q[0]) * (q[3] - q[1]) - inter;
        if union <= 0.0 {
            0.0
        } else {
            inter / union
        }
    };
    let mut rows: Vec<i64> = Vec::new();
    for bi in 0..b {
        for ci in 0..c {
            let score = |i: usize| scores.data.f64_at((bi * c + ci) * m + i);
            let mut candidates: Vec<usize> = (0..m)
                .filter(|&i| score_min.is_none_or(|t| score(i) > t))
                .collect();
            // stable: equal scores keep box order
            candidates.sort_by(|&p, &q| score(q).total_cmp(&score(p)));
            let mut kept: Vec<usize> = Vec::new();
            for i in candidates {
                if kept.len() >= max_out {
                    break;
                }
                if kept
                    .iter()
                    .all(|&k| iou(corners(bi, k), corners(bi, i)) <= iou_max)
                {
                    kept.push(i);
                }
            }
            for i in kept {
                rows.extend([bi as i64, ci as i64, i as i64]);
            }
        }
    }
    let count = rows.len() / 3;
    Ok(vec![ints(vec![count, 3], rows)?])
}
