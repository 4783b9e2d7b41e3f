//! The large-v3 and turbo configurations (128 mel bins, a 51866-token vocabulary; turbo with more
//! decoder layers) through the transformers safetensors loader and the encoder and decoder
//! programs, on reduced-size models against transformers' logits (fixture:
//! tools/fixtures/whisper/large_configs.py). The weights follow the fixture's formula and are
//! written here as model.safetensors beside the fixture's config.json.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use aneforge_models::whisper::runtime::Programs;
use aneforge_models::whisper::{load_weights, WhisperOptions};
use safetensors::tensor::{Dtype, TensorView};
use serde_json::Value;

fn fixture_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tools/fixtures/whisper/out/large")
        .join(name)
}

/// The fixture's formula: tensor `k` (sorted names), element `i`.
fn values(k: usize, n: usize, norm_weight: bool) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let s = (0.7 * i as f64 + 1.3 * k as f64 + 0.5).sin();
            (if norm_weight { 1.0 + 0.1 * s } else { 0.05 * s }) as f32
        })
        .collect()
}

fn checkpoint(name: &str, reference: &Value) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        fixture_dir(name).join("config.json"),
        dir.path().join("config.json"),
    )
    .unwrap();
    let mut data: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    for (k, entry) in reference["tensors"].as_array().unwrap().iter().enumerate() {
        let tensor = entry[0].as_str().unwrap();
        let shape: Vec<usize> = entry[1]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap() as usize)
            .collect();
        let norm = tensor.contains("layer_norm") && tensor.ends_with(".weight");
        let v = values(k, shape.iter().product(), norm);
        data.push((tensor.to_string(), shape, bytemuck::cast_slice(&v).to_vec()));
    }
    let views: Vec<(String, TensorView)> = data
        .iter()
        .map(|(n, s, b)| {
            (
                n.clone(),
                TensorView::new(Dtype::F32, s.clone(), b).unwrap(),
            )
        })
        .collect();
    safetensors::tensor::serialize_to_file(views, None, &dir.path().join("model.safetensors"))
        .unwrap();
    dir
}

fn check(name: &str, decoder_layers: usize) {
    let reference: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture_dir(name).join("reference.json")).unwrap(),
    )
    .unwrap();
    let dir = checkpoint(name, &reference);
    let (cfg, weights) = load_weights(dir.path()).unwrap();
    assert_eq!(cfg.n_mels, 128);
    assert_eq!(cfg.vocab_size, 51866);
    assert_eq!(cfg.decoder_layers, decoder_layers);
    let mut programs = Programs::new(cfg, Arc::new(weights), &WhisperOptions::default()).unwrap();
    let mel: Vec<f32> = (0..128)
        .flat_map(|c| {
            (0..3000).map(move |t| (0.5 * (0.01 * t as f64 + 0.1 * c as f64).sin()) as f32)
        })
        .collect();
    programs.encode(&mel).unwrap();
    let mut worst = 0.0f64;
    for (pos, tok) in reference["tokens"].as_array().unwrap().iter().enumerate() {
        let logits = programs.step(tok.as_u64().unwrap() as u32, pos).unwrap();
        assert_eq!(logits.len(), 51866);
        let mut compare = |i: usize, want: &Value| {
            worst = worst.max((f64::from(logits[i]) - want.as_f64().unwrap()).abs());
        };
        for (k, i) in reference["top_indices"][pos]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
        {
            compare(
                i.as_u64().unwrap() as usize,
                &reference["top_values"][pos][k],
            );
        }
        for (i, v) in reference["head"][pos]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
        {
            compare(i, v);
        }
        for (j, v) in reference["every_997"][pos]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
        {
            compare(j * 997, v);
        }
    }
    eprintln!("{name}: worst logit difference {worst:.2e}");
    assert!(worst < 1e-4, "{name}: worst logit difference {worst}");
}

#[test]
fn large_v3_configuration_matches_transformers() {
    check("large-v3-reduced", 2);
}

#[test]
fn turbo_configuration_matches_transformers() {
    check("turbo-reduced", 4);
}
