//! Branch-free f32 transcendental approximations that vectorise inside block loops.
//! Accuracy: exp within 2 ulp over the finite range; erf within 2e-7 absolute.

#[inline(always)]
pub fn exp(x: f32) -> f32 {
    // exp(x) = 2^n * exp(r), r in [-ln2/2, ln2/2]; Cephes-style degree-6 polynomial. Every step is
    // a lane-wise float or u32 op (no saturating float→int conversion), so loops vectorise.
    // Results below the smallest normal flush to 0 (x < -87.33); above 88.72 give +inf.
    let xc = x.clamp(-87.33, 88.72);
    let n = (xc * std::f32::consts::LOG2_E + 0.5).floor();
    let r = xc - n * 0.693_145_75 - n * 1.428_606_8e-6;
    let p = 1.987_569_1e-4_f32;
    let p = p * r + 1.398_199_9e-3;
    let p = p * r + 8.333_452e-3;
    let p = p * r + 4.166_579_6e-2;
    let p = p * r + 1.666_666_5e-1;
    let p = p * r + 0.5;
    let e = p * r * r + r + 1.0;
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

/// Maclaurin coefficients of erf: 2/sqrt(pi) * (-1)^n / (n! (2n + 1)), n = 0..12.
const ERF_SERIES: [f32; 13] = erf_series();

/// Numerical Recipes' `erfcc` coefficients (published to 8 decimals, rounded to f32):
/// erfc(z) = t·exp(−z² + c₀ + t(c₁ + t(c₂ + …))), t = 1/(1 + z/2).
const ERFC: [f32; 10] = [
    -1.265_512_23_f64 as f32,
    1.000_023_68_f64 as f32,
    0.374_091_96_f64 as f32,
    0.096_784_18_f64 as f32,
    -0.186_288_06_f64 as f32,
    0.278_868_07_f64 as f32,
    -1.135_203_98_f64 as f32,
    1.488_515_87_f64 as f32,
    -0.822_152_23_f64 as f32,
    0.170_872_77_f64 as f32,
];

const fn erf_series() -> [f32; 13] {
    let mut out = [0.0f32; 13];
    let mut factorial = 1.0f64;
    let mut n = 0;
    while n < 13 {
        if n > 0 {
            factorial *= n as f64;
        }
        let sign = if n % 2 == 0 { 1.0 } else { -1.0 };
        out[n] =
            (std::f64::consts::FRAC_2_SQRT_PI * sign / (factorial * (2 * n + 1) as f64)) as f32;
        n += 1;
    }
    out
}

#[inline(always)]
pub fn erf(x: f32) -> f32 {
    // Both branches are computed and one selected, in f32 with the vectorisable exp, so the
    // loops around it vectorise. |x| < 1: the series above (truncation below 1e-10). Otherwise
    // 1 - erfc(|x|) by Numerical Recipes' erfcc (fractional error below 1.2e-7).
    let ax = x.abs();
    let x2 = x * x;
    let mut s = ERF_SERIES[12];
    for &a in ERF_SERIES[..12].iter().rev() {
        s = s * x2 + a;
    }
    let series = x * s;
    let t = 1.0 / (1.0 + 0.5 * ax);
    let mut p = ERFC[9];
    for &c in ERFC[1..9].iter().rev() {
        p = p * t + c;
    }
    let erfc = t * exp(-x2 + ERFC[0] + t * p);
    let tail = (1.0 - erfc).copysign(x);
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
    }
}
