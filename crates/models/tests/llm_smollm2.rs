//! The real SmolLM2-135M-Instruct (Q4_1 GGUF) against transformers, which dequantises the GGUF to
//! fp32 (fixtures from tools/fixtures/llm/smollm2.py): prompt logits, 64 greedy tokens, a
//! 600-token context and the MODELS.md chat answer. Skips when the weights are absent
//! (scripts/fetch-models.sh).

use std::path::PathBuf;
use std::sync::Arc;

use aneforge_models::llm::{
    generate, ChatMessage, FinishReason, GenerateOptions, Llm, LoadOptions, Runner, RunnerOptions,
    SamplingOptions, WeightFormat,
};
use aneforge_models::require_model;
use safetensors::SafeTensors;

const MODEL: &str = "HuggingFaceTB/SmolLM2-135M-Instruct";

fn fixture() -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tools/fixtures/llm/out/smollm2/expected.safetensors");
    std::fs::read(p).unwrap()
}

fn ints(st: &SafeTensors, n: &str) -> Vec<u32> {
    st.tensor(n)
        .unwrap()
        .data()
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as u32)
        .collect()
}

fn floats(st: &SafeTensors, n: &str) -> Vec<f32> {
    st.tensor(n)
        .unwrap()
        .data()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn relative_error(got: &[f32], want: &[f32]) -> f64 {
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(0f64, |m, &w| m.max(f64::from(w).abs()));
    let diff = got.iter().zip(want).fold(0f64, |m, (&g, &w)| {
        m.max((f64::from(g) - f64::from(w)).abs())
    });
    diff / scale
}

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
    let bytes = fixture();
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
