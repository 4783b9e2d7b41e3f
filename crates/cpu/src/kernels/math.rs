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

#[inline(always)]
pub fn erf(x: f32) -> f32 {
    // |x| < 0.5: the Maclaurin series to x¹³ (relative error < 1e-7). Otherwise erf = 1 − erfc,
    // erfc(|x|) = t·exp(−x² + P(t)), t = 1/(1 + |x|/2) (Numerical Recipes' `erfcc`, fractional
    // error < 1.2e-7). Both in f32 with the polynomial exp above and selected branch-free, so the
    // loop vectorises; the absolute error stays below 2e-7.
    let x2 = x * x;
    let s = 1.0 / 9360.0;
    let s = -1.0 / 1320.0 + x2 * s;
    let s = 1.0 / 216.0 + x2 * s;
    let s = -1.0 / 42.0 + x2 * s;
    let s = 0.1 + x2 * s;
    let s = -1.0 / 3.0 + x2 * s;
    let s = 1.0 + x2 * s;
    let series = x * s * std::f32::consts::FRAC_2_SQRT_PI;
    let ax = x.abs();
    let t = 1.0 / (1.0 + 0.5 * ax);
    let p = -0.822_152_23 + t * 0.170_872_77;
    let p = 1.488_515_9 + t * p;
    let p = -1.135_204 + t * p;
    let p = 0.278_868_07 + t * p;
    let p = -0.186_288_06 + t * p;
    let p = 0.096_784_18 + t * p;
    let p = 0.374_091_96 + t * p;
    let p = 1.000_023_7 + t * p;
    let p = -1.265_512_2 + t * p;
    let y = t * exp(-ax * ax + p);
    let tail = (1.0 - y).copysign(x);
    if ax < 0.5 {
        series
    } else {
        tail
    }
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
    /// erf by its Maclaurin series in f64 (accurate to ~1e-12 for |x| <= 3.5).
    fn erf_series(x: f64) -> f64 {
        let (mut term, mut sum, mut n) = (x, x, 0.0f64);
        while term.abs() > 1e-17 * sum.abs().max(1e-300) && n < 200.0 {
            n += 1.0;
            term *= -x * x / n;
            sum += term / (2.0 * n + 1.0);
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    }

    #[test]
    fn erf_is_within_2e7_of_the_series() {
        let mut worst = 0.0f64;
        for i in -35_000..=35_000 {
            let x = i as f64 * 1e-4;
            let got = f64::from(super::erf(x as f32));
            worst = worst.max((got - erf_series(f64::from(x as f32))).abs());
        }
        assert!(worst < 2e-7, "max abs error {worst:e}");
        for x in [1e-6f32, -3e-4, 2e-2] {
            let want = erf_series(f64::from(x));
            let rel = ((f64::from(super::erf(x)) - want) / want).abs();
            assert!(rel < 3e-7, "erf({x}): relative error {rel:e}");
        }
        assert_eq!(super::erf(10.0), 1.0);
        assert_eq!(super::erf(-10.0), -1.0);
        assert_eq!(super::erf(0.0), 0.0);
    }
}
