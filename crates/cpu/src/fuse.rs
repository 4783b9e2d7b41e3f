//! Pattern fusion over the node list (before placement). Every rewrite replaces the last node of
//! a pattern and removes the earlier ones; intermediate values must have exactly one use and not
//! be outputs, so no other node can observe the difference. (A repeated attention mask is the
//! exception: the kernel reads the copy's source, and the copy is dropped later only if nothing
//! else reads it.)
//!
//! Passes: attention (matmul·scale·mask·softmax·matmul → flash kernel), RMS norm
//! (x·rsqrt(mean(x²)+eps)·w → one row kernel), elementwise chains into one loop, each chain's
//! own rewrites (`chain_folds`: GELU and h-swish written out of ops, scalar immediates), attention
//! operands read as stored (an fp16 cache cast to f32, or int8 blocks times their scales, read
//! by the attention kernel itself; a mask tiled along the query rows read untiled), and chains
//! into matmul/conv epilogues (bias, activation, residual add).

use crate::compile::Builder;
use crate::kernels::attention::{Attention, BlockScales, View, SCALE_BLOCK};
use crate::kernels::ew::{
    broadcast_shapes, broadcast_strides, BinOp, Chain, Instr, IntOp, Load, UnOp,
};
use crate::kernels::matmul::Rhs;
use crate::kernels::rows::{ReduceOp, RowKind, Rows};
use crate::kernels::Kernel;
use crate::plan::{Home, Node, Vid};
use crate::tensor::Elem;
use std::collections::HashMap;

mod chain_folds;

struct Graph<'a, 'p> {
    b: &'a mut Builder<'p>,
    nodes: Vec<Option<Node>>,
    uses: HashMap<Vid, usize>,
    producer: HashMap<Vid, usize>,
}

impl Graph<'_, '_> {
    fn index(&mut self, outputs: &[Vid]) {
        self.uses.clear();
        self.producer.clear();
        for (i, n) in self.nodes.iter().enumerate() {
            let Some(n) = n else { continue };
            let mut seen: Vec<Vid> = Vec::new();
            for &r in &n.reads {
                if !seen.contains(&r) {
                    seen.push(r);
                    *self.uses.entry(r).or_default() += 1;
                }
            }
            for &w in &n.writes {
                self.producer.insert(w, i);
            }
        }
        for v in &self.b.values {
            if let Home::Alias(s) = v.home {
                *self.uses.entry(s).or_default() += 1;
            }
        }
        for &o in outputs {
            *self.uses.entry(o).or_default() += 100;
        }
    }

    fn single_use(&self, v: Vid) -> bool {
        self.uses.get(&v).copied() == Some(1)
    }

    /// The node producing `v` if `v` has exactly one use.
    fn sole_producer(&self, v: Vid) -> Option<usize> {
        if self.single_use(v) {
            self.producer.get(&v).copied()
        } else {
            None
        }
    }

    fn node(&self, i: usize) -> &Node {
        self.nodes[i].as_ref().expect("live node")
    }

    fn op_type(&self, i: usize) -> &str {
        self.nodes[i].as_ref().map_or("", |n| n.op_type.as_str())
    }

    fn scalar(&self, v: Vid) -> Option<f32> {
        let k = self.b.known.get(&v)?;
        let f = k.f32s()?;
        (f.len() == 1).then(|| f[0])
    }

    /// Consumers of `v` (node indices).
    fn consumers(&self, v: Vid) -> Vec<usize> {
        self.nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.as_ref().is_some_and(|n| n.reads.contains(&v)))
            .map(|(i, _)| i)
            .collect()
    }
}

pub(crate) fn run(b: &mut Builder<'_>, outputs: &[Vid]) {
    let nodes = std::mem::take(&mut b.nodes).into_iter().map(Some).collect();
    let mut g = Graph {
        b,
        nodes,
        uses: HashMap::new(),
        producer: HashMap::new(),
    };
    g.index(outputs);
    attention(&mut g, outputs);
    g.index(outputs);
    rms_norm(&mut g, outputs);
    g.index(outputs);
    chains(&mut g, outputs);
    chain_folds(&mut g);
    g.index(outputs);
    stored_attention_operands(&mut g, outputs);
    g.index(outputs);
    repeated_attention_masks(&mut g);
    g.index(outputs);
    epilogues(&mut g);
    g.index(outputs);
    expansions(&mut g);
    g.b.nodes = g.nodes.into_iter().flatten().collect();
}

fn chain_of(n: &Node) -> Option<&Chain> {
    match &n.kernel {
        Kernel::Chain(c) => Some(c),
        _ => None,
    }
}

/// The producing instruction of register `reg` yields 0/1 (compare, logical, not).
fn is_boolean_reg(c: &Chain, reg: usize) -> bool {
    c.instrs.iter().rev().any(|i| match *i {
        Instr::Bin(op, d, _, _) => d == reg && (op.is_compare() || op.is_logical()),
        Instr::Un(UnOp::Not, d, _) => d == reg,
        _ => false,
    })
}

/// `b` with its load of `p` replaced by `a`'s register program (a produced `p`).
fn merge(a: &Chain, p: Vid, b: &Chain, keep_p: bool) -> Option<Chain> {
    let (&(preg, _, pelem), _) = a.stores.iter().zip(0..).find(|(s, _)| s.1 == p)?;
    if !(matches!(pelem, Elem::F32 | Elem::F16) || (pelem == Elem::Bool && is_boolean_reg(a, preg)))
    {
        return None;
    }
    if a.shape != b.shape
        || a.loads.len() + b.loads.len() > 16
        || a.instrs.len() + b.instrs.len() > 64
    {
        return None;
    }
    let dense = broadcast_strides(&b.shape, &b.shape);
    // registers: a's loads, b's loads (minus p), a's instrs, b's instrs
    let mut loads = a.loads.clone();
    let mut bmap: HashMap<usize, usize> = HashMap::new();
    let mut b_loads_kept = Vec::new();
    for (i, l) in b.loads.iter().enumerate() {
        if l.value == p {
            if l.strides != dense {
                return None;
            }
        } else {
            b_loads_kept.push((i, l.clone()));
        }
    }
    let base_a_instr = a.loads.len() + b_loads_kept.len();
    let amap = |r: usize| {
        if r < a.loads.len() {
            r
        } else {
            r - a.loads.len() + base_a_instr
        }
    };
    for (k, (i, l)) in b_loads_kept.into_iter().enumerate() {
        bmap.insert(i, a.loads.len() + k);
        loads.push(l);
    }
    let remap_instr = |ins: &Instr, f: &dyn Fn(usize) -> usize| match *ins {
        Instr::Un(op, d, s) => Instr::Un(op, f(d), f(s)),
        Instr::Bin(op, d, x, y) => Instr::Bin(op, f(d), f(x), f(y)),
        Instr::Select(d, c, x, y) => Instr::Select(f(d), f(c), f(x), f(y)),
    };
    let mut instrs: Vec<Instr> = a.instrs.iter().map(|i| remap_instr(i, &amap)).collect();
    let a_regs = a.nregs - a.loads.len();
    let base_b_instr = base_a_instr + a_regs;
    let p_reg = amap(preg);
    let bf = |r: usize| -> usize {
        if r < b.loads.len() {
            if b.loads[r].value == p {
                p_reg
            } else {
                bmap[&r]
            }
        } else {
            r - b.loads.len() + base_b_instr
        }
    };
    instrs.extend(b.instrs.iter().map(|i| remap_instr(i, &bf)));
    let mut stores: Vec<(usize, Vid, Elem)> = a
        .stores
        .iter()
        .filter(|s| keep_p || s.1 != p)
        .map(|&(r, v, e)| (amap(r), v, e))
        .collect();
    stores.extend(b.stores.iter().map(|&(r, v, e)| (bf(r), v, e)));
    Some(Chain {
        shape: b.shape.clone(),
        loads,
        instrs,
        nregs: base_b_instr + (b.nregs - b.loads.len()),
        stores,
    })
}

fn chains(g: &mut Graph<'_, '_>, outputs: &[Vid]) {
    for bi in 0..g.nodes.len() {
        while let Some(bc) = g.nodes[bi].as_ref().and_then(chain_of) {
            let mut merged = None;
            for l in &bc.loads {
                let Some(ai) = g.sole_producer(l.value) else {
                    continue;
                };
                if ai >= bi || outputs.contains(&l.value) {
                    continue;
                }
                let Some(ac) = g.nodes[ai].as_ref().and_then(chain_of) else {
                    continue;
                };
                if let Some(m) = merge(ac, l.value, bc, false) {
                    merged = Some((ai, l.value, m));
                    break;
                }
            }
            let Some((ai, p, m)) = merged else { break };
            let a = g.nodes[ai].take().expect("live");
            let bnode = g.nodes[bi].as_mut().expect("live");
            // the index follows the merge in place (re-indexing the graph after every merge made
            // long chains quadratic): `p` disappears; a value both nodes read loses one use (uses
            // count reading nodes); `a`'s other results are now produced by `bi`
            let mut reads: Vec<Vid> = Vec::with_capacity(a.reads.len() + bnode.reads.len());
            for &r in a.reads.iter().chain(bnode.reads.iter()) {
                if r != p && !reads.contains(&r) {
                    reads.push(r);
                }
            }
            let mut shared: Vec<Vid> = a
                .reads
                .iter()
                .copied()
                .filter(|r| *r != p && bnode.reads.contains(r))
                .collect();
            shared.sort_unstable();
            shared.dedup();
            for r in shared {
                if let Some(u) = g.uses.get_mut(&r) {
                    *u -= 1;
                }
            }
            g.uses.remove(&p);
            g.producer.remove(&p);
            for &w in a.writes.iter().filter(|&&w| w != p) {
                g.producer.insert(w, bi);
            }
            bnode.reads = reads;
            bnode
                .writes
                .extend(a.writes.iter().copied().filter(|&w| w != p));
            bnode.name = format!("{}+{}", a.name, bnode.name);
            bnode.kernel = Kernel::Chain(m);
        }
    }
}

/// Each chain's own rewrites (`chain_folds`): activations written out of ops become one
/// instruction, scalar constants become immediates.
fn chain_folds(g: &mut Graph<'_, '_>) {
    for i in 0..g.nodes.len() {
        let Some(Kernel::Chain(c)) = g.nodes[i].as_ref().map(|n| &n.kernel) else {
            continue;
        };
        let consts: Vec<Option<f32>> = c
            .loads
            .iter()
            .map(|l| {
                matches!(l.elem, Elem::F32 | Elem::F16)
                    .then(|| g.scalar(l.value))
                    .flatten()
            })
            .collect();
        let mut c = c.clone();
        if chain_folds::fold(&mut c, &consts) {
            let node = g.nodes[i].as_mut().expect("live");
            node.kernel = Kernel::Chain(c);
        }
    }
}

fn epilogues(g: &mut Graph<'_, '_>) {
    for bi in 0..g.nodes.len() {
        let Some(bn) = g.nodes[bi].as_ref() else {
            continue;
        };
        let Some(bc) = chain_of(bn) else { continue };
        let mut found = None;
        for l in &bc.loads {
            let Some(mi) = g.sole_producer(l.value) else {
                continue;
            };
            if mi >= bi {
                continue;
            }
            let ok = matches!(g.node(mi).kernel, Kernel::Matmul(_) | Kernel::Conv(_));
            if ok {
                found = Some((mi, l.value));
                break;
            }
        }
        let Some((mi, o)) = found else { continue };
        let mut mnode = g.nodes[mi].take().expect("live");
        let (raw, epi) = match &mut mnode.kernel {
            Kernel::Matmul(m) => (m.raw, &mut m.epilogue),
            Kernel::Conv(c) => (c.raw, &mut c.epilogue),
            _ => unreachable!(),
        };
        let shape = g.b.values[o].shape.clone();
        let oelem = g.b.values[o].elem().unwrap_or(Elem::F32);
        let base = epi.clone().unwrap_or_else(|| Chain {
            shape: shape.clone(),
            loads: vec![Load {
                value: raw,
                elem: Elem::F32,
                strides: broadcast_strides(&shape, &shape),
            }],
            instrs: if oelem == Elem::F16 {
                vec![Instr::Un(UnOp::RoundF16, 1, 0)]
            } else {
                vec![]
            },
            nregs: if oelem == Elem::F16 { 2 } else { 1 },
            stores: vec![(if oelem == Elem::F16 { 1 } else { 0 }, o, oelem)],
        });
        let bnode = g.nodes[bi].take().expect("live");
        let bc = chain_of(&bnode).expect("chain");
        match merge(&base, o, bc, false) {
            Some(m) => {
                *epi = Some(m);
                let mut reads = mnode.reads.clone();
                reads.extend(bnode.reads.iter().copied().filter(|&r| r != o && r != raw));
                reads.dedup();
                mnode.reads = reads;
                // the product buffer stays a written temporary; `o` disappears unless it is raw
                mnode.writes.retain(|&w| w != o || w == raw);
                mnode.writes.extend(bnode.writes.iter().copied());
                mnode.name = format!("{}+{}", mnode.name, bnode.name);
                g.nodes[bi] = Some(mnode);
            }
            None => {
                g.nodes[mi] = Some(mnode);
                g.nodes[bi] = Some(bnode);
            }
        }
    }
}

/// A pointwise conv (with its bias and activation) whose result only a depthwise conv reads
/// becomes part of that conv, which computes its input planes a block at a time
/// (`conv_expand`).
fn expansions(g: &mut Graph<'_, '_>) {
    for di in 0..g.nodes.len() {
        let Some(Kernel::Conv(d)) = g.nodes[di].as_ref().map(|n| &n.kernel) else {
            continue;
        };
        let Some(pi) = g.sole_producer(d.x).filter(|&pi| pi < di) else {
            continue;
        };
        let Kernel::Conv(p) = &g.node(pi).kernel else {
            continue;
        };
        // the product buffer of an epilogue must have no reader of its own
        if p.raw != d.x && g.uses.contains_key(&p.raw) {
            continue;
        }
        let Some(e) = d.expansion_from(p) else {
            continue;
        };
        let pnode = g.nodes[pi].take().expect("live");
        let dnode = g.nodes[di].as_mut().expect("live");
        let Kernel::Conv(d) = &mut dnode.kernel else {
            unreachable!("checked above")
        };
        let old = d.x;
        d.x = e.x;
        let mut reads = vec![e.x];
        reads.extend(e.bias);
        reads.extend(dnode.reads.iter().copied().filter(|&r| r != old));
        reads.dedup();
        d.expand = Some(e);
        dnode.reads = reads;
        dnode.name = format!("{}+{}", pnode.name, dnode.name);
    }
}

fn rms_norm(g: &mut Graph<'_, '_>, outputs: &[Vid]) {
    for i5 in 0..g.nodes.len() {
        let Some(n5) = g.nodes[i5].as_ref() else {
            continue;
        };
        if n5.op_type != "mul" || n5.reads.len() != 2 {
            continue;
        }
        // n5 = mul(x, r) with r = rsqrt(add(reduce_mean(mul(x, x)), eps))
        let (x, r) = {
            let (a, b2) = (n5.reads[0], n5.reads[1]);
            match (
                g.sole_producer(a).map(|i| g.op_type(i) == "rsqrt"),
                g.sole_producer(b2).map(|i| g.op_type(i) == "rsqrt"),
            ) {
                (_, Some(true)) => (a, b2),
                (Some(true), _) => (b2, a),
                _ => continue,
            }
        };
        let i4 = g.producer[&r];
        let Kernel::Chain(c4) = &g.node(i4).kernel else {
            continue;
        };
        let eps2 = match c4.instrs.first() {
            Some(Instr::Un(UnOp::Rsqrt(e), _, _)) => *e,
            _ => continue,
        };
        let a = g.node(i4).reads[0];
        let Some(i3) = g.sole_producer(a) else {
            continue;
        };
        if g.op_type(i3) != "add" {
            continue;
        }
        let n3 = g.node(i3);
        let (m, eps) = match (g.scalar(n3.reads[0]), g.scalar(n3.reads[1])) {
            (_, Some(e)) => (n3.reads[0], e),
            (Some(e), _) => (n3.reads[1], e),
            _ => continue,
        };
        let Some(i2) = g.sole_producer(m) else {
            continue;
        };
        let Kernel::Rows(r2) = &g.node(i2).kernel else {
            continue;
        };
        if !matches!(r2.kind, RowKind::Reduce(ReduceOp::Mean)) || r2.inner != 1 {
            continue;
        }
        let sq = g.node(i2).reads[0];
        let Some(i1) = g.sole_producer(sq) else {
            continue;
        };
        let n1 = g.node(i1);
        let is_square = (n1.op_type == "mul" && n1.reads == [x, x])
            || (n1.op_type == "square" && n1.reads == [x]);
        if !is_square || g.b.values[sq].shape != g.b.values[x].shape {
            continue;
        }
        let xs = g.b.values[x].shape.clone();
        let d = *xs.last().unwrap_or(&1);
        if r2.r != d || g.b.values[n5.writes[0]].shape != xs {
            continue;
        }
        // optional trailing mul by a constant weight [d]
        let y = n5.writes[0];
        let mut last = i5;
        let mut out = y;
        let mut weight = None;
        if let Some(&i6) = g.consumers(y).first() {
            let n6 = g.node(i6);
            if g.single_use(y) && !outputs.contains(&y) && n6.op_type == "mul" {
                let w = if n6.reads[0] == y {
                    n6.reads[1]
                } else {
                    n6.reads[0]
                };
                if let Some(k) = g.b.known.get(&w) {
                    if k.shape.iter().product::<usize>() == d
                        && k.shape.last() == Some(&d)
                        && g.b.values[n6.writes[0]].shape == xs
                    {
                        weight = k.f32s();
                        last = i6;
                        out = n6.writes[0];
                    }
                }
            }
        }
        let x_elem = match g.b.values[x].elem() {
            Some(e) if e.is_float() => e,
            _ => continue,
        };
        let out_elem = g.b.values[out].elem().unwrap_or(Elem::F32);
        let name = g.node(last).name.clone();
        let kernel = Kernel::Rows(Rows {
            x,
            x_elem,
            out,
            out_elem,
            out2: None,
            outer: xs.iter().product::<usize>() / d.max(1),
            r: d,
            inner: 1,
            kind: RowKind::RmsNorm {
                weight,
                eps,
                eps2,
                round16: x_elem == Elem::F16,
            },
            acc16: false,
        });
        for i in [i1, i2, i3, i4, i5, last] {
            g.nodes[i] = None;
        }
        g.nodes[last] = Some(Node {
            name,
            op_type: "rms_norm".into(),
            kernel,
            reads: vec![x],
            writes: vec![out],
        });
        g.index(outputs);
    }
}

fn attention(g: &mut Graph<'_, '_>, outputs: &[Vid]) {
    for i5 in 0..g.nodes.len() {
        let Some(n5) = g.nodes[i5].as_ref() else {
            continue;
        };
        let Kernel::Matmul(mm2) = &n5.kernel else {
            continue;
        };
        if n5.op_type != "matmul" {
            continue;
        }
        let p = mm2.a;
        let Some(i4) = g.sole_producer(p) else {
            continue;
        };
        if outputs.contains(&p) {
            continue;
        }
        let Kernel::Rows(sm) = &g.node(i4).kernel else {
            continue;
        };
        if !matches!(sm.kind, RowKind::Softmax)
            || sm.inner != 1
            || mm2.a_cs != 1
            || mm2.a_rs != mm2.k
        {
            continue;
        }
        let Rhs::Value {
            v: vv,
            elem: v_elem,
            rs: v_rs,
            cs: v_cs,
            batch_strides: v_bs,
        } = &mm2.rhs
        else {
            continue;
        };
        let mut cur = g.node(i4).reads[0];
        let mut chain_nodes = vec![i4];
        let mut mask: Option<(Vid, Vec<usize>)> = None;
        let mut scale = 1.0f32;
        // walk back through optional add(mask) and mul/real_div(scale)
        let mut i1 = None;
        for _ in 0..3 {
            let Some(pi) = g.sole_producer(cur) else {
                break;
            };
            if outputs.contains(&cur) {
                break;
            }
            let pn = g.node(pi);
            match pn.op_type.as_str() {
                "matmul" => {
                    i1 = Some(pi);
                    break;
                }
                "add" if mask.is_none() && pn.reads.len() == 2 => {
                    let scores_like = |v: Vid| {
                        g.sole_producer(v)
                            .is_some_and(|i| matches!(g.op_type(i), "matmul" | "mul" | "real_div"))
                    };
                    let (a, b2) = (pn.reads[0], pn.reads[1]);
                    let (src, other) = if scores_like(a) {
                        (a, b2)
                    } else if scores_like(b2) {
                        (b2, a)
                    } else {
                        break;
                    };
                    mask = Some((other, g.b.values[other].shape.clone()));
                    chain_nodes.push(pi);
                    cur = src;
                }
                "mul" | "real_div" => {
                    let (a, b2) = (pn.reads[0], pn.reads[1]);
                    let (src, c) = match (g.scalar(a), g.scalar(b2)) {
                        (_, Some(c)) => (a, c),
                        (Some(c), _) if pn.op_type == "mul" => (b2, c),
                        _ => break,
                    };
                    scale *= if pn.op_type == "mul" { c } else { 1.0 / c };
                    chain_nodes.push(pi);
                    cur = src;
                }
                _ => break,
            }
        }
        let Some(i1) = i1 else { continue };
        let Kernel::Matmul(mm1) = &g.node(i1).kernel else {
            continue;
        };
        let Rhs::Value {
            v: kv,
            elem: k_elem,
            rs: k_rs,
            cs: k_cs,
            batch_strides: k_bs,
        } = &mm1.rhs
        else {
            continue;
        };
        if mm1.batch != mm2.batch
            || mm1.n != mm2.k
            || mm1.m != mm2.m
            || k_bs.is_empty() && !mm1.batch.is_empty()
        {
            continue;
        }
        let batch = mm1.batch.clone();
        let (l, s, e, ev) = (mm1.m, mm1.n, mm1.k, mm2.n);
        let mut full = batch.clone();
        full.push(l);
        full.push(s);
        let mview = match &mask {
            Some((mv, ms)) => {
                let Some(me) = g.b.values[*mv].elem() else {
                    continue;
                };
                if broadcast_shapes(ms, &full).as_deref() != Some(&full[..])
                    || !matches!(me, Elem::F32 | Elem::F16 | Elem::Bool)
                {
                    continue;
                }
                let st = broadcast_strides(ms, &full);
                let r = full.len();
                Some(View {
                    v: *mv,
                    elem: me,
                    batch_strides: st[..r - 2].to_vec(),
                    rs: st[r - 2],
                    cs: st[r - 1],
                })
            }
            None => None,
        };
        let out = n5.writes[0];
        let Some(out_elem) = g.b.values[out].elem() else {
            continue;
        };
        let q = View {
            v: mm1.a,
            elem: mm1.a_elem,
            batch_strides: mm1.a_batch_strides.clone(),
            rs: mm1.a_rs,
            cs: mm1.a_cs,
        };
        let k = View {
            v: *kv,
            elem: *k_elem,
            batch_strides: k_bs.clone(),
            rs: *k_cs,
            cs: *k_rs,
        };
        let v = View {
            v: *vv,
            elem: *v_elem,
            batch_strides: v_bs.clone(),
            rs: *v_rs,
            cs: *v_cs,
        };
        let mut reads = vec![q.v, k.v, v.v];
        if let Some(m) = &mview {
            reads.push(m.v);
        }
        let kernel = Kernel::Attention(Attention {
            q,
            k,
            v,
            k_scales: None,
            v_scales: None,
            mask: mview,
            mask_rows: l,
            batch,
            l,
            s,
            e,
            ev,
            scale,
            out,
            out_elem,
            bf16: g.b.bf16_products(out_elem == Elem::F32, l),
        });
        let name = format!("{}+attention", g.node(i5).name);
        chain_nodes.push(i1);
        for i in chain_nodes {
            g.nodes[i] = None;
        }
        g.nodes[i5] = Some(Node {
            name,
            op_type: "attention".into(),
            kernel,
            reads,
            writes: vec![out],
        });
        g.index(outputs);
    }
}

/// An attention mask that is a smaller mask repeated along the query rows (the query heads of a
/// group sharing one `[T, S]` mask, tiled) is read where it is stored, its rows taken modulo
/// the period, so the repeated copy is not made (unless something else reads it).
fn repeated_attention_masks(g: &mut Graph<'_, '_>) {
    for i in 0..g.nodes.len() {
        let Some(Kernel::Attention(att)) = g.nodes[i].as_ref().map(|n| &n.kernel) else {
            continue;
        };
        let Some(m) = &att.mask else { continue };
        if m.cs != 1 || m.rs < att.s || m.batch_strides.iter().any(|&s| s != 0) {
            continue;
        }
        let mut root = m.v;
        while let Home::Alias(src) = g.b.values[root].home {
            root = src;
        }
        let Some(Kernel::Copy(copy)) = g.producer.get(&root).map(|&p| &g.node(p).kernel) else {
            continue;
        };
        let Some((src, n)) = copy.repeats(&g.b.values) else {
            continue;
        };
        // element (i, j) lies at i·rs + j with j < rs, so modulo n it is row i mod n/rs
        if att.mask_rows != att.l || !n.is_multiple_of(m.rs) || n / m.rs >= att.l {
            continue;
        }
        let (old, rows) = (m.v, n / m.rs);
        let node = g.nodes[i].as_mut().expect("live node");
        let Kernel::Attention(att) = &mut node.kernel else {
            continue;
        };
        att.mask_rows = rows;
        if let Some(m) = &mut att.mask {
            m.v = src;
        }
        for r in &mut node.reads {
            if *r == old {
                *r = src;
            }
        }
        node.name = format!("{}+periodic_mask", node.name);
    }
}

/// `v` as stored: through single-use reshapes and chains that only widen one dense load (a
/// cast), back to the value they read. Returns that value, its element type and the chain
/// nodes passed.
fn widened_from(g: &Graph<'_, '_>, mut v: Vid, outputs: &[Vid]) -> (Vid, Option<Elem>, Vec<usize>) {
    let mut nodes = Vec::new();
    loop {
        if !g.single_use(v) || outputs.contains(&v) {
            break;
        }
        if let Home::Alias(src) = g.b.values[v].home {
            v = src;
            continue;
        }
        let Some(&p) = g.producer.get(&v) else { break };
        // a float chain of copies, or an integer source's cast
        let (shape, loads, copies, stores) = match &g.node(p).kernel {
            Kernel::Chain(c) => (
                &c.shape,
                &c.loads,
                c.instrs
                    .iter()
                    .all(|i| matches!(i, Instr::Un(UnOp::Copy, _, _))),
                c.stores.len(),
            ),
            Kernel::IntEw(c) => (&c.shape, &c.loads, matches!(c.op, IntOp::Un(UnOp::Copy)), 1),
            _ => break,
        };
        if loads.len() != 1
            || stores != 1
            || !copies
            || loads[0].strides != broadcast_strides(shape, shape)
        {
            break;
        }
        nodes.push(p);
        v = loads[0].value;
    }
    (v, g.b.values[v].elem(), nodes)
}

/// The load register `reg` of chain `c` holds once `Copy` instructions are looked through.
fn load_behind(c: &Chain, mut reg: usize) -> Option<usize> {
    while reg >= c.loads.len() {
        let i = c.instrs.iter().rposition(|i| match *i {
            Instr::Un(_, d, _) | Instr::Bin(_, d, _, _) | Instr::Select(d, _, _, _) => d == reg,
        })?;
        match c.instrs[i] {
            Instr::Un(UnOp::Copy, _, src) => reg = src,
            _ => return None,
        }
    }
    Some(reg)
}

/// An attention operand computed as `int8 · scale` over blocks of [`SCALE_BLOCK`] along its
/// rows: the int8 value, the scales' value and type, and the nodes to drop.
fn int8_blocks(g: &Graph<'_, '_>, v: Vid, outputs: &[Vid]) -> Option<(Vid, Vid, Elem, Vec<usize>)> {
    let mut root = v;
    while let Home::Alias(src) = g.b.values[root].home {
        if !g.single_use(root) || outputs.contains(&root) {
            return None;
        }
        root = src;
    }
    if !g.single_use(root) || outputs.contains(&root) {
        return None;
    }
    let p = *g.producer.get(&root)?;
    let c = g.nodes[p].as_ref().and_then(chain_of)?;
    let r = c.shape.len();
    if c.stores.len() != 1 || r < 2 || c.shape[r - 1] != SCALE_BLOCK {
        return None;
    }
    let out = c.stores[0].0;
    let last = c.instrs.iter().rposition(|i| match *i {
        Instr::Un(_, d, _) | Instr::Bin(_, d, _, _) | Instr::Select(d, _, _, _) => d == out,
    })?;
    let Instr::Bin(BinOp::Mul, _, x, y) = c.instrs[last] else {
        return None;
    };
    let (x, y) = (load_behind(c, x)?, load_behind(c, y)?);
    let dense = broadcast_strides(&c.shape, &c.shape);
    let mut per_block = broadcast_strides(&c.shape[..r - 1], &c.shape[..r - 1]);
    per_block.push(0);
    let (data, scales) = match (&c.loads[x], &c.loads[y]) {
        (a, b) if a.strides == dense && b.strides == per_block => (a, b),
        (a, b) if b.strides == dense && a.strides == per_block => (b, a),
        _ => return None,
    };
    let (dv, de, mut nodes) = widened_from(g, data.value, outputs);
    let (sv, se, snodes) = widened_from(g, scales.value, outputs);
    if de != Some(Elem::I8)
        || !matches!(se, Some(Elem::F16 | Elem::F32))
        || g.b.values[sv].len() * SCALE_BLOCK != g.b.values[dv].len()
    {
        return None;
    }
    nodes.push(p);
    nodes.extend(snodes);
    Some((dv, sv, se?, nodes))
}

/// An attention operand (`which`: 1 keys, 2 values) to read as stored, and the widening nodes
/// that stop being needed.
struct StoredOperand {
    which: usize,
    data: Vid,
    elem: Elem,
    scales: Option<BlockScales>,
    nodes: Vec<usize>,
}

/// Attention keys and values that are a stored cache widened to f32 are read as stored: an fp16
/// tensor cast to f32, or int8 blocks times their per-block scales (the kernel widens a few rows
/// at a time, so no f32 copy of the cache is made).
fn stored_attention_operands(g: &mut Graph<'_, '_>, outputs: &[Vid]) {
    for i in 0..g.nodes.len() {
        let Some(Kernel::Attention(att)) = g.nodes[i].as_ref().map(|n| &n.kernel) else {
            continue;
        };
        let mut operands = vec![att.q.v, att.k.v, att.v.v];
        operands.extend(att.mask.as_ref().map(|m| m.v));
        let mut distinct = operands.clone();
        distinct.sort_unstable();
        distinct.dedup();
        if distinct.len() != operands.len() {
            continue;
        }
        let mut changes: Vec<StoredOperand> = Vec::new();
        for (which, view) in [(1, &att.k), (2, &att.v)] {
            if view.elem != Elem::F32 || view.cs != 1 {
                continue;
            }
            if let Some((data, sv, se, nodes)) = int8_blocks(g, view.v, outputs) {
                let blocks = |x: usize| x.is_multiple_of(SCALE_BLOCK).then_some(x / SCALE_BLOCK);
                let strides: Option<Vec<usize>> =
                    view.batch_strides.iter().map(|&x| blocks(x)).collect();
                let (Some(batch_strides), Some(rs)) = (strides, blocks(view.rs)) else {
                    continue;
                };
                let row = if which == 1 { att.e } else { att.ev };
                if !row.is_multiple_of(SCALE_BLOCK) {
                    continue;
                }
                let scales = BlockScales {
                    v: sv,
                    elem: se,
                    batch_strides,
                    rs,
                };
                changes.push(StoredOperand {
                    which,
                    data,
                    elem: Elem::I8,
                    scales: Some(scales),
                    nodes,
                });
                continue;
            }
            let (src, elem, nodes) = widened_from(g, view.v, outputs);
            if elem == Some(Elem::F16) && !nodes.is_empty() {
                changes.push(StoredOperand {
                    which,
                    data: src,
                    elem: Elem::F16,
                    scales: None,
                    nodes,
                });
            }
        }
        if changes.is_empty() {
            continue;
        }
        let mut dropped = Vec::new();
        let node = g.nodes[i].as_mut().expect("live node");
        let Kernel::Attention(att) = &mut node.kernel else {
            continue;
        };
        for StoredOperand {
            which,
            data,
            elem,
            scales,
            nodes,
        } in changes
        {
            let (view, slot) = if which == 1 {
                (&mut att.k, &mut att.k_scales)
            } else {
                (&mut att.v, &mut att.v_scales)
            };
            node.reads.retain(|&r| r != view.v);
            view.v = data;
            view.elem = elem;
            node.reads.push(data);
            if let Some(sc) = &scales {
                node.reads.push(sc.v);
            }
            *slot = scales;
            dropped.extend(nodes);
        }
        node.name = format!("{}+stored", node.name);
        for d in dropped {
            g.nodes[d] = None;
        }
        g.index(outputs);
    }
}
