//! Whisper tiny.en and base on the shared speech clips against transformers' greedy `generate`
//! in fp32 (fixture: tools/fixtures/whisper/reference.py): identical token sequences and
//! transcripts, with and without timestamps, and raw per-step logits within 1e-3; beam search
//! with 5 beams against transformers' `num_beams=5`.

use crate::whisper_fixtures;

use aneforge_models::whisper::WhisperOptions;
use whisper_fixtures::{check_beam, check_detected_language, check_model};

#[test]
fn tiny_en_matches_transformers_greedy() {
    check_model("openai/whisper-tiny.en", &WhisperOptions::default(), 1e-3);
}

#[test]
fn base_matches_transformers_greedy() {
    check_model("openai/whisper-base", &WhisperOptions::default(), 1e-3);
}

#[test]
fn tiny_en_beam_search_matches_transformers() {
    // all three clips: on the second, beam search corrects greedy's "old-sposed"
    check_beam("openai/whisper-tiny.en", &WhisperOptions::default(), 3);
}

#[test]
fn base_beam_search_matches_transformers() {
    check_beam("openai/whisper-base", &WhisperOptions::default(), 1);
}

#[test]
fn base_detects_the_language_as_transformers_does() {
    check_detected_language("openai/whisper-base");
}

/// bf16 products (`MatmulPrecision::Bf16`, on AMX where the CPU has it): the same transcripts,
/// with the logits' worst difference bounded as for the fp16 programs.
#[test]
fn tiny_en_with_bf16_products_matches_transformers_greedy() {
    let options = WhisperOptions {
        matmul: aneforge::engine::MatmulPrecision::Bf16,
        ..WhisperOptions::default()
    };
    check_model("openai/whisper-tiny.en", &options, 0.25);
}
