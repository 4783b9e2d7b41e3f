//! Hugging Face ViT and DeiT (distilled, with teacher head) with random weights of the real
//! architecture, reduced in size (`tools/fixtures/vision/hf_vit_random.py`: hub tensor names,
//! the real preprocessor configs, a massive-activation channel pushing LayerNorm inputs past 300)
//! on scikit-image's photos: fp32 logits within 1e-4 of transformers' (relative to the largest
//! |logit|), the fp16 ANE-target programs for h16 and h13 within cosine 0.999 with the same
//! top-1, the h16 program through the ANE engine over the e5rt simulator, and clear errors for
//! checkpoints that do not fit.

use std::path::{Path, PathBuf};

use aneforge::engine::{AneEngine, AneOptions, MatmulPrecision};
use aneforge::{AneArch, Engine, Target};
use aneforge_models::encoders::cosine;
use aneforge_models::require_model;
use aneforge_models::vision::{
    load_image, ClassifierOptions, CropRounding, ImageClassifier, Interpolation, Preprocess,
    Resize, VisionError,
};
use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tools/fixtures/vision/out/hf_vit")
        .join(name)
}

fn expected(name: &str) -> (Value, Vec<f32>) {
    let dir = fixture(name);
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();
    let (_, logits) = aneforge_models::npy::read(dir.join("logits.npy")).unwrap();
    (doc, logits)
}

fn ane(arch: &str) -> Target {
    Target::Ane(arch.parse::<AneArch>().unwrap())
}

/// Logits of the fixture's photos through `name`'s classifier compiled for `target`.
fn logits(name: &str, photos: &Path, target: Target, engine: Engine) -> Vec<Vec<f32>> {
    logits_with(name, photos, target, engine, MatmulPrecision::F32)
}

/// [`logits`] with the CPU engine's products at `matmul`.
fn logits_with(
    name: &str,
    photos: &Path,
    target: Target,
    engine: Engine,
    matmul: MatmulPrecision,
) -> Vec<Vec<f32>> {
    let options = ClassifierOptions {
        target,
        engine,
        batch_size: 2,
        matmul,
        ..ClassifierOptions::default()
    };
    let clf = ImageClassifier::load(fixture(name).to_str().unwrap(), options).unwrap();
    let (doc, _) = expected(name);
    let images: Vec<_> = doc["photos"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| load_image(photos.join(p.as_str().unwrap())).unwrap())
        .collect();
    let predictions = clf.classify(&images, 1, &mut |_| {}).unwrap();
    let size = clf
        .preprocess
        .output_size(images[0].width, images[0].height);
    let logits = clf
        .logits_of(&clf.pixel_values(&images), size, &mut |_| {})
        .unwrap();
    for (p, l) in predictions.iter().zip(&logits) {
        let top = (0..l.len()).max_by(|&a, &b| l[a].total_cmp(&l[b])).unwrap();
        assert_eq!(p[0].index, top);
    }
    logits
}

fn check_fp32(name: &str) {
    let photos = require_model!("scikit-image/data");
    let (doc, want) = expected(name);
    // The fixtures mean something only with LayerNorm inputs whose squares pass fp16's range.
    assert!(doc["layernorm_input_peak"].as_f64().unwrap() > 256.0);
    let got = logits(name, photos.dir(), Target::Cpu, Engine::Cpu);
    assert_eq!(got.len() * got[0].len(), want.len());
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    let worst = got
        .iter()
        .flatten()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    eprintln!("{name}: max |Δlogit| {worst:.2e} (|logit| up to {scale:.3})");
    assert!(worst <= 1e-4 * scale, "{name}: logits off by {worst}");
}

fn check_fp16(name: &str, photos: &Path, target: Target, engine: Engine) -> Vec<Vec<f32>> {
    check_close(name, photos, target, engine, MatmulPrecision::F32)
}

/// Logits within cosine 0.999 of transformers' with its top-1, and not equal to the fp32
/// program's (fp16 programs, or bf16 products).
fn check_close(
    name: &str,
    photos: &Path,
    target: Target,
    engine: Engine,
    matmul: MatmulPrecision,
) -> Vec<Vec<f32>> {
    let (_, want) = expected(name);
    let got = logits_with(name, photos, target.clone(), engine, matmul);
    let classes = got[0].len();
    for (i, row) in got.iter().enumerate() {
        let w = &want[i * classes..(i + 1) * classes];
        let c = cosine(row, w);
        let top = |v: &[f32]| (0..v.len()).max_by(|&a, &b| v[a].total_cmp(&v[b])).unwrap();
        let d = row
            .iter()
            .zip(w)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        eprintln!("{name} {target:?} {matmul:?} photo {i}: cosine {c:.7}, max |Δ| {d:.3e}");
        assert!(c >= 0.999, "{name} photo {i}: cosine {c}");
        assert!(
            d > 0.0,
            "{name} photo {i}: fp32 results from the fp16 program or bf16 products"
        );
        assert_eq!(top(row), top(w), "{name} photo {i}: top-1");
    }
    got
}

#[test]
fn vit_matches_transformers() {
    check_fp32("vit");
}

#[test]
fn deit_distilled_matches_transformers() {
    check_fp32("deit");
}

#[test]
fn vit_and_deit_fp16_programs_follow_transformers() {
    let photos = require_model!("scikit-image/data");
    for name in ["vit", "deit"] {
        for arch in ["h16", "h13"] {
            check_fp16(name, photos.dir(), ane(arch), Engine::Cpu);
        }
    }
}

/// bf16 products (AMX tiles where the CPU has them) on the fixtures, whose LayerNorm inputs
/// pass 300.
#[test]
fn vit_and_deit_with_bf16_products_follow_transformers() {
    let photos = require_model!("scikit-image/data");
    for name in ["vit", "deit"] {
        check_close(
            name,
            photos.dir(),
            Target::Cpu,
            Engine::Cpu,
            MatmulPrecision::Bf16,
        );
    }
}

#[test]
fn vit_through_the_ane_engine_on_the_simulator() {
    let photos = require_model!("scikit-image/data");
    AneEngine::install_global(AneOptions {
        library: Some(e5rt_sim::test_library_path().unwrap_or_else(|e| panic!("{e}"))),
        program_cache: Some(std::env::temp_dir().join("aneforge-vision-vit-programs")),
        ..AneOptions::default()
    })
    .unwrap();
    let on_ane = check_fp16("vit", photos.dir(), ane("h16"), Engine::Ane);
    let on_cpu = check_fp16("vit", photos.dir(), ane("h16"), Engine::Cpu);
    assert_eq!(on_ane, on_cpu, "the simulator runs the same fp16 program");
}

#[test]
fn families_names_and_recipes_come_from_the_checkpoint_and_configs() {
    let vit = ImageClassifier::load(
        fixture("vit").to_str().unwrap(),
        ClassifierOptions::default(),
    )
    .unwrap();
    assert_eq!(vit.network().name(), "vit-patch16-224-4x64");
    let square = |n| {
        Some(Resize::Exact {
            height: n,
            width: n,
        })
    };
    assert_eq!(vit.preprocess.resize, square(224));
    assert_eq!(vit.preprocess.crop, None);
    assert_eq!(vit.preprocess.interpolation, Interpolation::Bilinear);
    assert_eq!(vit.preprocess.mean, [0.5; 3]);
    assert_eq!(vit.labels()[3], "LABEL_3");
    let deit = ImageClassifier::load(
        fixture("deit").to_str().unwrap(),
        ClassifierOptions::default(),
    )
    .unwrap();
    assert_eq!(deit.network().name(), "deit-distilled-patch16-224-4x64");
    let mut recipe = Preprocess::imagenet(256, 224, Interpolation::Bicubic);
    recipe.resize = square(256);
    recipe.crop_rounding = CropRounding::Floor;
    assert_eq!(deit.preprocess, recipe);
}

/// Rewrites the fixture's safetensors with `edit` applied to its tensors (name, shape, f32
/// values) into a temporary model directory with the same configs.
fn edited(
    name: &str,
    edit: impl Fn(&mut Vec<(String, Vec<usize>, Vec<f32>)>),
) -> tempfile::TempDir {
    let src = fixture(name);
    let tmp = tempfile::tempdir().unwrap();
    for f in ["config.json", "preprocessor_config.json"] {
        std::fs::copy(src.join(f), tmp.path().join(f)).unwrap();
    }
    let bytes = std::fs::read(src.join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut tensors: Vec<(String, Vec<usize>, Vec<f32>)> = st
        .tensors()
        .into_iter()
        .map(|(n, v)| {
            let values = v
                .data()
                .chunks(2)
                .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect();
            (n, v.shape().to_vec(), values)
        })
        .collect();
    edit(&mut tensors);
    let data: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
        .into_iter()
        .map(|(n, s, v)| (n, s, v.iter().flat_map(|x| x.to_le_bytes()).collect()))
        .collect();
    let views: Vec<_> = data
        .iter()
        .map(|(n, s, d)| {
            (
                n.clone(),
                safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), d)
                    .unwrap(),
            )
        })
        .collect();
    safetensors::serialize_to_file(views, None, &tmp.path().join("model.safetensors")).unwrap();
    tmp
}

fn load_err(dir: &Path) -> String {
    match ImageClassifier::load(dir.to_str().unwrap(), ClassifierOptions::default()) {
        Ok(_) => panic!("{} loaded", dir.display()),
        Err(e) => {
            let _: &VisionError = &e;
            e.to_string()
        }
    }
}

#[test]
fn checkpoints_that_do_not_fit_are_named() {
    // A query projection of the wrong width: the tensor and both shapes are named.
    let bad = edited("vit", |t| {
        let q = t
            .iter_mut()
            .find(|(n, _, _)| n == "vit.encoder.layer.2.attention.attention.query.weight")
            .unwrap();
        q.1 = vec![32, 128];
    });
    let msg = load_err(bad.path());
    assert!(
        msg.contains("vit.encoder.layer.2.attention.attention.query.weight")
            && msg.contains("32")
            && msg.contains("64"),
        "{msg}"
    );
    // A missing tensor is named.
    let missing = edited("deit", |t| {
        t.retain(|(n, _, _)| n != "deit.encoder.layer.1.layernorm_after.bias")
    });
    let msg = load_err(missing.path());
    assert!(
        msg.contains("deit.encoder.layer.1.layernorm_after.bias"),
        "{msg}"
    );
    // A bare encoder (no head) cannot classify.
    let bare = edited("vit", |t| {
        t.retain(|(n, _, _)| !n.starts_with("classifier."))
    });
    let msg = load_err(bare.path());
    assert!(msg.contains("no classification head"), "{msg}");
    // Position embeddings that are not leading tokens plus a square grid.
    let odd = edited("vit", |t| {
        let p = t
            .iter_mut()
            .find(|(n, _, _)| n == "vit.embeddings.position_embeddings")
            .unwrap();
        p.1 = vec![1, 190, 64];
        p.2.truncate(190 * 64);
    });
    let msg = load_err(odd.path());
    assert!(msg.contains("square grid"), "{msg}");
}

/// The layer names transformers 5 saves (`vit.layers.N.attention.q_proj`, `mlp.fc1`, …; the
/// inverse of the fixture's HUB_NAMES, transformers' own conversion) load to the same logits.
#[test]
fn transformers5_names_load_the_same_model() {
    let photos = require_model!("scikit-image/data");
    let renamed = edited("vit", |t| {
        for (name, _, _) in t.iter_mut() {
            let mut n = name.replace(".encoder.layer.", ".layers.");
            for (from, to) in [
                (".attention.attention.query.", ".attention.q_proj."),
                (".attention.attention.key.", ".attention.k_proj."),
                (".attention.attention.value.", ".attention.v_proj."),
                (".attention.output.dense.", ".attention.o_proj."),
                (".intermediate.dense.", ".mlp.fc1."),
                (".output.dense.", ".mlp.fc2."),
            ] {
                n = n.replace(from, to);
            }
            *name = n;
        }
    });
    let clf = ImageClassifier::load(
        renamed.path().to_str().unwrap(),
        ClassifierOptions::default(),
    )
    .unwrap();
    let (doc, want) = expected("vit");
    let images: Vec<_> = doc["photos"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| load_image(photos.dir().join(p.as_str().unwrap())).unwrap())
        .collect();
    let got = clf
        .logits_of(&clf.pixel_values(&images), (224, 224), &mut |_| {})
        .unwrap();
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    let worst = got
        .iter()
        .flatten()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(worst <= 1e-4 * scale, "logits off by {worst}");
}
