//! Index-driven kernels: gather, gather_along_axis, one_hot. Indices are checked at run time
//! (negative indices wrap as in coremltools; out-of-range ones are an execute error).

use super::Cx;
use crate::plan::Vid;
use crate::tensor::{Elem, SendPtr};

#[derive(Debug)]
pub enum GatherKind {
    /// x viewed [outer, d, post]; indices [batches, ni]; out [outer, ni, post].
    Gather {
        outer: usize,
        d: usize,
        post: usize,
        batches: usize,
        ni: usize,
    },
    /// x [outer, d, inner]; indices and out [outer, ni, inner].
    AlongAxis {
        outer: usize,
        d: usize,
        ni: usize,
        inner: usize,
    },
    /// out [outer, depth, inner] = indices[outer, inner] == k ? on : off
    OneHot {
        outer: usize,
        depth: usize,
        inner: usize,
        on: [u8; 4],
        off: [u8; 4],
    },
}

#[derive(Debug)]
pub struct Gather {
    pub x: Option<Vid>,
    pub indices: Vid,
    pub idx_elem: Elem,
    pub out: Vid,
    pub esize: usize,
    pub kind: GatherKind,
}

/// Copies rows `ids` (of `row` bytes each) of `src` to consecutive rows of `dst`; rows of one
/// element are moved as integers instead of one `memcpy` call each.
///
/// # Safety
/// Every id's row lies inside `src`; `dst` holds `ids.len()` rows.
unsafe fn gather_row(src: *const u8, dst: *mut u8, ids: &[usize], row: usize) {
    macro_rules! typed {
        ($t:ty) => {
            for (t, &j) in ids.iter().enumerate() {
                let v = (src as *const $t).add(j).read_unaligned();
                (dst as *mut $t).add(t).write_unaligned(v);
            }
        };
    }
    match row {
        4 => typed!(u32),
        2 => typed!(u16),
        1 => typed!(u8),
        8 => typed!(u64),
        _ => {
            for (t, &j) in ids.iter().enumerate() {
                std::ptr::copy_nonoverlapping(src.add(j * row), dst.add(t * row), row);
            }
        }
    }
}

pub(crate) unsafe fn index_at(p: *const u8, elem: Elem, i: usize) -> i64 {
    match elem {
        Elem::I32 => *(p as *const i32).add(i) as i64,
        Elem::I8 => *(p as *const i8).add(i) as i64,
        Elem::U8 | Elem::Bool => *p.add(i) as i64,
        Elem::F32 => *(p as *const f32).add(i) as i64,
        Elem::F16 => (*(p as *const half::f16).add(i)).to_f32() as i64,
    }
}

pub(crate) fn wrap(i: i64, d: usize) -> Result<usize, String> {
    let j = if i < 0 { i + d as i64 } else { i };
    if j < 0 || j >= d as i64 {
        return Err(format!(
            "index {i} is out of range for a dimension of size {d}"
        ));
    }
    Ok(j as usize)
}

impl Gather {
    pub fn run(&self, cx: &Cx) -> Result<(), String> {
        let ip = cx.ptr(self.indices) as *const u8;
        let out = cx.ptr(self.out);
        let es = self.esize;
        // SAFETY: all offsets are bounded by the validated shapes and checked indices.
        unsafe {
            match self.kind {
                GatherKind::Gather {
                    outer,
                    d,
                    post,
                    batches,
                    ni,
                } => {
                    let x = cx.ptr(self.x.unwrap_or(self.out)) as *const u8;
                    let per_batch = (outer / batches.max(1)).max(1);
                    // each batch's indices are checked once, not once per outer row
                    let mut idx = Vec::with_capacity(outer.div_ceil(per_batch) * ni);
                    for q in 0..outer.div_ceil(per_batch) * ni {
                        idx.push(wrap(index_at(ip, self.idx_elem, q), d)?);
                    }
                    let row = post * es;
                    let (xp, op) = (SendPtr(x as *mut u8), SendPtr(out));
                    let rows = |o0: usize, o1: usize| {
                        for o in o0..o1 {
                            let ids = &idx[o / per_batch * ni..][..ni];
                            // `ids` are checked against `d`; rows lie inside x and out.
                            let src = xp.get().add(o * d * row) as *const u8;
                            let dst = op.get().add(o * ni * row);
                            gather_row(src, dst, ids, row);
                        }
                    };
                    let tasks = if outer * ni * row >= 1 << 16 {
                        (cx.threads * 4).min(outer)
                    } else {
                        1
                    };
                    if tasks > 1 {
                        let per = outer.div_ceil(tasks);
                        cx.par_for(outer.div_ceil(per), &|t| {
                            rows(t * per, ((t + 1) * per).min(outer))
                        });
                    } else {
                        rows(0, outer);
                    }
                }
                GatherKind::AlongAxis {
                    outer,
                    d,
                    ni,
                    inner,
                } => {
                    let x = cx.ptr(self.x.unwrap_or(self.out)) as *const u8;
                    for o in 0..outer {
                        for t in 0..ni {
                            for i in 0..inner {
                                let q = (o * ni + t) * inner + i;
                                let j = wrap(index_at(ip, self.idx_elem, q), d)?;
                                std::ptr::copy_nonoverlapping(
                                    x.add(((o * d + j) * inner + i) * es),
                                    out.add(q * es),
                                    es,
                                );
                            }
                        }
                    }
                }
                GatherKind::OneHot {
                    outer,
                    depth,
                    inner,
                    on,
                    off,
                } => {
                    for o in 0..outer {
                        for i in 0..inner {
                            let v = index_at(ip, self.idx_elem, o * inner + i);
                            for k in 0..depth {
                                let pat = if v == k as i64 { &on } else { &off };
                                std::ptr::copy_nonoverlapping(
                                    pat.as_ptr(),
                                    out.add(((o * depth + k) * inner + i) * es),
                                    es,
                                );
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }
}
