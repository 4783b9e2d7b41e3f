//! Depthwise conv (one input and one output channel per group, as MobileNets, EfficientNets and
//! the PP-OCR backbones use).
//!
//! Each input plane is split into its stride phases: phase (a, b) holds the zero-padded plane's
//! rows a, a + sh, … and columns b, b + sw, …, every phase `we = ⌈wp / sw⌉` columns wide. Output
//! pixel (oy, ox) then reads tap (i, j) from phase ((i·dh) mod sh, (j·dw) mod sw) at
//! `(oy + i·dh / sh)·we + ox + j·dw / sw`: a constant offset from `oy·we + ox`. Output rows at
//! least a vector wide are summed straight into the output, each row in full vectors (its last
//! one overlapping the one before). Narrower planes are computed as one flat run of `oh·we`
//! positions (the `we - ow` positions past each row's end are computed and dropped), in full
//! vectors whatever the plane's width and stride: a 7 × 7 plane is 64 lanes, not seven rows of
//! seven; their kept columns are copied out. A fused bias and activation are applied in
//! registers; a fused residual goes through the flat run and the epilogue's store; any other
//! epilogue chain runs on each batch of planes while they are still in cache. A conv that
//! computes its own input (`conv_expand`) takes its planes `conv_expand::BLOCK` at a time from
//! a scratch block instead of from `x`.

use super::conv::Geometry;
use super::conv_epilogue::{with_act, Act, Bound};
use super::conv_expand::{self, Expand};
use super::ew::Chain;
use super::Cx;
use crate::tensor::SendPtr;

/// Output positions summed in registers at a time (four 16-lane vectors on AVX-512); the tail
/// runs in chunks of `TAIL`.
const CHUNK: usize = 64;
const TAIL: usize = 16;

/// Output elements per epilogue call: planes are batched until they reach this size, so the
/// epilogue reads them from L1/L2.
const EPILOGUE_BATCH: usize = 4096;

/// The phase layout of one plane.
struct Layout {
    /// Row pitch of every phase.
    we: usize,
    /// Floats per phase plane: every position a chunk can read.
    phase_len: usize,
    /// Output positions computed per plane (`oh·we` rounded up to `TAIL`).
    flat: usize,
}

fn layout(g: &Geometry) -> Layout {
    let hp = ((g.oh - 1) * g.sh + (g.kh - 1) * g.dh + 1).max(g.pt + g.h);
    let wp = ((g.ow - 1) * g.sw + (g.kw - 1) * g.dw + 1).max(g.pl + g.w);
    let (hq, we) = (hp.div_ceil(g.sh), wp.div_ceil(g.sw));
    let flat = (g.oh * we).next_multiple_of(TAIL);
    let reach = ((g.kh - 1) * g.dh / g.sh) * we + (g.kw - 1) * g.dw / g.sw;
    Layout {
        we,
        phase_len: (flat + reach).max(hq * we),
        flat,
    }
}

fn tasks(g: &Geometry, threads: usize) -> usize {
    let planes = g.n * g.cout;
    if threads > 1 && planes * g.oh * g.ow * g.kh * g.kw >= 1 << 16 {
        (threads * 4).min(planes)
    } else {
        1
    }
}

/// Per tap, its phase plane's start and its offset inside it: computed once when the conv is
/// compiled, so a run allocates nothing.
pub fn tap_offsets(g: &Geometry) -> Vec<usize> {
    let l = layout(g);
    (0..g.kh * g.kw)
        .map(|t| {
            let (i, j) = (t / g.kw * g.dh, t % g.kw * g.dw);
            ((i % g.sh) * g.sw + j % g.sw) * l.phase_len + (i / g.sh) * l.we + j / g.sw
        })
        .collect()
}

/// Floats one task needs: its phase planes, the flat output and, with an expansion, the
/// block of input planes it computes.
fn task_floats(g: &Geometry, epilogue: Option<&Chain>, expand: bool) -> usize {
    let l = layout(g);
    g.sh * g.sw * l.phase_len
        + l.flat
        + epilogue.map_or(0, Chain::block_floats)
        + if expand {
            conv_expand::BLOCK * g.h * g.w
        } else {
            0
        }
}

/// Scratch floats `run` needs.
pub fn scratch_floats(
    g: &Geometry,
    threads: usize,
    epilogue: Option<&Chain>,
    expand: bool,
) -> usize {
    tasks(g, threads) * task_floats(g, epilogue, expand)
}

/// Whether `epilogue` can run plane batch by plane batch: it stores exactly the conv's output
/// positions.
pub fn epilogue_per_plane(g: &Geometry, epilogue: &Chain) -> bool {
    epilogue.len() == g.n * g.cout * g.oh * g.ow
}

/// The depthwise conv's input computed as it is read (`conv_expand`), bound to a run's buffers.
#[derive(Clone, Copy)]
pub struct Expanded<'a> {
    pub e: &'a Expand,
    /// The expansion's input, n·cin planes of h·w floats.
    pub x: SendPtr<f32>,
    /// cout floats.
    pub bias: Option<SendPtr<f32>>,
}

/// Writes the conv of `x` by `w` to `out`, through `fused` when given; then (when given) runs
/// `epilogue` over the output. With `expand`, `x` is not read: the input planes are computed
/// from the expansion's input, `BLOCK` channels at a time.
///
/// # Safety
/// `x` holds n·cout planes of h·w floats (unless `expand` is given), `w` cout·kh·kw floats,
/// `out` (`fused`'s target when given) n·cout planes of oh·ow, `scratch` at least
/// `scratch_floats(g, cx.threads, epilogue, expand.is_some())` floats; `epilogue`, when given,
/// satisfies [`epilogue_per_plane`] and reads `out` only at the positions it stores; `expand`'s
/// input holds n·cin planes of h·w floats (`conv_expand::applies(h·w)`) and its bias, when
/// given, cout floats.
#[allow(clippy::too_many_arguments)]
pub unsafe fn run(
    x: *const f32,
    w: *const f32,
    out: *mut f32,
    g: &Geometry,
    taps: &[usize],
    fused: Option<Bound>,
    epilogue: Option<&Chain>,
    expand: Option<Expanded>,
    scratch: &mut [f32],
    cx: &Cx,
) {
    let (pin, pout, kk) = (g.h * g.w, g.oh * g.ow, g.kh * g.kw);
    let l = layout(g);
    // a task's unit of work: one plane, or the planes of one expansion block
    let unit = if expand.is_some() {
        conv_expand::BLOCK
    } else {
        1
    };
    let per_image = g.cout.div_ceil(unit);
    let units = g.n * per_image;
    let first_plane = |u: usize| u / per_image * g.cout + u % per_image * unit;
    let tasks = tasks(g, cx.threads).min(units);
    let per_task = task_floats(g, epilogue, expand.is_some());
    assert!(scratch.len() >= tasks * per_task, "depthwise scratch");
    assert_eq!(taps.len(), kk, "depthwise taps");
    let (xp, wtp, op) = (SendPtr(x as *mut f32), SendPtr(w as *mut f32), SendPtr(out));
    let sp = SendPtr(scratch.as_mut_ptr());
    let per = units.div_ceil(tasks);
    // Rows at least a vector wide are summed straight into the output (the bias and activation
    // in registers): the flat run's dropped positions and its copy-out cost more there than the
    // recomputed overlap of a row's last vector.
    let rows_direct = g.ow >= TAIL && fused.is_none_or(|f| !f.has_residual());
    cx.par_for(tasks, &|t| {
        // SAFETY: task t owns its scratch region and the output planes it is given.
        let mine = unsafe { std::slice::from_raw_parts_mut(sp.get().add(t * per_task), per_task) };
        let (phases, rest) = mine.split_at_mut(g.sh * g.sw * l.phase_len);
        let (flat, rest) = rest.split_at_mut(l.flat);
        let (block, regs) = rest.split_at_mut(if expand.is_some() {
            conv_expand::BLOCK * pin
        } else {
            0
        });
        // positions no phase row reaches stay zero across planes
        phases.fill(0.0);
        let (first, end) = (t * per, ((t + 1) * per).min(units));
        let (mut pending, last) = (first_plane(first), first_plane(end));
        for u in first..end {
            let (img, c0) = (u / per_image, u % per_image * unit);
            if let Some(ex) = expand {
                let cin = ex.e.cin;
                let mut bias = [0f32; conv_expand::BLOCK];
                if let Some(b) = ex.bias {
                    let n = (g.cout - c0).min(unit);
                    // SAFETY: the bias holds cout floats and c0 + n ≤ cout.
                    bias[..n]
                        .copy_from_slice(unsafe { std::slice::from_raw_parts(b.get().add(c0), n) });
                }
                // SAFETY: image img of the expansion's input is in bounds (see `run`).
                let xi = unsafe {
                    std::slice::from_raw_parts(ex.x.get().add(img * cin * pin), cin * pin)
                };
                let wb = ex.e.block_weight(c0 / unit);
                conv_expand::planes(xi, pin, wb, &bias, ex.e.act, block);
            }
            for c in c0..(c0 + unit).min(g.cout) {
                let p = img * g.cout + c;
                let src = if expand.is_some() {
                    &block[(c - c0) * pin..][..pin]
                } else {
                    // SAFETY: plane p of x is in bounds (see `run`).
                    unsafe { std::slice::from_raw_parts(xp.get().add(p * pin), pin) }
                };
                // SAFETY: channel c's taps are in bounds.
                let wc = unsafe { std::slice::from_raw_parts(wtp.get().add(c * kk), kk) };
                split_phases(src, g, &l, phases);
                // without a residual, the bias and activation are applied in registers
                let in_regs = fused.filter(|f| !f.has_residual());
                // SAFETY: c < cout.
                let (bias, act) =
                    in_regs.map_or((None, Act::None), |f| (unsafe { f.bias_of(c) }, f.act()));
                if rows_direct {
                    // SAFETY: plane p of out is this task's (tasks take disjoint output planes).
                    let dst =
                        unsafe { std::slice::from_raw_parts_mut(op.get().add(p * pout), pout) };
                    sum_taps(phases, taps, wc, bias, act, dst, Some((l.we, g.ow)));
                } else {
                    sum_taps(phases, taps, wc, bias, act, flat, None);
                }
                match fused {
                    _ if rows_direct => {}
                    Some(f) if in_regs.is_none() => {
                        for (oy, kept) in flat.chunks(l.we).take(g.oh).enumerate() {
                            // SAFETY: the row's output positions are this task's.
                            unsafe { f.store(c, p * pout + oy * g.ow, g.ow, Some(&kept[..g.ow])) }
                        }
                    }
                    _ => {
                        // SAFETY: plane p of out is this task's.
                        let dst =
                            unsafe { std::slice::from_raw_parts_mut(op.get().add(p * pout), pout) };
                        keep_columns(flat, l.we, dst, g.ow)
                    }
                }
                if let Some(e) = epilogue {
                    if (p + 1 - pending) * pout >= EPILOGUE_BATCH || p + 1 == last {
                        e.run_part(cx, pending * pout, (p + 1) * pout, regs);
                        pending = p + 1;
                    }
                }
            }
        }
    });
}

crate::simd_dispatch! {
    /// Scatters one input plane into its stride phases (see the module comment). Only the
    /// input's own positions are written, the same ones for every plane: the padding is zeroed
    /// once.
    fn split_phases(src: &[f32], g: &Geometry, l: &Layout, phases: &mut [f32]) {
        for (y, srow) in src.chunks_exact(g.w).enumerate() {
            let pr = y + g.pt;
            let row = (pr % g.sh) * g.sw * l.phase_len + (pr / g.sh) * l.we;
            match g.sw {
                1 => copy_short(&mut phases[row + g.pl..][..g.w], srow),
                2 => {
                    // even input columns go to one phase, odd ones to the other
                    let (q, odd) = (g.pl / 2, g.pl % 2);
                    let (ea, oa) = if odd == 0 {
                        (row + q, row + l.phase_len + q)
                    } else {
                        (row + l.phase_len + q, row + q + 1)
                    };
                    let (lo, hi) = if ea < oa {
                        let (lo, hi) = phases.split_at_mut(oa);
                        (&mut lo[ea..], hi)
                    } else {
                        let (lo, hi) = phases.split_at_mut(ea);
                        (hi, &mut lo[oa..])
                    };
                    let pairs = srow.chunks_exact(2);
                    let tail = pairs.remainder();
                    for ((e, o), pair) in lo.iter_mut().zip(hi.iter_mut()).zip(pairs) {
                        *e = pair[0];
                        *o = pair[1];
                    }
                    if let [last] = tail {
                        lo[g.w / 2] = *last;
                    }
                }
                _ => {
                    for (x, &v) in srow.iter().enumerate() {
                        let pc = x + g.pl;
                        phases[row + (pc % g.sw) * l.phase_len + pc / g.sw] = v;
                    }
                }
            }
        }
    }
}

crate::simd_dispatch! {
    fn sum_taps(
        phases: &[f32],
        taps: &[usize],
        wc: &[f32],
        bias: Option<f32>,
        act: Act,
        out: &mut [f32],
        rows: Option<(usize, usize)>,
    ) {
        let o = out;
        match bias {
            None => with_act!(act, |f| run_taps(phases, taps, wc, o, rows, f)),
            Some(b) => with_act!(act, |f| run_taps(phases, taps, wc, o, rows, |v| f(v + b))),
        }
    }
}

/// Sums the flat run into `out` or, with `rows = Some((we, ow))`, only each row's `ow` kept
/// positions into the rows of `out` (`ow` ≥ `TAIL`; a row's last vector overlaps the one before
/// it and rewrites the same values).
#[inline(always)]
fn run_taps(
    phases: &[f32],
    taps: &[usize],
    wc: &[f32],
    out: &mut [f32],
    rows: Option<(usize, usize)>,
    fin: impl Fn(f32) -> f32,
) {
    if let Some((we, ow)) = rows {
        for (oy, row) in out.chunks_exact_mut(ow).enumerate() {
            let base = oy * we;
            let mut f = 0;
            while f + CHUNK <= ow {
                chunk::<CHUNK>(phases, taps, wc, base + f, &mut row[f..f + CHUNK], &fin);
                f += CHUNK;
            }
            // the rest in one call, so its vectors sum side by side
            match ow - f {
                48.. => {
                    chunk::<48>(phases, taps, wc, base + f, &mut row[f..f + 48], &fin);
                    f += 48;
                }
                32.. => {
                    chunk::<32>(phases, taps, wc, base + f, &mut row[f..f + 32], &fin);
                    f += 32;
                }
                16.. => {
                    chunk::<16>(phases, taps, wc, base + f, &mut row[f..f + 16], &fin);
                    f += 16;
                }
                _ => {}
            }
            if f < ow {
                let f = ow - TAIL;
                chunk::<TAIL>(phases, taps, wc, base + f, &mut row[f..], &fin);
            }
        }
        return;
    }
    let flat = out;
    let mut f = 0;
    while f + CHUNK <= flat.len() {
        chunk::<CHUNK>(phases, taps, wc, f, &mut flat[f..f + CHUNK], &fin);
        f += CHUNK;
    }
    while f < flat.len() {
        chunk::<TAIL>(phases, taps, wc, f, &mut flat[f..f + TAIL], &fin);
        f += TAIL;
    }
}

/// Output positions `f..f + W` of the flat run, summed over every tap in registers, then
/// finished by `fin` (the bias and activation, in the chain's order).
#[inline(always)]
fn chunk<const W: usize>(
    phases: &[f32],
    taps: &[usize],
    wc: &[f32],
    f: usize,
    out: &mut [f32],
    fin: impl Fn(f32) -> f32,
) {
    let mut acc = [0f32; W];
    for (&at, &wv) in taps.iter().zip(wc) {
        let s: &[f32; W] = phases[at + f..at + f + W].try_into().expect("chunk width");
        for (a, v) in acc.iter_mut().zip(s) {
            *a += wv * v;
        }
    }
    for (o, a) in out.iter_mut().zip(acc) {
        *o = fin(a);
    }
}

crate::simd_dispatch! {
    /// Copies the first `ow` of every `we` positions of `flat` to the rows of `dst`.
    fn keep_columns(flat: &[f32], we: usize, dst: &mut [f32], ow: usize) {
        for (row, kept) in dst.chunks_exact_mut(ow).zip(flat.chunks(we)) {
            copy_short(row, &kept[..ow]);
        }
    }
}

/// `dst.copy_from_slice(src)` for the short rows of small planes, in fixed-size moves instead
/// of a call to `memcpy` per row.
#[inline(always)]
fn copy_short(dst: &mut [f32], src: &[f32]) {
    let n = dst.len();
    let src = &src[..n];
    let mut i = 0;
    while i + 16 <= n {
        dst[i..i + 16].copy_from_slice(&src[i..i + 16]);
        i += 16;
    }
    if n >= 16 {
        dst[n - 16..].copy_from_slice(&src[n - 16..]);
    } else if n >= 8 {
        dst[..8].copy_from_slice(&src[..8]);
        dst[n - 8..].copy_from_slice(&src[n - 8..]);
    } else if n >= 4 {
        dst[..4].copy_from_slice(&src[..4]);
        dst[n - 4..].copy_from_slice(&src[n - 4..]);
    } else {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = *s;
        }
    }
}
