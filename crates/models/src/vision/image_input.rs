//! Images in: decoding (JPEG, PNG, WebP, BMP) with EXIF orientation applied, conversion to 8-bit
//! RGB as PIL's `convert("RGB")` does (grey repeated, alpha dropped), and the classification
//! preprocessing recipe (resize, centre crop, rescale, normalise) into a `[3, H, W]` float tensor.

use std::io::{BufRead, Cursor, Seek};
use std::path::{Path, PathBuf};

use image::{ImageDecoder, ImageFormat, ImageReader};

use super::resample::{resize, Interpolation};

/// Decoded images may hold at most this many pixels (a guard against decompression bombs).
pub const MAX_PIXELS: u64 = 1 << 28;

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("{}: cannot read: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: unsupported image format ({what}); JPEG, PNG, WebP and BMP are read", path.display())]
    Unsupported { path: PathBuf, what: String },
    #[error("{}: corrupt or truncated {format} image: {reason}", path.display())]
    Corrupt {
        path: PathBuf,
        format: String,
        reason: String,
    },
    #[error("{}: {width}x{height} is too large (more than {MAX_PIXELS} pixels)", path.display())]
    TooLarge {
        path: PathBuf,
        width: u32,
        height: u32,
    },
}

/// An 8-bit RGB image, interleaved, row-major, orientation already applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RgbImage {
    pub width: usize,
    pub height: usize,
    /// `height * width * 3` bytes.
    pub pixels: Vec<u8>,
}

const FORMATS: [ImageFormat; 4] = [
    ImageFormat::Jpeg,
    ImageFormat::Png,
    ImageFormat::WebP,
    ImageFormat::Bmp,
];

/// Reads and decodes the image file at `path`.
pub fn load_image(path: impl AsRef<Path>) -> Result<RgbImage, ImageError> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|source| ImageError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    decode_image(&bytes, path)
}

/// Decodes `bytes`; `path` names the image in errors.
pub fn decode_image(bytes: &[u8], path: &Path) -> Result<RgbImage, ImageError> {
    let img = decode_from(Cursor::new(bytes), path)?;
    if bytes.starts_with(&[0xff, 0xd8]) {
        if let Err(reason) = jpeg_complete(bytes) {
            return Err(ImageError::Corrupt {
                path: path.to_path_buf(),
                format: "JPEG".into(),
                reason,
            });
        }
    }
    Ok(img)
}

/// The JPEG decoder fills a truncated scan with grey instead of failing; PIL refuses such a
/// file ("image file is truncated"). A complete file has an end-of-image marker (FF D9) after
/// its first top-level start-of-scan: marker segments before the scan are skipped by their
/// lengths (an EXIF thumbnail's own markers live inside APP1), and inside entropy-coded data a
/// 0xFF byte is always followed by 0x00 or a restart marker, so FF D9 cannot occur by chance.
fn jpeg_complete(bytes: &[u8]) -> Result<(), String> {
    let mut pos = 2;
    loop {
        let (Some(&ff), Some(&marker)) = (bytes.get(pos), bytes.get(pos + 1)) else {
            return Err(format!("ends at byte {pos} before any image scan"));
        };
        if ff != 0xff {
            return Err(format!("expected a marker at byte {pos}"));
        }
        match marker {
            0xff => pos += 1,
            0x01 | 0xd0..=0xd7 => pos += 2,
            0xd9 => return Err("ends before any image scan".into()),
            _ => {
                let len = match bytes.get(pos + 2..pos + 4) {
                    Some(&[a, b]) => usize::from(u16::from_be_bytes([a, b])),
                    _ => return Err(format!("truncated inside the marker at byte {pos}")),
                };
                let next = pos + 2 + len;
                if marker == 0xda {
                    let rest = bytes.get(next..).unwrap_or_default();
                    return if rest.windows(2).any(|w| w == [0xff, 0xd9]) {
                        Ok(())
                    } else {
                        Err("truncated: the image data stops before its end marker".into())
                    };
                }
                pos = next;
            }
        }
    }
}

fn decode_from<R: BufRead + Seek>(reader: R, path: &Path) -> Result<RgbImage, ImageError> {
    let reader = ImageReader::new(reader)
        .with_guessed_format()
        .map_err(|source| ImageError::Io {
            path: path.to_path_buf(),
            source,
        })?;
    let format = match reader.format() {
        Some(f) if FORMATS.contains(&f) => f,
        Some(f) => {
            return Err(ImageError::Unsupported {
                path: path.to_path_buf(),
                what: format!("{f:?}"),
            })
        }
        None => {
            return Err(ImageError::Unsupported {
                path: path.to_path_buf(),
                what: "not a recognised image signature".into(),
            })
        }
    };
    let corrupt = |e: image::ImageError| ImageError::Corrupt {
        path: path.to_path_buf(),
        format: format!("{format:?}").to_uppercase(),
        reason: e.to_string(),
    };
    let mut decoder = reader.into_decoder().map_err(corrupt)?;
    let (width, height) = decoder.dimensions();
    if u64::from(width) * u64::from(height) > MAX_PIXELS {
        return Err(ImageError::TooLarge {
            path: path.to_path_buf(),
            width,
            height,
        });
    }
    // A malformed EXIF block is ignored, as PIL's exif_transpose does.
    let orientation = decoder.orientation().ok();
    let mut img = image::DynamicImage::from_decoder(decoder).map_err(corrupt)?;
    if let Some(o) = orientation {
        img.apply_orientation(o);
    }
    let rgb = img.to_rgb8();
    Ok(RgbImage {
        width: rgb.width() as usize,
        height: rgb.height() as usize,
        pixels: rgb.into_raw(),
    })
}

/// How the shorter side, or both sides, are resized.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Resize {
    /// torchvision `Resize(n)`: the shorter side becomes `n`, the longer `floor(n * long / short)`.
    ShortestEdge(usize),
    /// Both sides exact.
    Exact { height: usize, width: usize },
}

/// Where a centre crop starts when the margin is odd.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CropRounding {
    /// torchvision `CenterCrop`: `round((size - crop) / 2)`, halves to even.
    Torchvision,
    /// Hugging Face image processors: `(size - crop) // 2`.
    Floor,
}

/// A classification preprocessing recipe: resize, centre crop, `pixel * rescale`, then
/// `(v - mean) / std` per channel.
#[derive(Clone, Debug, PartialEq)]
pub struct Preprocess {
    pub resize: Option<Resize>,
    pub interpolation: Interpolation,
    /// `(height, width)`.
    pub crop: Option<(usize, usize)>,
    pub crop_rounding: CropRounding,
    pub rescale: f32,
    pub mean: [f32; 3],
    pub std: [f32; 3],
}

pub const IMAGENET_MEAN: [f32; 3] = [0.485, 0.456, 0.406];
pub const IMAGENET_STD: [f32; 3] = [0.229, 0.224, 0.225];

impl Preprocess {
    /// torchvision's ImageNet evaluation recipe: `Resize(resize)`, `CenterCrop(crop)`,
    /// `ToTensor`, `Normalize(IMAGENET_MEAN, IMAGENET_STD)`.
    pub fn imagenet(resize: usize, crop: usize, interpolation: Interpolation) -> Preprocess {
        Preprocess {
            resize: Some(Resize::ShortestEdge(resize)),
            interpolation,
            crop: Some((crop, crop)),
            crop_rounding: CropRounding::Torchvision,
            rescale: 1.0 / 255.0,
            mean: IMAGENET_MEAN,
            std: IMAGENET_STD,
        }
    }

    /// The recipe a Hugging Face `preprocessor_config.json` describes, as transformers' PIL
    /// backend applies it: `size` as `{"shortest_edge"}`, `{"height", "width"}` or a number
    /// (with `crop_pct`, ConvNeXT's rule: below 384 the shorter side becomes
    /// `shortest_edge / crop_pct` and the centre `shortest_edge` square is kept), `resample`
    /// (2 bilinear, 3 bicubic), `do_center_crop` + `crop_size`, `do_rescale` + `rescale_factor`,
    /// `do_normalize` + `image_mean`/`image_std`. Crops start at `(size - crop) // 2`.
    pub fn from_preprocessor_config(cfg: &serde_json::Value) -> Result<Preprocess, String> {
        let flag = |k: &str, default: bool| cfg[k].as_bool().unwrap_or(default);
        let pair = |v: &serde_json::Value, what: &str| -> Result<Option<(usize, usize)>, String> {
            match v {
                serde_json::Value::Null => Ok(None),
                serde_json::Value::Number(n) => {
                    let n = n.as_u64().ok_or(format!("{what} is not a size"))? as usize;
                    Ok(Some((n, n)))
                }
                serde_json::Value::Object(o) => match (o.get("height"), o.get("width")) {
                    (Some(h), Some(w)) => Ok(Some((
                        h.as_u64().ok_or(format!("{what}.height is not a size"))? as usize,
                        w.as_u64().ok_or(format!("{what}.width is not a size"))? as usize,
                    ))),
                    _ => Err(format!("{what} has neither a number nor height and width")),
                },
                _ => Err(format!("{what} is not a size")),
            }
        };
        let interpolation = match cfg["resample"].as_i64() {
            None => Interpolation::Bilinear,
            Some(code) => Interpolation::from_pil_code(code).ok_or(format!(
                "resample {code} is not bilinear (2) or bicubic (3)"
            ))?,
        };
        let mut crop = if flag("do_center_crop", false) {
            pair(&cfg["crop_size"], "crop_size")?
        } else {
            None
        };
        let mut resize = None;
        if flag("do_resize", true) {
            let size = &cfg["size"];
            let shortest = size["shortest_edge"]
                .as_u64()
                .or_else(|| size.as_u64().filter(|_| cfg.get("crop_pct").is_some()));
            resize = match shortest {
                Some(edge) => {
                    let edge = edge as usize;
                    match cfg["crop_pct"].as_f64() {
                        Some(pct) if edge < 384 => {
                            if pct <= 0.0 || pct > 1.0 {
                                return Err(format!("crop_pct {pct} is not in (0, 1]"));
                            }
                            crop = Some((edge, edge));
                            Some(Resize::ShortestEdge((edge as f64 / pct) as usize))
                        }
                        Some(_) => Some(Resize::Exact {
                            height: edge,
                            width: edge,
                        }),
                        None => Some(Resize::ShortestEdge(edge)),
                    }
                }
                None => pair(size, "size")?.map(|(height, width)| Resize::Exact { height, width }),
            };
        }
        let three = |k: &str, default: [f32; 3]| -> Result<[f32; 3], String> {
            match cfg[k].as_array() {
                None => Ok(default),
                Some(a) if a.len() == 3 => {
                    let mut out = [0f32; 3];
                    for (o, v) in out.iter_mut().zip(a) {
                        *o = v.as_f64().ok_or(format!("{k} holds a non-number"))? as f32;
                    }
                    Ok(out)
                }
                Some(a) => Err(format!("{k} has {} entries, expected 3", a.len())),
            }
        };
        let (mean, std) = if flag("do_normalize", true) {
            (
                three("image_mean", IMAGENET_MEAN)?,
                three("image_std", IMAGENET_STD)?,
            )
        } else {
            ([0.0; 3], [1.0; 3])
        };
        if std.contains(&0.0) {
            return Err("image_std holds a zero".into());
        }
        let rescale = if flag("do_rescale", true) {
            cfg["rescale_factor"].as_f64().unwrap_or(1.0 / 255.0) as f32
        } else {
            1.0
        };
        Ok(Preprocess {
            resize,
            interpolation,
            crop,
            crop_rounding: CropRounding::Floor,
            rescale,
            mean,
            std,
        })
    }

    /// The `(height, width)` of the tensor this recipe makes from a `width`×`height` image.
    pub fn output_size(&self, width: usize, height: usize) -> (usize, usize) {
        if let Some(crop) = self.crop {
            return crop;
        }
        let (w, h) = self.resized_size(width, height);
        (h, w)
    }

    fn resized_size(&self, width: usize, height: usize) -> (usize, usize) {
        match &self.resize {
            None => (width, height),
            Some(Resize::Exact { height, width }) => (*width, *height),
            Some(Resize::ShortestEdge(n)) => {
                let (short, long) = (width.min(height), width.max(height));
                let new_long = ((*n as u64 * long as u64) / short as u64) as usize;
                if width <= height {
                    (*n, new_long.max(1))
                } else {
                    (new_long.max(1), *n)
                }
            }
        }
    }

    /// The resized and centre-cropped 8-bit pixels, interleaved RGB: what PIL's image holds
    /// before `ToTensor`.
    pub fn pixels(&self, img: &RgbImage) -> RgbImage {
        let (w, h) = self.resized_size(img.width, img.height);
        let resized = if (w, h) == (img.width, img.height) {
            img.clone()
        } else {
            RgbImage {
                width: w,
                height: h,
                pixels: resize(
                    &img.pixels,
                    img.width,
                    img.height,
                    3,
                    w,
                    h,
                    self.interpolation,
                ),
            }
        };
        match self.crop {
            Some(crop) => center_crop(&resized, crop, self.crop_rounding),
            None => resized,
        }
    }

    /// The `[3, H, W]` normalised float tensor (channel-major, as the models take it).
    pub fn tensor(&self, img: &RgbImage) -> Vec<f32> {
        let px = self.pixels(img);
        let plane = px.width * px.height;
        let mut out = vec![0f32; 3 * plane];
        for (i, rgb) in px.pixels.chunks_exact(3).enumerate() {
            for c in 0..3 {
                out[c * plane + i] =
                    (f32::from(rgb[c]) * self.rescale - self.mean[c]) / self.std[c];
            }
        }
        out
    }
}

fn crop_start(size: usize, crop: usize, rounding: CropRounding) -> isize {
    let margin = size as isize - crop as isize;
    match rounding {
        CropRounding::Floor => margin.div_euclid(2),
        CropRounding::Torchvision => {
            let half = margin.div_euclid(2);
            // margin / 2 is exact or a half: round halves to even.
            if margin.rem_euclid(2) == 1 && half.rem_euclid(2) == 1 {
                half + 1
            } else {
                half
            }
        }
    }
}

/// A `(height, width)` centre crop; regions outside the image are zero (torchvision pads with
/// zeros when the crop is larger than the image).
fn center_crop(img: &RgbImage, (ch, cw): (usize, usize), rounding: CropRounding) -> RgbImage {
    let top = crop_start(img.height, ch, rounding);
    let left = crop_start(img.width, cw, rounding);
    let mut pixels = vec![0u8; ch * cw * 3];
    for y in 0..ch {
        let sy = top + y as isize;
        if sy < 0 || sy >= img.height as isize {
            continue;
        }
        for x in 0..cw {
            let sx = left + x as isize;
            if sx < 0 || sx >= img.width as isize {
                continue;
            }
            let s = (sy as usize * img.width + sx as usize) * 3;
            pixels[(y * cw + x) * 3..(y * cw + x) * 3 + 3].copy_from_slice(&img.pixels[s..s + 3]);
        }
    }
    RgbImage {
        width: cw,
        height: ch,
        pixels,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crop_offsets_round_halves_to_even_like_python() {
        // Python: round(117 / 2) == 58, round(119 / 2) == 60, round(1 / 2) == 0, round(3 / 2) == 2.
        assert_eq!(crop_start(341, 224, CropRounding::Torchvision), 58);
        assert_eq!(crop_start(343, 224, CropRounding::Torchvision), 60);
        assert_eq!(crop_start(5, 4, CropRounding::Torchvision), 0);
        assert_eq!(crop_start(7, 4, CropRounding::Torchvision), 2);
        assert_eq!(crop_start(7, 4, CropRounding::Floor), 1);
    }

    #[test]
    fn preprocessor_configs_of_vit_clip_and_convnext_shapes() {
        let vit = serde_json::json!({"size": {"height": 224, "width": 224}, "resample": 2,
            "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]});
        let p = Preprocess::from_preprocessor_config(&vit).unwrap();
        assert_eq!(
            p.resize,
            Some(Resize::Exact {
                height: 224,
                width: 224
            })
        );
        assert_eq!((p.crop, p.mean), (None, [0.5; 3]));
        let clip = serde_json::json!({"size": {"shortest_edge": 224}, "resample": 3,
            "do_center_crop": true, "crop_size": {"height": 224, "width": 224}});
        let p = Preprocess::from_preprocessor_config(&clip).unwrap();
        assert_eq!(p.resize, Some(Resize::ShortestEdge(224)));
        assert_eq!(
            (p.crop, p.interpolation),
            (Some((224, 224)), Interpolation::Bicubic)
        );
        let big = serde_json::json!({"size": 384, "crop_pct": 0.875});
        let p = Preprocess::from_preprocessor_config(&big).unwrap();
        assert_eq!(
            p.resize,
            Some(Resize::Exact {
                height: 384,
                width: 384
            })
        );
        for bad in [
            serde_json::json!({"resample": 0}),
            serde_json::json!({"image_std": [0.5, 0.0, 0.5]}),
            serde_json::json!({"image_mean": [0.5]}),
            serde_json::json!({"size": "large"}),
        ] {
            assert!(Preprocess::from_preprocessor_config(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn shortest_edge_keeps_the_aspect_ratio_rounding_down() {
        let p = Preprocess::imagenet(256, 224, Interpolation::Bilinear);
        assert_eq!(p.resized_size(640, 480), (341, 256));
        assert_eq!(p.resized_size(480, 640), (256, 341));
    }
}
