//! Pooling and upsampling over [planes, h, w] (1-D runs with h = 1).

use super::ew::{load_block, store_block};
use super::Cx;
use crate::plan::Vid;
use crate::tensor::{Elem, SendPtr};

/// A pooling window: its size, strides, and top and left padding.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub kh: usize,
    pub kw: usize,
    pub sh: usize,
    pub sw: usize,
    pub pt: usize,
    pub pl: usize,
}

#[derive(Debug, Clone)]
pub enum SpatialKind {
    MaxPool(Window),
    /// Without `exclude_pad` the divisor counts padding but not window parts past the padded
    /// input (PyTorch's ceil_mode rule).
    AvgPool {
        win: Window,
        pb: usize,
        pr: usize,
        exclude_pad: bool,
    },
    Nearest,
    /// Per output coordinate: (low index, high index, high weight) for rows and columns.
    Bilinear {
        rows: Vec<(usize, usize, f32)>,
        cols: Vec<(usize, usize, f32)>,
    },
}

#[derive(Debug)]
pub struct Spatial {
    pub x: Vid,
    pub out: Vid,
    pub elem: Elem,
    pub planes: usize,
    pub h: usize,
    pub w: usize,
    pub oh: usize,
    pub ow: usize,
    pub kind: SpatialKind,
}

impl Spatial {
    pub fn scratch_floats(&self, threads: usize) -> usize {
        self.tasks(threads) * self.per_task()
    }

    /// Scratch floats of one task: the input plane, the output plane and, for max pooling, the
    /// padded plane and two rows of maxima (over the window's rows, then its columns).
    fn per_task(&self) -> usize {
        self.input_floats()
            + self.oh * self.ow
            + self.padded().map_or(0, |(ph, pw)| ph * pw + 2 * pw)
    }

    /// Floats of the widened input plane: max pooling reads its rows straight into the padded
    /// plane instead.
    fn input_floats(&self) -> usize {
        match self.kind {
            SpatialKind::MaxPool(_) => 0,
            _ => self.h * self.w,
        }
    }

    /// Max pooling's input plane bordered with -inf: every window of every output lies inside.
    fn padded(&self) -> Option<(usize, usize)> {
        match self.kind {
            SpatialKind::MaxPool(w) => Some((
                (self.oh.max(1) - 1) * w.sh + w.kh,
                (self.ow.max(1) - 1) * w.sw + w.kw,
            )),
            _ => None,
        }
    }

    /// Planes are split between threads from 4096 outputs: ResNet-18's pool at 64 × 64 input
    /// (64 planes of 16 × 16 outputs) took 0.041–0.046 ms on two threads against 0.068 on one.
    fn tasks(&self, threads: usize) -> usize {
        if threads > 1 && self.planes * self.oh * self.ow >= 1 << 12 {
            threads.min(self.planes)
        } else {
            1
        }
    }

    pub fn elements(&self) -> usize {
        self.planes * self.oh * self.ow
    }

    pub fn run(&self, cx: &Cx) {
        let tasks = self.tasks(cx.threads);
        let per_task = self.per_task();
        let scratch = SendPtr(cx.scratch(tasks * per_task).as_mut_ptr());
        let xp = SendPtr(cx.ptr(self.x));
        let op = SendPtr(cx.ptr(self.out));
        let per = self.planes.div_ceil(tasks);
        cx.par_for(tasks, &|t| {
            // SAFETY: disjoint scratch regions and output planes per task.
            let buf = unsafe {
                std::slice::from_raw_parts_mut(scratch.get().add(t * per_task), per_task)
            };
            let (inp, rest) = buf.split_at_mut(self.input_floats());
            let (outp, pad) = rest.split_at_mut(self.oh * self.ow);
            for p in t * per..((t + 1) * per).min(self.planes) {
                if let SpatialKind::MaxPool(_) = self.kind {
                    // SAFETY: plane p lies inside x.
                    unsafe { self.max_pool_plane(xp.get(), p, outp, pad) };
                } else {
                    unsafe {
                        for (c, chunk) in inp.chunks_mut(256).enumerate() {
                            load_block(
                                xp.get(),
                                self.elem,
                                p * self.h * self.w + c * 256,
                                1,
                                chunk,
                            );
                        }
                    }
                    self.plane(inp, outp);
                }
                unsafe {
                    for (c, chunk) in outp.chunks(256).enumerate() {
                        store_block(op.get(), self.elem, p * self.oh * self.ow + c * 256, chunk);
                    }
                }
            }
        });
    }

    /// Max pooling of plane `p` of `x` into `y`: the plane's rows are read (widened) into a
    /// copy bordered with -inf, then each output row takes its window's maxima.
    ///
    /// # Safety
    /// `x` holds the op's planes of h·w elements of `self.elem`; `pad` holds the padded plane
    /// and two rows of maxima.
    unsafe fn max_pool_plane(&self, x: *const u8, p: usize, y: &mut [f32], pad: &mut [f32]) {
        let SpatialKind::MaxPool(win) = self.kind else {
            unreachable!("called for max pooling only")
        };
        let (ph, pw) = self.padded().unwrap_or((0, 0));
        let (plane, rmax) = pad.split_at_mut(ph * pw);
        // rows and columns of the padded plane that hold input; the rest is -inf (a padding
        // wider than the windows reach leaves whole planes of -inf)
        let (pt, pl) = (win.pt.min(ph), win.pl.min(pw));
        let rows = self.h.min(ph - pt);
        let n = self.w.min(pw - pl);
        plane[..pt * pw].fill(f32::NEG_INFINITY);
        plane[(pt + rows) * pw..].fill(f32::NEG_INFINITY);
        for iy in 0..rows {
            let row = &mut plane[(iy + pt) * pw..][..pw];
            row[..pl].fill(f32::NEG_INFINITY);
            row[pl + n..].fill(f32::NEG_INFINITY);
            // SAFETY: row iy of plane p holds w ≥ n elements.
            unsafe {
                load_block(
                    x,
                    self.elem,
                    (p * self.h + iy) * self.w,
                    1,
                    &mut row[pl..pl + n],
                );
            }
        }
        let (rmax, cmax) = rmax.split_at_mut(pw);
        for oy in 0..self.oh {
            let rows = &plane[oy * win.sh * pw..][..win.kh * pw];
            max_pool_row(
                rows,
                win.kw,
                win.sw,
                rmax,
                cmax,
                &mut y[oy * self.ow..][..self.ow],
            );
        }
    }

    fn plane(&self, x: &[f32], y: &mut [f32]) {
        let (h, w, oh, ow) = (self.h as isize, self.w as isize, self.oh, self.ow);
        match &self.kind {
            SpatialKind::MaxPool(_) => unreachable!("max pooling runs max_pool_plane"),
            SpatialKind::AvgPool {
                win,
                pb,
                pr,
                exclude_pad,
            } => {
                let (pb, pr) = (*pb as isize, *pr as isize);
                for oy in 0..oh {
                    for ox in 0..ow {
                        let y0 = (oy * win.sh) as isize - win.pt as isize;
                        let x0 = (ox * win.sw) as isize - win.pl as isize;
                        let mut acc = 0.0;
                        let mut count = 0usize;
                        for i in 0..win.kh as isize {
                            for j in 0..win.kw as isize {
                                let (iy, ix) = (y0 + i, x0 + j);
                                if iy < 0 || iy >= h || ix < 0 || ix >= w {
                                    continue;
                                }
                                acc += x[(iy * w + ix) as usize];
                                count += 1;
                            }
                        }
                        y[oy * ow + ox] = if *exclude_pad {
                            acc / count.max(1) as f32
                        } else {
                            let ry = (y0 + win.kh as isize).min(h + pb) - y0;
                            let rx = (x0 + win.kw as isize).min(w + pr) - x0;
                            acc / (ry * rx).max(1) as f32
                        };
                    }
                }
            }
            SpatialKind::Nearest => {
                for oy in 0..oh {
                    let iy = (oy * self.h / oh).min(self.h - 1);
                    for ox in 0..ow {
                        let ix = (ox * self.w / ow).min(self.w - 1);
                        y[oy * ow + ox] = x[iy * self.w + ix];
                    }
                }
            }
            SpatialKind::Bilinear { rows, cols } => {
                for (oy, &(y0, y1, fy)) in rows.iter().enumerate() {
                    for (ox, &(x0, x1, fx)) in cols.iter().enumerate() {
                        let a = x[y0 * self.w + x0] * (1.0 - fx) + x[y0 * self.w + x1] * fx;
                        let b = x[y1 * self.w + x0] * (1.0 - fx) + x[y1 * self.w + x1] * fx;
                        y[oy * ow + ox] = a * (1.0 - fy) + b * fy;
                    }
                }
            }
        }
    }
}

crate::simd_dispatch! {
    /// One output row of max pooling from the window's `rows` of the padded plane (`rmax.len()`
    /// floats each): their maxima, then the maxima of every `kw` columns from each start, both
    /// over whole rows in vectors; the outputs pick every `sw`-th.
    fn max_pool_row(
        rows: &[f32],
        kw: usize,
        sw: usize,
        rmax: &mut [f32],
        cmax: &mut [f32],
        out: &mut [f32],
    ) {
        let pw = rmax.len();
        let (first, rest) = rows.split_at(pw);
        // the first pass reads two rows (or columns) at once: no copy of the first
        match rest.chunks_exact(pw).next() {
            Some(second) => {
                for ((m, &a), &b) in rmax.iter_mut().zip(first).zip(second) {
                    *m = a.max(b);
                }
            }
            None => rmax.copy_from_slice(first),
        }
        for r in rest.chunks_exact(pw).skip(1) {
            for (m, &v) in rmax.iter_mut().zip(r) {
                *m = m.max(v);
            }
        }
        let starts = pw + 1 - kw;
        if kw > 1 {
            for ((m, &a), &b) in cmax[..starts].iter_mut().zip(rmax.iter()).zip(&rmax[1..]) {
                *m = a.max(b);
            }
        } else {
            cmax[..starts].copy_from_slice(&rmax[..starts]);
        }
        for j in 2..kw {
            for (m, &v) in cmax[..starts].iter_mut().zip(&rmax[j..]) {
                *m = m.max(v);
            }
        }
        for (ox, o) in out.iter_mut().enumerate() {
            *o = cmax[ox * sw];
        }
    }
}
