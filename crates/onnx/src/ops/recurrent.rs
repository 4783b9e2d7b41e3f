//! Recurrent layers `RNN`, `GRU` and `LSTM`, unrolled over the (static) sequence length: the
//! input projection of every step is one matmul, each step adds the recurrent projection and
//! applies the gates. Forward, reverse and bidirectional; `layout` 0 and 1.

use super::Importer;
use crate::error::{invalid, unsupported, OpResult};
use crate::node::Node;
use crate::value::Value;
use aneforge::graph::concat;
use aneforge::Tensor;

pub const OPS: &[(&str, Importer)] = &[
    ("RNN", |n| recurrent(n, Cell::Rnn)),
    ("GRU", |n| recurrent(n, Cell::Gru)),
    ("LSTM", |n| recurrent(n, Cell::Lstm)),
];

#[derive(Clone, Copy, PartialEq)]
enum Cell {
    Rnn,
    Gru,
    Lstm,
}

impl Cell {
    fn gates(self) -> usize {
        match self {
            Cell::Rnn => 1,
            Cell::Gru => 3,
            Cell::Lstm => 4,
        }
    }

    fn default_activations(self) -> &'static [&'static str] {
        match self {
            Cell::Rnn => &["Tanh"],
            Cell::Gru => &["Sigmoid", "Tanh"],
            Cell::Lstm => &["Sigmoid", "Tanh", "Tanh"],
        }
    }
}

fn activate(name: &str, x: &Tensor) -> OpResult<Tensor> {
    Ok(match name {
        "Sigmoid" => x.sigmoid()?,
        "Tanh" => x.tanh()?,
        "Relu" => x.relu()?,
        other => return unsupported(format!("activation {other}")),
    })
}

/// `[rows, cols]` slice `k` of `[.., parts·h]` along the last axis.
fn part(t: &Tensor, k: usize, h: usize) -> OpResult<Tensor> {
    Ok(t.narrow(-1, k * h, h)?)
}

struct Step<'a> {
    cell: Cell,
    h: usize,
    acts: &'a [String],
    clip: Option<f32>,
    linear_before_reset: bool,
}

impl Step<'_> {
    fn clipped(&self, t: Tensor) -> OpResult<Tensor> {
        Ok(match self.clip {
            Some(c) => t.clip(-c, c)?,
            None => t,
        })
    }

    /// One RNN or LSTM step (GRU's is [`Step::run_gru`]) from the input projection `xw` (`[B, gates·H]`, biases included) and the state.
    fn run(
        &self,
        xw: &Tensor,
        h_prev: &Tensor,
        c_prev: Option<&Tensor>,
        r: &Tensor,
        rb: Option<&Tensor>,
        peep: Option<&Tensor>,
    ) -> OpResult<(Tensor, Option<Tensor>)> {
        let h = self.h;
        let hr = h_prev.matmul_t(r, false, true)?;
        let hr = match rb {
            Some(b) => hr.add(b)?,
            None => hr,
        };
        match self.cell {
            Cell::Rnn => Ok((activate(&self.acts[0], &self.clipped(xw.add(&hr)?)?)?, None)),
            Cell::Gru => invalid("GRU steps run through run_gru"),
            Cell::Lstm => {
                let c_prev =
                    c_prev.ok_or(crate::error::OpError::Invalid("no cell state".into()))?;
                let g = xw.add(&hr)?;
                let peep_of = |k: usize| -> OpResult<Option<Tensor>> {
                    Ok(match peep {
                        Some(p) => Some(p.narrow(-1, k * h, h)?),
                        None => None,
                    })
                };
                let with_peep = |t: Tensor, k: usize, c: &Tensor| -> OpResult<Tensor> {
                    Ok(match peep_of(k)? {
                        Some(p) => t.add(&p.mul(c)?)?,
                        None => t,
                    })
                };
                let i = activate(
                    &self.acts[0],
                    &self.clipped(with_peep(part(&g, 0, h)?, 0, c_prev)?)?,
                )?;
                let f = activate(
                    &self.acts[0],
                    &self.clipped(with_peep(part(&g, 2, h)?, 2, c_prev)?)?,
                )?;
                let cand = activate(&self.acts[1], &self.clipped(part(&g, 3, h)?)?)?;
                let c = f.mul(c_prev)?.add(&i.mul(&cand)?)?;
                let o = activate(
                    &self.acts[0],
                    &self.clipped(with_peep(part(&g, 1, h)?, 1, &c)?)?,
                )?;
                let h_new = o.mul(&activate(&self.acts[2], &c)?)?;
                Ok((h_new, Some(c)))
            }
        }
    }
}

fn recurrent(n: &Node, cell: Cell) -> OpResult<Vec<Value>> {
    let layout = n.attr_i("layout", 0);
    let mut x = n.tensor(0)?;
    if x.rank() != 3 {
        return invalid(format!(
            "X must be [seq, batch, input], got {:?}",
            x.shape()
        ));
    }
    if layout == 1 {
        x = x.transpose(&[1, 0, 2])?;
    }
    let (seq, batch) = (x.shape()[0], x.shape()[1]);
    let w = n.tensor(1)?;
    let r = n.tensor(2)?;
    let h = match n.attr_i("hidden_size", 0) {
        v if v > 0 => v as usize,
        _ => r.shape().get(2).copied().unwrap_or(0),
    };
    let gates = cell.gates();
    let dirs = match n.attr_s("direction", "forward").as_str() {
        "forward" => vec![false],
        "reverse" => vec![true],
        "bidirectional" => vec![false, true],
        other => return invalid(format!("direction {other:?}")),
    };
    if w.shape() != [dirs.len(), gates * h, x.shape()[2]] || r.shape() != [dirs.len(), gates * h, h]
    {
        return invalid(format!(
            "W {:?} and R {:?} do not fit {} direction(s), hidden size {h}",
            w.shape(),
            r.shape(),
            dirs.len()
        ));
    }
    if n.attr_i("input_forget", 0) != 0 {
        return unsupported("input_forget");
    }
    if n.opt(4).is_some() && !n.konst(4)?.to_i64s()?.iter().all(|&l| l == seq as i64) {
        return unsupported("sequence_lens shorter than the sequence");
    }
    let mut acts: Vec<String> = n
        .attr("activations")
        .map(|a| {
            a.strings
                .iter()
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        })
        .unwrap_or_default();
    let per_dir = cell.default_activations().len();
    if acts.is_empty() {
        acts = cell
            .default_activations()
            .iter()
            .map(|s| s.to_string())
            .collect();
        if dirs.len() == 2 {
            acts.extend(acts.clone());
        }
    }
    if acts.len() != per_dir * dirs.len() {
        return invalid(format!(
            "{} activations for {} direction(s)",
            acts.len(),
            dirs.len()
        ));
    }
    if n.attr("activation_alpha").is_some() || n.attr("activation_beta").is_some() {
        return unsupported("activation_alpha / activation_beta");
    }
    let step_of = |d: usize| Step {
        cell,
        h,
        acts: &acts[d * per_dir..(d + 1) * per_dir],
        clip: n.attr("clip").and_then(|a| a.f),
        linear_before_reset: n.attr_i("linear_before_reset", 0) != 0,
    };
    let bias = n.opt_tensor(3)?;
    let init_h = n.opt_tensor(5)?;
    let init_c = if cell == Cell::Lstm {
        n.opt_tensor(6)?
    } else {
        None
    };
    let peep = if cell == Cell::Lstm {
        n.opt_tensor(7)?
    } else {
        None
    };
    let zeros = aneforge::graph::full(&[batch, h], 0.0)?;
    let mut ys: Vec<Tensor> = Vec::new();
    let mut hs: Vec<Tensor> = Vec::new();
    let mut cs: Vec<Tensor> = Vec::new();
    for (d, &reverse) in dirs.iter().enumerate() {
        let wd = w.narrow(0, d, 1)?.squeeze(&[0])?;
        let rd = r.narrow(0, d, 1)?.squeeze(&[0])?;
        let (wb, rb) = match &bias {
            Some(b) => {
                let bd = b.narrow(0, d, 1)?.squeeze(&[0])?;
                (
                    Some(bd.narrow(0, 0, gates * h)?),
                    Some(bd.narrow(0, gates * h, gates * h)?),
                )
            }
            None => (None, None),
        };
        let mut xw = x.matmul_t(&wd, false, true)?;
        if let Some(b) = &wb {
            xw = xw.add(b)?;
        }
        let state_of = |t: &Option<Tensor>| -> OpResult<Tensor> {
            Ok(match t {
                Some(s) => s.narrow(0, d, 1)?.squeeze(&[0])?,
                None => zeros.clone(),
            })
        };
        let mut h_t = state_of(&init_h)?;
        let mut c_t = if cell == Cell::Lstm {
            Some(state_of(&init_c)?)
        } else {
            None
        };
        let peep_d = match &peep {
            Some(p) => Some(p.narrow(0, d, 1)?.squeeze(&[0])?),
            None => None,
        };
        let step = step_of(d);
        let mut outs: Vec<Tensor> = Vec::with_capacity(seq);
        let order: Vec<usize> = if reverse {
            (0..seq).rev().collect()
        } else {
            (0..seq).collect()
        };
        for t in order {
            let xt = xw.narrow(0, t, 1)?.squeeze(&[0])?;
            let (hn, cn) = if cell == Cell::Gru {
                step.run_gru(&xt, &h_t, &rd, rb.as_ref())?
            } else {
                step.run(&xt, &h_t, c_t.as_ref(), &rd, rb.as_ref(), peep_d.as_ref())?
            };
            h_t = hn;
            c_t = cn;
            outs.push(h_t.clone());
        }
        if reverse {
            outs.reverse();
        }
        let stacked: Vec<Tensor> = outs
            .iter()
            .map(|o| o.expand_dims(&[0]))
            .collect::<Result<_, _>>()?;
        ys.push(concat(&stacked, 0)?.expand_dims(&[1])?);
        hs.push(h_t.expand_dims(&[0])?);
        if let Some(c) = c_t {
            cs.push(c.expand_dims(&[0])?);
        }
    }
    let mut y = concat(&ys, 1)?;
    let mut y_h = concat(&hs, 0)?;
    if layout == 1 {
        y = y.transpose(&[2, 0, 1, 3])?;
        y_h = y_h.transpose(&[1, 0, 2])?;
    }
    let mut out = vec![Value::Tensor(y), Value::Tensor(y_h)];
    if cell == Cell::Lstm {
        let mut y_c = concat(&cs, 0)?;
        if layout == 1 {
            y_c = y_c.transpose(&[1, 0, 2])?;
        }
        out.push(Value::Tensor(y_c));
    }
    Ok(out)
}

impl Step<'_> {
    /// A GRU step; `rb` holds the recurrent biases of z, r and h. Without
    /// `linear_before_reset` the candidate's recurrent product is of the reset state `r ⊙ H`.
    fn run_gru(
        &self,
        xw: &Tensor,
        h_prev: &Tensor,
        r: &Tensor,
        rb: Option<&Tensor>,
    ) -> OpResult<(Tensor, Option<Tensor>)> {
        let h = self.h;
        let mut hr = h_prev.matmul_t(r, false, true)?;
        if let Some(b) = rb {
            hr = hr.add(b)?;
        }
        let z = activate(
            &self.acts[0],
            &self.clipped(part(xw, 0, h)?.add(&part(&hr, 0, h)?)?)?,
        )?;
        let rg = activate(
            &self.acts[0],
            &self.clipped(part(xw, 1, h)?.add(&part(&hr, 1, h)?)?)?,
        )?;
        let cand = if self.linear_before_reset {
            part(xw, 2, h)?.add(&rg.mul(&part(&hr, 2, h)?)?)?
        } else {
            let rh = r.narrow(0, 2 * h, h)?;
            let mut p = rg.mul(h_prev)?.matmul_t(&rh, false, true)?;
            if let Some(b) = rb {
                p = p.add(&b.narrow(0, 2 * h, h)?)?;
            }
            part(xw, 2, h)?.add(&p)?
        };
        let cand = activate(&self.acts[1], &self.clipped(cand)?)?;
        let keep = z.mul(h_prev)?;
        Ok((z.neg()?.add_scalar(1.0)?.mul(&cand)?.add(&keep)?, None))
    }
}
