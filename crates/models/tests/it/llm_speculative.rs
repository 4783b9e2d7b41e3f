//! Exact speculative decoding gives the target model's greedy output: tiny fixture targets with a
//! draft of the same model in another weight format (mostly accepted) and with an unrelated
//! family's model (mostly rejected), against transformers' greedy tokens; the real SmolLM2 GGUF
//! drafted by its int4 re-quantization against its fixture's greedy tokens.

use crate::llm_fixtures;
use std::path::PathBuf;
use std::sync::Arc;

use aneforge_models::llm::{
    speculative_generate, ChatMessage, GenerateOptions, Llm, LoadOptions, Runner, RunnerOptions,
    SamplingOptions, WeightFormat,
};
use aneforge_models::require_model;
use llm_fixtures::{file_ints, tiny};

fn load(spec: &str, format: WeightFormat) -> Arc<Llm> {
    Arc::new(Llm::load(spec, LoadOptions::new(format)).unwrap())
}

fn runner(llm: Arc<Llm>, all_logits: Vec<usize>) -> Runner {
    let opts = RunnerOptions {
        max_context: 256,
        min_context: 64,
        prefill_chunks: vec![16],
        all_logits_chunks: all_logits,
        ..RunnerOptions::default()
    };
    Runner::new(llm, opts).unwrap()
}

fn greedy(n: usize, stop_at_eos: bool) -> GenerateOptions {
    GenerateOptions {
        max_new_tokens: n,
        sampling: SamplingOptions::greedy(),
        stop: Vec::new(),
        stop_at_eos,
    }
}

#[test]
fn speculative_output_equals_greedy_on_tiny_models() {
    let cases = [
        ("llama", "llama", WeightFormat::Int8, 4),
        ("qwen3", "qwen3", WeightFormat::Int4, 3),
        ("llama", "mistral", WeightFormat::Stored, 4),
        ("gpt2", "qwen2", WeightFormat::Stored, 2),
    ];
    for (target_family, draft_family, draft_format, k) in cases {
        let expected = tiny(target_family).join("expected.safetensors");
        let prompt = file_ints(&expected, "prompt_ids");
        let want = file_ints(&expected, "greedy_ids");
        let target = load(tiny(target_family).to_str().unwrap(), WeightFormat::Stored);
        let draft = load(tiny(draft_family).to_str().unwrap(), draft_format);
        let mut t = runner(target, vec![k + 1]);
        let mut d = runner(draft, Vec::new());
        let mut streamed = String::new();
        let (g, stats) =
            speculative_generate(&mut t, &mut d, &prompt, k, &greedy(64, false), &mut |s| {
                streamed.push_str(s);
                true
            })
            .unwrap();
        let case = format!("{target_family} drafted by {draft_family} {draft_format:?}, k {k}");
        assert_eq!(g.tokens, want, "{case}");
        assert_eq!(streamed, g.text, "{case}");
        assert!(stats.drafted > 0, "{case}: {stats:?}");
        // the prompt's call gives the first token, each later call its accepted drafts plus one
        assert!(stats.target_calls < want.len(), "{case}: {stats:?}");
        assert!(
            1 + stats.target_calls + stats.accepted >= want.len(),
            "{case}: {stats:?}"
        );
        // rejections in every case; acceptances where the draft is the same model
        assert!(stats.accepted < stats.drafted, "{case}: {stats:?}");
        if draft_family == target_family {
            assert!(stats.accepted > 0, "{case}: {stats:?}");
        }
        eprintln!("{case}: {stats:?}");
    }
}

#[test]
fn speculative_refuses_sampling_and_mismatched_vocabularies() {
    let llama = load(tiny("llama").to_str().unwrap(), WeightFormat::Stored);
    let mut t = runner(llama.clone(), vec![5]);
    let mut d = runner(llama, Vec::new());
    let mut sampled = greedy(8, false);
    sampled.sampling = SamplingOptions {
        temperature: 0.7,
        ..SamplingOptions::greedy()
    };
    let err = speculative_generate(&mut t, &mut d, &[1, 2, 3], 4, &sampled, &mut |_| true)
        .unwrap_err()
        .to_string();
    assert!(err.contains("greedy"), "{err}");
    let err = speculative_generate(
        &mut t,
        &mut d,
        &[1, 2, 3],
        0,
        &greedy(8, false),
        &mut |_| true,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("at least one draft token"), "{err}");
}

#[test]
fn smollm2_drafted_by_its_int4_requantization_equals_greedy() {
    let model = require_model!("HuggingFaceTB/SmolLM2-135M-Instruct");
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tools/fixtures/llm/out/smollm2/expected.safetensors");
    let target =
        Arc::new(Llm::from_resolved(&model, LoadOptions::new(WeightFormat::Stored)).unwrap());
    let draft = Arc::new(Llm::from_resolved(&model, LoadOptions::new(WeightFormat::Int4)).unwrap());
    let template = target.chat().unwrap();
    let text = template
        .render(
            &[ChatMessage::new("user", "What is the capital of France?")],
            true,
        )
        .unwrap();
    let prompt = target.encode_raw(&text).unwrap();
    assert_eq!(prompt, file_ints(&fixture, "chat_ids"));
    let k = 4;
    let mut t = runner(target, vec![k + 1]);
    let mut d = runner(draft, Vec::new());
    let (g, stats) =
        speculative_generate(&mut t, &mut d, &prompt, k, &greedy(64, false), &mut |_| {
            true
        })
        .unwrap();
    assert_eq!(g.tokens, file_ints(&fixture, "chat_greedy_ids"));
    assert!(stats.target_calls < 64, "{stats:?}");
    eprintln!("SmolLM2 Q4_1 drafted by int4: {stats:?}");
}
