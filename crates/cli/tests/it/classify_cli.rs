//! `aneforge classify` on the real EfficientNet-Lite0 weights and scikit-image's photos
//! (`scripts/fetch-models.sh efficientnet-lite0 skimage-data`): the reference top-5 and
//! probabilities (`tools/fixtures/vision/out/efficientnet_lite/lite0.json`), batches keeping
//! the order, and errors naming the file.

use crate::common;

use std::path::PathBuf;

use aneforge_models::testing::model_or_skip;
use serde_json::Value;

fn photos() -> Option<PathBuf> {
    model_or_skip("ml-illustrated/efficientnet-lite0")?;
    Some(model_or_skip("scikit-image/data")?.dir().to_path_buf())
}

fn classify(args: &[&str]) -> (Value, String) {
    let mut all = vec!["classify", "-m", "ml-illustrated/efficientnet-lite0"];
    all.extend_from_slice(args);
    let out = common::run(&all);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{all:?}: {stderr}");
    (serde_json::from_slice(&out.stdout).unwrap(), stderr)
}

#[test]
fn json_output_matches_the_pytorch_reference_in_order_across_batches() {
    let Some(dir) = photos() else { return };
    let reference: Value = serde_json::from_str(
        &std::fs::read_to_string(common::repo(
            "tools/fixtures/vision/out/efficientnet_lite/lite0.json",
        ))
        .unwrap(),
    )
    .unwrap();
    // PNG photos only: the JPEG one differs by the decoder (vision_efficientnet_lite.rs).
    let pngs: Vec<&Value> = reference["photos"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["photo"].as_str().unwrap().ends_with(".png"))
        .collect();
    // Each PNG twice, batch size 2: three programs runs, the last one short.
    let paths: Vec<String> = pngs
        .iter()
        .chain(pngs.iter())
        .map(|p| dir.join(p["photo"].as_str().unwrap()).display().to_string())
        .collect();
    let mut args = vec!["--format", "json", "--batch-size", "2", "-t", "2"];
    args.extend(paths.iter().map(String::as_str));
    let (out, _) = classify(&args);
    let rows = out.as_array().unwrap();
    assert_eq!(rows.len(), paths.len());
    for (row, (path, want)) in rows
        .iter()
        .zip(paths.iter().zip(pngs.iter().chain(pngs.iter())))
    {
        assert_eq!(row["image"].as_str().unwrap(), path);
        let preds = row["predictions"].as_array().unwrap();
        assert_eq!(preds.len(), 5);
        for (p, (i, prob)) in preds.iter().zip(
            want["top5"]
                .as_array()
                .unwrap()
                .iter()
                .zip(want["probs"].as_array().unwrap()),
        ) {
            assert_eq!(p["index"], *i, "{path}");
            let d = (p["probability"].as_f64().unwrap() - prob.as_f64().unwrap()).abs();
            assert!(d < 1e-4, "{path}: probability off by {d}");
        }
    }
    assert_eq!(rows[0]["predictions"][0]["label"], "football helmet");
}

#[test]
fn text_output_names_the_classes_and_jsonl_is_one_object_per_image() {
    let Some(dir) = photos() else { return };
    let coffee = dir.join("coffee.png").display().to_string();
    let out = common::run(&[
        "classify",
        "-m",
        "ml-illustrated/efficientnet-lite0",
        "-k",
        "2",
        &coffee,
    ]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert_eq!(lines[0], coffee);
    assert!(lines[1].contains("espresso (967)"), "{text}");
    let out = common::run(&[
        "classify",
        "-m",
        "ml-illustrated/efficientnet-lite0",
        "--format",
        "jsonl",
        &coffee,
        &coffee,
    ]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 2);
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["predictions"][0]["index"], 967);
    }
}

#[test]
fn bad_images_and_flags_are_errors() {
    let Some(dir) = photos() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let cut = tmp.path().join("cut.png");
    let bytes = std::fs::read(dir.join("chelsea.png")).unwrap();
    std::fs::write(&cut, &bytes[..bytes.len() / 3]).unwrap();
    let coffee = dir.join("coffee.png").display().to_string();
    let cut = cut.display().to_string();
    let out = common::run(&[
        "classify",
        "-m",
        "ml-illustrated/efficientnet-lite0",
        &coffee,
        &cut,
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&cut) && err.contains("truncated"), "{err}");
    let out = common::run(&[
        "classify",
        "-m",
        "ml-illustrated/efficientnet-lite0",
        "-k",
        "0",
        &coffee,
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--top-k"));
    let out = common::run(&["classify", &coffee]);
    assert_eq!(out.status.code(), Some(2), "missing -m is a usage error");
}

#[test]
fn a_missing_model_is_an_error() {
    let out = common::run(&["classify", "-m", "nobody/no-such-classifier", "x.png"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nobody/no-such-classifier"), "{err}");
}

/// Without downloads: a random-weight torchvision MobileNetV3-Small regenerated from its fixture
/// (`tools/fixtures/vision/torchvision_random.py`), given as a checkpoint file, on the committed
/// test images listed in a `-f` file, batches of 2; the top-5 of torchvision's logits.
#[test]
fn a_regenerated_torchvision_checkpoint_file_classifies_like_torchvision() {
    let doc: Value = serde_json::from_str(
        &std::fs::read_to_string(common::repo(
            "tools/fixtures/vision/out/torchvision/mobilenet_v3_small.json",
        ))
        .unwrap(),
    )
    .unwrap();
    let (_, logits) = aneforge_models::npy::read(common::repo(
        "tools/fixtures/vision/out/torchvision/mobilenet_v3_small.logits.npy",
    ))
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let ckpt = tmp.path().join("mnv3-small.safetensors");
    aneforge_models::testing::write_reproducible_state_dict(&doc, &ckpt).unwrap();
    let images: Vec<String> = doc["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            common::repo(&format!(
                "tools/fixtures/vision/out/images/{}",
                i.as_str().unwrap()
            ))
        })
        .collect();
    let list = tmp.path().join("list.txt");
    std::fs::write(&list, images.join("\n") + "\n").unwrap();
    let ckpt = ckpt.display().to_string();
    let list = list.display().to_string();
    let out = common::run(&[
        "classify",
        "-m",
        &ckpt,
        "-f",
        &list,
        "--format",
        "json",
        "--batch-size",
        "2",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    for (i, row) in rows.as_array().unwrap().iter().enumerate() {
        assert_eq!(row["image"].as_str().unwrap(), images[i]);
        let want = &logits[i * 1000..(i + 1) * 1000];
        let mut order: Vec<usize> = (0..1000).collect();
        order.sort_by(|&a, &b| want[b].total_cmp(&want[a]));
        let got: Vec<u64> = row["predictions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["index"].as_u64().unwrap())
            .collect();
        assert_eq!(
            got,
            order[..5].iter().map(|&i| i as u64).collect::<Vec<_>>(),
            "image {i}"
        );
        for p in row["predictions"].as_array().unwrap() {
            let l = p["logit"].as_f64().unwrap();
            let w = f64::from(want[p["index"].as_u64().unwrap() as usize]);
            assert!((l - w).abs() < 1e-4, "image {i}: logit {l} vs {w}");
        }
    }
}

fn hf_vit(name: &str) -> PathBuf {
    PathBuf::from(common::repo(&format!(
        "tools/fixtures/vision/out/hf_vit/{name}"
    )))
}

fn npy_rows(path: PathBuf) -> Vec<Vec<f32>> {
    let (shape, data) = aneforge_models::npy::read(path).unwrap();
    data.chunks(shape[1]).map(<[f32]>::to_vec).collect()
}

fn skimage() -> Option<PathBuf> {
    Some(model_or_skip("scikit-image/data")?.dir().to_path_buf())
}

/// A random-weight ViT directory (tools/fixtures/vision/hf_vit_random.py): the top-3 classes
/// are transformers' three largest logits, named from config.json's id2label.
#[test]
fn a_vit_directory_classifies_with_its_own_labels() {
    let Some(dir) = skimage() else { return };
    let model = hf_vit("vit");
    let logits = npy_rows(model.join("logits.npy"));
    let photo = dir.join("astronaut.png").display().to_string();
    let out = common::run(&[
        "classify",
        "-m",
        model.to_str().unwrap(),
        "--format",
        "json",
        "-k",
        "3",
        &photo,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let preds = doc[0]["predictions"].as_array().unwrap();
    let mut order: Vec<usize> = (0..logits[0].len()).collect();
    order.sort_by(|&a, &b| logits[0][b].total_cmp(&logits[0][a]));
    for (p, want) in preds.iter().zip(&order) {
        assert_eq!(p["index"], *want);
        assert_eq!(p["label"], format!("LABEL_{want}"));
    }
}

/// CLIP zero-shot from the command line: per image, the labels ranked by transformers'
/// logits_per_image with their softmax as probabilities.
#[test]
fn clip_ranks_the_given_labels_zero_shot() {
    let Some(dir) = skimage() else { return };
    let model = hf_vit("clip");
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(model.join("expected.json")).unwrap())
            .unwrap();
    let labels: Vec<&str> = expected["labels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    let logits = npy_rows(model.join("logits_per_image.npy"));
    let photos: Vec<String> = expected["photos"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| dir.join(p.as_str().unwrap()).display().to_string())
        .collect();
    let joined = labels.join(",");
    let mut args = vec![
        "classify",
        "-m",
        model.to_str().unwrap(),
        "--labels",
        &joined,
        "--format",
        "json",
        "--batch-size",
        "2",
        "-k",
        "5",
    ];
    args.extend(photos.iter().map(String::as_str));
    let out = common::run(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    for (i, row) in doc.as_array().unwrap().iter().enumerate() {
        let want = &logits[i];
        let max = want.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let total: f64 = want.iter().map(|&l| f64::from(l - max).exp()).sum();
        let mut order: Vec<usize> = (0..want.len()).collect();
        order.sort_by(|&a, &b| want[b].total_cmp(&want[a]));
        for (p, &j) in row["predictions"].as_array().unwrap().iter().zip(&order) {
            assert_eq!(p["label"], labels[j], "photo {i}");
            let prob = f64::from(want[j] - max).exp() / total;
            let d = (p["probability"].as_f64().unwrap() - prob).abs();
            assert!(d < 1e-4, "photo {i}: probability off by {d}");
        }
    }
    // A non-CLIP model with labels is refused by name.
    let vit = hf_vit("vit");
    let out = common::run(&[
        "classify",
        "-m",
        vit.to_str().unwrap(),
        "--labels",
        "a,b",
        &photos[0],
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a CLIP checkpoint"), "{err}");
}

/// `embed --images` on a CLIP model: transformers' image_embeds of the same photos, in order
/// across batches, as .npy and JSON; a model without an image tower is refused by name.
#[test]
fn embed_images_gives_clip_image_embeddings() {
    let Some(dir) = skimage() else { return };
    let model = hf_vit("clip");
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(model.join("expected.json")).unwrap())
            .unwrap();
    let want = npy_rows(model.join("image_embeds.npy"));
    let photos: Vec<String> = expected["photos"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| dir.join(p.as_str().unwrap()).display().to_string())
        .collect();
    let tmp = tempfile::tempdir().unwrap();
    let npy = tmp.path().join("images.npy");
    let mut args = vec![
        "embed",
        "-m",
        model.to_str().unwrap(),
        "--images",
        "--batch-size",
        "2",
        "--format",
        "npy",
        "-o",
        npy.to_str().unwrap(),
    ];
    args.extend(photos.iter().map(String::as_str));
    let out = common::run(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = npy_rows(npy);
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g.len(), w.len());
        let d = g
            .iter()
            .zip(w)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(d < 1e-5, "photo {i}: embedding off by {d}");
    }

    let out = common::run(&[
        "embed",
        "-m",
        model.to_str().unwrap(),
        "--images",
        "--format",
        "json",
        &photos[1],
    ]);
    assert!(out.status.success());
    let doc: Vec<Vec<f32>> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc.len(), 1);
    let d = doc[0]
        .iter()
        .zip(&want[1])
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(d < 1e-5, "json: embedding off by {d}");

    let vit = hf_vit("vit");
    let out = common::run(&["embed", "-m", vit.to_str().unwrap(), "--images", &photos[0]]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a CLIP checkpoint"), "{err}");
    let out = common::run(&[
        "embed",
        "-m",
        model.to_str().unwrap(),
        "--images",
        "--pooling",
        "mean",
        &photos[0],
    ]);
    assert!(!out.status.success());
}

/// `embed` given a CLIP directory and texts: transformers' text_embeds of the fixture's labels,
/// in order across batches, as .npy and JSON lines, within the library test's tolerance (1e-4 of
/// the largest value); the sentence encoders' options and an empty text list are refused.
#[test]
fn embed_texts_gives_clip_text_embeddings() {
    let model = hf_vit("clip");
    let spec = model.to_str().unwrap();
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(model.join("expected.json")).unwrap())
            .unwrap();
    let want = npy_rows(model.join("text_embeds.npy"));
    let labels: Vec<&str> = expected["labels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    let scale = want.iter().flatten().fold(0f32, |m, v| m.max(v.abs()));
    let check = |what: &str, got: &[Vec<f32>], want: &[Vec<f32>]| {
        assert_eq!(got.len(), want.len(), "{what}");
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert_eq!(g.len(), w.len(), "{what} {i}");
            let d = g
                .iter()
                .zip(w)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            eprintln!("{what} text {i}: max |Δ| {d:.2e}");
            assert!(d <= 1e-4 * scale, "{what} text {i}: off by {d}");
        }
    };
    let tmp = tempfile::tempdir().unwrap();
    let npy = tmp.path().join("texts.npy");
    let mut args = vec![
        "embed",
        "-m",
        spec,
        "--batch-size",
        "2",
        "--format",
        "npy",
        "-o",
        npy.to_str().unwrap(),
    ];
    args.extend(labels.iter().copied());
    let out = common::run(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    check("npy", &npy_rows(npy), &want);

    let list = tmp.path().join("labels.txt");
    std::fs::write(&list, format!("{}\n{}\n", labels[3], labels[1])).unwrap();
    let out = common::run(&[
        "embed",
        "-m",
        spec,
        "-f",
        list.to_str().unwrap(),
        "--format",
        "jsonl",
    ]);
    assert!(out.status.success());
    let got: Vec<Vec<f32>> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    check("jsonl", &got, &[want[3].clone(), want[1].clone()]);

    let empty = tmp.path().join("empty.txt");
    std::fs::write(&empty, "").unwrap();
    for (args, message) in [
        (
            vec!["embed", "-m", spec, "-f", empty.to_str().unwrap()],
            "no texts given",
        ),
        (
            vec!["embed", "-m", spec, "--pooling", "mean", "a cat"],
            "--pooling applies to sentence encoders",
        ),
        (
            vec!["embed", "-m", spec, "--max-length", "8", "a cat"],
            "--max-length applies to sentence encoders",
        ),
    ] {
        let out = common::run(&args);
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(message), "{err}");
    }
}
