//! Branch-free f32 transcendental approximations that vectorise inside block loops.
//! Accuracy: exp within 2 ulp over the finite range; erf within 2e-7 absolute.

#[inline(always)]
pub fn exp(x: f32) -> f32 {
    // exp(x) = 2^n * exp(r), r in [-ln2/2, ln2/2]; Cephes-style degree-6 polynomial. Every step is
    // a lane-wise float or u32 op (no saturating float→int conversion), so loops vectorise.
    // Results below the smallest normal flush to 0 (x < -87.33); above 88.72 give +inf.
    let xc = x.clamp(-87.33, 88.72);
    let n = xc.mul_add(std::f32::consts::LOG2_E, 0.5).floor();
    let r = (-n).mul_add(0.693_145_75, xc);
    let r = (-n).mul_add(1.428_606_8e-6, r);
    let p = horner(
        &[
            0.5,
            1.666_666_5e-1,
            4.166_579_6e-2,
            8.333_452e-3,
            1.398_199_9e-3,
            1.987_569_1e-4,
        ],
        r,
    );
    let e = (p * r).mul_add(r, r) + 1.0;
    // n = 128 (x above 88.03) has no exponent field: 2^127 and e doubled
    let top = n > 127.0;
    let e = if top { e + e } else { e };
    let n = if top { 127.0 } else { n };
    // n + 127 in [1, 254] sits in the low mantissa bits of (n + 127 + 2^23)
    let biased = (n + (127.0 + 8_388_608.0))
        .to_bits()
        .wrapping_sub(0x4B00_0000);
    let scaled = e * f32::from_bits(biased << 23);
    if x < -87.33 {
        0.0
    } else if x > 88.72 {
        f32::INFINITY
    } else {
        scaled
    }
}

#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    // tanh(x) = 1 - 2 / (exp(2x) + 1); small |x| by the odd series to keep relative accuracy.
    let ax = x.abs();
    let big = 1.0 - 2.0 / (exp(2.0 * ax) + 1.0);
    let x2 = x * x;
    let small = ax * (1.0 + x2 * (-1.0 / 3.0 + x2 * (2.0 / 15.0 + x2 * (-17.0 / 315.0))));
    let t = if ax < 0.0625 { small } else { big };
    t.copysign(x)
}

/// erf(x) = x·P(x²) for |x| < 1, and 1 − exp(−x² + R(|x|)) for 1 ≤ |x| ≤ 3.92 (beyond, R at
/// 3.92 rounds to ±1 in f32). Near-minimax fits by tools/math/erf_fit.py, which also checks the
/// whole f32 evaluation against scipy (max abs error 1.1e-7). P's first coefficient is the fit's,
/// one ulp below 2/√π.
#[allow(clippy::approx_constant)]
const ERF_SMALL: [f32; 6] = [
    1.1283791,
    -0.37612355,
    0.112804115,
    -0.026717708,
    0.0049247895,
    -0.00056601537,
];
const ERF_TAIL: [f32; 7] = [
    -0.00035370307,
    -1.1270401,
    0.36177444,
    -0.10303746,
    0.021805365,
    -0.002939619,
    0.0001855752,
];

/// Horner's rule with fused multiply-adds (one instruction each where the kernel's features
/// include FMA).
#[inline(always)]
fn horner<const N: usize>(c: &[f32; N], x: f32) -> f32 {
    let mut p = c[N - 1];
    for &a in c[..N - 1].iter().rev() {
        p = p.mul_add(x, a);
    }
    p
}

#[inline(always)]
pub fn erf(x: f32) -> f32 {
    // Both branches are computed and one selected, without a division, so the loops around it
    // vectorise. A NaN takes the tail (the comparisons fail) and stays NaN there.
    let ax = x.abs();
    let series = x * horner(&ERF_SMALL, x * x);
    let xb = if ax > 3.92 { 3.92 } else { ax };
    let tail = (1.0 - exp((-xb).mul_add(xb, horner(&ERF_TAIL, xb)))).copysign(x);
    if ax < 1.0 {
        series
    } else {
        tail
    }
}

// The activations below are named `inline(always)` functions rather than closures at their call
// sites: a closure is a separate function that a debug build (many codegen units) may leave
// un-inlined and compiled without the caller's SIMD features, so its loop stops vectorising.

#[inline(always)]
pub fn gelu_exact(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// `x·clamp(x + 3, 0, 6)·⅙`: the product by ⅙ instead of a division by 6 (a division is
/// several times slower in SIMD) may differ from `x·clamp(x + 3, 0, 6)/6` by an ulp.
#[inline(always)]
pub fn hard_swish(x: f32) -> f32 {
    x * (x + 3.0).clamp(0.0, 6.0) * (1.0 / 6.0)
}

/// `hard_swish(x)·s + t`, two roundings (as the written-out ops give it): the chain's
/// `UnOp::HardSwish` and the convs' `Act::HardSwish`.
#[inline(always)]
pub fn hard_swish_affine(x: f32, s: f32, t: f32) -> f32 {
    hard_swish(x) * s + t
}

#[inline(always)]
pub fn gelu_sigmoid(x: f32) -> f32 {
    x * sigmoid(1.702 * x)
}

#[inline(always)]
pub fn silu(x: f32) -> f32 {
    x * sigmoid(x)
}

#[inline(always)]
pub fn gelu_tanh(x: f32) -> f32 {
    const C: f32 = 0.797_884_6; // sqrt(2/pi)
    0.5 * x * (1.0 + tanh(C * (x + 0.044_715 * x * x * x)))
}

#[inline(always)]
pub fn softplus(x: f32) -> f32 {
    // log(1 + exp(x)) without overflow: max(x, 0) + log1p(exp(-|x|)).
    x.max(0.0) + (exp(-x.abs())).ln_1p()
}

#[cfg(test)]
mod tests {
    /// Distance in units in the last place between two finite positive f32 values.
    fn ulps(a: f32, b: f32) -> u32 {
        a.to_bits().abs_diff(b.to_bits())
    }

    #[test]
    fn exp_is_within_2_ulp_of_libm_over_the_normal_range() {
        let mut worst = (0, 0.0f32);
        // every 97th f32 bit pattern from -87.33 to 88.72 (the results that are normal floats)
        for bits in (0u32..=u32::MAX).step_by(97) {
            let x = f32::from_bits(bits);
            if !(-87.33..=88.72).contains(&x) {
                continue;
            }
            let d = ulps(super::exp(x), libm::expf(x));
            if d > worst.0 {
                worst = (d, x);
            }
        }
        assert!(worst.0 <= 2, "{} ulp at x = {}", worst.0, worst.1);
        assert_eq!(super::exp(-100.0), 0.0);
        assert_eq!(super::exp(100.0), f32::INFINITY);
        assert!(super::exp(f32::NAN).is_nan());
    }

    #[test]
    fn erf_is_within_2e7_of_libm() {
        let mut worst = 0.0f64;
        for i in -600_000..=600_000 {
            let x = i as f32 * 1e-5;
            let err = (f64::from(super::erf(x)) - libm::erf(f64::from(x))).abs();
            worst = worst.max(err);
        }
        for x in [f32::INFINITY, f32::NEG_INFINITY, 1e30, -1e30, 0.0, -0.0] {
            let err = (f64::from(super::erf(x)) - libm::erf(f64::from(x))).abs();
            worst = worst.max(err);
        }
        assert!(worst <= 2e-7, "max abs error {worst}");
        assert!(super::erf(f32::NAN).is_nan());
    }
}
