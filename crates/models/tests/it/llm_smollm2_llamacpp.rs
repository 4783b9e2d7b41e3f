//! The real SmolLM2-135M-Instruct Q4_1 GGUF beside llama.cpp on the same file (fixtures from
//! tools/fixtures/llm/smollm2_llamacpp.py, llama-cpp-python 0.3.36): logits against transformers'
//! (smollm2.py, the GGUF dequantised to fp32) next to llama.cpp's, each side fed the same token ids
//! the same way. Skips when the weights are absent (scripts/fetch-models.sh smollm2).

use crate::llm_fixtures;
use std::sync::Arc;

use aneforge::engine::Activations;
use aneforge_models::llm::{Llm, LoadOptions, RunnerOptions, WeightFormat};
use aneforge_models::require_model;
use llm_fixtures::{
    floats, ints, llamacpp_runner, real_model_file, real_model_fixture, relative_error,
};
use safetensors::SafeTensors;

const MODEL: &str = "HuggingFaceTB/SmolLM2-135M-Instruct";
/// smollm2.py's PROMPTS.
const PROMPTS: usize = 8;
/// How far 8-bit activations may stray, as a multiple of llama.cpp's own deviation on the same
/// measure. Fed one token at a time they are further from transformers than llama.cpp on five of
/// the nineteen measures (the chat prompt's last position 7.2e-2 against 3.3e-2, every position
/// 4.9e-2 against 3.6e-2; prompts 0, 1 and 7: 3.8e-2, 1.7e-2, 4.0e-2 against 2.4e-2, 1.5e-2,
/// 3.9e-2), closer on the other fourteen; so they are not the default on this model's Q4_1 blocks.
const INT8_ALLOWANCE: f64 = 2.5;

/// The measures of one activation mode: how many are further from transformers than
/// llama.cpp's, and those beyond `allowance` times llama.cpp's deviation.
struct Tally {
    allowance: f64,
    further: usize,
    failed: Vec<String>,
}

impl Tally {
    fn record(&mut self, what: &str, ours: f64, theirs: f64) {
        eprintln!("{what}: relative error {ours:e}, llama.cpp {theirs:e}");
        if ours > theirs {
            self.further += 1;
        }
        if ours > self.allowance * theirs {
            self.failed
                .push(format!("{what}: {ours:e} against llama.cpp's {theirs:e}"));
        }
    }
}

/// On the chat prompt (every position and the last, fed one token at a time against llama.cpp's
/// one token per batch; the last position prompt-wide against llama.cpp's prompt in one batch) and
/// on each short prompt (last position, both ways): exact and 15-bit activations are no further
/// from transformers' than llama.cpp's on every measure, 8-bit activations within
/// [`INT8_ALLOWANCE`] of it; and the runner's default activations are the coarsest integer mode
/// no further than llama.cpp's on every measure (8-bit ones are not: see [`INT8_ALLOWANCE`]), or
/// exact f32 if neither is.
#[test]
fn smollm2_logits_are_as_close_to_transformers_as_llamacpps() {
    let model = require_model!(MODEL);
    let cpp_bytes = real_model_file("smollm2", "llamacpp.safetensors");
    let cpp = SafeTensors::deserialize(&cpp_bytes).unwrap();
    let hf_bytes = real_model_fixture("smollm2");
    let hf = SafeTensors::deserialize(&hf_bytes).unwrap();
    let llm = Arc::new(Llm::from_resolved(&model, LoadOptions::new(WeightFormat::Stored)).unwrap());
    let tallies = compare(llm, &hf, &cpp);
    for (mode, tally) in &tallies {
        let mode = mode.name();
        eprintln!(
            "{mode}: further from transformers than llama.cpp on {} measures",
            tally.further
        );
        assert!(
            tally.failed.is_empty(),
            "{mode}: beyond {} times llama.cpp's deviation: {:#?}",
            tally.allowance,
            tally.failed
        );
    }
    // The rule for the default: the coarsest (fastest) integer mode that is no further from
    // transformers than llama.cpp on every measure, else exact f32.
    let further = |mode| tallies.iter().find(|(m, _)| *m == mode).unwrap().1.further;
    let want = [Activations::Int8, Activations::Int16]
        .into_iter()
        .find(|&mode| further(mode) == 0)
        .unwrap_or(Activations::F32);
    assert_eq!(
        RunnerOptions::default().activations,
        want,
        "further from transformers than llama.cpp: int8 on {} measures, int16 on {}",
        further(Activations::Int8),
        further(Activations::Int16)
    );
}

/// Every measure of the test above, for each activation mode, from smollm2.py's fixture `hf` and
/// smollm2_llamacpp.py's `cpp` of the GGUF `llm` was loaded from.
fn compare(llm: Arc<Llm>, hf: &SafeTensors, cpp: &SafeTensors) -> Vec<(Activations, Tally)> {
    let chat_ids = ints(hf, "chat_ids");
    let columns = ints(hf, "columns");
    let width = columns.len();
    let want = floats(hf, "chat_logits_cols");
    let stepped = floats(cpp, "chat_logits_cols_one_by_one");
    let want_last = &want[want.len() - width..];
    let mut tallies = Vec::new();
    for activations in [Activations::F32, Activations::Int16, Activations::Int8] {
        let mode = activations.name();
        let allowance = if activations == Activations::Int8 {
            INT8_ALLOWANCE
        } else {
            1.0
        };
        let mut tally = Tally {
            allowance,
            further: 0,
            failed: Vec::new(),
        };
        let mut r = llamacpp_runner(llm.clone(), activations, 64);
        let mut picked = Vec::new();
        for &t in &chat_ids {
            let logits = r.feed(&[t]).unwrap();
            picked.extend(columns.iter().map(|&c| logits[c as usize]));
        }
        tally.record(
            &format!("{mode}, chat prompt one token at a time, every position"),
            relative_error(&picked, &want),
            relative_error(&stepped, &want),
        );
        tally.record(
            &format!("{mode}, chat prompt one token at a time, last position"),
            relative_error(&picked[picked.len() - width..], want_last),
            relative_error(&stepped[stepped.len() - width..], want_last),
        );
        r.reset();
        let last = r.feed(&chat_ids).unwrap();
        let picked: Vec<f32> = columns.iter().map(|&c| last[c as usize]).collect();
        tally.record(
            &format!("{mode}, chat prompt prompt-wide, last position"),
            relative_error(&picked, want_last),
            relative_error(&floats(cpp, "chat_logits_last_cols"), want_last),
        );

        for k in 0..PROMPTS {
            let ids = ints(hf, &format!("prompt{k}_ids"));
            let columns = ints(hf, &format!("columns{k}"));
            let want = floats(hf, &format!("prompt{k}_logits_cols"));
            for one_by_one in [false, true] {
                r.reset();
                let (last, name, how) = if one_by_one {
                    let last = ids.iter().map(|&t| r.feed(&[t]).unwrap()).last().unwrap();
                    (
                        last,
                        format!("prompt{k}_logits_cols_one_by_one"),
                        "one token at a time",
                    )
                } else {
                    (
                        r.feed(&ids).unwrap(),
                        format!("prompt{k}_logits_cols"),
                        "prompt-wide",
                    )
                };
                let picked: Vec<f32> = columns.iter().map(|&c| last[c as usize]).collect();
                tally.record(
                    &format!("{mode}, prompt {k} {how}"),
                    relative_error(&picked, &want),
                    relative_error(&floats(cpp, &name), &want),
                );
            }
        }
        tallies.push((activations, tally));
    }
    tallies
}
