//! The gemm crate's f32 product, split over the run's team.
//!
//! The gemm crate parallelises through rayon, whose sleeping workers take tens of microseconds to
//! wake; here each thread of the team instead computes one band of C on its own (columns when C
//! is at least as wide as it is tall, rows otherwise), packing the shared operand separately.
//! That repeats the packing of one operand per thread, O(mk) or O(kn) against O(mnk) of work.

use super::Cx;
use crate::tensor::SendPtr;

/// Strides of one matrix operand, in elements: (column stride, row stride).
#[derive(Clone, Copy)]
pub struct Strides(pub isize, pub isize);

/// `C[m, n] = A[m, k] · B[k, n]`, overwriting C; split when `split` and the run has threads.
///
/// # Safety
/// Each pointer with its strides describes an in-bounds matrix of the given shape; C does not
/// overlap A or B.
#[allow(clippy::too_many_arguments)]
pub unsafe fn sgemm(
    cx: &Cx,
    split: bool,
    (m, n, k): (usize, usize, usize),
    c: *mut f32,
    cs: Strides,
    a: *const f32,
    as_: Strides,
    b: *const f32,
    bs: Strides,
) {
    let one = |c: *mut f32, a: *const f32, b: *const f32, m: usize, n: usize| {
        // SAFETY: the caller's contract, restricted to a band of C.
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                c,
                cs.0,
                cs.1,
                false,
                a,
                as_.0,
                as_.1,
                b,
                bs.0,
                bs.1,
                0.0,
                1.0,
                false,
                false,
                false,
                gemm::Parallelism::None,
            )
        }
    };
    let threads = if split { cx.threads } else { 1 };
    // bands of whole 16-wide column or row groups, so every band keeps full register tiles
    let (wide, len) = if n >= m { (true, n) } else { (false, m) };
    let band = len.div_ceil(threads).next_multiple_of(16);
    let tasks = len.div_ceil(band);
    if tasks <= 1 {
        one(c, a, b, m, n);
        return;
    }
    let (cp, ap, bp) = (SendPtr(c), SendPtr(a as *mut f32), SendPtr(b as *mut f32));
    cx.par_for(tasks, &|t| {
        let lo = t * band;
        let w = band.min(len - lo);
        let lo = lo as isize;
        // SAFETY: bands are disjoint and inside C; A's rows and B's columns stay in bounds.
        unsafe {
            if wide {
                one(
                    cp.get().offset(lo * cs.0),
                    ap.get(),
                    bp.get().offset(lo * bs.0),
                    m,
                    w,
                )
            } else {
                one(
                    cp.get().offset(lo * cs.1),
                    ap.get().offset(lo * as_.1),
                    bp.get(),
                    w,
                    n,
                )
            }
        }
    });
}
