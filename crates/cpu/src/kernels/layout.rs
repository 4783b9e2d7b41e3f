//! Strided copies: the one kernel behind transpose, slice, concat, split, tile, pad, space/depth
//! rearrangements and slice_update. Works on raw element bytes, so it is dtype-agnostic.

use super::Cx;
use crate::plan::{Value, Vid};
use crate::tensor::SendPtr;

#[derive(Clone, Debug)]
pub struct Piece {
    pub src: Vid,
    pub src_off: isize,
    pub src_strides: Vec<isize>,
    pub dst: Vid,
    pub dst_off: isize,
    pub dst_strides: Vec<isize>,
    pub shape: Vec<usize>,
}

pub fn dense_strides(shape: &[usize]) -> Vec<isize> {
    let mut s = vec![0isize; shape.len()];
    let mut acc = 1isize;
    for i in (0..shape.len()).rev() {
        s[i] = acc;
        acc *= shape[i] as isize;
    }
    s
}

impl Piece {
    /// Copies all of `src` (dense, `shape`) to all of `dst` (dense).
    pub fn dense(src: Vid, dst: Vid, shape: &[usize]) -> Piece {
        let st = dense_strides(shape);
        Piece {
            src,
            src_off: 0,
            src_strides: st.clone(),
            dst,
            dst_off: 0,
            dst_strides: st,
            shape: shape.to_vec(),
        }
    }

    fn collapsed(&self) -> (Vec<usize>, Vec<isize>, Vec<isize>) {
        let mut shape: Vec<usize> = Vec::new();
        let mut ss: Vec<isize> = Vec::new();
        let mut ds: Vec<isize> = Vec::new();
        for i in 0..self.shape.len() {
            let d = self.shape[i];
            if d == 1 {
                continue;
            }
            if let (Some(&ls), Some(&ld)) = (ss.last(), ds.last()) {
                if ls == self.src_strides[i] * d as isize && ld == self.dst_strides[i] * d as isize
                {
                    let k = shape.len() - 1;
                    shape[k] *= d;
                    ss[k] = self.src_strides[i];
                    ds[k] = self.dst_strides[i];
                    continue;
                }
            }
            shape.push(d);
            ss.push(self.src_strides[i]);
            ds.push(self.dst_strides[i]);
        }
        if shape.is_empty() {
            shape.push(1);
            ss.push(1);
            ds.push(1);
        }
        (shape, ss, ds)
    }

    pub fn elements(&self) -> usize {
        self.shape.iter().product()
    }
}

#[derive(Debug)]
pub struct Copy {
    pub esize: usize,
    /// Byte pattern (first `esize` bytes) to fill a whole value with before the pieces.
    pub fills: Vec<(Vid, [u8; 4])>,
    pub pieces: Vec<Piece>,
    /// slice_update: piece 0 copies this value into the output; skipped when they share memory.
    pub inplace_src: Option<Vid>,
}

impl Copy {
    pub fn new(
        esize: usize,
        fills: Vec<(Vid, [u8; 4])>,
        pieces: Vec<Piece>,
        inplace_src: Option<Vid>,
    ) -> Copy {
        let pieces = pieces
            .into_iter()
            .map(|p| {
                let (shape, ss, ds) = p.collapsed();
                Piece {
                    shape,
                    src_strides: ss,
                    dst_strides: ds,
                    ..p
                }
            })
            .collect();
        Copy {
            esize,
            fills,
            pieces,
            inplace_src,
        }
    }

    pub fn elements(&self, _values: &[Value]) -> usize {
        self.pieces.iter().map(|p| p.elements()).sum()
    }

    /// `(src, n)` when this copy fills its one output with the first `n` elements of `src`
    /// repeated end to end (a plain copy, or `tile` along leading axes of size 1).
    pub fn repeats(&self, values: &[Value]) -> Option<(Vid, usize)> {
        let [p] = &self.pieces[..] else { return None };
        if !self.fills.is_empty() || self.inplace_src.is_some() || p.src_off != 0 || p.dst_off != 0
        {
            return None;
        }
        let n = *p.shape.last()?;
        let repeated = match (&p.shape[..], &p.src_strides[..], &p.dst_strides[..]) {
            ([_], [1], [1]) => true,
            ([_, _], [0, 1], [d, 1]) => *d == n as isize,
            _ => false,
        };
        (repeated && values[p.dst].len() == p.elements()).then_some((p.src, n))
    }

    pub fn run(&self, cx: &Cx) {
        let es = self.esize;
        for (v, pat) in &self.fills {
            let n = cx.len(*v);
            let p = cx.ptr(*v);
            // SAFETY: the value holds n elements of es bytes.
            unsafe {
                if pat[..es].iter().all(|&b| b == 0) {
                    std::ptr::write_bytes(p, 0, n * es);
                } else {
                    for i in 0..n {
                        std::ptr::copy_nonoverlapping(pat.as_ptr(), p.add(i * es), es);
                    }
                }
            }
        }
        for (pi, piece) in self.pieces.iter().enumerate() {
            let src = cx.ptr(piece.src);
            let dst = cx.ptr(piece.dst);
            if pi == 0 && self.inplace_src == Some(piece.src) && src == dst {
                continue;
            }
            let (shape, ss, ds) = (&piece.shape, &piece.src_strides, &piece.dst_strides);
            let src = SendPtr(unsafe { src.offset(piece.src_off * es as isize) });
            let dst = SendPtr(unsafe { dst.offset(piece.dst_off * es as isize) });
            let total: usize = shape.iter().product();
            let outer = shape[0];
            if cx.threads > 1 && total >= 1 << 18 && outer >= cx.threads && piece.src != piece.dst {
                let tasks = cx.threads * 2;
                let per = outer.div_ceil(tasks);
                cx.par_for(tasks, &|t| {
                    let a = t * per;
                    let b = (a + per).min(outer);
                    if a < b {
                        let mut sh = [0usize; 8];
                        sh[..shape.len()].copy_from_slice(shape);
                        sh[0] = b - a;
                        // SAFETY: disjoint outer slabs of the destination.
                        unsafe {
                            copy_nd(
                                src.get().offset(a as isize * ss[0] * es as isize),
                                ss,
                                dst.get().offset(a as isize * ds[0] * es as isize),
                                ds,
                                &sh[..shape.len()],
                                es,
                            )
                        }
                    }
                });
            } else {
                // SAFETY: strides and offsets were validated against both values' shapes.
                unsafe { copy_nd(src.get(), ss, dst.get(), ds, shape, es) };
            }
        }
    }
}

/// # Safety
/// Every addressed element must be inside its buffer.
pub(crate) unsafe fn copy_nd(
    src: *const u8,
    ss: &[isize],
    dst: *mut u8,
    ds: &[isize],
    shape: &[usize],
    es: usize,
) {
    let rank = shape.len();
    let inner = shape[rank - 1];
    let (si, di) = (ss[rank - 1], ds[rank - 1]);
    let outer: usize = shape[..rank - 1].iter().product();
    let mut idx = [0usize; 8];
    let mut so: isize = 0;
    let mut dof: isize = 0;
    let esi = es as isize;
    for _ in 0..outer {
        let s = src.offset(so * esi);
        let d = dst.offset(dof * esi);
        if si == 1 && di == 1 {
            std::ptr::copy(s, d, inner * es);
        } else {
            match es {
                4 => {
                    for i in 0..inner as isize {
                        *(d.offset(i * di * 4) as *mut u32) = *(s.offset(i * si * 4) as *const u32);
                    }
                }
                2 => {
                    for i in 0..inner as isize {
                        *(d.offset(i * di * 2) as *mut u16) = *(s.offset(i * si * 2) as *const u16);
                    }
                }
                _ => {
                    for i in 0..inner as isize {
                        std::ptr::copy(s.offset(i * si * esi), d.offset(i * di * esi), es);
                    }
                }
            }
        }
        let mut a = rank - 1;
        while a > 0 {
            a -= 1;
            idx[a] += 1;
            so += ss[a];
            dof += ds[a];
            if idx[a] < shape[a] {
                break;
            }
            so -= ss[a] * shape[a] as isize;
            dof -= ds[a] * shape[a] as isize;
            idx[a] = 0;
        }
    }
}
