//! Floating-point literals: C99 hex floats (`0x1.5798eep-27`, `-0x0p+0`, `inf`, `nan`) exactly as
//! Apple's `model.mil` prints them, and correctly rounded reading into a declared float dtype.

use crate::ast::DType;

/// `%a`-style spelling of `v`: normalized significand, trailing zero digits trimmed, signed
/// decimal exponent. Values of narrower dtypes print the same way (they are exact in `f64`).
pub fn format_hex(v: f64) -> String {
    if v.is_nan() {
        return "nan".into();
    }
    let sign = if v.is_sign_negative() { "-" } else { "" };
    if v.is_infinite() {
        return format!("{sign}inf");
    }
    if v == 0.0 {
        return format!("{sign}0x0p+0");
    }
    let bits = v.to_bits();
    let field = ((bits >> 52) & 0x7ff) as i32;
    let mut mantissa = bits & ((1u64 << 52) - 1);
    let mut exponent = field - 1023;
    if field == 0 {
        // Subnormal: shift the leading one into the implicit position.
        let shift = mantissa.leading_zeros() as i32 - 11;
        mantissa = (mantissa << shift) & ((1u64 << 52) - 1);
        exponent = -1022 - shift;
    }
    let mut digits = format!("{mantissa:013x}");
    while digits.ends_with('0') {
        digits.pop();
    }
    let dot = if digits.is_empty() { "" } else { "." };
    let exp_sign = if exponent >= 0 { "+" } else { "" };
    format!("{sign}0x1{dot}{digits}p{exp_sign}{exponent}")
}

/// Binary format parameters: significand bits (with the implicit one), smallest exponent of
/// the least significant bit, largest finite exponent.
#[derive(Clone, Copy)]
struct Format {
    precision: i32,
    min_lsb_exponent: i32,
    max_exponent: i32,
}

fn format_of(dtype: DType) -> Option<Format> {
    Some(match dtype {
        DType::Fp64 => Format {
            precision: 53,
            min_lsb_exponent: -1074,
            max_exponent: 1023,
        },
        DType::Fp32 => Format {
            precision: 24,
            min_lsb_exponent: -149,
            max_exponent: 127,
        },
        DType::Fp16 => Format {
            precision: 11,
            min_lsb_exponent: -24,
            max_exponent: 15,
        },
        DType::Bf16 => Format {
            precision: 8,
            min_lsb_exponent: -133,
            max_exponent: 127,
        },
        _ => return None,
    })
}

/// An exactly read hex float: `(-1)^negative · mantissa · 2^exponent`, `sticky` set when nonzero
/// digits beyond the kept mantissa were dropped.
#[derive(Clone, Copy, Debug)]
pub struct HexFloat {
    negative: bool,
    mantissa: u64,
    exponent: i64,
    sticky: bool,
}

/// Reads `[-+]0x<hex>[.<hex>]p[-+]<dec>`; `None` when malformed.
pub fn parse_hex(text: &str) -> Option<HexFloat> {
    let (negative, rest) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let rest = rest
        .strip_prefix("0x")
        .or_else(|| rest.strip_prefix("0X"))?;
    let (significand, exp_text) = rest.split_once(['p', 'P'])?;
    let (int_part, frac_part) = significand.split_once('.').unwrap_or((significand, ""));
    if int_part.is_empty() && frac_part.is_empty() {
        return None;
    }
    let exp_digits = exp_text.strip_prefix(['+', '-']).unwrap_or(exp_text);
    if exp_digits.is_empty() || !exp_digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Clamp absurd exponents; anything this large is already inf or zero.
    let exponent: i64 = exp_text
        .parse::<i64>()
        .unwrap_or(if exp_text.starts_with('-') {
            -1_000_000
        } else {
            1_000_000
        });
    let exponent = exponent.clamp(-1_000_000, 1_000_000);
    let mut mantissa: u64 = 0;
    let mut extra_exponent: i64 = 0;
    let mut sticky = false;
    for (i, c) in int_part.chars().chain(frac_part.chars()).enumerate() {
        let digit = c.to_digit(16)? as u64;
        let is_fraction = i >= int_part.len();
        if mantissa < (1 << 59) {
            mantissa = mantissa * 16 + digit;
            if is_fraction {
                extra_exponent -= 4;
            }
        } else {
            sticky |= digit != 0;
            if !is_fraction {
                extra_exponent += 4;
            }
        }
    }
    Some(HexFloat {
        negative,
        mantissa,
        exponent: exponent + extra_exponent,
        sticky,
    })
}

impl HexFloat {
    /// The value rounded (to nearest, ties to even) into `dtype`, returned widened to `f64`.
    pub fn round_to(self, dtype: DType) -> Option<f64> {
        let format = format_of(dtype)?;
        let sign = if self.negative { -1.0 } else { 1.0 };
        if self.mantissa == 0 {
            return Some(sign * 0.0);
        }
        let m = self.mantissa as u128;
        let bit_len = 128 - m.leading_zeros() as i64;
        let mut lsb =
            (self.exponent + bit_len - format.precision as i64).max(format.min_lsb_exponent as i64);
        let drop = lsb - self.exponent;
        let mut kept: u128 = if drop <= 0 {
            m << (-drop) as u32
        } else if drop > 100 {
            0
        } else {
            let drop = drop as u32;
            let kept = m >> drop;
            let rest = m & ((1u128 << drop) - 1);
            let half = 1u128 << (drop - 1);
            let round_up = rest > half || (rest == half && (self.sticky || kept & 1 == 1));
            kept + round_up as u128
        };
        if kept >> format.precision != 0 {
            kept >>= 1;
            lsb += 1;
        }
        if kept == 0 {
            return Some(sign * 0.0);
        }
        let top_exponent = lsb + (127 - kept.leading_zeros() as i64);
        if top_exponent > format.max_exponent as i64 {
            return Some(sign * f64::INFINITY);
        }
        // kept < 2^53 and lsb ≥ -1074: exact in f64.
        Some(sign * (kept as f64) * pow2(lsb as i32))
    }
}

/// 2^e for -1074 ≤ e ≤ 1023, exactly.
fn pow2(e: i32) -> f64 {
    if e >= -1022 {
        f64::from_bits(((e + 1023) as u64) << 52)
    } else {
        f64::from_bits(1u64 << (e + 1074))
    }
}

/// `v` rounded to nearest in `dtype`, widened back to `f64`; `None` for non-float dtypes.
pub fn round_f64_to(v: f64, dtype: DType) -> Option<f64> {
    Some(match dtype {
        DType::Fp64 => v,
        DType::Fp32 => v as f32 as f64,
        DType::Fp16 => half::f16::from_f64(v).to_f64(),
        DType::Bf16 => half::bf16::from_f64(v).to_f64(),
        _ => return None,
    })
}

/// Whether `v` is exactly a value of `dtype` (NaN counts as representable).
pub fn representable(v: f64, dtype: DType) -> bool {
    match round_f64_to(v, dtype) {
        Some(r) => v.is_nan() || r.to_bits() == v.to_bits(),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_printf_a() {
        assert_eq!(format_hex(0.0), "0x0p+0");
        assert_eq!(format_hex(-0.0), "-0x0p+0");
        assert_eq!(format_hex(1.0), "0x1p+0");
        assert_eq!(format_hex(0.5), "0x1p-1");
        assert_eq!(format_hex(-10.0), "-0x1.4p+3");
        assert_eq!(format_hex(1e-8f32 as f64), "0x1.5798eep-27");
        assert_eq!(format_hex(2f64.powi(-24)), "0x1p-24");
        assert_eq!(format_hex(1023.0 * 2f64.powi(-24)), "0x1.ff8p-15");
        assert_eq!(format_hex(f64::from_bits(1)), "0x1p-1074");
        assert_eq!(format_hex(f64::INFINITY), "inf");
        assert_eq!(format_hex(f64::NEG_INFINITY), "-inf");
        assert_eq!(format_hex(f64::NAN), "nan");
    }

    #[test]
    fn every_fp16_value_survives_format_and_parse() {
        for bits in 0..=u16::MAX {
            let v = half::f16::from_bits(bits).to_f64();
            if v.is_nan() {
                continue;
            }
            let text = format_hex(v);
            let back = parse_hex(&text)
                .and_then(|h| h.round_to(DType::Fp16))
                .or_else(|| text.parse::<f64>().ok());
            assert_eq!(
                back.map(f64::to_bits),
                Some(v.to_bits()),
                "{bits:#06x} {text}"
            );
        }
    }

    #[test]
    fn rounds_to_nearest_even_in_the_declared_dtype() {
        // 1 + 2^-11 lies exactly between two fp16 values: ties go to the even one (1.0).
        let tie = parse_hex("0x1.002p+0").unwrap();
        assert_eq!(tie.round_to(DType::Fp16), Some(1.0));
        // A hair above the tie rounds up, even when the extra bit is far beyond 64 bits.
        let above = parse_hex("0x1.00200000000000000000001p+0").unwrap();
        assert_eq!(above.round_to(DType::Fp16), Some(1.0 + 2f64.powi(-10)));
        // Overflow and underflow.
        assert_eq!(
            parse_hex("0x1p+16").unwrap().round_to(DType::Fp16),
            Some(f64::INFINITY)
        );
        assert_eq!(
            parse_hex("0x1p-26").unwrap().round_to(DType::Fp16),
            Some(0.0)
        );
        assert_eq!(
            parse_hex("0x1.8p-25").unwrap().round_to(DType::Fp16),
            Some(2f64.powi(-24))
        );
        assert_eq!(
            parse_hex("-0x1p-1075")
                .unwrap()
                .round_to(DType::Fp64)
                .map(f64::to_bits),
            Some((-0.0f64).to_bits())
        );
    }

    #[test]
    fn rejects_malformed_hex() {
        for bad in ["0x", "0xp+1", "0x1", "0x1p", "0x1.g p+1", "1p+0", "0x1p+x"] {
            assert!(parse_hex(bad).is_none(), "{bad}");
        }
    }
}
