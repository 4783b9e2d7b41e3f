//! Whisper tiny.en and base compiled for an ANE target (fp16 programs with the family's
//! legalization, run with the CPU engine's fp16 semantics) give transformers' fp32 greedy
//! transcripts on the shared clips, token for token, with and without timestamps; and tiny.en's
//! programs run through the ANE engine on the e5rt simulator give the same tokens.

use crate::whisper_fixtures;

use aneforge::engine::{AneEngine, AneOptions};
use aneforge::{AneArch, Engine, Target};
use aneforge_models::whisper::WhisperOptions;
use whisper_fixtures::check_model;

fn ane(engine: Engine) -> WhisperOptions {
    WhisperOptions {
        target: Target::Ane(AneArch::default()),
        engine,
        ..WhisperOptions::default()
    }
}

/// fp16 keeps 11 significant bits: logits of magnitude ~30 move by a few hundredths through
/// the encoder's and decoder's layers.
const FP16_LOGITS: f64 = 0.25;

#[test]
fn tiny_en_fp16_programs_give_the_reference_transcripts() {
    check_model("openai/whisper-tiny.en", &ane(Engine::Cpu), FP16_LOGITS);
}

#[test]
fn base_fp16_programs_give_the_reference_transcripts() {
    check_model("openai/whisper-base", &ane(Engine::Cpu), FP16_LOGITS);
}

#[test]
fn tiny_en_through_the_ane_engine_on_the_simulator() {
    let library = e5rt_sim::test_library_path().unwrap_or_else(|e| panic!("{e}"));
    AneEngine::install_global(AneOptions {
        library: Some(library),
        program_cache: Some(std::env::temp_dir().join("aneforge-whisper-test-programs")),
        ..AneOptions::default()
    })
    .unwrap();
    check_model("openai/whisper-tiny.en", &ane(Engine::Ane), FP16_LOGITS);
}
