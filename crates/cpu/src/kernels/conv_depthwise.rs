//! Depthwise conv (one input and one output channel per group, as MobileNets, EfficientNets and
//! the PP-OCR backbones use). Each plane is first copied into a zero-bordered scratch plane, so
//! every tap reads a full output row without bounds checks; output rows are then summed 32, 16
//! or 8 columns at a time in registers over all kh·kw taps and stored once.

use super::conv::Geometry;
use super::Cx;
use crate::tensor::SendPtr;

/// The zero-bordered plane: every row and column a tap can reach.
fn padded(g: &Geometry) -> (usize, usize) {
    let hp = ((g.oh - 1) * g.sh + (g.kh - 1) * g.dh + 1).max(g.pt + g.h);
    let wp = ((g.ow - 1) * g.sw + (g.kw - 1) * g.dw + 1).max(g.pl + g.w);
    (hp, wp)
}

fn tasks(g: &Geometry, threads: usize) -> usize {
    let planes = g.n * g.cout;
    if threads > 1 && planes * g.oh * g.ow * g.kh * g.kw >= 1 << 16 {
        (threads * 4).min(planes)
    } else {
        1
    }
}

/// Scratch floats `run` needs: one padded plane per task.
pub fn scratch_floats(g: &Geometry, threads: usize) -> usize {
    let (hp, wp) = padded(g);
    tasks(g, threads) * hp * wp
}

/// # Safety
/// `x` holds n·cout planes of h·w floats, `w` cout·kh·kw floats, `out` n·cout planes of oh·ow,
/// `scratch` at least `scratch_floats(g, cx.threads)` floats.
pub unsafe fn run(
    x: *const f32,
    w: *const f32,
    out: *mut f32,
    g: &Geometry,
    scratch: &mut [f32],
    cx: &Cx,
) {
    let planes = g.n * g.cout;
    let (pin, pout, kk) = (g.h * g.w, g.oh * g.ow, g.kh * g.kw);
    let (hp, wp) = padded(g);
    let tasks = tasks(g, cx.threads);
    assert!(scratch.len() >= tasks * hp * wp, "depthwise scratch");
    let (xp, wtp, op) = (SendPtr(x as *mut f32), SendPtr(w as *mut f32), SendPtr(out));
    let sp = SendPtr(scratch.as_mut_ptr());
    let per = planes.div_ceil(tasks);
    cx.par_for(tasks, &|t| {
        // SAFETY: task t owns its padded plane and the output planes it is given.
        let pad = unsafe { std::slice::from_raw_parts_mut(sp.get().add(t * hp * wp), hp * wp) };
        pad.fill(0.0);
        for p in t * per..((t + 1) * per).min(planes) {
            let c = p % g.cout;
            // SAFETY: plane p of x and of out, and channel c's taps, are in bounds (see `run`);
            // tasks take disjoint output planes.
            let (src, wc, dst) = unsafe {
                (
                    std::slice::from_raw_parts(xp.get().add(p * pin), pin),
                    std::slice::from_raw_parts(wtp.get().add(c * kk), kk),
                    std::slice::from_raw_parts_mut(op.get().add(p * pout), pout),
                )
            };
            for (y, row) in src.chunks_exact(g.w).enumerate() {
                let at = (g.pt + y) * wp + g.pl;
                pad[at..at + g.w].copy_from_slice(row);
            }
            plane(pad, wp, wc, g, dst);
        }
    });
}

crate::simd_dispatch! {
    fn plane(pad: &[f32], wp: usize, wc: &[f32], g: &Geometry, dst: &mut [f32]) {
        for oy in 0..g.oh {
            let rows = &pad[oy * g.sh * wp..];
            let drow = &mut dst[oy * g.ow..(oy + 1) * g.ow];
            let mut ox = 0;
            while ox < g.ow {
                let left = g.ow - ox;
                let out = &mut drow[ox..];
                // fixed widths keep the sums in registers
                ox += if left >= 32 {
                    span::<32>(rows, wp, wc, g, ox, out)
                } else if left >= 16 {
                    span::<16>(rows, wp, wc, g, ox, out)
                } else if left >= 8 {
                    span::<8>(rows, wp, wc, g, ox, out)
                } else {
                    span::<1>(rows, wp, wc, g, ox, out)
                };
            }
        }
    }
}

/// Output columns `ox..ox + W` of one row (`rows` starts at the row's first input row) into
/// `out[..W]`; returns W.
#[inline(always)]
fn span<const W: usize>(
    rows: &[f32],
    wp: usize,
    wc: &[f32],
    g: &Geometry,
    ox: usize,
    out: &mut [f32],
) -> usize {
    let mut acc = [0f32; W];
    for ki in 0..g.kh {
        let row = &rows[ki * g.dh * wp..];
        for kj in 0..g.kw {
            let wv = wc[ki * g.kw + kj];
            let s0 = ox * g.sw + kj * g.dw;
            if g.sw == 1 {
                let s: &[f32; W] = row[s0..s0 + W].try_into().unwrap_or(&[0.0; W]);
                for (a, v) in acc.iter_mut().zip(s) {
                    *a += wv * v;
                }
            } else {
                for (i, a) in acc.iter_mut().enumerate() {
                    *a += wv * row[s0 + i * g.sw];
                }
            }
        }
    }
    out[..W].copy_from_slice(&acc);
    W
}
