//! conv (im2col + GEMM, 1×1 stride-1 without im2col; 3×3 with a constant weight on AVX-512 by
//! `conv_winograd` at stride 1, `conv_direct` otherwise, which also takes 7×7 stems; depthwise by
//! `conv_depthwise`) and
//! conv_transpose (GEMM + col2im).
//! Spatial rank 1 runs as 2-D with height 1.

use super::bf16::{Bf16A, Bf16B};
use super::conv_epilogue::{Act, Bound, Fused};
use super::conv_expand::{self, Expand};
use super::ew::Chain;
use super::matmul::to_f32;
use super::packed::PackedB;
use super::sgemm::{sgemm, Strides};
use super::Cx;
use super::{conv_depthwise, conv_direct, conv_winograd};
use crate::plan::Vid;
use crate::tensor::{Elem, SendPtr};

#[derive(Clone, Debug)]
pub struct Geometry {
    pub n: usize,
    pub cin: usize,
    pub h: usize,
    pub w: usize,
    pub cout: usize,
    pub groups: usize,
    pub kh: usize,
    pub kw: usize,
    pub sh: usize,
    pub sw: usize,
    pub dh: usize,
    pub dw: usize,
    pub pt: usize,
    pub pl: usize,
    pub oh: usize,
    pub ow: usize,
}

/// A conv weight in the MIL layout — conv: `[cout, cin/groups*kh*kw]`; transpose:
/// `[cin, cout/groups*kh*kw]` — decoded at compile time or read from a value at run time.
#[derive(Debug)]
pub enum ConvWeight {
    Const(Vec<f32>),
    /// A constant weight packed for `conv_direct`.
    Direct(Vec<f32>),
    /// A constant weight transformed and packed for `conv_winograd`.
    Winograd(Vec<f32>),
    /// A 1×1 conv's constant weight as the right-hand side `[cin, cout]` of `packed::gemm`, for
    /// convs over few pixels (see [`PACKED_MAX_PIXELS`]).
    Packed(PackedB),
    /// An ungrouped conv's constant weight as the right-hand side `[cin·kh·kw, cout]` of a
    /// product with bf16 operands (`MatmulPrecision::Bf16`), the pixels (or their im2col rows)
    /// as its rows (CPUs without AMX).
    Bf16(Bf16B),
    /// An ungrouped conv's constant weight `[cout, cin·kh·kw]` as the left-hand side of a
    /// product with bf16 operands on AMX tiles, whose columns are the pixels: the output
    /// channels come out as planes.
    Bf16Tiles(Bf16A),
    Runtime {
        value: Vid,
        elem: Elem,
        len: usize,
    },
}

/// Ungrouped convs over at most this many output pixels per image that neither register-tiled
/// 3×3 kernel serves multiply by a weight packed at compile time, the pixels as rows (1×1 convs
/// read the input in place, others their im2col rows): over few pixels the gemm crate's packing
/// of the weight on every call costs more than the product (PP-OCR det's 384-channel 1×1 convs
/// on 2 × 5 pixels ran at 15 GFLOP/s). `conv_direct` stays ahead of this on 3×3 convs down to
/// 2 × 2 pixels (ResNet-18's last stage).
const PACKED_MAX_PIXELS: usize = 64;

fn packed_applies(g: &Geometry, transpose: bool) -> bool {
    !transpose && g.groups == 1 && g.oh * g.ow <= PACKED_MAX_PIXELS
}

impl ConvWeight {
    /// A constant weight in the MIL layout, packed for the kernel that serves this conv on this
    /// CPU: `conv_winograd`, `conv_direct` or, over few pixels, `packed::gemm`.
    /// With `bf16` (bf16 products for this many pixels, `Builder::bf16_products`), ungrouped
    /// convs take a weight for the bf16 product instead.
    pub fn constant(w: Vec<f32>, g: &Geometry, transpose: bool, bf16: bool) -> ConvWeight {
        let k = g.cin * g.kh * g.kw;
        if bf16 && !transpose && g.groups == 1 {
            if super::bf16::uses_amx() {
                return ConvWeight::Bf16Tiles(Bf16A::pack(g.cout, k, |i, t| w[i * k + t]));
            }
            return ConvWeight::Bf16(Bf16B::pack(k, g.cout, |t, j| w[j * k + t]));
        }
        if conv_winograd::applies(g, transpose) {
            ConvWeight::Winograd(conv_winograd::pack(&w, g))
        } else if conv_direct::applies(g, transpose) {
            ConvWeight::Direct(conv_direct::pack(&w, g))
        } else if packed_applies(g, transpose) {
            let k = g.cin * g.kh * g.kw;
            ConvWeight::Packed(PackedB::pack(k, g.cout, |t, j| w[j * k + t]))
        } else {
            ConvWeight::Const(w)
        }
    }

    pub fn owned_len(&self) -> usize {
        match self {
            ConvWeight::Const(w) | ConvWeight::Direct(w) | ConvWeight::Winograd(w) => w.len(),
            ConvWeight::Packed(p) => p.bytes() / 4,
            ConvWeight::Bf16(b) => b.bytes() / 4,
            ConvWeight::Bf16Tiles(a) => a.bytes() / 4,
            ConvWeight::Runtime { .. } => 0,
        }
    }

    /// Scratch floats needed to widen a runtime fp16 weight.
    fn scratch_floats(&self) -> usize {
        match self {
            ConvWeight::Runtime { elem, len, .. } if *elem != Elem::F32 => *len,
            _ => 0,
        }
    }
}

#[derive(Debug)]
pub struct Conv {
    /// The input; with `expand`, the expansion's input.
    pub x: Vid,
    pub x_elem: Elem,
    pub g: Geometry,
    pub weight: ConvWeight,
    pub transpose: bool,
    /// Added before the epilogue in conv_transpose (col2im accumulates on top of it).
    pub raw: Vid,
    pub epilogue: Option<Chain>,
    /// The epilogue `act?((raw + bias?) + residual?)` applied by the kernel as it writes, to
    /// `target` instead of `raw`.
    pub fused: Option<Fused>,
    /// The depthwise kernel's tap offsets (`conv_depthwise::tap_offsets`), set by
    /// [`Conv::finalize`]; empty for other convs.
    pub depthwise_taps: Vec<usize>,
    /// A depthwise conv's input computed as it is read, from the pointwise conv that produced
    /// it (`conv_expand`); `x` is then not read.
    pub expand: Option<Expand>,
}

impl Conv {
    /// The schedule: "direct", "winograd", "packed", "bf16", "expanded" (a depthwise conv
    /// computing its input), or "" for im2col + GEMM.
    pub fn schedule(&self) -> &'static str {
        if self.expand.is_some() {
            return "expanded";
        }
        match self.weight {
            ConvWeight::Direct(_) => "direct",
            ConvWeight::Winograd(_) => "winograd",
            ConvWeight::Packed(_) => "packed",
            ConvWeight::Bf16(_) | ConvWeight::Bf16Tiles(_) => "bf16",
            _ => "",
        }
    }

    fn direct(&self) -> bool {
        matches!(self.weight, ConvWeight::Direct(_) | ConvWeight::Winograd(_))
    }

    /// The compile-time final form: the fused epilogue, the remaining chain collapsed, the
    /// depthwise tap offsets.
    pub fn finalize(&mut self) {
        self.fuse_epilogue();
        if let Some(e) = &mut self.epilogue {
            e.collapse();
        }
        if self.depthwise() {
            self.depthwise_taps = conv_depthwise::tap_offsets(&self.g);
        }
    }

    /// Folds an epilogue the kernel serving this conv can apply as it writes (see
    /// `conv_epilogue`). Call before the epilogue is collapsed.
    fn fuse_epilogue(&mut self) {
        let Some(e) = &self.epilogue else { return };
        if self.transpose {
            return;
        }
        let g = &self.g;
        let Some(f) = Fused::recognize(e, self.raw, &[g.n, g.cout, g.oh, g.ow]) else {
            return;
        };
        // the register-tiled kernels take a bias and an activation (Winograd's only relu)
        let winograd = matches!(self.weight, ConvWeight::Winograd(_));
        if self.direct()
            && (f.residual.is_some() || winograd && !matches!(f.act, Act::None | Act::Relu))
        {
            return;
        }
        self.fused = Some(f);
        self.epilogue = None;
    }

    fn depthwise(&self) -> bool {
        let g = &self.g;
        !self.transpose && g.cin == g.groups && g.cout == g.groups
    }

    /// The expansion this depthwise conv can compute for itself (`conv_expand`) from `p`, the
    /// conv producing its input: a pointwise conv with a constant f32 weight whose result, with
    /// its epilogue `act?(raw + bias?)` when it has one, is this conv's input. Call before the
    /// epilogues are finalized.
    pub fn expansion_from(&self, p: &Conv) -> Option<Expand> {
        let (g, pg) = (&self.g, &p.g);
        let plain = |c: &Conv| matches!(c.weight, ConvWeight::Const(_)) && c.x_elem == Elem::F32;
        if !self.depthwise()
            || !plain(self)
            || self.expand.is_some()
            || !conv_expand::applies(g.h * g.w)
            || !p.pointwise()
            || pg.groups != 1
            || !plain(p)
            || p.expand.is_some()
            || p.fused.is_some()
            || (pg.n, pg.cout, pg.oh, pg.ow) != (g.n, g.cin, g.h, g.w)
        {
            return None;
        }
        let ConvWeight::Const(w) = &p.weight else {
            return None;
        };
        let (bias, act) = match &p.epilogue {
            None if p.raw == self.x => (None, Act::None),
            None => return None,
            Some(e) => {
                let f = Fused::recognize(e, p.raw, &[pg.n, pg.cout, pg.oh, pg.ow])?;
                if f.residual.is_some() || f.target != self.x {
                    return None;
                }
                (f.bias, f.act)
            }
        };
        Some(Expand::new(p.x, w, pg.cout, pg.cin, bias, act))
    }

    /// The epilogue the depthwise kernel runs on its planes as it writes them.
    fn depthwise_epilogue(&self) -> Option<&Chain> {
        self.epilogue
            .as_ref()
            .filter(|e| conv_depthwise::epilogue_per_plane(&self.g, e))
    }

    fn pointwise(&self) -> bool {
        let g = &self.g;
        !self.transpose
            && g.kh == 1
            && g.kw == 1
            && g.sh == 1
            && g.sw == 1
            && g.pt == 0
            && g.pl == 0
            && g.oh == g.h
            && g.ow == g.w
    }

    fn x_len(&self) -> usize {
        self.g.n * self.g.cin * self.g.h * self.g.w
    }

    fn col_len(&self, threads: usize) -> usize {
        let g = &self.g;
        if let ConvWeight::Bf16Tiles(a) = &self.weight {
            let cols = if self.pointwise() {
                0
            } else {
                g.cin * g.kh * g.kw * g.oh * g.ow
            };
            cols + a.scratch_floats(g.oh * g.ow)
        } else if let ConvWeight::Packed(_) | ConvWeight::Bf16(_) = self.weight {
            let cols = if self.pointwise() {
                0
            } else {
                g.cin * g.kh * g.kw
            };
            let rounded = match &self.weight {
                ConvWeight::Bf16(b) => b.scratch_floats(g.oh * g.ow),
                _ => 0,
            };
            (g.oh * g.ow * (g.cout + cols) + rounded) * image_tasks(g, threads)
        } else if self.depthwise() && !self.direct() {
            conv_depthwise::scratch_floats(
                g,
                threads,
                self.depthwise_epilogue(),
                self.expand.is_some(),
            )
        } else if self.transpose {
            (g.cout / g.groups) * g.kh * g.kw * g.h * g.w
        } else if self.pointwise() {
            0
        } else if let ConvWeight::Winograd(_) = self.weight {
            conv_winograd::scratch_floats(g, threads)
        } else if self.direct() {
            conv_direct::scratch_floats(g)
        } else {
            (g.cin / g.groups) * g.kh * g.kw * g.oh * g.ow
        }
    }

    pub fn flops(&self) -> usize {
        let g = &self.g;
        2 * g.n
            * g.cout
            * (g.cin / g.groups)
            * g.kh
            * g.kw
            * if self.transpose {
                g.h * g.w
            } else {
                g.oh * g.ow
            }
    }

    pub fn scratch_floats(&self, threads: usize) -> usize {
        let conv = if self.x_elem != Elem::F32 {
            self.x_len()
        } else {
            0
        } + self.col_len(threads)
            + self.weight.scratch_floats();
        conv.max(
            self.epilogue
                .as_ref()
                .map_or(0, |e| e.scratch_floats(threads)),
        )
    }

    pub fn run(&self, cx: &Cx) {
        let g = &self.g;
        let xlen = self.x_len();
        let x: *const f32 = if self.x_elem == Elem::F32 {
            cx.ptr(self.x) as *const f32
        } else {
            let s = cx.scratch_at(0, xlen);
            unsafe { to_f32(cx.ptr(self.x), self.x_elem, s) };
            s.as_ptr()
        };
        let off = if self.x_elem == Elem::F32 { 0 } else { xlen };
        let col = cx.scratch_at(off, self.col_len(cx.threads));
        let fused = self.fused.as_ref().map(|f| f.bind(cx));
        let out = fused.map_or(cx.ptr(self.raw) as *mut f32, |f| f.out);
        if let ConvWeight::Direct(w) | ConvWeight::Winograd(w) = &self.weight {
            let f = self.fused.as_ref();
            let epilogue = conv_direct::Epilogue {
                bias: f
                    .and_then(|f| f.bias)
                    .map_or(std::ptr::null(), |b| cx.ptr(b) as *const f32),
                act: f.map_or(Act::None, |f| f.act),
            };
            // SAFETY: `Direct` weights exist only where `conv_direct::applies`; x and out hold
            // this geometry's input and output (f32), the bias cout f32, col the kernel's
            // scratch.
            unsafe {
                if self.schedule() == "winograd" {
                    conv_winograd::run(x, w, out, g, epilogue, col, cx)
                } else {
                    conv_direct::run(x, w, out, g, epilogue, col, cx)
                }
            };
            return self.chain_after(cx);
        }
        if let ConvWeight::Bf16Tiles(wa) = &self.weight {
            let (pix, cout) = (g.oh * g.ow, g.cout);
            let cols = if self.pointwise() {
                0
            } else {
                g.cin * g.kh * g.kw * pix
            };
            let (rows, packed) = col.split_at_mut(cols);
            for b in 0..g.n {
                // SAFETY: image b holds cin planes of h × w floats, read as the [cin, pix] B
                // operand (or its im2col rows, [cin·kh·kw, pix]); out holds n × cout planes of
                // pix floats; the weight exists only where AMX is available.
                unsafe {
                    let xb = x.add(b * g.cin * g.h * g.w);
                    let src = if self.pointwise() {
                        xb
                    } else {
                        im2col(xb, rows, g, g.cin, cx);
                        rows.as_ptr()
                    };
                    super::bf16::gemm_a(
                        wa,
                        src,
                        pix,
                        pix,
                        out.add(b * cout * pix),
                        pix,
                        cx,
                        packed,
                    );
                    if let Some(f) = fused {
                        for co in 0..cout {
                            f.store(co, (b * cout + co) * pix, pix, None);
                        }
                    }
                }
            }
            return self.chain_after(cx);
        }
        if let ConvWeight::Packed(_) | ConvWeight::Bf16(_) = &self.weight {
            let (pix, cout) = (g.oh * g.ow, g.cout);
            let cols = if self.pointwise() {
                0
            } else {
                g.cin * g.kh * g.kw * pix
            };
            let tasks = image_tasks(g, cx.threads);
            let per_task = col.len() / tasks;
            // with images side by side, each product runs on its task's thread alone
            let serial = Cx {
                plan: cx.plan,
                ptrs: cx.ptrs,
                scratch: cx.scratch,
                scratch_len: cx.scratch_len,
                threads: 1,
                team: None,
            };
            let inner = if tasks > 1 { &serial } else { cx };
            let (colp, xp, op) = (
                SendPtr(col.as_mut_ptr()),
                SendPtr(x as *mut f32),
                SendPtr(out),
            );
            cx.par_for(tasks, &|t| {
                // SAFETY: task t owns its share of the scratch and the output planes of the
                // images it takes.
                let mine = unsafe {
                    std::slice::from_raw_parts_mut(colp.get().add(t * per_task), per_task)
                };
                let (c, rows) = mine.split_at_mut(pix * cout);
                let (rows, rounded) = rows.split_at_mut(cols);
                for b in (t..g.n).step_by(tasks) {
                    // SAFETY: image b holds cin planes of h × w floats; the A operand is its
                    // pixels (or its im2col rows' columns) as the rows of a [pix, cin·kh·kw]
                    // matrix; c holds pix × cout floats; out n × cout × pix.
                    unsafe {
                        let xb = xp.get().add(b * g.cin * g.h * g.w) as *const f32;
                        let a = if self.pointwise() {
                            xb
                        } else {
                            im2col(xb, rows, g, g.cin, inner);
                            rows.as_ptr()
                        };
                        match &self.weight {
                            ConvWeight::Bf16(w) => super::bf16::gemm(
                                a,
                                1,
                                pix,
                                pix,
                                w,
                                c.as_mut_ptr(),
                                cout,
                                inner,
                                rounded,
                            ),
                            ConvWeight::Packed(p) => {
                                super::packed::gemm(a, 1, pix, pix, p, c.as_mut_ptr(), cout, inner)
                            }
                            _ => unreachable!("the packed and bf16 weights only"),
                        }
                        write_planes(c, pix, cout, op.get(), b * cout * pix, fused);
                    }
                }
            });
            return self.chain_after(cx);
        }
        let weight: *const f32 = match &self.weight {
            ConvWeight::Const(w) => w.as_ptr(),
            ConvWeight::Packed(_) | ConvWeight::Bf16(_) | ConvWeight::Bf16Tiles(_) => {
                unreachable!("handled above")
            }
            ConvWeight::Direct(_) | ConvWeight::Winograd(_) => unreachable!("handled above"),
            ConvWeight::Runtime { value, elem, len } => {
                if *elem == Elem::F32 {
                    cx.ptr(*value) as *const f32
                } else {
                    let s = cx.scratch_at(off + self.col_len(cx.threads), *len);
                    // SAFETY: the value holds `len` elements of `elem`.
                    unsafe { to_f32(cx.ptr(*value), *elem, s) };
                    s.as_ptr()
                }
            }
        };
        if self.depthwise() {
            let inside = self.depthwise_epilogue();
            let expand = self.expand.as_ref().map(|e| conv_depthwise::Expanded {
                e,
                x: SendPtr(cx.ptr(e.x) as *mut f32),
                bias: e.bias.map(|b| SendPtr(cx.ptr(b) as *mut f32)),
            });
            // SAFETY: x holds n*cin planes of h*w floats, weight cout*kk, out n*cout*pout, the
            // taps this geometry's offsets, col the depthwise scratch; the chain epilogue stores
            // the conv's output positions.
            unsafe {
                conv_depthwise::run(
                    x,
                    weight,
                    out,
                    g,
                    &self.depthwise_taps,
                    fused,
                    inside,
                    expand,
                    col,
                    cx,
                )
            };
            if inside.is_none() {
                self.chain_after(cx);
            }
            return;
        }
        if self.pointwise() && g.groups == 1 {
            // SAFETY: x holds n·cin·h·w floats, weight cout·cin, out n·cout·h·w.
            unsafe { pointwise(x, weight, out, g, fused, cx) };
            return self.chain_after(cx);
        }
        let split = self.flops() >= 1 << 21;
        let (cig, cog) = (g.cin / g.groups, g.cout / g.groups);
        let (pin, pout) = (g.h * g.w, g.oh * g.ow);
        let kk = g.kh * g.kw;
        if self.transpose {
            // SAFETY: raw holds n*cout*pout floats.
            unsafe { std::ptr::write_bytes(out, 0, g.n * g.cout * pout) };
        }
        for b in 0..g.n {
            for gi in 0..g.groups {
                // SAFETY: pointers index validated shapes.
                unsafe {
                    let xg = x.add((b * g.cin + gi * cig) * pin);
                    let og = out.add((b * g.cout + gi * cog) * pout);
                    if self.transpose {
                        // col[cog*kk, pin] = W_gᵀ · x_g
                        let wg = weight.add(gi * cig * cog * kk);
                        sgemm(
                            cx,
                            split,
                            (cog * kk, pin, cig),
                            col.as_mut_ptr(),
                            Strides(1, pin as isize),
                            wg,
                            Strides((cog * kk) as isize, 1),
                            xg,
                            Strides(1, pin as isize),
                        );
                        col2im(col, og, g, cog, cx);
                    } else {
                        let rhs = if self.pointwise() {
                            xg
                        } else {
                            im2col(xg, col, g, cig, cx);
                            col.as_ptr()
                        };
                        let wg = weight.add(gi * cog * cig * kk);
                        sgemm(
                            cx,
                            split,
                            (cog, pout, cig * kk),
                            og,
                            Strides(1, pout as isize),
                            wg,
                            Strides(1, (cig * kk) as isize),
                            rhs,
                            Strides(1, pout as isize),
                        );
                        if let Some(f) = fused {
                            for co in gi * cog..(gi + 1) * cog {
                                f.store(co, (b * g.cout + co) * pout, pout, None);
                            }
                        }
                    }
                }
            }
        }
        self.chain_after(cx)
    }

    /// The epilogue chain no kernel applied as it wrote.
    fn chain_after(&self, cx: &Cx) {
        if let Some(e) = &self.epilogue {
            e.run(cx);
        }
    }
}

/// Tasks of the packed and bf16 products: one image per task at a time when there are several
/// images and threads, each product then on one thread with its write-out beside it (rather
/// than one image's product split across the threads and its write-out on one).
fn image_tasks(g: &Geometry, threads: usize) -> usize {
    if threads > 1 && g.n > 1 {
        threads.min(g.n)
    } else {
        1
    }
}

/// Writes a product `c` `[pix, cout]` (pixels as rows) to the output planes `[cout, pix]`
/// starting at position `at` of `out`, through `fused` when given (`out` is then its target):
/// sixteen channels by up to `SPAN` pixels at a time, transposed into a block in L1.
///
/// # Safety
/// Positions `at..at + cout·pix` are in `out`; `c` holds `pix·cout` floats.
unsafe fn write_planes(
    c: &[f32],
    pix: usize,
    cout: usize,
    out: *mut f32,
    at: usize,
    fused: Option<Bound>,
) {
    assert!(c.len() >= pix * cout, "write_planes");
    let mut block = [0f32; 16 * SPAN];
    for co0 in (0..cout).step_by(16) {
        let lanes = (cout - co0).min(16);
        for px0 in (0..pix).step_by(SPAN) {
            let len = (pix - px0).min(SPAN);
            pixels_to_planes(&c[px0 * cout..], cout, len, co0, lanes, &mut block);
            for (l, row) in block.chunks_exact(SPAN).take(lanes).enumerate() {
                let (co, row) = (co0 + l, &row[..len]);
                let to = at + co * pix + px0;
                match fused {
                    Some(f) => f.store(co, to, len, Some(row)),
                    None => std::slice::from_raw_parts_mut(out.add(to), len).copy_from_slice(row),
                }
            }
        }
    }
}

/// Pixels per block of `write_planes` (a multiple of 16).
const SPAN: usize = 64;

/// `block[l·SPAN + px] = c[px·cout + co0 + l]` for `l < lanes`, `px < pix` (`pix` ≤ `SPAN`).
fn pixels_to_planes(
    c: &[f32],
    cout: usize,
    pix: usize,
    co0: usize,
    lanes: usize,
    block: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if crate::simd::has_avx512() {
        // SAFETY: AVX-512 is available.
        unsafe { pixels_to_planes_avx512(c, cout, pix, co0, lanes, block) };
        return;
    }
    for px in 0..pix {
        for l in 0..lanes {
            block[l * SPAN + px] = c[px * cout + co0 + l];
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn pixels_to_planes_avx512(
    c: &[f32],
    cout: usize,
    pix: usize,
    co0: usize,
    lanes: usize,
    block: &mut [f32],
) {
    use std::arch::x86_64::*;
    let mask = ((1u32 << lanes) - 1) as __mmask16;
    for px0 in (0..pix).step_by(16) {
        let mut m = [_mm512_setzero_ps(); 16];
        for (i, v) in m.iter_mut().enumerate().take(pix - px0) {
            let row = &c[(px0 + i) * cout + co0..][..lanes];
            // SAFETY: `row` holds `lanes` floats; the mask reads no more.
            *v = unsafe { _mm512_maskz_loadu_ps(mask, row.as_ptr()) };
        }
        super::conv_direct::arch::transpose16(&mut m);
        for (l, v) in m.iter().enumerate().take(lanes) {
            // px0 + 16 <= SPAN: a block row holds the whole vector
            let dst = &mut block[l * SPAN + px0..][..16];
            // SAFETY: `dst` holds 16 floats.
            unsafe { _mm512_storeu_ps(dst.as_mut_ptr(), *v) };
        }
    }
}

/// Output floats of one pointwise chunk: it stays in the L2 caches of every CPU we schedule for
/// (512 KiB and up) until its epilogue has run.
const POINTWISE_CHUNK_FLOATS: usize = 1 << 17;

/// How a pointwise conv is cut into tasks: pixel chunks of equal size, each at most
/// `POINTWISE_CHUNK_FLOATS` of output; on several threads, up to about four chunks per thread
/// down to 64 pixels, then output-channel bands of a multiple of 16 until there are about four
/// tasks per thread, so no thread waits long for another. Each task's product packs its
/// operands again, so bands are the costlier cut: EfficientNet-Lite0's 672 → 112 projection
/// over 14 × 14 pixels took 0.24 ms on 2 threads as one chunk in seven bands (no faster than on
/// one thread) and 0.16 ms as three chunks of 80 pixels in three bands. Returns (chunk, band).
fn pointwise_split(g: &Geometry, threads: usize) -> (usize, usize) {
    let pix = g.h * g.w;
    let fits = (POINTWISE_CHUNK_FLOATS / g.cout).max(256);
    let mut pieces = pix.div_ceil(fits);
    if threads > 1 {
        pieces = pieces
            .max((4 * threads).div_ceil(g.n))
            .min((pix / 64).max(1));
    }
    let chunk = pix.div_ceil(pieces).next_multiple_of(16).min(pix);
    let tasks = g.n * pix.div_ceil(chunk);
    let bands = if threads > 1 {
        (4 * threads).div_ceil(tasks)
    } else {
        1
    };
    (
        chunk,
        g.cout.div_ceil(bands).next_multiple_of(16).min(g.cout),
    )
}

/// A 1×1, stride-1, ungrouped conv as products over chunks of pixels, each task finishing its
/// chunk with the fused epilogue while the chunk is in cache.
///
/// # Safety
/// `x` holds n·cin·h·w floats, `w` cout·cin, `out` (the fused epilogue's target when given)
/// n·cout·h·w.
unsafe fn pointwise(
    x: *const f32,
    w: *const f32,
    out: *mut f32,
    g: &Geometry,
    fused: Option<Bound>,
    cx: &Cx,
) {
    let pix = g.h * g.w;
    let (chunk, band) = pointwise_split(g, cx.threads);
    let (per_image, bands) = (pix.div_ceil(chunk), g.cout.div_ceil(band));
    let (xp, wp, op) = (SendPtr(x as *mut f32), SendPtr(w as *mut f32), SendPtr(out));
    cx.par_for(g.n * per_image * bands, &|t| {
        let (b, p0, c0) = (
            t / (per_image * bands),
            t / bands % per_image * chunk,
            t % bands * band,
        );
        let (len, rows) = (chunk.min(pix - p0), band.min(g.cout - c0));
        // SAFETY: the chunk's columns of image b and the band's rows of the weight are inside
        // x, w and out; tasks write disjoint (band, chunk) blocks.
        unsafe {
            let ob = op.get().add((b * g.cout + c0) * pix + p0);
            sgemm(
                cx,
                false,
                (rows, len, g.cin),
                ob,
                Strides(1, pix as isize),
                wp.get().add(c0 * g.cin),
                Strides(1, g.cin as isize),
                xp.get().add(b * g.cin * pix + p0),
                Strides(1, pix as isize),
            );
            if let Some(f) = fused {
                for co in c0..c0 + rows {
                    f.store(co, (b * g.cout + co) * pix + p0, len, None);
                }
            }
        }
    });
}

/// # Safety
/// `x` holds cig planes of h*w floats; `col` holds cig*kh*kw rows of oh*ow floats.
unsafe fn im2col(x: *const f32, col: &mut [f32], g: &Geometry, cig: usize, cx: &Cx) {
    let kk = g.kh * g.kw;
    let pout = g.oh * g.ow;
    let colp = SendPtr(col.as_mut_ptr());
    let xp = SendPtr(x as *mut f32);
    let rows = cig * kk;
    let tasks = if cx.threads > 1 && rows * pout >= 1 << 16 {
        cx.threads * 2
    } else {
        1
    };
    let per = rows.div_ceil(tasks);
    cx.par_for(tasks, &|t| {
        for row in t * per..((t + 1) * per).min(rows) {
            let (ci, k) = (row / kk, row % kk);
            let (ki, kj) = (k / g.kw, k % g.kw);
            let dst = std::slice::from_raw_parts_mut(colp.get().add(row * pout), pout);
            let plane = xp.get().add(ci * g.h * g.w) as *const f32;
            for oy in 0..g.oh {
                let iy = (oy * g.sh + ki * g.dh) as isize - g.pt as isize;
                let drow = &mut dst[oy * g.ow..(oy + 1) * g.ow];
                if iy < 0 || iy >= g.h as isize {
                    drow.fill(0.0);
                    continue;
                }
                let src = plane.add(iy as usize * g.w);
                let x0 = (kj * g.dw) as isize - g.pl as isize;
                if g.sw == 1 {
                    // contiguous run: ox where 0 <= ox + x0 < w
                    let lo = (-x0).clamp(0, g.ow as isize) as usize;
                    let hi = (g.w as isize - x0).clamp(0, g.ow as isize) as usize;
                    drow[..lo].fill(0.0);
                    if hi > lo {
                        std::ptr::copy_nonoverlapping(
                            src.offset(lo as isize + x0),
                            drow.as_mut_ptr().add(lo),
                            hi - lo,
                        );
                    }
                    drow[hi.max(lo)..].fill(0.0);
                } else {
                    for (ox, d) in drow.iter_mut().enumerate() {
                        let ix = (ox * g.sw) as isize + x0;
                        *d = if ix >= 0 && ix < g.w as isize {
                            *src.offset(ix)
                        } else {
                            0.0
                        };
                    }
                }
            }
        }
    });
}

/// Scatters col[cog*kh*kw, h*w] into out[cog, oh, ow] (accumulating).
///
/// # Safety
/// `out` holds cog planes of oh*ow floats.
unsafe fn col2im(col: &[f32], out: *mut f32, g: &Geometry, cog: usize, cx: &Cx) {
    let kk = g.kh * g.kw;
    let pin = g.h * g.w;
    // the input columns whose output column lies inside for kernel column kj, and the first
    // such output column: ox = ix·sw + kj·dw − pl
    let cols = |kj: usize| {
        let shift = (kj * g.dw) as isize - g.pl as isize;
        let lo = if shift < 0 {
            ((-shift) as usize).div_ceil(g.sw)
        } else {
            0
        };
        let hi = ((g.ow as isize - shift).max(0) as usize)
            .div_ceil(g.sw)
            .min(g.w);
        (lo, hi, (lo * g.sw) as isize + shift)
    };
    let planes = SendPtr(out);
    let one = |co: usize| {
        // SAFETY: each output channel's plane is written by one task.
        let plane = unsafe { planes.get().add(co * g.oh * g.ow) };
        if g.kw == 2 && g.sw == 2 && g.dw == 1 && g.pl == 0 && g.ow == 2 * g.w {
            // windows side by side along a row (2×2 stride 2 upsampling): each output row
            // interleaves the two kernel columns' rows
            for ki in 0..g.kh {
                let s0 = &col[(co * kk + ki * 2) * pin..][..pin];
                let s1 = &col[(co * kk + ki * 2 + 1) * pin..][..pin];
                for iy in 0..g.h {
                    let oy = (iy * g.sh + ki * g.dh) as isize - g.pt as isize;
                    if oy < 0 || oy >= g.oh as isize {
                        continue;
                    }
                    // SAFETY: row oy of this channel's plane.
                    let row = unsafe {
                        std::slice::from_raw_parts_mut(plane.add(oy as usize * g.ow), g.ow)
                    };
                    let (a, b) = (&s0[iy * g.w..][..g.w], &s1[iy * g.w..][..g.w]);
                    for ((o, &x0), &x1) in row.chunks_exact_mut(2).zip(a).zip(b) {
                        o[0] += x0;
                        o[1] += x1;
                    }
                }
            }
            return;
        }
        for k in 0..kk {
            let (ki, kj) = (k / g.kw, k % g.kw);
            let (lo, hi, ox0) = cols(kj);
            if lo >= hi {
                continue;
            }
            let src = &col[(co * kk + k) * pin..(co * kk + k + 1) * pin];
            for iy in 0..g.h {
                let oy = (iy * g.sh + ki * g.dh) as isize - g.pt as isize;
                if oy < 0 || oy >= g.oh as isize {
                    continue;
                }
                // SAFETY: ox0 ≥ 0 is the output column of input column lo on row oy < oh.
                let row = unsafe { plane.add(oy as usize * g.ow + ox0 as usize) };
                for (t, &v) in src[iy * g.w + lo..iy * g.w + hi].iter().enumerate() {
                    // SAFETY: ox0 + t·sw < ow for every ix in lo..hi.
                    unsafe { *row.add(t * g.sw) += v };
                }
            }
        }
    };
    if cx.threads > 1 && cog * kk * pin >= 1 << 14 {
        let per = cog.div_ceil(cx.threads);
        cx.par_for(cog.div_ceil(per), &|c| {
            (c * per..((c + 1) * per).min(cog)).for_each(one)
        });
    } else {
        (0..cog).for_each(one);
    }
}
