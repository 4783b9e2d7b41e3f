//! The Whisper checkpoint readers: CTranslate2 `model.bin` under transformers' names (against an
//! independent Python reader of the same files, tools/fixtures/whisper/reference.py), and clear
//! errors for truncated or corrupt files.

use std::path::Path;

use aneforge::graph::{HalfStorage, HostData};
use aneforge_models::require_model;
use aneforge_models::weights::TensorSource;
use aneforge_models::whisper::{load_weights, CheckpointFiles, Ct2Model, WhisperConfig};
use serde_json::Value;

fn fixture(name: &str) -> Value {
    let path = format!(
        "{}/../../tools/fixtures/whisper/out/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn check_real(repo: &str) {
    let model = require_model!(repo);
    let expected = &fixture("weights.json")[repo];
    let files = CheckpointFiles::find(model.dir()).unwrap();
    assert!(matches!(files, CheckpointFiles::Ctranslate2 { .. }));
    let (cfg, vb) = files.open().unwrap();
    let c = &expected["config"];
    let n = |k: &str| c[k].as_u64().unwrap() as usize;
    assert_eq!(
        cfg,
        WhisperConfig {
            n_mels: n("num_mel_bins"),
            d_model: n("d_model"),
            encoder_layers: n("encoder_layers"),
            decoder_layers: n("decoder_layers"),
            encoder_heads: n("encoder_attention_heads"),
            decoder_heads: n("decoder_attention_heads"),
            ffn_dim: n("encoder_ffn_dim"),
            vocab_size: n("vocab_size"),
            max_source_positions: n("max_source_positions"),
            max_target_positions: n("max_target_positions"),
        }
    );
    assert_eq!(
        vb.source().names().len() as u64,
        expected["tensor_count"].as_u64().unwrap(),
        "tensors exposed under transformers names"
    );
    for (name, t) in expected["tensors"].as_object().unwrap() {
        let a = vb.get_any(name).unwrap();
        let shape: Vec<usize> = t["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as usize)
            .collect();
        assert_eq!(a.shape(), shape.as_slice(), "{name}");
        let sum: f64 = a.data().iter().map(|&v| f64::from(v)).sum();
        let want = t["sum"].as_f64().unwrap();
        assert!(
            (sum - want).abs() <= 1e-6 * want.abs().max(1.0) * 10.0,
            "{name}: sum {sum} vs {want}"
        );
        for (i, v) in t["first"].as_array().unwrap().iter().enumerate() {
            let v = v.as_f64().unwrap();
            assert!((f64::from(a.data()[i]) - v).abs() < 1e-6, "{name}[{i}]");
        }
        // read in parts (as a program's compile reads deferred matrices): the same values,
        // fused projections' row views included
        let mut parts = vec![0.0f32; a.data().len()];
        for (i, chunk) in parts.chunks_mut(1000).enumerate() {
            vb.source().read_f32_range(name, i * 1000, chunk).unwrap();
        }
        assert_eq!(parts.as_slice(), a.data(), "{name} read in parts");
        let past = vb
            .source()
            .read_f32_range(name, a.data().len() - 1, &mut [0.0; 2])
            .unwrap_err()
            .to_string();
        assert!(past.contains(name.as_str()), "{past}");
    }
    let (cfg2, weights) = load_weights(model.dir()).unwrap();
    assert_eq!(cfg2, cfg);
    assert_eq!(weights.decoder_layers.len(), cfg.decoder_layers);
    assert!(weights.encoder_layers[0].attn.k.bias.is_none());
    // matrices are read when the programs compile; the decoder's one-row products keep the
    // file's fp16, the products over the encoder's rows are widened to f32
    let half = |a: &aneforge::HostArray| match a.data() {
        HostData::Deferred(d) => d.half_storage(a.shape()[1]) == Some(HalfStorage::Exact),
        other => panic!("not deferred: {other:?}"),
    };
    let dec = &weights.decoder_layers[0];
    assert!(half(&dec.fc1.weight) && half(&dec.self_attn.q.weight));
    assert!(half(&dec.cross_attn.q.weight) && half(&weights.token_embeddings));
    assert!(!half(&dec.cross_attn.k.weight) && !half(&dec.cross_attn.v.weight));
    assert!(!half(&weights.encoder_layers[0].fc1.weight));
}

#[test]
fn tiny_en_model_bin_reads_as_transformers_tensors() {
    check_real("openai/whisper-tiny.en");
}

#[test]
fn base_model_bin_reads_as_transformers_tensors() {
    check_real("openai/whisper-base");
}

/// A CTranslate2 file of `vars` and `aliases` at `path`.
fn write_ct2(path: &Path, vars: &[(&str, Vec<u32>, u8, Vec<u8>)], aliases: &[(&str, &str)]) {
    std::fs::write(path, aneforge_models::testing::ct2_bytes(vars, aliases)).unwrap();
}

fn f32s(n: usize, start: f32) -> Vec<u8> {
    (0..n)
        .flat_map(|i| (start + i as f32).to_le_bytes())
        .collect()
}

fn small_vars() -> Vec<(&'static str, Vec<u32>, u8, Vec<u8>)> {
    vec![
        ("encoder/num_heads", vec![], 2, 2i16.to_le_bytes().to_vec()),
        (
            "encoder/layer_0/self_attention/linear_0/weight",
            vec![6, 2],
            0,
            f32s(12, 0.0),
        ),
        (
            "encoder/layer_0/self_attention/linear_0/bias",
            vec![6],
            0,
            f32s(6, 100.0),
        ),
        ("decoder/embeddings/weight", vec![3, 2], 0, f32s(6, 7.0)),
    ]
}

#[test]
fn fused_projections_split_into_transformers_tensors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.bin");
    write_ct2(
        &path,
        &small_vars(),
        &[("decoder/projection/weight", "decoder/embeddings/weight")],
    );
    let m = Ct2Model::open(&path).unwrap();
    assert_eq!(m.scalar_int("encoder/num_heads").unwrap(), 2);
    let k = m
        .read_f32("model.encoder.layers.0.self_attn.k_proj.weight")
        .unwrap();
    assert_eq!(k.shape(), &[2, 2]);
    // rows 2..4 of the fused [q; k; v] weight, whose elements count up from 0
    let fused: Vec<f32> = (0..12).map(|i| i as f32).collect();
    assert_eq!(k.data(), &fused[4..8]);
    let vb = m
        .read_f32("model.encoder.layers.0.self_attn.v_proj.bias")
        .unwrap();
    let bias: Vec<f32> = (0..6).map(|i| 100.0 + i as f32).collect();
    assert_eq!(vb.data(), &bias[4..6]);
    assert!(m
        .meta("model.encoder.layers.0.self_attn.k_proj.bias")
        .is_none());
    assert_eq!(
        m.read_f32("model.decoder.embed_tokens.weight")
            .unwrap()
            .shape(),
        &[3, 2]
    );
}

#[test]
fn truncated_model_bin_names_the_file_and_the_variable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.bin");
    write_ct2(&path, &small_vars(), &[]);
    let bytes = std::fs::read(&path).unwrap();
    // cut inside the data of the fused weight (the second variable)
    let name = b"encoder/layer_0/self_attention/linear_0/weight";
    let at = bytes.windows(name.len()).position(|w| w == name).unwrap();
    // NUL, rank, two dims, dtype, byte count, then 20 of the 48 data bytes
    let cut = at + name.len() + 1 + 1 + 8 + 1 + 4 + 20;
    std::fs::write(&path, &bytes[..cut]).unwrap();
    let err = Ct2Model::open(&path).unwrap_err().to_string();
    assert!(err.contains(&path.display().to_string()), "{err}");
    assert!(
        err.contains("encoder/layer_0/self_attention/linear_0/weight") && err.contains("truncated"),
        "{err}"
    );
    for cut in [0, 3, 10, bytes.len() - 2] {
        std::fs::write(&path, &bytes[..cut]).unwrap();
        let err = Ct2Model::open(&path).unwrap_err().to_string();
        assert!(
            err.contains(&path.display().to_string()) && err.contains("truncated"),
            "cut at {cut}: {err}"
        );
    }
}

#[test]
fn corrupt_model_bin_is_refused_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.bin");
    let mut vars = small_vars();
    vars[3].2 = 9;
    write_ct2(&path, &vars, &[]);
    let err = Ct2Model::open(&path).unwrap_err().to_string();
    assert!(
        err.contains("decoder/embeddings/weight") && err.contains("dtype code 9"),
        "{err}"
    );
    let mut vars = small_vars();
    vars[3].3.truncate(20);
    write_ct2(&path, &vars, &[]);
    let err = Ct2Model::open(&path).unwrap_err().to_string();
    assert!(
        err.contains("decoder/embeddings/weight") && err.contains("should hold 24 bytes"),
        "{err}"
    );
    std::fs::write(&path, 5u32.to_le_bytes()).unwrap();
    let err = Ct2Model::open(&path).unwrap_err().to_string();
    assert!(err.contains("format version 5"), "{err}");
    let err = load_weights(dir.path()).unwrap_err().to_string();
    assert!(err.contains("model.bin"), "{err}");
    let empty = tempfile::tempdir().unwrap();
    let err = load_weights(empty.path()).unwrap_err().to_string();
    assert!(err.contains("no Whisper checkpoint"), "{err}");
}
