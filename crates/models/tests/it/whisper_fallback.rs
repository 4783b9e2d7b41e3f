//! Temperature fallback, no-speech detection, language probabilities and translation against
//! references (fixture: tools/fixtures/whisper/fallback.py): openai-whisper's compression ratio
//! against Python's zlib, the greedy pass's average log-probability and no-speech probability
//! against transformers on the shared clips and on 30 s of silence, base's language
//! probabilities and `task="translate"` output against transformers.

use crate::whisper_fixtures;

use aneforge_models::require_model;
use aneforge_models::testing::speech_dir_or_skip;
use aneforge_models::whisper::audio::load_audio;
use aneforge_models::whisper::fallback::compression_ratio;
use aneforge_models::whisper::{DecodeOptions, Fallback, Whisper, WhisperOptions};
use whisper_fixtures::{fixture, ids};

const SILENCE: &str = "silence";

#[test]
fn compression_ratio_is_zlibs() {
    let fx = fixture("fallback.json");
    for case in fx["compression"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        let want = case["ratio"].as_f64().unwrap();
        assert_eq!(text.len() as u64, case["bytes"].as_u64().unwrap());
        let got = compression_ratio(text);
        eprintln!("{:>4} bytes: {got:.6} (zlib {want:.6})", text.len());
        assert!(
            (got - want).abs() < 1e-12,
            "{text:?}: {got} vs zlib's {want}"
        );
    }
}

fn samples(speech: &std::path::Path, clip: &str) -> Vec<f32> {
    if clip == SILENCE {
        vec![0.0; 30 * 16000]
    } else {
        load_audio(speech.join(clip)).unwrap()
    }
}

fn english(whisper: &Whisper) -> DecodeOptions {
    DecodeOptions {
        language: whisper.tokens.multilingual.then(|| "en".to_string()),
        ..DecodeOptions::default()
    }
}

/// The greedy pass's tokens, average log-probability and no-speech probability on every clip
/// and on silence equal transformers'.
fn check_scores(repo: &str) {
    let model = require_model!(repo);
    let Some(speech) = speech_dir_or_skip() else {
        return;
    };
    let fx = &fixture("fallback.json")["models"][repo];
    let mut whisper = Whisper::load(model.dir(), &WhisperOptions::default()).unwrap();
    assert_eq!(
        u64::from(whisper.tokens.no_speech),
        fx["no_speech_token"].as_u64().unwrap()
    );
    let opts = english(&whisper);
    for (clip, want) in fx["clips"].as_object().unwrap() {
        let mel = whisper.features(&samples(&speech, clip));
        let out = whisper.decode_window(&mel, &opts, &mut |_, _| {}).unwrap();
        assert_eq!(out.generated, ids(&want["tokens"]), "{repo} {clip}");
        let s = out.scores;
        let (avg, ns) = (
            want["avg_logprob"].as_f64().unwrap(),
            want["no_speech_prob"].as_f64().unwrap(),
        );
        eprintln!(
            "{repo} {clip}: avg logprob {:.5} ({avg:.5}), no-speech {:.5} ({ns:.5})",
            s.avg_logprob, s.no_speech_prob
        );
        assert!(
            (s.avg_logprob - avg).abs() < 1e-3,
            "{repo} {clip} avg logprob"
        );
        assert!(
            (s.no_speech_prob - ns).abs() < 1e-3,
            "{repo} {clip} no-speech"
        );
        assert_eq!(out.temperature, 0.0);
        assert!(!out.no_speech, "no thresholds: nothing is silent");
    }
}

#[test]
fn tiny_en_scores_match_transformers() {
    check_scores("openai/whisper-tiny.en");
}

#[test]
fn base_scores_match_transformers() {
    check_scores("openai/whisper-base");
}

/// A threshold no decoding can meet makes every temperature run and the last one's result
/// come back; sampling with one seed gives the same tokens twice. openai-whisper's defaults keep
/// the clip's greedy result.
#[test]
fn fallback_runs_the_temperatures_deterministically() {
    let model = require_model!("openai/whisper-tiny.en");
    let Some(speech) = speech_dir_or_skip() else {
        return;
    };
    let fx = &fixture("fallback.json")["models"]["openai/whisper-tiny.en"]["clips"];
    let (clip, want) = fx.as_object().unwrap().iter().nth(1).unwrap();
    let mut whisper = Whisper::load(model.dir(), &WhisperOptions::default()).unwrap();
    let mel = whisper.features(&samples(&speech, clip));
    let accepted = whisper
        .decode_window(
            &mel,
            &DecodeOptions {
                fallback: Fallback::openai(),
                ..DecodeOptions::default()
            },
            &mut |_, _| {},
        )
        .unwrap();
    assert_eq!(accepted.temperature, 0.0);
    assert_eq!(accepted.generated, ids(&want["tokens"]));
    let forced = |seed: u64| DecodeOptions {
        fallback: Fallback {
            temperatures: vec![0.0, 0.2, 0.4],
            // every average log-probability is below 0
            logprob_threshold: Some(0.0),
            best_of: 2,
            seed,
            ..Fallback::openai()
        },
        ..DecodeOptions::default()
    };
    let a = whisper
        .decode_window(&mel, &forced(7), &mut |_, _| {})
        .unwrap();
    let b = whisper
        .decode_window(&mel, &forced(7), &mut |_, _| {})
        .unwrap();
    assert_eq!(a.temperature, 0.4);
    assert_eq!(a, b, "one seed, one result");
    assert!(a.scores.avg_logprob < 0.0);
    // a forced compression-ratio threshold falls back the same way
    let repetitive = DecodeOptions {
        fallback: Fallback {
            temperatures: vec![0.0, 0.3],
            compression_ratio_threshold: Some(0.0),
            logprob_threshold: None,
            best_of: 1,
            ..Fallback::openai()
        },
        ..DecodeOptions::default()
    };
    let c = whisper
        .decode_window(&mel, &repetitive, &mut |_, _| {})
        .unwrap();
    assert_eq!(c.temperature, 0.3);
    eprintln!(
        "T=0.4 best of 2: {:?}; T=0.3: {:?}",
        whisper.text(&a.generated).unwrap(),
        whisper.text(&c.generated).unwrap()
    );
}

/// 30 s of zeros: the no-speech probability is transformers' (above 0.6). With openai-whisper's
/// defaults the greedy " you" is likely enough (average log-probability above -1) to be kept,
/// as openai-whisper keeps it; with a log-probability threshold above that average the window
/// is reported as silent and a transcription of the file is empty.
#[test]
fn silence_is_no_speech() {
    let model = require_model!("openai/whisper-tiny.en");
    let want = &fixture("fallback.json")["models"]["openai/whisper-tiny.en"]["clips"][SILENCE];
    let mut whisper = Whisper::load(model.dir(), &WhisperOptions::default()).unwrap();
    let zeros = vec![0.0f32; 30 * 16000];
    let mel = whisper.features(&zeros);
    let with = |logprob: f64| DecodeOptions {
        fallback: Fallback {
            logprob_threshold: Some(logprob),
            ..Fallback::openai()
        },
        ..DecodeOptions::default()
    };
    let kept = whisper
        .decode_window(&mel, &with(-1.0), &mut |_, _| {})
        .unwrap();
    let want_ns = want["no_speech_prob"].as_f64().unwrap();
    assert!(want_ns > 0.6);
    assert!((kept.scores.no_speech_prob - want_ns).abs() < 1e-3);
    assert!(kept.scores.avg_logprob > -1.0);
    assert!(!kept.no_speech);
    assert_eq!(kept.generated, ids(&want["tokens"]));
    let threshold = want["avg_logprob"].as_f64().unwrap() + 0.1;
    let silent = whisper
        .decode_window(&mel, &with(threshold), &mut |_, _| {})
        .unwrap();
    assert!(silent.no_speech);
    assert_eq!(silent.temperature, 0.0, "a silent window is not retried");

    let dir = tempfile::tempdir().unwrap();
    let wav = dir.path().join("silence.wav");
    write_silence(&wav, 30 * 16000);
    let t = whisper
        .transcribe_file(&wav, &with(threshold), &mut |_, _| {})
        .unwrap();
    assert_eq!(t.text, "");
    assert!(t.segments.is_empty());
}

fn write_silence(path: &std::path::Path, samples: u32) {
    let mut b = Vec::new();
    b.extend(b"RIFF");
    b.extend((36 + 2 * samples).to_le_bytes());
    b.extend(b"WAVEfmt ");
    b.extend(16u32.to_le_bytes());
    b.extend(1u16.to_le_bytes());
    b.extend(1u16.to_le_bytes());
    b.extend(16000u32.to_le_bytes());
    b.extend(32000u32.to_le_bytes());
    b.extend(2u16.to_le_bytes());
    b.extend(16u16.to_le_bytes());
    b.extend(b"data");
    b.extend((2 * samples).to_le_bytes());
    b.resize(b.len() + 2 * samples as usize, 0);
    std::fs::write(path, b).unwrap();
}

/// base: the language probabilities of every clip within 1e-3 of transformers' softmax over the
/// language tokens (top "en"), and greedy `task="translate"` (language detected) giving
/// transformers' tokens. The clips are English: no non-English clip is available here.
#[test]
fn base_language_probabilities_and_translation_match_transformers() {
    let model = require_model!("openai/whisper-base");
    let Some(speech) = speech_dir_or_skip() else {
        return;
    };
    let fx = &fixture("fallback.json")["models"]["openai/whisper-base"]["clips"];
    let mut whisper = Whisper::load(model.dir(), &WhisperOptions::default()).unwrap();
    for (clip, want) in fx.as_object().unwrap() {
        if clip == SILENCE {
            continue;
        }
        let mel = whisper.features(&samples(&speech, clip));
        let probs = whisper.language_probabilities(&mel).unwrap();
        let want_p = want["language_probs"].as_object().unwrap();
        assert_eq!(probs.len(), want_p.len());
        let mut worst = 0.0f64;
        for (code, p) in &probs {
            let e = want_p[&format!("<|{code}|>")].as_f64().unwrap();
            worst = worst.max((p - e).abs());
        }
        let top = probs.iter().max_by(|a, b| a.1.total_cmp(&b.1)).unwrap();
        eprintln!(
            "{clip}: top {} {:.4}, worst difference {worst:.2e}",
            top.0, top.1
        );
        assert_eq!(top.0, "en");
        assert!(worst < 1e-3, "{clip}: language probabilities");

        let out = whisper
            .decode_window(
                &mel,
                &DecodeOptions {
                    translate: true,
                    ..DecodeOptions::default()
                },
                &mut |_, _| {},
            )
            .unwrap();
        let tr = &want["translate"];
        assert_eq!(out.prompt, ids(&tr["prompt"]), "{clip} translate prompt");
        assert_eq!(out.generated, ids(&tr["tokens"]), "{clip} translate");
        assert_eq!(
            whisper.text(&out.generated).unwrap(),
            tr["text"].as_str().unwrap()
        );
    }
}
