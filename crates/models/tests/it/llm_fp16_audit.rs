//! The fp16 audit (`aneforge check-fp16`'s library side) on the tiny Llama fixture: a model whose
//! fp16 program is faithful audits clean, layer by layer; the same model with one projection
//! scaled past fp16's range is caught at the op that overflows, and its runner refuses to return
//! non-finite logits instead of sampling from them.

use crate::llm_fixtures;
use std::path::Path;
use std::sync::Arc;

use aneforge::engine::Accumulation;
use aneforge::{AneArch, Engine, Target};
use aneforge_models::llm::{
    audit_fp16, Llm, LlmError, LoadOptions, Runner, RunnerOptions, WeightFormat,
};
use llm_fixtures::{file_ints, tiny};

fn h16() -> Target {
    Target::Ane("h16".parse::<AneArch>().unwrap())
}

fn load(dir: &Path) -> Arc<Llm> {
    Arc::new(
        Llm::load(
            dir.to_str().unwrap(),
            LoadOptions::new(WeightFormat::Stored),
        )
        .unwrap(),
    )
}

/// A copy of the tiny Llama whose layer-0 up projection is multiplied by `factor`.
fn scaled_copy(factor: f32) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    aneforge_models::testing::copy_with_scaled_tensor(
        &tiny("llama"),
        dir.path(),
        "model.layers.0.mlp.up_proj.weight",
        factor,
    )
    .unwrap();
    dir
}

fn prompt() -> Vec<u32> {
    file_ints(&tiny("llama").join("expected.safetensors"), "prompt_ids")
}

#[test]
fn a_faithful_program_audits_clean_layer_by_layer() {
    let llm = load(&tiny("llama"));
    for acc in [Accumulation::F32, Accumulation::F16] {
        let a = audit_fp16(&llm, &prompt(), &h16(), acc, 0.05).unwrap();
        assert!(a.is_clean(), "{acc:?}: {a:#?}");
        let names: Vec<&str> = a.probes.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            ["l0_attn", "l0_mlp", "l0_out", "l1_attn", "l1_mlp", "l1_out"]
        );
        for p in &a.probes {
            assert!(p.max_abs > 0.0 && p.non_finite == 0, "{p:?}");
            assert!(p.relative < 2e-2, "{acc:?} {p:?}");
        }
        let l = a.logits.as_ref().unwrap();
        assert!(l.relative < 2e-2, "{acc:?} {l:?}");
        assert!(a.first_non_finite.is_none() && a.first_drift.is_none());
        assert!(!a.largest.is_empty());
    }
}

#[test]
fn the_audit_names_the_op_that_overflows() {
    let dir = scaled_copy(1e7);
    let llm = load(dir.path());
    let a = audit_fp16(&llm, &prompt(), &h16(), Accumulation::F32, 0.05).unwrap();
    assert!(!a.is_clean());
    let op = a.first_non_finite.as_ref().expect("an op overflows");
    assert!(op.non_finite > 0);
    // the layer-0 MLP's up projection (its fused gate/up linear) is the first op past 65504
    assert_eq!(op.op_type, "linear", "{op:?}");
    assert_eq!(a.first_drift.as_deref(), Some("l0_mlp"), "{:#?}", a.probes);
    assert!(
        a.probes[0].non_finite == 0,
        "attention of layer 0 is untouched"
    );

    let mut r = Runner::new(
        llm,
        RunnerOptions {
            target: h16(),
            engine: Engine::Cpu,
            max_context: 64,
            min_context: 64,
            prefill_chunks: vec![16],
            ..RunnerOptions::default()
        },
    )
    .unwrap();
    match r.feed(&prompt()) {
        Err(LlmError::NonFinite { bad, .. }) => assert!(bad > 0),
        other => panic!("expected a non-finite logits error, got {other:?}"),
    }
}
