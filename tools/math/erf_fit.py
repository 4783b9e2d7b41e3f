#!/usr/bin/env python3
"""Fits the two polynomials of the CPU engine's f32 erf (crates/cpu/src/kernels/math.rs) and
checks the whole approximation, evaluated in f32 with fused multiply-adds as the kernel does,
against scipy's erf. Prints the Rust constants.

    |x| < 1:        erf(x) = x · P(x²)                      P of degree 5
    1 ≤ |x| ≤ 3.92: erf(x) = 1 − exp(−x² + R(|x|))          R of degree 6
    |x| > 3.92:     R at 3.92, which gives 1 after rounding to f32 (erfc(3.92) < 2^-25)

P minimises the relative error of erf, R the absolute error of erf (R's error weighted by
erfc), both near-minimax by Lawson's iteration over Chebyshev nodes against mpmath at 40 digits.
Versions used: numpy 2.4.6, mpmath 1.3.0, scipy 1.17.1.
Usage: python3 tools/math/erf_fit.py
"""
import mpmath as mp
import numpy as np
from scipy.special import erf as scipy_erf

mp.mp.dps = 40
F32 = np.float32
SPLIT, CLAMP = 1.0, 3.92


def lawson(xs, degree, target, weight, iters=60):
    basis = np.array([[x**i for i in range(degree + 1)] for x in xs], dtype=np.float64)
    target, weight = np.asarray(target, np.float64), np.asarray(weight, np.float64)
    lw = np.ones(len(xs))
    for _ in range(iters):
        w = np.sqrt(lw) * weight
        c, *_ = np.linalg.lstsq(basis * w[:, None], target * w, rcond=None)
        err = np.abs((basis @ c - target) * weight)
        lw = lw * err
        lw /= lw.sum()
    return c.astype(F32), err.max()


def chebyshev(lo, hi, n):
    return (np.cos(np.linspace(np.pi, 0, n)) + 1) / 2 * (hi - lo) + lo


def fma(a, b, c):
    return (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(F32)


def horner(cs, x):
    p = np.full_like(x, cs[-1])
    for c in cs[-2::-1]:
        p = fma(p, x, np.full_like(x, c))
    return p


def exp_f32(x):
    """math::exp as the kernel computes it (Cephes degree-6, 2^n by exponent bits)."""
    xc = np.clip(x, F32(-87.33), F32(88.72))
    n = np.floor(fma(xc, np.full_like(xc, 1.442_695), np.full_like(xc, 0.5)))
    r = fma(-n, np.full_like(xc, 0.693_145_75), xc)
    r = fma(-n, np.full_like(xc, 1.428_606_8e-6), r)
    p = horner([F32(c) for c in (0.5, 1.666_666_5e-1, 4.166_579_6e-2, 8.333_452e-3,
                                 1.398_199_9e-3, 1.987_569_1e-4)], r)
    e = (fma((p * r).astype(F32), r, r) + F32(1.0)).astype(F32)
    return (e.astype(np.float64) * np.exp2(n.astype(np.float64))).astype(F32)


def erf_f32(x, p, r):
    ax = np.abs(x)
    small = (x * horner(p, (x * x).astype(F32))).astype(F32)
    xb = np.minimum(ax, F32(CLAMP))
    tail = (F32(1.0) - exp_f32(fma(-xb, xb, horner(r, xb)))).astype(F32)
    return np.where(ax < SPLIT, small, np.copysign(tail, x))


def main():
    us = chebyshev(0.0, SPLIT * SPLIT, 2000)
    us[0] = 1e-12
    p, p_err = lawson(us, 5, [float(mp.erf(mp.sqrt(u)) / mp.sqrt(u)) for u in us], np.ones(len(us)))
    xs = chebyshev(SPLIT, CLAMP, 3000)
    r, r_err = lawson(
        xs, 6, [float(mp.log(mp.erfc(x)) + x * x) for x in xs], [float(mp.erfc(x)) for x in xs]
    )
    grid = (np.arange(-600_000, 600_001) * 1e-5).astype(F32)
    worst = np.abs(erf_f32(grid, p, r).astype(np.float64) - scipy_erf(grid.astype(np.float64))).max()
    print(f"// fit: P relative {p_err:.2e}, R weighted {r_err:.2e}; f32 erf max abs error {worst:.2e}")
    for name, cs in (("ERF_SMALL", p), ("ERF_TAIL", r)):
        body = ", ".join(np.format_float_positional(c, unique=True) for c in cs)
        print(f"const {name}: [f32; {len(cs)}] = [{body}];")


if __name__ == "__main__":
    main()
