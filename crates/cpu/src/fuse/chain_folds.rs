//! Rewrites inside one elementwise chain: activations written out of ops (GELU with erf,
//! h-swish with a clip) become one instruction, and a binary op whose other operand is a scalar
//! constant takes it as an immediate instead of a broadcast load. A folded pattern's
//! intermediate registers must each be written once, read once and not stored, so nothing else
//! can observe them.

use crate::kernels::ew::{BinOp, Chain, Instr, UnOp};

/// Folds `c`; `consts[i]` is load `i`'s value when it is a scalar constant.
pub(super) fn fold(c: &mut Chain, consts: &[Option<f32>]) -> bool {
    let mut changed = false;
    while fold_gelu(c, consts) {
        changed = true;
    }
    changed |= immediates(c, consts);
    while fold_hard_swish(c) {
        changed = true;
    }
    while fold_scale_shift(c) {
        changed = true;
    }
    // a folded pattern's constants, and the second load of a value it read twice
    if changed {
        drop_unused_loads(c);
    }
    changed
}

fn dst(i: &Instr) -> usize {
    match *i {
        Instr::Un(_, d, _) | Instr::Bin(_, d, _, _) | Instr::Select(d, _, _, _) => d,
    }
}

fn operands(i: &Instr) -> impl Iterator<Item = usize> {
    let ops: [Option<usize>; 3] = match *i {
        Instr::Un(_, _, s) => [Some(s), None, None],
        Instr::Bin(_, _, a, b) => [Some(a), Some(b), None],
        Instr::Select(_, k, a, b) => [Some(k), Some(a), Some(b)],
    };
    ops.into_iter().flatten()
}

/// Register queries over one chain.
struct View<'a> {
    c: &'a Chain,
    consts: &'a [Option<f32>],
}

impl View<'_> {
    /// Register `r` is a load of the scalar constant `v` (to a millionth).
    fn is(&self, r: usize, v: f32) -> bool {
        self.consts
            .get(r)
            .copied()
            .flatten()
            .is_some_and(|k| (k - v).abs() <= 1e-6 * v.abs())
    }

    /// Operand and store reads of `r`.
    fn reads(&self, r: usize) -> usize {
        let uses: usize = self
            .c
            .instrs
            .iter()
            .map(|i| operands(i).filter(|&o| o == r).count())
            .sum();
        uses + self.c.stores.iter().filter(|s| s.0 == r).count()
    }

    /// The instruction writing `r`, when `r` is no load and exactly one instruction writes it.
    fn writer(&self, r: usize) -> Option<usize> {
        let mut w = self
            .c
            .instrs
            .iter()
            .enumerate()
            .filter(|(_, i)| dst(i) == r);
        match (w.next(), w.next()) {
            (Some((j, _)), None) if r >= self.c.loads.len() => Some(j),
            _ => None,
        }
    }

    /// The first instruction reading `r`.
    fn reader(&self, r: usize) -> Option<usize> {
        self.c
            .instrs
            .iter()
            .position(|i| operands(i).any(|o| o == r))
    }

    /// The other operand of instruction `i` when it is the commutative `op` and one operand
    /// satisfies `side`.
    fn other(&self, i: usize, op: BinOp, side: &dyn Fn(usize) -> bool) -> Option<usize> {
        match self.c.instrs[i] {
            Instr::Bin(o, _, a, b) if o == op && side(a) => Some(b),
            Instr::Bin(o, _, a, b) if o == op && side(b) => Some(a),
            _ => None,
        }
    }

    /// `r` is an intermediate: written by one instruction, read once.
    fn single(&self, r: usize) -> bool {
        self.writer(r).is_some() && self.reads(r) == 1
    }

    /// One register, or two loads of the same value alike (merged chains load a value per use).
    fn same(&self, a: usize, b: usize) -> bool {
        let loads = &self.c.loads;
        a == b
            || (a.max(b) < loads.len() && {
                let (la, lb) = (&loads[a], &loads[b]);
                la.value == lb.value && la.elem == lb.elem && la.strides == lb.strides
            })
    }

    /// The unary instruction writing the intermediate `r`, with its index.
    fn unary(&self, r: usize) -> Option<(usize, UnOp, usize)> {
        let i = self.writer(r).filter(|_| self.single(r))?;
        match self.c.instrs[i] {
            Instr::Un(op, _, s) => Some((i, op, s)),
            _ => None,
        }
    }
}

/// Replaces instruction `at` by `with` and removes the instructions `dead`.
fn rewrite(c: &mut Chain, at: usize, with: Instr, dead: &[usize]) {
    c.instrs[at] = with;
    let mut j = 0;
    c.instrs.retain(|_| {
        j += 1;
        !dead.contains(&(j - 1))
    });
}

/// Rewrites one `x·½·(1 + erf(x/√2))` (in any operand order, the ½ applied to x or to the
/// product, the division as a product by 1/√2) into `GeluExact(x)`.
fn fold_gelu(c: &mut Chain, consts: &[Option<f32>]) -> bool {
    let v = View { c, consts };
    for (ie, ins) in c.instrs.iter().enumerate() {
        let Instr::Un(UnOp::Erf, e, t) = *ins else {
            continue;
        };
        let (Some(it), true, true) = (v.writer(t), v.single(t), v.single(e)) else {
            continue;
        };
        let x = match c.instrs[it] {
            Instr::Bin(BinOp::Div, _, x, k) if v.is(k, std::f32::consts::SQRT_2) => x,
            _ => match v.other(it, BinOp::Mul, &|r| {
                v.is(r, std::f32::consts::FRAC_1_SQRT_2)
            }) {
                Some(x) => x,
                None => continue,
            },
        };
        // 1 + erf
        let Some(ia) = v.reader(e) else { continue };
        if v.other(ia, BinOp::Add, &|r| r == e)
            .is_none_or(|k| !v.is(k, 1.0))
        {
            continue;
        }
        let a = dst(&c.instrs[ia]);
        if !v.single(a) {
            continue;
        }
        let Some(im) = v.reader(a) else { continue };
        let Some(y) = v.other(im, BinOp::Mul, &|r| r == a) else {
            continue;
        };
        let m = dst(&c.instrs[im]);
        // (x·(1 + erf))·½, or (x·½)·(1 + erf)
        let (out, dead) = if v.same(y, x) && v.single(m) {
            let Some(ih) = v.reader(m) else { continue };
            if v.other(ih, BinOp::Mul, &|r| r == m)
                .is_none_or(|k| !v.is(k, 0.5))
            {
                continue;
            }
            (ih, [it, ie, ia, im])
        } else {
            let Some(ih) = v.writer(y) else { continue };
            if !v.single(y)
                || v.other(ih, BinOp::Mul, &|r| v.same(r, x))
                    .is_none_or(|k| !v.is(k, 0.5))
            {
                continue;
            }
            (im, [it, ie, ia, ih])
        };
        let d = dst(&c.instrs[out]);
        rewrite(c, out, Instr::Un(UnOp::GeluExact, d, x), &dead);
        return true;
    }
    false
}

/// Binary ops with one scalar-constant operand take it as an immediate.
fn immediates(c: &mut Chain, consts: &[Option<f32>]) -> bool {
    let k = |r: usize| consts.get(r).copied().flatten();
    let mut changed = false;
    for ins in c.instrs.iter_mut() {
        let Instr::Bin(op, d, a, b) = *ins else {
            continue;
        };
        let imm = match (k(a), k(b)) {
            (None, Some(kb)) => UnOp::with_scalar(op, kb, false).map(|u| Instr::Un(u, d, a)),
            (Some(ka), None) => UnOp::with_scalar(op, ka, true).map(|u| Instr::Un(u, d, b)),
            _ => None,
        };
        if let Some(imm) = imm {
            *ins = imm;
            changed = true;
        }
    }
    changed
}

fn near(a: f32, b: f32) -> bool {
    (a - b).abs() <= 1e-6 * b.abs()
}

/// `r` (an intermediate) is `s·y` for the unary instruction scaling by `s`: `·s` or `/(1/s)`.
fn scaled_by(v: &View<'_>, r: usize, s: f32) -> Option<(usize, usize)> {
    match v.unary(r)? {
        (i, UnOp::MulK(k), y) if near(k, s) => Some((i, y)),
        (i, UnOp::DivK(k), y) if near(k, 1.0 / s) => Some((i, y)),
        _ => None,
    }
}

/// The h-swish gate held in the intermediate `g`, as `(x, six, instructions)`: `clamp(x + 3,
/// 0, 6)` (`six`), or the same scaled by ⅙, `hard_sigmoid(x)` with α = ⅙, β = ½, or
/// `clamp(x/6 + ½, 0, 1)` (not `six`).
fn gate(v: &View<'_>, g: usize) -> Option<(usize, bool, Vec<usize>)> {
    if let Some((ig, inner)) = scaled_by(v, g, 1.0 / 6.0) {
        let (x, true, mut dead) = gate(v, inner)? else {
            return None;
        };
        dead.push(ig);
        return Some((x, false, dead));
    }
    let (ig, op, t) = v.unary(g)?;
    match op {
        UnOp::Clip(lo, hi) if lo == 0.0 && hi == 6.0 => {}
        UnOp::Relu6 => {}
        UnOp::SigmoidHard(a, b) if near(a, 1.0 / 6.0) && near(b, 0.5) => {
            return Some((t, false, vec![ig]));
        }
        UnOp::Clip(lo, hi) if lo == 0.0 && hi == 1.0 => {
            let (ih, UnOp::AddK(h), u) = v.unary(t)? else {
                return None;
            };
            let (iu, x) = scaled_by(v, u, 1.0 / 6.0).filter(|_| near(h, 0.5))?;
            return Some((x, false, vec![ig, ih, iu]));
        }
        _ => return None,
    }
    match v.unary(t)? {
        (it, UnOp::AddK(3.0), x) => Some((x, true, vec![ig, it])),
        _ => None,
    }
}

/// Rewrites one h-swish written out of ops — `x·clamp(x + 3, 0, 6)/6` with the division
/// anywhere, or `x·hard_sigmoid(x)` — into `HardSwish(1, −0)`.
fn fold_hard_swish(c: &mut Chain) -> bool {
    let v = View { c, consts: &[] };
    for (im, ins) in c.instrs.iter().enumerate() {
        let Instr::Bin(BinOp::Mul, m, a, b) = *ins else {
            continue;
        };
        for (x, g) in [(a, b), (b, a)] {
            let Some((xg, six, mut dead)) = gate(&v, g) else {
                continue;
            };
            if !v.same(x, xg) {
                continue;
            }
            let out = if six {
                // (x·clamp(x + 3, 0, 6))/6
                let Some(ir) = v.reader(m).filter(|_| v.single(m)) else {
                    continue;
                };
                match c.instrs[ir] {
                    Instr::Un(UnOp::MulK(k), _, _) if near(k, 1.0 / 6.0) => {}
                    Instr::Un(UnOp::DivK(6.0), _, _) => {}
                    _ => continue,
                }
                dead.push(im);
                ir
            } else {
                im
            };
            let d = dst(&c.instrs[out]);
            rewrite(c, out, Instr::Un(UnOp::HardSwish(1.0, -0.0), d, x), &dead);
            return true;
        }
    }
    false
}

/// An h-swish whose only reader scales it by a scalar, or shifts it by one, takes that scale
/// or shift (`·s` then `+ t`, as the chain computed them).
fn fold_scale_shift(c: &mut Chain) -> bool {
    let v = View { c, consts: &[] };
    for (ih, ins) in c.instrs.iter().enumerate() {
        let Instr::Un(UnOp::HardSwish(s, t), h, x) = *ins else {
            continue;
        };
        let Some(ir) = v.reader(h).filter(|_| v.single(h)) else {
            continue;
        };
        let folded = match c.instrs[ir] {
            // with no shift yet (−0 adds exactly nothing)
            Instr::Un(UnOp::MulK(k), _, _) if s == 1.0 && t == 0.0 && t.is_sign_negative() => {
                UnOp::HardSwish(k, t)
            }
            Instr::Un(UnOp::AddK(k), _, _) if t == 0.0 && t.is_sign_negative() => {
                UnOp::HardSwish(s, k)
            }
            _ => continue,
        };
        let d = dst(&c.instrs[ir]);
        rewrite(c, ir, Instr::Un(folded, d, x), &[ih]);
        return true;
    }
    false
}

/// Removes the loads no instruction or store reads (the constants of a folded pattern), and
/// renumbers the registers after them.
fn drop_unused_loads(c: &mut Chain) {
    let n = c.loads.len();
    let mut used = vec![false; n];
    for r in c.instrs.iter().flat_map(operands) {
        if r < n {
            used[r] = true;
        }
    }
    for s in &c.stores {
        if s.0 < n {
            used[s.0] = true;
        }
    }
    let dropped = used.iter().filter(|u| !**u).count();
    if dropped == 0 {
        return;
    }
    let mut map = Vec::with_capacity(c.nregs);
    let mut next = 0;
    for r in 0..c.nregs {
        map.push(next);
        if r >= n || used[r] {
            next += 1;
        }
    }
    let f = |r: usize| map[r];
    for i in c.instrs.iter_mut() {
        *i = match *i {
            Instr::Un(op, d, s) => Instr::Un(op, f(d), f(s)),
            Instr::Bin(op, d, a, b) => Instr::Bin(op, f(d), f(a), f(b)),
            Instr::Select(d, k, a, b) => Instr::Select(f(d), f(k), f(a), f(b)),
        };
    }
    for s in c.stores.iter_mut() {
        s.0 = f(s.0);
    }
    let mut r = 0;
    c.loads.retain(|_| {
        r += 1;
        used[r - 1]
    });
    c.nregs -= dropped;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::ew::Load;
    use crate::tensor::Elem;

    /// `(x·clip(x + 3, 0, 6))/6` with x loaded once per use (as merged chains load it) and its
    /// constants loaded: one instruction on one load remains.
    #[test]
    fn hard_swish_over_two_loads_of_x_keeps_one_load() {
        let load = |value| Load {
            value,
            elem: Elem::F32,
            strides: vec![1],
        };
        let scalar = |value| Load {
            value,
            elem: Elem::F32,
            strides: vec![0],
        };
        let mut c = Chain {
            shape: vec![8],
            loads: vec![load(7), load(7), scalar(8), scalar(9)],
            instrs: vec![
                Instr::Bin(BinOp::Add, 4, 1, 2),
                Instr::Un(UnOp::Clip(0.0, 6.0), 5, 4),
                Instr::Bin(BinOp::Mul, 6, 0, 5),
                Instr::Bin(BinOp::Div, 7, 6, 3),
            ],
            nregs: 8,
            stores: vec![(7, 10, Elem::F32)],
        };
        assert!(fold(&mut c, &[None, None, Some(3.0), Some(6.0)]));
        assert_eq!(c.loads.len(), 1, "{c:?}");
        assert_eq!(c.loads[0].value, 7);
        let [Instr::Un(UnOp::HardSwish(s, t), d, 0)] = c.instrs[..] else {
            panic!("{c:?}");
        };
        assert_eq!((s, t.to_bits()), (1.0, (-0.0f32).to_bits()));
        assert_eq!((c.stores[0].0, c.nregs), (d, d + 1));
    }
}
