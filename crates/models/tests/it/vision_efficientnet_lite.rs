//! EfficientNet-Lite0/1/2 with their real ImageNet weights against the PyTorch reference
//! (`tools/fixtures/vision/efficientnet_lite.py`) on scikit-image's photos: the whole path
//! (decode, preprocess, fp32 program on the CPU engine) gives the reference's top-5 with
//! probabilities within 1e-4 on the PNG photos; on the JPEG photo the model is held to 1e-4 on
//! the pixels PIL decoded, and the whole path (our JPEG decoder) to the same top-5. Needs `scripts/fetch-models.sh efficientnet-lite0
//! efficientnet-lite1 efficientnet-lite2 skimage-data`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use aneforge_models::require_model;
use aneforge_models::vision::{
    load_image, ClassifierOptions, ImageClassifier, Resize, VisionError,
};
use aneforge_models::weights::{TensorSource, TorchCheckpoint, WeightError};
use serde_json::Value;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/fixtures/vision/out/efficientnet_lite")
}

fn check_variant(n: usize) {
    let model = require_model!(&format!("ml-illustrated/efficientnet-lite{n}"));
    let photos = require_model!("scikit-image/data");
    let doc: Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join(format!("lite{n}.json"))).unwrap(),
    )
    .unwrap();
    let (_, want_logits) =
        aneforge_models::npy::read(fixtures().join(format!("lite{n}.logits.npy"))).unwrap();
    let clf =
        ImageClassifier::load(model.dir().to_str().unwrap(), ClassifierOptions::default()).unwrap();
    assert_eq!(clf.network().name(), format!("efficientnet-lite{n}"));
    let crop = doc["crop"].as_u64().unwrap() as usize;
    assert_eq!(clf.preprocess.crop, Some((crop, crop)));
    assert_eq!(
        clf.preprocess.resize,
        Some(Resize::ShortestEdge(
            doc["resize"].as_u64().unwrap() as usize
        ))
    );
    let entries = doc["photos"].as_array().unwrap();
    let images: Vec<_> = entries
        .iter()
        .map(|p| load_image(photos.dir().join(p["photo"].as_str().unwrap())).unwrap())
        .collect();
    let mut inputs = clf.pixel_values(&images);
    // JPEG photos: also PIL's own decoded and cropped pixels, normalised by our recipe.
    let mut pil_rows = Vec::new();
    for p in entries {
        let name = p["photo"].as_str().unwrap();
        if name.ends_with(".jpg") {
            let (shape, px) = match aneforge_models::npy::read_tensor(
                fixtures().join(format!("lite{n}.{name}.pixels.npy")),
            )
            .unwrap()
            {
                (s, aneforge::engine::HostTensor::U8(px)) => (s, px),
                _ => panic!("uint8 pixels"),
            };
            let plane = shape[1] * shape[2];
            let interleaved: Vec<u8> = (0..plane)
                .flat_map(|i| (0..3).map(move |c| c * plane + i))
                .map(|j| px[j])
                .collect();
            let img = aneforge_models::vision::RgbImage {
                width: shape[2],
                height: shape[1],
                pixels: interleaved,
            };
            let mut norm = clf.preprocess.clone();
            norm.resize = None;
            norm.crop = None;
            pil_rows.push(inputs.len());
            inputs.push(norm.tensor(&img));
        }
    }
    let logits = clf.logits_of(&inputs, (crop, crop), &mut |_| {}).unwrap();
    let mut jpeg = 0;
    for (i, p) in entries.iter().enumerate() {
        let name = p["photo"].as_str().unwrap();
        let top = clf.top_k(&logits[i], 5);
        let own_decoder_row = name.ends_with(".jpg");
        let i = if own_decoder_row {
            let ours = top.iter().map(|t| t.index).collect::<Vec<_>>();
            let row = pil_rows[jpeg];
            jpeg += 1;
            let pil_top = clf.top_k(&logits[row], 5);
            assert_eq!(
                ours,
                pil_top.iter().map(|t| t.index).collect::<Vec<_>>(),
                "lite{n} {name}: top-5 through our JPEG decoder"
            );
            let dp = top
                .iter()
                .zip(&pil_top)
                .map(|(a, b)| (a.probability - b.probability).abs())
                .fold(0f32, f32::max);
            eprintln!("lite{n} {name}: our JPEG decoder moves the top-5 probabilities by {dp:.2e}");
            row
        } else {
            i
        };
        let top = clf.top_k(&logits[i], 5);
        let want_top: Vec<usize> = p["top5"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as usize)
            .collect();
        let got_top: Vec<usize> = top.iter().map(|t| t.index).collect();
        assert_eq!(got_top, want_top, "lite{n} {name}: top-5");
        let worst_prob = top
            .iter()
            .zip(p["probs"].as_array().unwrap())
            .map(|(t, w)| (f64::from(t.probability) - w.as_f64().unwrap()).abs())
            .fold(0f64, f64::max);
        let row = entries.iter().position(|e| e == p).unwrap();
        let want = &want_logits[row * 1000..(row + 1) * 1000];
        let worst_logit = logits[i]
            .iter()
            .zip(want)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        eprintln!(
            "lite{n} {name}: {} ({:.4}); max |Δp| {worst_prob:.2e}, max |Δlogit| {worst_logit:.2e}",
            top[0].label, top[0].probability
        );
        assert!(
            worst_prob < 1e-4,
            "lite{n} {name}: probabilities off by {worst_prob}"
        );
    }
}

#[test]
fn lite0_matches_pytorch_on_the_photos() {
    check_variant(0);
}

#[test]
fn lite1_matches_pytorch_on_the_photos() {
    check_variant(1);
}

#[test]
fn lite2_matches_pytorch_on_the_photos() {
    check_variant(2);
}

/// A safetensors copy of the Lite0 checkpoint with `tensor` replaced by zeros of `shape`.
fn copy_with_shape(src: &Path, dst: &Path, tensor: &str, shape: &[usize]) {
    let ckpt = TorchCheckpoint::open(src).unwrap();
    let mut data: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    for name in ckpt.names() {
        let Ok(a) = ckpt.read_f32(&name) else {
            continue;
        };
        let (s, v) = if name == tensor {
            (shape.to_vec(), vec![0f32; shape.iter().product()])
        } else {
            a.into_parts()
        };
        data.push((name, s, v.iter().flat_map(|x| x.to_le_bytes()).collect()));
    }
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
    safetensors::serialize_to_file(views, None, dst).unwrap();
}

fn lite0_pth() -> Option<PathBuf> {
    let model = aneforge_models::testing::model_or_skip("ml-illustrated/efficientnet-lite0")?;
    Some(model.dir().join("efficientnet-lite0-57934424.pth"))
}

#[test]
fn a_tensor_of_the_wrong_shape_is_named_with_both_shapes() {
    let Some(pth) = lite0_pth() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("model.safetensors");
    copy_with_shape(
        &pth,
        &bad,
        "_blocks.1._depthwise_conv.weight",
        &[96, 1, 5, 5],
    );
    let err =
        match ImageClassifier::load(tmp.path().to_str().unwrap(), ClassifierOptions::default()) {
            Ok(_) => panic!("a mis-shaped checkpoint loaded"),
            Err(e) => e,
        };
    let msg = err.to_string();
    assert!(
        matches!(err, VisionError::Weights(WeightError::WrongShape { .. }))
            && msg.contains("_blocks.1._depthwise_conv.weight")
            && msg.contains("[96, 1, 3, 3]")
            && msg.contains("[96, 1, 5, 5]"),
        "{msg}"
    );
}

#[test]
fn the_safetensors_path_loads_the_same_network() {
    let Some(pth) = lite0_pth() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let st = tmp.path().join("model.safetensors");
    // A harmless rewrite: the fc bias keeps its shape.
    copy_with_shape(&pth, &st, "_fc.bias", &[1000]);
    let from_st = aneforge_models::vision::open_checkpoint(&st).unwrap();
    let from_pth: Arc<dyn TensorSource> = Arc::new(TorchCheckpoint::open(&pth).unwrap());
    let w = "_blocks.5._expand_conv.weight";
    assert_eq!(
        from_st.get_any(w).unwrap().data(),
        from_pth.read_f32(w).unwrap().data()
    );
    let net = aneforge_models::vision::Network::load(&from_st, None).unwrap();
    assert_eq!(net.name(), "efficientnet-lite0");
}
