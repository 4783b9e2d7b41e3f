//! Whisper tiny.en and base on the shared speech clips against transformers' greedy `generate`
//! in fp32 (fixture: tools/fixtures/whisper/reference.py): identical token sequences and
//! transcripts, with and without timestamps, and raw per-step logits within 1e-3.

mod whisper_fixtures;

use aneforge_models::whisper::WhisperOptions;
use whisper_fixtures::check_model;

#[test]
fn tiny_en_matches_transformers_greedy() {
    check_model("openai/whisper-tiny.en", &WhisperOptions::default(), 1e-3);
}

#[test]
fn base_matches_transformers_greedy() {
    check_model("openai/whisper-base", &WhisperOptions::default(), 1e-3);
}
