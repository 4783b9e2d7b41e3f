//! Resizing 8-bit images exactly as Pillow's `Image.resize` does (`libImaging/Resample.c`), which
//! is what torchvision's `Resize` runs on PIL images: a separable filter whose support widens by
//! the scale factor when shrinking (antialiasing), coefficients normalised per output pixel and
//! rounded to fixed point with 22 fractional bits, the horizontal pass first into an 8-bit
//! intermediate covering only the rows the vertical pass reads, each pass rounded and clamped to
//! 0..=255.

/// The resampling filter (Pillow's `Image.Resampling`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Interpolation {
    /// Triangle filter, support 1 (`PIL.Image.BILINEAR`, code 2).
    Bilinear,
    /// Keys cubic with a = -0.5, support 2 (`PIL.Image.BICUBIC`, code 3).
    Bicubic,
}

impl Interpolation {
    /// From Pillow's integer code as `preprocessor_config.json` stores it (`resample`).
    pub fn from_pil_code(code: i64) -> Option<Interpolation> {
        match code {
            2 => Some(Interpolation::Bilinear),
            3 => Some(Interpolation::Bicubic),
            _ => None,
        }
    }

    fn support(self) -> f64 {
        match self {
            Interpolation::Bilinear => 1.0,
            Interpolation::Bicubic => 2.0,
        }
    }

    fn weight(self, x: f64) -> f64 {
        let x = x.abs();
        match self {
            Interpolation::Bilinear => {
                if x < 1.0 {
                    1.0 - x
                } else {
                    0.0
                }
            }
            Interpolation::Bicubic => {
                const A: f64 = -0.5;
                if x < 1.0 {
                    ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
                } else if x < 2.0 {
                    (((x - 5.0) * x + 8.0) * x - 4.0) * A
                } else {
                    0.0
                }
            }
        }
    }
}

const PRECISION_BITS: u32 = 32 - 8 - 2;

/// Per output position: the first input index, the tap count, and `ksize` fixed-point weights.
struct Coeffs {
    ksize: usize,
    bounds: Vec<(usize, usize)>,
    weights: Vec<i32>,
}

fn coefficients(in_size: usize, out_size: usize, filter: Interpolation) -> Coeffs {
    let scale = in_size as f64 / out_size as f64;
    let filterscale = scale.max(1.0);
    let support = filter.support() * filterscale;
    let ksize = support.ceil() as usize * 2 + 1;
    let mut bounds = Vec::with_capacity(out_size);
    let mut weights = vec![0i32; out_size * ksize];
    let mut k = vec![0f64; ksize];
    for xx in 0..out_size {
        let center = (xx as f64 + 0.5) * scale;
        let ss = 1.0 / filterscale;
        // Pillow truncates toward zero here (C `(int)` casts).
        let xmin = ((center - support + 0.5) as i64).max(0) as usize;
        let xmax = ((center + support + 0.5) as i64).min(in_size as i64) as usize;
        let taps = xmax.saturating_sub(xmin);
        let mut total = 0.0;
        for (x, w) in k.iter_mut().enumerate().take(taps) {
            *w = filter.weight((x as f64 + xmin as f64 - center + 0.5) * ss);
            total += *w;
        }
        let row = &mut weights[xx * ksize..(xx + 1) * ksize];
        for x in 0..taps {
            let w = if total != 0.0 { k[x] / total } else { k[x] };
            let fixed = w * f64::from(1u32 << PRECISION_BITS);
            row[x] = if w < 0.0 {
                (-0.5 + fixed) as i32
            } else {
                (0.5 + fixed) as i32
            };
        }
        bounds.push((xmin, taps));
    }
    Coeffs {
        ksize,
        bounds,
        weights,
    }
}

fn clip8(v: i64) -> u8 {
    (v >> PRECISION_BITS).clamp(0, 255) as u8
}

/// Resizes an interleaved 8-bit image of `channels` channels, `width`×`height`, to
/// `out_width`×`out_height`.
pub fn resize(
    pixels: &[u8],
    width: usize,
    height: usize,
    channels: usize,
    out_width: usize,
    out_height: usize,
    filter: Interpolation,
) -> Vec<u8> {
    debug_assert_eq!(pixels.len(), width * height * channels);
    let need_h = out_width != width;
    let need_v = out_height != height;
    let vert = coefficients(height, out_height, filter);
    let (first_row, last_row) = match (vert.bounds.first(), vert.bounds.last()) {
        (Some(&(first, _)), Some(&(start, taps))) => (first, start + taps),
        _ => (0, height),
    };
    let round = 1i64 << (PRECISION_BITS - 1);
    // Horizontal pass over the rows the vertical pass reads (all rows when it is skipped).
    let (rows, row_offset) = if need_h {
        let horiz = coefficients(width, out_width, filter);
        let (r0, r1) = if need_v {
            (first_row, last_row)
        } else {
            (0, height)
        };
        let mut out = vec![0u8; (r1 - r0) * out_width * channels];
        for (yy, y) in (r0..r1).enumerate() {
            let src = &pixels[y * width * channels..(y + 1) * width * channels];
            for xx in 0..out_width {
                let (xmin, taps) = horiz.bounds[xx];
                let k = &horiz.weights[xx * horiz.ksize..xx * horiz.ksize + taps];
                for c in 0..channels {
                    let mut ss = round;
                    for (x, &w) in k.iter().enumerate() {
                        ss += i64::from(src[(xmin + x) * channels + c]) * i64::from(w);
                    }
                    out[(yy * out_width + xx) * channels + c] = clip8(ss);
                }
            }
        }
        (out, r0)
    } else {
        (pixels.to_vec(), 0)
    };
    if !need_v {
        return rows;
    }
    let stride = out_width * channels;
    let mut out = vec![0u8; out_height * stride];
    for yy in 0..out_height {
        let (ymin, taps) = vert.bounds[yy];
        let k = &vert.weights[yy * vert.ksize..yy * vert.ksize + taps];
        let dst = &mut out[yy * stride..(yy + 1) * stride];
        for (i, d) in dst.iter_mut().enumerate() {
            let mut ss = round;
            for (y, &w) in k.iter().enumerate() {
                ss += i64::from(rows[(ymin - row_offset + y) * stride + i]) * i64::from(w);
            }
            *d = clip8(ss);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_of_every_output_pixel_sum_to_one_in_fixed_point() {
        for filter in [Interpolation::Bilinear, Interpolation::Bicubic] {
            for (i, o) in [(10, 3), (3, 10), (97, 36), (64, 64), (7, 1)] {
                let c = coefficients(i, o, filter);
                for xx in 0..o {
                    let (_, taps) = c.bounds[xx];
                    let sum: i64 = c.weights[xx * c.ksize..xx * c.ksize + taps]
                        .iter()
                        .map(|&w| i64::from(w))
                        .sum();
                    assert!((sum - (1 << PRECISION_BITS)).abs() <= taps as i64, "{sum}");
                }
            }
        }
    }

    #[test]
    fn a_flat_image_stays_flat() {
        let px = vec![77u8; 13 * 9 * 3];
        for filter in [Interpolation::Bilinear, Interpolation::Bicubic] {
            let out = resize(&px, 13, 9, 3, 5, 21, filter);
            assert!(out.iter().all(|&v| v == 77));
        }
    }
}
