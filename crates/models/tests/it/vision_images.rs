//! Image decoding and preprocessing against PIL + torchvision
//! (`tools/fixtures/vision/images.py`): decoding, Pillow's resampling on PIL's own pixels within
//! 1 LSB, the whole pipeline, the normalised tensor, and errors that name the file.

use std::path::{Path, PathBuf};

use aneforge::engine::HostTensor;
use aneforge_models::npy;
use aneforge_models::vision::{
    load_image, ImageError, Interpolation, Preprocess, Resize, RgbImage,
};
use serde_json::Value;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/fixtures/vision/out/images")
}

fn manifest() -> Value {
    let text = std::fs::read_to_string(dir().join("manifest.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn recipe(m: &Value, name: &str) -> Preprocess {
    let r = &m["recipes"][name];
    let interpolation = match r["interpolation"].as_str().unwrap() {
        "bilinear" => Interpolation::Bilinear,
        "bicubic" => Interpolation::Bicubic,
        other => panic!("{other}"),
    };
    let crop = r["crop"].as_u64().unwrap() as usize;
    let mut p = Preprocess::imagenet(0, crop, interpolation);
    p.resize = Some(Resize::ShortestEdge(r["resize"].as_u64().unwrap() as usize));
    p
}

fn u8_npy(name: &str) -> (Vec<usize>, Vec<u8>) {
    match npy::read_tensor(dir().join(name)).unwrap() {
        (shape, HostTensor::U8(data)) => (shape, data),
        _ => panic!("{name}: uint8 expected"),
    }
}

/// PIL's decoded pixels of `image` (orientation applied, RGB).
fn pil_decoded(image: &str) -> RgbImage {
    let (shape, pixels) = u8_npy(&format!("{image}.decoded.npy"));
    RgbImage {
        width: shape[1],
        height: shape[0],
        pixels,
    }
}

/// (largest difference, mean difference) between our `[H, W, 3]` pixels and a `[3, H, W]` fixture.
fn compare_planar(ours: &RgbImage, fixture: &str) -> (i32, f64) {
    let (shape, want) = u8_npy(fixture);
    assert_eq!(shape, [3, ours.height, ours.width], "{fixture}");
    let plane = ours.width * ours.height;
    let mut worst = 0i32;
    let mut sum = 0f64;
    for (i, rgb) in ours.pixels.chunks_exact(3).enumerate() {
        for c in 0..3 {
            let d = (i32::from(rgb[c]) - i32::from(want[c * plane + i])).abs();
            worst = worst.max(d);
            sum += f64::from(d);
        }
    }
    (worst, sum / (3 * plane) as f64)
}

fn is_jpeg(image: &str) -> bool {
    image.ends_with(".jpg")
}

#[test]
fn decoding_matches_pil() {
    let m = manifest();
    for image in m["images"].as_object().unwrap().keys() {
        let ours = load_image(dir().join(image)).unwrap();
        let pil = pil_decoded(image);
        assert_eq!(
            (ours.width, ours.height),
            (pil.width, pil.height),
            "{image}"
        );
        let diffs: Vec<i32> = ours
            .pixels
            .iter()
            .zip(&pil.pixels)
            .map(|(&a, &b)| (i32::from(a) - i32::from(b)).abs())
            .collect();
        let worst = diffs.iter().copied().max().unwrap_or(0);
        let mean = diffs.iter().map(|&d| f64::from(d)).sum::<f64>() / diffs.len() as f64;
        eprintln!("{image}: decoded max {worst}, mean {mean:.3}");
        if is_jpeg(image) {
            // Two JPEG decoders (zune-jpeg here, libjpeg-turbo in PIL) differ in IDCT rounding
            // and chroma upsampling; measured here: max 6 at sharp colour edges of the 4:2:0
            // file, max 2 at 4:4:4, means 0.34 and 0.01. PNG, WebP and BMP decode exactly.
            assert!(
                worst <= 6 && mean < 0.6,
                "{image}: max {worst}, mean {mean}"
            );
        } else {
            assert_eq!(worst, 0, "{image}: lossless formats decode exactly");
        }
    }
}

#[test]
fn resampling_pils_pixels_matches_pil_within_one_lsb() {
    let m = manifest();
    let cases = m["cases"].as_array().unwrap();
    assert!(cases.len() >= 35);
    for case in cases {
        let image = case["image"].as_str().unwrap();
        let p = recipe(&m, case["recipe"].as_str().unwrap());
        let ours = p.pixels(&pil_decoded(image));
        let (worst, _) = compare_planar(&ours, case["pixels"].as_str().unwrap());
        assert!(worst <= 1, "{image} {}: off by {worst}", case["recipe"]);
    }
}

#[test]
fn decoding_and_preprocessing_match_pil() {
    let m = manifest();
    for case in m["cases"].as_array().unwrap() {
        let image = case["image"].as_str().unwrap();
        let img = load_image(dir().join(image)).unwrap();
        let size = case["decoded_size"].as_array().unwrap();
        assert_eq!(
            (img.width as u64, img.height as u64),
            (size[0].as_u64().unwrap(), size[1].as_u64().unwrap()),
            "{image}: size after orientation"
        );
        let p = recipe(&m, case["recipe"].as_str().unwrap());
        let (worst, mean) = compare_planar(&p.pixels(&img), case["pixels"].as_str().unwrap());
        if is_jpeg(image) {
            assert!(
                worst <= 6 && mean < 0.6,
                "{image}: max {worst}, mean {mean}"
            );
        } else {
            assert!(worst <= 1, "{image} {}: off by {worst}", case["recipe"]);
        }
    }
}

#[test]
fn normalised_tensor_matches_torchvision() {
    let m = manifest();
    let n = &m["normalized"];
    let img = load_image(dir().join(n["image"].as_str().unwrap())).unwrap();
    let p = recipe(&m, n["recipe"].as_str().unwrap());
    let ours = p.tensor(&img);
    let (shape, want) = npy::read(dir().join(n["tensor"].as_str().unwrap())).unwrap();
    assert_eq!(shape, [3, 32, 32]);
    let worst = ours
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(worst < 1e-5, "{worst}");
}

fn expect_error(bytes: &[u8], name: &str) -> ImageError {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join(name);
    std::fs::write(&path, bytes).unwrap();
    let err = load_image(&path).unwrap_err();
    assert!(
        err.to_string().contains(path.to_str().unwrap()),
        "error does not name the file: {err}"
    );
    err
}

#[test]
fn corrupt_truncated_and_unsupported_images_are_errors_naming_the_file() {
    for image in [
        "wide.png",
        "rotated.jpg",
        "full_chroma.jpg",
        "tall.webp",
        "square.bmp",
    ] {
        let bytes = std::fs::read(dir().join(image)).unwrap();
        // JPEG: also just the end-of-image marker missing, which its decoder papers over.
        let near_end = if is_jpeg(image) {
            bytes.len() - 2
        } else {
            bytes.len() * 9 / 10
        };
        for cut in [bytes.len() / 2, near_end] {
            let err = expect_error(&bytes[..cut], image);
            assert!(
                matches!(err, ImageError::Corrupt { .. }),
                "{image} cut at {cut}: {err}"
            );
        }
        // Garbled data may still decode to some pixels (JPEG and WebP carry no checksums); it
        // must never panic, and PNG's checksums must catch it.
        let mut garbled = bytes.clone();
        for b in garbled.iter_mut().skip(40).take(400) {
            *b ^= 0x5a;
        }
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join(image);
        std::fs::write(&path, &garbled).unwrap();
        let result = load_image(&path);
        if image.ends_with(".png") {
            assert!(result.is_err(), "garbled {image} decoded");
        }
    }
    let gif = b"GIF89a\x01\x00\x01\x00\x00\x00\x00;";
    let err = expect_error(gif, "anim.gif");
    assert!(
        matches!(err, ImageError::Unsupported { .. }) && err.to_string().contains("Gif"),
        "{err}"
    );
    let err = expect_error(b"just some text, not an image", "notes.jpg");
    assert!(matches!(err, ImageError::Unsupported { .. }), "{err}");
    let err = expect_error(b"", "empty.png");
    assert!(matches!(err, ImageError::Unsupported { .. }), "{err}");
    let missing = load_image(dir().join("no-such-image.png")).unwrap_err();
    assert!(matches!(missing, ImageError::Io { .. }), "{missing}");
    assert!(missing.to_string().contains("no-such-image.png"));
}
