//! Weight compression of vision programs through the pipeline's compress stage, on the real
//! EfficientNet-Lite0 and scikit-image's PNG photos (`scripts/fetch-models.sh efficientnet-lite0
//! skimage-data`): an int8 ANE-target program keeps PyTorch's top-5 and stays within a cosine
//! bound of PyTorch's fp32 logits (the committed fixture); the random-weight ViT fixture as an
//! int8 program keeps transformers' top-1 within a cosine bound of its logits; an int4 request
//! is honoured per weight behind the compress stage's accuracy gate.

use std::path::{Path, PathBuf};

use aneforge::pipeline::CompressionReport;
use aneforge::{AneArch, Compress, Target};
use aneforge_mil::encode::Scheme;
use aneforge_models::encoders::cosine;
use aneforge_models::require_model;
use aneforge_models::vision::{load_image, ClassifierOptions, ImageClassifier};
use serde_json::Value;

const MODEL: &str = "ml-illustrated/efficientnet-lite0";
/// The fixture's rows of the PNG photos (the JPEG goes through a different decoder).
const PHOTOS: [(usize, &str); 3] = [(0, "astronaut.png"), (1, "chelsea.png"), (2, "coffee.png")];
/// Cosine of the int8 program's logits to PyTorch's fp32 logits, per photo.
const INT8_COSINE: f64 = 0.995;
/// The same for the random-weight ViT fixture against transformers' fp32 logits.
const VIT_INT8_COSINE: f64 = 0.999;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/fixtures/vision/out/efficientnet_lite")
}

/// The classifier for `compress` on the h16 target, and its logits of the photos.
fn run(model: &Path, photos: &Path, compress: Compress) -> (ImageClassifier, Vec<Vec<f32>>) {
    let options = ClassifierOptions {
        target: Target::Ane(AneArch::default()),
        compress,
        ..ClassifierOptions::default()
    };
    let clf = ImageClassifier::load(model.to_str().unwrap(), options).unwrap();
    let images: Vec<_> = PHOTOS
        .iter()
        .map(|(_, p)| load_image(photos.join(p)).unwrap())
        .collect();
    let crop = clf.preprocess.crop.unwrap();
    let logits = clf
        .logits_of(&clf.pixel_values(&images), crop, &mut |_| {})
        .unwrap();
    (clf, logits)
}

fn the_report(clf: &ImageClassifier) -> CompressionReport {
    let mut reports = clf.compression();
    assert_eq!(reports.len(), 1, "one program for one batch");
    reports.remove(0)
}

#[test]
fn lite0_int8_program_keeps_the_reference_top5() {
    let model = require_model!(MODEL);
    let photos = require_model!("scikit-image/data");
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("lite0.json")).unwrap())
            .unwrap();
    let (_, want) = aneforge_models::npy::read(fixtures().join("lite0.logits.npy")).unwrap();
    let (clf, logits) = run(model.dir(), photos.dir(), Compress::Int8);
    let report = the_report(&clf);
    let int8 = report
        .weights
        .iter()
        .filter(|w| w.scheme == Scheme::Int8)
        .count();
    eprintln!("{report}");
    assert!(
        int8 > 0 && report.weights.iter().all(|w| w.scheme == Scheme::Int8),
        "every large weight int8"
    );
    let (dense, stored) = report
        .weights
        .iter()
        .fold((0, 0), |(d, s), w| (d + w.dense_bytes, s + w.stored_bytes));
    assert!(stored * 10 < dense * 6, "{stored} bytes stored of {dense}");
    for ((row, photo), got) in PHOTOS.iter().zip(&logits) {
        let entry = &doc["photos"][*row];
        assert_eq!(entry["photo"], *photo);
        let want_top: Vec<usize> = entry["top5"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as usize)
            .collect();
        let got_top: Vec<usize> = clf.top_k(got, 5).iter().map(|p| p.index).collect();
        let c = cosine(got, &want[row * 1000..(row + 1) * 1000]);
        eprintln!("int8 {photo}: cosine {c:.6} to PyTorch fp32, top-5 {got_top:?} vs {want_top:?}");
        assert_eq!(got_top, want_top, "int8 {photo}: top-5");
        assert!(c >= INT8_COSINE, "int8 {photo}: cosine {c}");
    }
}

#[test]
fn lite0_int4_request_is_gated_per_weight() {
    let model = require_model!(MODEL);
    let photos = require_model!("scikit-image/data");
    let (int4, got) = run(model.dir(), photos.dir(), Compress::Int4);
    let (dense, want) = run(model.dir(), photos.dir(), Compress::None);
    let report = the_report(&int4);
    assert!(the_report(&dense).weights.is_empty());
    let refused: Vec<&str> = report
        .weights
        .iter()
        .filter(|w| w.scheme == Scheme::Fp16)
        .map(|w| w.name.as_str())
        .collect();
    eprintln!("int4 request: {report}refused by the gate: {refused:?}");
    for w in &report.weights {
        match w.scheme {
            Scheme::Int4Lut => assert!(w.stored_bytes < w.dense_bytes, "{}", w.name),
            Scheme::Fp16 => assert!(
                !w.declines.is_empty(),
                "{}: kept fp16 without a decline",
                w.name
            ),
            other => panic!("{}: {other} was not requested", w.name),
        }
    }
    if refused.len() == report.weights.len() {
        assert_eq!(got, want, "every weight refused: the fp16 program itself");
    }
    let worst = got
        .iter()
        .zip(&want)
        .map(|(a, b)| cosine(a, b))
        .fold(1.0f64, f64::min);
    eprintln!("int4 request: worst cosine {worst:.6} to the fp16 program");
    assert!(worst >= 0.95);
}

/// The random-weight ViT fixture (`tools/fixtures/vision/hf_vit_random.py`) as an int8 h16
/// program: transformers' top-1 per photo and a cosine bound to its logits.
#[test]
fn vit_int8_program_follows_transformers() {
    let photos = require_model!("scikit-image/data");
    let dir =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/fixtures/vision/out/hf_vit/vit");
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();
    let (_, want) = aneforge_models::npy::read(dir.join("logits.npy")).unwrap();
    let options = ClassifierOptions {
        target: Target::Ane(AneArch::default()),
        compress: Compress::Int8,
        ..ClassifierOptions::default()
    };
    let clf = ImageClassifier::load(dir.to_str().unwrap(), options).unwrap();
    let images: Vec<_> = doc["photos"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| load_image(photos.dir().join(p.as_str().unwrap())).unwrap())
        .collect();
    let size = clf
        .preprocess
        .output_size(images[0].width, images[0].height);
    let got = clf
        .logits_of(&clf.pixel_values(&images), size, &mut |_| {})
        .unwrap();
    let report = the_report(&clf);
    let int8 = report
        .weights
        .iter()
        .filter(|w| w.scheme == Scheme::Int8)
        .count();
    eprintln!("{report}");
    assert!(int8 > 0, "no int8 weight in the ViT program");
    let classes = got[0].len();
    let top = |v: &[f32]| (0..v.len()).max_by(|&a, &b| v[a].total_cmp(&v[b])).unwrap();
    for (i, row) in got.iter().enumerate() {
        let w = &want[i * classes..(i + 1) * classes];
        let c = cosine(row, w);
        eprintln!(
            "vit int8 photo {i}: cosine {c:.6} to transformers, top-1 {} vs {}",
            top(row),
            top(w)
        );
        assert!(c >= VIT_INT8_COSINE, "vit int8 photo {i}: cosine {c}");
        assert_eq!(top(row), top(w), "vit int8 photo {i}: top-1");
    }
}
