//! EfficientNet-Lite0's ANE-target fp16 programs on its real weights and scikit-image's photos
//! (`scripts/fetch-models.sh efficientnet-lite0 skimage-data`): logits within cosine 0.999 of
//! the fp32 program, and the same program through the ANE engine over the e5rt simulator.

use aneforge::engine::{AneEngine, AneOptions};
use aneforge::{AneArch, Engine, Target};
use aneforge_models::encoders::cosine;
use aneforge_models::require_model;
use aneforge_models::vision::{load_image, ClassifierOptions, ImageClassifier};

const MODEL: &str = "ml-illustrated/efficientnet-lite0";
const PHOTOS: [&str; 4] = ["astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg"];

fn ane(arch: &str) -> Target {
    Target::Ane(arch.parse::<AneArch>().unwrap())
}

/// Logits of the photos with Lite0 compiled for `target` and run on `engine`.
fn logits(model: &str, photos: &std::path::Path, target: Target, engine: Engine) -> Vec<Vec<f32>> {
    let options = ClassifierOptions {
        target,
        engine,
        ..ClassifierOptions::default()
    };
    let clf = ImageClassifier::load(model, options).unwrap();
    let images: Vec<_> = PHOTOS
        .iter()
        .map(|p| load_image(photos.join(p)).unwrap())
        .collect();
    let crop = clf.preprocess.crop.unwrap();
    let inputs = clf.pixel_values(&images);
    clf.logits_of(&inputs, crop, &mut |_| {}).unwrap()
}

fn check_close(what: &str, fp32: &[Vec<f32>], fp16: &[Vec<f32>]) {
    for (i, (a, b)) in fp32.iter().zip(fp16).enumerate() {
        let c = cosine(a, b);
        let top = |v: &[f32]| (0..v.len()).max_by(|&x, &y| v[x].total_cmp(&v[y])).unwrap();
        eprintln!(
            "{what} {}: cosine {c:.6}, top-1 {} vs fp32 {}",
            PHOTOS[i],
            top(b),
            top(a)
        );
        assert!(c >= 0.999, "{what} {}: cosine {c}", PHOTOS[i]);
        assert_eq!(top(a), top(b), "{what} {}: top-1", PHOTOS[i]);
    }
}

#[test]
fn lite0_fp16_programs_follow_fp32_on_h16_and_h13() {
    let model = require_model!(MODEL);
    let photos = require_model!("scikit-image/data");
    let spec = model.dir().to_str().unwrap();
    let fp32 = logits(spec, photos.dir(), Target::Cpu, Engine::Cpu);
    for arch in ["h16", "h13"] {
        let fp16 = logits(spec, photos.dir(), ane(arch), Engine::Cpu);
        check_close(arch, &fp32, &fp16);
    }
}

#[test]
fn lite0_through_the_ane_engine_on_the_simulator() {
    let model = require_model!(MODEL);
    let photos = require_model!("scikit-image/data");
    AneEngine::install_global(AneOptions {
        library: Some(e5rt_sim::test_library_path().unwrap_or_else(|e| panic!("{e}"))),
        program_cache: Some(std::env::temp_dir().join("aneforge-vision-fp16-programs")),
        ..AneOptions::default()
    })
    .unwrap();
    let spec = model.dir().to_str().unwrap();
    let on_ane = logits(spec, photos.dir(), ane("h16"), Engine::Ane);
    let on_cpu = logits(spec, photos.dir(), ane("h16"), Engine::Cpu);
    assert_eq!(on_ane, on_cpu, "the simulator runs the same fp16 program");
    let fp32 = logits(spec, photos.dir(), Target::Cpu, Engine::Cpu);
    check_close("h16 on the ANE engine", &fp32, &on_ane);
}
