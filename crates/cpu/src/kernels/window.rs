//! Windows at a runtime position: `slice_by_size` reading and `slice_update` writing a window whose
//! `begin` is an int32 tensor computed by the program (a KV-cache write at the current position).
//! The window's shape is static; its position is checked against the tensor at every execute.

use super::layout::{copy_nd, dense_strides};
use super::Cx;
use crate::plan::Vid;

#[derive(Debug)]
pub enum Side {
    /// `out = x[begin .. begin + shape]`.
    Read { out: Vid },
    /// `out = x` with `out[begin .. begin + shape] = update`; `end`, when a runtime value, must
    /// equal `begin + shape`.
    Write {
        update: Vid,
        end: Option<Vid>,
        out: Vid,
    },
}

#[derive(Debug)]
pub struct Window {
    pub x: Vid,
    pub begin: Vid,
    pub x_shape: Vec<usize>,
    pub shape: Vec<usize>,
    pub esize: usize,
    pub side: Side,
}

impl Window {
    /// For `slice_update`: the value that may share the output's buffer.
    pub fn inplace_source(&self) -> Option<Vid> {
        match self.side {
            Side::Write { .. } => Some(self.x),
            Side::Read { .. } => None,
        }
    }

    /// The window's element offset in `x`, after checking `begin` (negative entries count from
    /// the end, as in MIL).
    fn offset(&self, cx: &Cx) -> Result<isize, String> {
        let r = self.x_shape.len();
        // SAFETY: `begin` is an int32 value of `r` elements (checked when the op was built).
        let begin = unsafe { std::slice::from_raw_parts(cx.ptr(self.begin) as *const i32, r) };
        let strides = dense_strides(&self.x_shape);
        let mut off = 0isize;
        for i in 0..r {
            let d = self.x_shape[i] as i64;
            let b = i64::from(begin[i]);
            let b = if b < 0 { b + d } else { b };
            if b < 0 || b + self.shape[i] as i64 > d {
                return Err(format!(
                    "begin {begin:?} puts the window {:?} outside the tensor {:?} (axis {i})",
                    self.shape, self.x_shape
                ));
            }
            off += b as isize * strides[i];
        }
        if let Side::Write { end: Some(e), .. } = self.side {
            // SAFETY: as for `begin`.
            let end = unsafe { std::slice::from_raw_parts(cx.ptr(e) as *const i32, r) };
            for i in 0..r {
                let d = self.x_shape[i] as i64;
                let b = i64::from(begin[i]);
                let b = if b < 0 { b + d } else { b };
                let e = i64::from(end[i]);
                let e = if e < 0 { e + d } else { e };
                if e - b != self.shape[i] as i64 {
                    return Err(format!(
                        "begin {begin:?} and end {end:?} do not span the update's shape {:?}",
                        self.shape
                    ));
                }
            }
        }
        Ok(off)
    }

    pub fn run(&self, cx: &Cx) -> Result<(), String> {
        let off = self.offset(cx)?;
        let es = self.esize;
        let x_strides = dense_strides(&self.x_shape);
        let w_strides = dense_strides(&self.shape);
        let x = cx.ptr(self.x);
        match self.side {
            Side::Read { out } => {
                // SAFETY: the window lies inside `x` (checked above); `out` holds the window.
                unsafe {
                    copy_nd(
                        x.offset(off * es as isize),
                        &x_strides,
                        cx.ptr(out),
                        &w_strides,
                        &self.shape,
                        es,
                    )
                };
            }
            Side::Write { update, out, .. } => {
                let o = cx.ptr(out);
                if o != x {
                    let n = cx.len(self.x) * es;
                    // SAFETY: `x` and `out` have the same shape and dtype and do not overlap.
                    unsafe { std::ptr::copy_nonoverlapping(x, o, n) };
                }
                // SAFETY: the window lies inside `out` (checked above); `update` holds it densely.
                unsafe {
                    copy_nd(
                        cx.ptr(update),
                        &w_strides,
                        o.offset(off * es as isize),
                        &x_strides,
                        &self.shape,
                        es,
                    )
                };
            }
        }
        Ok(())
    }
}
