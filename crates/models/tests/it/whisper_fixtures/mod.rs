//! What the Whisper model tests share: the transformers fixture and the per-model check.
#![allow(dead_code)]

use aneforge_models::require_model;
use aneforge_models::testing::speech_dir_or_skip;
use aneforge_models::whisper::audio::load_audio;
use aneforge_models::whisper::{DecodeOptions, Whisper, WhisperOptions};
use serde_json::Value;

pub fn fixture(name: &str) -> Value {
    let path = format!(
        "{}/../../tools/fixtures/whisper/out/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// Checks every clip of `repo` under `options` against transformers' greedy tokens and text
/// (with and without timestamps), and the first clip's raw logits of the first steps within
/// `logits_tolerance`.
pub fn check_model(repo: &str, options: &WhisperOptions, logits_tolerance: f64) {
    let model = require_model!(repo);
    let Some(speech) = speech_dir_or_skip() else {
        return;
    };
    let fx = fixture("transcripts.json");
    let steps = fx["steps"].as_u64().unwrap() as usize;
    let mut whisper = Whisper::load(model.dir(), options).unwrap();
    let multilingual = whisper.tokens.multilingual;
    for (index, (clip, want)) in fx["models"][repo]["clips"]
        .as_object()
        .unwrap()
        .iter()
        .enumerate()
    {
        let samples = load_audio(speech.join(clip)).unwrap();
        let mel = whisper.features(&samples);
        let opts = DecodeOptions {
            language: multilingual.then(|| "en".to_string()),
            ..DecodeOptions::default()
        };
        let mut raw: Vec<Vec<f32>> = Vec::new();
        let out = whisper
            .decode_window(&mel, &opts, &mut |step, l| {
                if step < steps {
                    raw.push(l.to_vec());
                }
            })
            .unwrap();
        let mut sequence = out.prompt.clone();
        sequence.extend(&out.generated);
        sequence.push(whisper.tokens.eot);
        assert_eq!(sequence, ids(&want["sequence"]), "{repo} {clip}");
        let text = whisper.text(&out.generated).unwrap();
        assert_eq!(text, want["text"].as_str().unwrap(), "{repo} {clip}");
        eprintln!("{repo} {clip}: {text}");
        if index == 0 {
            let l = &want["logits"];
            let mut worst = 0.0f64;
            for (s, row) in raw.iter().enumerate() {
                let top = ids(&l["top_indices"][s]);
                for (k, &i) in top.iter().enumerate() {
                    let e = l["top_values"][s][k].as_f64().unwrap();
                    worst = worst.max((f64::from(row[i as usize]) - e).abs());
                }
                for (i, e) in l["head"][s].as_array().unwrap().iter().enumerate() {
                    worst = worst.max((f64::from(row[i]) - e.as_f64().unwrap()).abs());
                }
            }
            assert_eq!(raw.len(), l["top_indices"].as_array().unwrap().len());
            eprintln!(
                "{repo}: worst raw logit difference over {} steps {worst:.2e}",
                raw.len()
            );
            assert!(
                worst < logits_tolerance,
                "{repo}: worst logit difference {worst}"
            );
        }
        let ts = whisper
            .decode_window(
                &mel,
                &DecodeOptions {
                    timestamps: true,
                    ..opts
                },
                &mut |_, _| {},
            )
            .unwrap();
        assert_eq!(
            ts.generated,
            ids(&want["timestamps_sequence"]),
            "{repo} {clip} with timestamps"
        );
        assert_eq!(
            whisper.text(&ts.generated).unwrap(),
            want["timestamps_text"].as_str().unwrap()
        );
    }
}

/// Beam search with 5 beams on the first `clips` clips of `repo` gives transformers'
/// `num_beams=5` tokens.
pub fn check_beam(repo: &str, options: &WhisperOptions, clips: usize) {
    let model = require_model!(repo);
    let Some(speech) = speech_dir_or_skip() else {
        return;
    };
    let fx = fixture("transcripts.json");
    let mut whisper = Whisper::load(model.dir(), options).unwrap();
    let multilingual = whisper.tokens.multilingual;
    for (clip, want) in fx["models"][repo]["clips"]
        .as_object()
        .unwrap()
        .iter()
        .take(clips)
    {
        let samples = load_audio(speech.join(clip)).unwrap();
        let mel = whisper.features(&samples);
        let opts = DecodeOptions {
            language: multilingual.then(|| "en".to_string()),
            beam_size: 5,
            ..DecodeOptions::default()
        };
        let out = whisper.decode_window(&mel, &opts, &mut |_, _| {}).unwrap();
        // transformers returns the generated tokens without the prompt and the end token here
        assert_eq!(
            out.generated,
            ids(&want["beam5_sequence"]),
            "{repo} {clip} beam 5"
        );
        let text = whisper.text(&out.generated).unwrap();
        assert_eq!(text, want["beam5_text"].as_str().unwrap());
        eprintln!("{repo} {clip} beam 5: {text}");
    }
}

/// A multilingual model left to detect the language picks transformers' `detect_language` token
/// on every clip, then decodes transformers' greedy tokens for that language.
pub fn check_detected_language(repo: &str) {
    let model = require_model!(repo);
    let Some(speech) = speech_dir_or_skip() else {
        return;
    };
    let fx = fixture("transcripts.json");
    let mut whisper = Whisper::load(model.dir(), &WhisperOptions::default()).unwrap();
    for (clip, want) in fx["models"][repo]["clips"].as_object().unwrap() {
        let samples = load_audio(speech.join(clip)).unwrap();
        let mel = whisper.features(&samples);
        let out = whisper
            .decode_window(&mel, &DecodeOptions::default(), &mut |_, _| {})
            .unwrap();
        let code = out.language.clone().unwrap();
        assert_eq!(
            format!("<|{code}|>"),
            want["detected_language"].as_str().unwrap(),
            "{clip}"
        );
        // the fixture's greedy run names the same language
        let mut sequence = out.prompt.clone();
        sequence.extend(&out.generated);
        sequence.push(whisper.tokens.eot);
        assert_eq!(sequence, ids(&want["sequence"]), "{clip}");
    }
}
