//! The narrow float element types ONNX defines (FLOAT16, BFLOAT16 and the four FLOAT8 kinds; the
//! schema this crate was generated from predates FLOAT4E2M1): decoding their bits, and rounding
//! f32 values onto them as ONNX's Cast does. The graph holds their values as f32 (each of them is
//! exactly an f32).

use crate::proto::tensor_proto::DataType;
use aneforge::graph::{scalar, CompareOp};
use aneforge::{GraphError, Tensor};

/// How a format encodes infinities and NaN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Special {
    /// IEEE 754: an all-ones exponent is infinity (zero mantissa) or NaN.
    Ieee,
    /// FLOAT8E4M3FN: no infinities; only the all-ones exponent with all-ones mantissa is NaN.
    Fn,
    /// FLOAT8E4M3FNUZ, FLOAT8E5M2FNUZ: no infinities, no negative zero; the bits of −0 are NaN.
    Fnuz,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FloatFormat {
    exponent_bits: u32,
    mantissa_bits: u32,
    bias: i32,
    special: Special,
    /// The largest finite value.
    max: f32,
    /// Whether `saturate` (Cast's attribute for the FLOAT8 kinds) applies.
    saturable: bool,
    /// Whether Cast rounds toward zero instead of to nearest: BFLOAT16, as ONNX's reference
    /// implementation and its backend test data (onnx 1.17) do.
    truncates: bool,
}

impl FloatFormat {
    /// The format of an ONNX element type, if it is one of the narrow floats.
    pub fn of(code: i32) -> Option<FloatFormat> {
        use DataType as D;
        let f = |e, m, bias, special, max, saturable| FloatFormat {
            exponent_bits: e,
            mantissa_bits: m,
            bias,
            special,
            max,
            saturable,
            truncates: false,
        };
        Some(match D::try_from(code).ok()? {
            D::Float16 => f(5, 10, 15, Special::Ieee, 65504.0, false),
            D::Bfloat16 => FloatFormat {
                truncates: true,
                ..f(8, 7, 127, Special::Ieee, 3.389_531_4e38, false)
            },
            D::Float8e4m3fn => f(4, 3, 7, Special::Fn, 448.0, true),
            D::Float8e4m3fnuz => f(4, 3, 8, Special::Fnuz, 240.0, true),
            D::Float8e5m2 => f(5, 2, 15, Special::Ieee, 57344.0, true),
            D::Float8e5m2fnuz => f(5, 2, 16, Special::Fnuz, 57344.0, true),
            _ => return None,
        })
    }

    /// The number of bits of one value.
    pub fn bits(&self) -> u32 {
        1 + self.exponent_bits + self.mantissa_bits
    }

    /// The smallest exponent of a normal number.
    fn min_exponent(&self) -> i32 {
        1 - self.bias
    }

    /// The largest exponent of a finite number.
    fn max_exponent(&self) -> i32 {
        let all_ones = (1i32 << self.exponent_bits) - 1;
        match self.special {
            Special::Ieee => all_ones - 1 - self.bias,
            Special::Fn | Special::Fnuz => all_ones - self.bias,
        }
    }

    /// The value of one encoding (the low `bits()` bits of `bits`).
    pub fn decode(&self, bits: u32) -> f32 {
        let m_bits = self.mantissa_bits;
        let sign_bit = 1u32 << (self.bits() - 1);
        let exp_all_ones = (1u32 << self.exponent_bits) - 1;
        let negative = bits & sign_bit != 0;
        let exponent = (bits >> m_bits) & exp_all_ones;
        let mantissa = bits & ((1u32 << m_bits) - 1);
        match self.special {
            Special::Ieee if exponent == exp_all_ones => {
                return if mantissa != 0 {
                    f32::NAN
                } else if negative {
                    f32::NEG_INFINITY
                } else {
                    f32::INFINITY
                };
            }
            Special::Fn if exponent == exp_all_ones && mantissa == (1 << m_bits) - 1 => {
                return f32::NAN
            }
            Special::Fnuz if bits & (sign_bit * 2 - 1) == sign_bit => return f32::NAN,
            _ => {}
        }
        let magnitude = if exponent == 0 {
            mantissa as f64 * 2f64.powi(self.min_exponent() - m_bits as i32)
        } else {
            (1.0 + mantissa as f64 / (1u64 << m_bits) as f64)
                * 2f64.powi(exponent as i32 - self.bias)
        };
        let v = magnitude as f32;
        if negative {
            -v
        } else {
            v
        }
    }

    /// `x` rounded to this format, to nearest with ties to even (toward zero for BFLOAT16), held
    /// as f32. Values beyond the
    /// largest finite one become infinity where the format has it, NaN where it does not; with
    /// `saturate` (the FLOAT8 kinds) they become the largest finite value of their sign instead,
    /// and so do infinities. Every step is exact in f32: the
    /// quantum `q` (the spacing of the format's values at `|x|`) is a power of two found by
    /// comparisons and power-of-two scalings, and `round(|x| / q) · q` rounds half to even.
    pub fn round(&self, x: &Tensor, saturate: bool) -> Result<Tensor, GraphError> {
        let emin = self.min_exponent();
        // 2^128 is no f32: BFLOAT16's top binade is found as [2^127, ∞)
        let top = (self.max_exponent() + 1).min(127);
        let a = x.abs()?;
        // |x| clamped into the exponent range whose quantum matters: below 2^emin the spacing is
        // the subnormal one, from 2^top on every value overflows anyway.
        let clamped = a.maximum_scalar(pow2(emin))?.minimum(&scalar(pow2(top)))?;
        // m · s = clamped with s a power of two and m in [1, 2), found greedily.
        let mut m = clamped;
        let mut s = scalar(1.0);
        for k in steps(top) {
            let up = m.compare_scalar(CompareOp::GreaterEqual, pow2(k))?;
            m = up.select(&m.mul_scalar(pow2(-k))?, &m)?;
            s = up.select(&s.mul_scalar(pow2(k))?, &s)?;
        }
        for k in steps(-emin) {
            let down = m.compare_scalar(CompareOp::Less, pow2(1 - k))?;
            m = down.select(&m.mul_scalar(pow2(k))?, &m)?;
            s = down.select(&s.mul_scalar(pow2(-k))?, &s)?;
        }
        let q = s.mul_scalar(pow2(-(self.mantissa_bits as i32)))?;
        let steps = a.div(&q)?;
        let whole = if self.truncates {
            steps.floor()?
        } else {
            steps.round()?
        };
        let rounded = whole.mul(&q)?;
        let over = rounded.compare_scalar(CompareOp::Greater, self.max)?;
        let overflow = if saturate && self.saturable {
            scalar(self.max)
        } else if self.special == Special::Ieee {
            scalar(f32::INFINITY)
        } else {
            scalar(f32::NAN)
        };
        let magnitude = over.select(&overflow, &rounded)?;
        let negative = x.compare_scalar(CompareOp::Less, 0.0)?;
        negative.select(&magnitude.neg()?, &magnitude)
    }
}

fn pow2(e: i32) -> f32 {
    2f32.powi(e)
}

/// Powers of two, largest first, whose greedy sums reach every integer in `0..=bound`.
fn steps(bound: i32) -> Vec<i32> {
    let mut k = 1;
    while k * 2 <= bound {
        k *= 2;
    }
    let mut out = Vec::new();
    while k >= 1 && bound > 0 {
        out.push(k);
        k /= 2;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_the_float8_extremes() {
        let e4m3fn = FloatFormat::of(DataType::Float8e4m3fn as i32).unwrap();
        assert_eq!(e4m3fn.decode(0x7e), 448.0);
        assert!(e4m3fn.decode(0x7f).is_nan());
        assert_eq!(e4m3fn.decode(0x01), 2f32.powi(-9));
        let e5m2 = FloatFormat::of(DataType::Float8e5m2 as i32).unwrap();
        assert_eq!(e5m2.decode(0x7b), 57344.0);
        assert_eq!(e5m2.decode(0xfc), f32::NEG_INFINITY);
        let fnuz = FloatFormat::of(DataType::Float8e4m3fnuz as i32).unwrap();
        assert!(fnuz.decode(0x80).is_nan());
        assert_eq!(fnuz.decode(0x7f), 240.0);
    }

    #[test]
    fn steps_cover_the_range() {
        assert_eq!(steps(16), vec![16, 8, 4, 2, 1]);
        assert_eq!(steps(15), vec![8, 4, 2, 1]);
        assert!(steps(0).is_empty());
    }
}
