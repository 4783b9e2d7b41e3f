//! Long-form transcription (67 s built from the shared clips, so speech crosses the 30 s window
//! boundaries) against transformers' sequential long-form `generate` in fp32 (fixture:
//! tools/fixtures/whisper/longform.py): every segment's tokens and times, greedy, with and without
//! conditioning on the previous windows' text, for tiny.en and base; and a clip transcribed after
//! an initial prompt against transformers' `generate(prompt_ids=...)`.

use crate::whisper_fixtures;

use aneforge_models::require_model;
use aneforge_models::testing::speech_dir_or_skip;
use aneforge_models::whisper::audio::{load_audio, SAMPLE_RATE};
use aneforge_models::whisper::{DecodeOptions, Whisper, WhisperOptions};
use serde_json::Value;
use whisper_fixtures::{fixture, ids};

/// The shared clips, sorted by name.
fn clips(speech: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut clips: Vec<_> = std::fs::read_dir(speech)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "wav"))
        .collect();
    clips.sort();
    clips
}

/// The fixture's audio as a 16-bit WAV: the clips (sorted by name) in the plan's order, each
/// followed by its seconds of silence.
fn write_plan(fx: &Value, speech: &std::path::Path, path: &std::path::Path) {
    let clips = clips(speech);
    let mut pcm: Vec<i16> = Vec::new();
    for step in fx["plan"].as_array().unwrap() {
        let clip = &clips[step[0].as_u64().unwrap() as usize];
        // load_audio gives int16 / 32768 exactly for 16 kHz mono PCM
        pcm.extend(
            load_audio(clip)
                .unwrap()
                .iter()
                .map(|&s| (s * 32768.0) as i16),
        );
        let gap = (step[1].as_f64().unwrap() * SAMPLE_RATE as f64).round() as usize;
        pcm.resize(pcm.len() + gap, 0);
    }
    assert_eq!(pcm.len() as u64, fx["samples"].as_u64().unwrap());
    let data = (2 * pcm.len()) as u32;
    let mut b = Vec::new();
    b.extend(b"RIFF");
    b.extend((36 + data).to_le_bytes());
    b.extend(b"WAVEfmt ");
    b.extend(16u32.to_le_bytes());
    b.extend(1u16.to_le_bytes());
    b.extend(1u16.to_le_bytes());
    b.extend((SAMPLE_RATE as u32).to_le_bytes());
    b.extend((2 * SAMPLE_RATE as u32).to_le_bytes());
    b.extend(2u16.to_le_bytes());
    b.extend(16u16.to_le_bytes());
    b.extend(b"data");
    b.extend(data.to_le_bytes());
    for s in pcm {
        b.extend(s.to_le_bytes());
    }
    std::fs::write(path, b).unwrap();
}

fn check(repo: &str) {
    let model = require_model!(repo);
    let Some(speech) = speech_dir_or_skip() else {
        return;
    };
    let fx = fixture("longform.json");
    let dir = tempfile::tempdir().unwrap();
    let wav = dir.path().join("long.wav");
    write_plan(&fx, &speech, &wav);
    let mut whisper = Whisper::load(model.dir(), &WhisperOptions::default()).unwrap();
    for (key, condition) in [("plain", false), ("conditioned", true)] {
        let want = &fx["models"][repo][key];
        let opts = DecodeOptions {
            language: whisper.tokens.multilingual.then(|| "en".to_string()),
            timestamps: true,
            condition_on_previous_text: condition,
            ..DecodeOptions::default()
        };
        let got = whisper.transcribe(&wav, &opts, &mut |_, _| {}).unwrap();
        let want_segments = want["segments"].as_array().unwrap();
        for (i, (g, w)) in got.segments.iter().zip(want_segments).enumerate() {
            // transformers also puts the second of a window's two closing timestamps into its last
            // segment (and drops it again when conditioning); openai-whisper's segments, ours,
            // end at the first
            let mut want_tokens = ids(&w["tokens"]);
            if want_tokens.len() > 2
                && whisper
                    .tokens
                    .is_timestamp(want_tokens[want_tokens.len() - 2])
            {
                want_tokens.pop();
            }
            assert_eq!(
                g.tokens, want_tokens,
                "{repo} {key}: segment {i} ({:.2}-{:.2} s) {:?}",
                g.start, g.end, g.text
            );
            for (t, name) in [(g.start, "start"), (g.end, "end")] {
                let e = w[name].as_f64().unwrap();
                assert!(
                    (t - e).abs() < 1e-6,
                    "{repo} {key}: segment {i} {name} {t} vs {e}"
                );
            }
        }
        assert_eq!(
            got.segments.len(),
            want_segments.len(),
            "{repo} {key}: segments"
        );
        assert_eq!(
            got.text,
            want["text"].as_str().unwrap(),
            "{repo} {key}: text"
        );
    }

    let want = &fx["models"][repo]["prompted"];
    let opts = DecodeOptions {
        language: whisper.tokens.multilingual.then(|| "en".to_string()),
        initial_prompt: Some(fx["prompt"].as_str().unwrap().to_string()),
        ..DecodeOptions::default()
    };
    let got = whisper
        .transcribe(&clips(&speech)[0], &opts, &mut |_, _| {})
        .unwrap();
    assert_eq!(got.segments.len(), 1);
    assert_eq!(
        got.segments[0].tokens,
        ids(&want["tokens"]),
        "{repo}: prompted"
    );
    assert_eq!(
        got.text,
        want["text"].as_str().unwrap(),
        "{repo}: prompted text"
    );
}

#[test]
fn tiny_en_long_form_matches_transformers() {
    check("openai/whisper-tiny.en");
}

#[test]
fn base_long_form_matches_transformers() {
    check("openai/whisper-base");
}
