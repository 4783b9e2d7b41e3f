//! CLIP (Hugging Face `CLIPModel`) with random weights of the real architecture, reduced in size,
//! and a CLIP BPE tokenizer built by transformers' CLIPTokenizer from a small vocabulary
//! (`tools/fixtures/vision/hf_vit_random.py`): token ids equal to transformers', then image
//! embeddings, text embeddings and `logits_per_image` on scikit-image's photos against
//! transformers in fp32 (within 1e-4 of the largest value), the fp16 ANE-target programs (h16,
//! h13) within cosine 0.999 with the same best label, the h16 programs over the e5rt simulator,
//! zero-shot classification, and errors for directories that are not CLIP models.

use std::path::{Path, PathBuf};

use aneforge::engine::{AneEngine, AneOptions};
use aneforge::{AneArch, Engine, Target};
use aneforge_models::encoders::cosine;
use aneforge_models::require_model;
use aneforge_models::tokenizer::Padding;
use aneforge_models::vision::{
    load_image, ClassifierOptions, ClipModel, ImageClassifier, RgbImage,
};
use serde_json::Value;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/fixtures/vision/out/hf_vit/clip")
}

fn doc() -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir().join("expected.json")).unwrap()).unwrap()
}

fn npy(name: &str) -> (Vec<usize>, Vec<f32>) {
    aneforge_models::npy::read(dir().join(format!("{name}.npy"))).unwrap()
}

fn model(target: Target, engine: Engine) -> ClipModel {
    let options = ClassifierOptions {
        target,
        engine,
        batch_size: 2,
        ..ClassifierOptions::default()
    };
    ClipModel::load(dir().to_str().unwrap(), options).unwrap()
}

fn photos(dir: &Path) -> Vec<RgbImage> {
    doc()["photos"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| load_image(dir.join(p.as_str().unwrap())).unwrap())
        .collect()
}

fn labels() -> Vec<String> {
    doc()["labels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap().to_string())
        .collect()
}

struct Run {
    images: Vec<Vec<f32>>,
    texts: Vec<Vec<f32>>,
    logits: Vec<Vec<f32>>,
}

fn run(clip: &ClipModel, photo_dir: &Path) -> Run {
    let labels = labels();
    let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
    let images = clip
        .image_embeddings(&photos(photo_dir), &mut |_| {})
        .unwrap();
    let texts = clip.text_embeddings(&labels).unwrap();
    let logits = clip.logits(&images, &texts);
    Run {
        images,
        texts,
        logits,
    }
}

fn ane(arch: &str) -> Target {
    Target::Ane(arch.parse::<AneArch>().unwrap())
}

fn max_diff(got: &[Vec<f32>], want: &[f32]) -> (f32, f32) {
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    let worst = got
        .iter()
        .flatten()
        .zip(want)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    (worst, scale)
}

#[test]
fn token_ids_match_transformers() {
    let clip = model(Target::Cpu, Engine::Cpu);
    let doc = doc();
    for (text, want) in doc["tokenizer_texts"]
        .as_array()
        .unwrap()
        .iter()
        .zip(doc["tokenizer_ids"].as_array().unwrap())
    {
        let ids = clip.tokenizer().encode(text.as_str().unwrap()).unwrap().ids;
        let want: Vec<u32> = want
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(ids, want, "{text}");
    }
    // The padded batch of labels, as transformers pads it (with <|endoftext|>).
    let labels = labels();
    let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
    let enc = clip
        .tokenizer()
        .encode_batch(&labels, Padding::Longest)
        .unwrap();
    for (row, want) in doc["label_ids"].as_array().unwrap().iter().enumerate() {
        let want: Vec<u32> = want
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(enc.row_ids(row), &want[..], "label {row}");
    }
}

#[test]
fn embeddings_and_logits_match_transformers() {
    let photo_dir = require_model!("scikit-image/data");
    assert!(doc()["layernorm_input_peak"].as_f64().unwrap() > 256.0);
    let clip = model(Target::Cpu, Engine::Cpu);
    assert!((clip.logit_scale() - doc()["logit_scale"].as_f64().unwrap()).abs() < 1e-4);
    let got = run(&clip, photo_dir.dir());
    for (name, rows) in [
        ("image_embeds", &got.images),
        ("text_embeds", &got.texts),
        ("logits_per_image", &got.logits),
    ] {
        let (shape, want) = npy(name);
        assert_eq!(shape, [rows.len(), rows[0].len()], "{name}");
        let (worst, scale) = max_diff(rows, &want);
        eprintln!("{name}: max |Δ| {worst:.2e} (values up to {scale:.3})");
        assert!(worst <= 1e-4 * scale, "{name} off by {worst}");
    }
}

fn check_fp16(got: &Run) {
    let (_, want_images) = npy("image_embeds");
    let (_, want_texts) = npy("text_embeds");
    let (_, want_logits) = npy("logits_per_image");
    let dim = got.images[0].len();
    for (what, rows, want) in [
        ("image", &got.images, &want_images),
        ("text", &got.texts, &want_texts),
    ] {
        for (i, row) in rows.iter().enumerate() {
            let c = cosine(row, &want[i * dim..(i + 1) * dim]);
            eprintln!("{what} {i}: cosine {c:.7}");
            assert!(c >= 0.999, "{what} {i}: cosine {c}");
        }
    }
    let n = got.logits[0].len();
    let top = |v: &[f32]| (0..v.len()).max_by(|&a, &b| v[a].total_cmp(&v[b])).unwrap();
    for (i, row) in got.logits.iter().enumerate() {
        let w = &want_logits[i * n..(i + 1) * n];
        let (d, _) = max_diff(std::slice::from_ref(row), w);
        eprintln!("logits of photo {i}: max |Δ| {d:.3e}");
        assert!(d > 0.0, "photo {i}: fp32 results from the fp16 programs");
        assert_eq!(top(row), top(w), "photo {i}: best label");
    }
}

#[test]
fn fp16_programs_follow_transformers() {
    let photo_dir = require_model!("scikit-image/data");
    for arch in ["h16", "h13"] {
        eprintln!("{arch}:");
        check_fp16(&run(&model(ane(arch), Engine::Cpu), photo_dir.dir()));
    }
}

#[test]
fn clip_through_the_ane_engine_on_the_simulator() {
    let photo_dir = require_model!("scikit-image/data");
    AneEngine::install_global(AneOptions {
        library: Some(e5rt_sim::test_library_path().unwrap_or_else(|e| panic!("{e}"))),
        program_cache: Some(std::env::temp_dir().join("aneforge-vision-clip-programs")),
        ..AneOptions::default()
    })
    .unwrap();
    let on_ane = run(&model(ane("h16"), Engine::Ane), photo_dir.dir());
    let on_cpu = run(&model(ane("h16"), Engine::Cpu), photo_dir.dir());
    assert_eq!(on_ane.images, on_cpu.images);
    assert_eq!(on_ane.texts, on_cpu.texts);
    check_fp16(&on_ane);
}

#[test]
fn zero_shot_ranks_labels_by_logits_per_image() {
    let photo_dir = require_model!("scikit-image/data");
    let clip = model(Target::Cpu, Engine::Cpu);
    let labels = labels();
    let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
    let (_, want) = npy("logits_per_image");
    let n = labels.len();
    let predictions = clip
        .zero_shot(&photos(photo_dir.dir()), &labels, "{}", n, &mut |_| {})
        .unwrap();
    for (i, preds) in predictions.iter().enumerate() {
        let row = &want[i * n..(i + 1) * n];
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&a, &b| row[b].total_cmp(&row[a]));
        let got: Vec<usize> = preds.iter().map(|p| p.index).collect();
        assert_eq!(got, order, "photo {i}");
        let total: f32 = preds.iter().map(|p| p.probability).sum();
        assert!((total - 1.0).abs() < 1e-5);
        assert_eq!(preds[0].label, labels[order[0]]);
    }
    let err = clip
        .zero_shot(&photos(photo_dir.dir()), &labels, "a photo", 1, &mut |_| {})
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("{}"), "{err}");
}

#[test]
fn directories_that_are_not_clip_models_are_refused() {
    let vit = dir().parent().unwrap().join("vit");
    let err = ClipModel::load(vit.to_str().unwrap(), ClassifierOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("not a CLIP checkpoint"), "{err}");
    // The classifier names a CLIP checkpoint for what it is.
    let err = ImageClassifier::load(dir().to_str().unwrap(), ClassifierOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("CLIP model"), "{err}");
    // Without its tokenizer the model cannot embed text.
    let tmp = tempfile::tempdir().unwrap();
    for f in [
        "config.json",
        "model.safetensors",
        "preprocessor_config.json",
    ] {
        std::fs::copy(dir().join(f), tmp.path().join(f)).unwrap();
    }
    let err = ClipModel::load(tmp.path().to_str().unwrap(), ClassifierOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("tokenizer.json"), "{err}");
}

/// A config with the current `eos_token_id` (the id of `<|endoftext|>`, pooled at its first
/// occurrence) pools the same token as the legacy one (the highest id), so the text embeddings
/// are transformers' again.
#[test]
fn the_current_eos_token_id_pools_the_same_token() {
    let tmp = tempfile::tempdir().unwrap();
    for f in [
        "model.safetensors",
        "preprocessor_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ] {
        std::fs::copy(dir().join(f), tmp.path().join(f)).unwrap();
    }
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(dir().join("config.json")).unwrap()).unwrap();
    let clip = model(Target::Cpu, Engine::Cpu);
    let eos = clip.tokenizer().token_to_id("<|endoftext|>").unwrap();
    assert_ne!(eos, 2);
    config["text_config"]["eos_token_id"] = eos.into();
    std::fs::write(tmp.path().join("config.json"), config.to_string()).unwrap();
    let current =
        ClipModel::load(tmp.path().to_str().unwrap(), ClassifierOptions::default()).unwrap();
    let labels = labels();
    let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
    let texts = current.text_embeddings(&labels).unwrap();
    let (_, want) = npy("text_embeds");
    let (worst, scale) = max_diff(&texts, &want);
    assert!(worst <= 1e-4 * scale, "text_embeds off by {worst}");
}
