//! `aneforge transcribe` as a process: tiny.en on the shared speech clips prints transformers'
//! greedy transcripts (fixture: tools/fixtures/whisper/reference.py), the subtitle formats carry
//! the timed segments, and bad audio files fail with their name.

use crate::common;

use aneforge_models::require_model;
use aneforge_models::testing::speech_dir_or_skip;

const TINY_EN: &str = "openai/whisper-tiny.en";

fn fixture() -> serde_json::Value {
    let path = common::repo("tools/fixtures/whisper/out/transcripts.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn txt_and_json_print_the_reference_transcripts() {
    let _ = require_model!(TINY_EN);
    let Some(speech) = speech_dir_or_skip() else {
        return;
    };
    let fx = fixture();
    let clips = fx["models"][TINY_EN]["clips"].as_object().unwrap();
    let paths: Vec<String> = clips
        .keys()
        .map(|c| speech.join(c).display().to_string())
        .collect();
    let mut args = vec!["transcribe", "-m", TINY_EN, "-q"];
    args.extend(paths.iter().map(String::as_str));
    let out = common::run(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let want: Vec<String> = clips
        .values()
        .map(|c| c["text"].as_str().unwrap().trim().to_string())
        .collect();
    let got: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(got, want);

    let first = &paths[0];
    let out = common::run(&["transcribe", "-m", TINY_EN, "--format", "json", first]);
    assert!(out.status.success());
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let entry = clips.values().next().unwrap();
    assert_eq!(
        doc[0]["text"].as_str().unwrap(),
        entry["text"].as_str().unwrap().trim()
    );
    let out = common::run(&[
        "transcribe",
        "-m",
        TINY_EN,
        "--format",
        "json",
        "--timestamps",
        first,
    ]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        doc[0]["text"].as_str().unwrap(),
        entry["timestamps_text"].as_str().unwrap().trim()
    );
    let segments = doc[0]["segments"].as_array().unwrap();
    assert!(!segments.is_empty());
    let out = common::run(&["transcribe", "-m", TINY_EN, "--format", "vtt", first]);
    let vtt = String::from_utf8(out.stdout).unwrap();
    assert!(vtt.starts_with("WEBVTT\n\n00:00:00.000 --> "), "{vtt}");
    let out = common::run(&["transcribe", "-m", TINY_EN, "--format", "srt", first]);
    let srt = String::from_utf8(out.stdout).unwrap();
    assert!(srt.starts_with("1\n00:00:00,000 --> "), "{srt}");
}

#[test]
fn bad_audio_fails_naming_the_file() {
    let _ = require_model!(TINY_EN);
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.wav");
    std::fs::write(&empty, b"").unwrap();
    let garbage = dir.path().join("garbage.mp3");
    std::fs::write(&garbage, [0x17u8; 3000]).unwrap();
    for path in [&empty, &garbage] {
        let out = common::run(&[
            "transcribe",
            "-m",
            TINY_EN,
            "-q",
            &path.display().to_string(),
        ]);
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.starts_with("error: ") && err.contains(&path.display().to_string()),
            "{err}"
        );
    }
}

/// The same clip as FLAC, OGG/Vorbis (44.1 kHz stereo) and MP3 (tools/fixtures/whisper/codecs.py)
/// gives the WAV's reference transcript.
#[test]
fn flac_ogg_and_mp3_transcribe_like_the_wav() {
    let _ = require_model!(TINY_EN);
    let fx = fixture();
    let codecs = common::repo("tools/fixtures/whisper/out/codecs");
    let decoded: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{codecs}/decoded.json")).unwrap())
            .unwrap();
    let clip = decoded["clip"].as_str().unwrap();
    let want = fx["models"][TINY_EN]["clips"][clip]["text"]
        .as_str()
        .unwrap()
        .trim();
    let files: Vec<String> = ["clip.flac", "clip_44k_stereo.ogg", "clip.mp3"]
        .iter()
        .map(|f| format!("{codecs}/{f}"))
        .collect();
    let mut args = vec!["transcribe", "-m", TINY_EN, "-q"];
    args.extend(files.iter().map(String::as_str));
    let out = common::run(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines, vec![want; 3]);
}

/// 30 s of zeros: tiny.en's greedy text (transformers' " you", fixture
/// tools/fixtures/whisper/fallback.py) without thresholds; silent and skipped (an empty line) when
/// the log-probability threshold lies above that text's average log-probability.
#[test]
fn silence_is_skipped_under_the_no_speech_rule() {
    let _ = require_model!(TINY_EN);
    let path = common::repo("tools/fixtures/whisper/out/fallback.json");
    let fx: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let want = &fx["models"][TINY_EN]["clips"]["silence"];
    let dir = tempfile::tempdir().unwrap();
    let wav = dir.path().join("silence.wav");
    let n: u32 = 30 * 16000;
    let mut b = Vec::new();
    for part in [
        &b"RIFF"[..],
        &(36 + 2 * n).to_le_bytes(),
        b"WAVEfmt ",
        &16u32.to_le_bytes(),
        &1u16.to_le_bytes(),
        &1u16.to_le_bytes(),
        &16000u32.to_le_bytes(),
        &32000u32.to_le_bytes(),
        &2u16.to_le_bytes(),
        &16u16.to_le_bytes(),
        b"data",
        &(2 * n).to_le_bytes(),
    ] {
        b.extend_from_slice(part);
    }
    b.resize(b.len() + 2 * n as usize, 0);
    std::fs::write(&wav, b).unwrap();
    let wav = wav.display().to_string();
    let run = |extra: &[&str]| {
        let mut args = vec!["transcribe", "-m", TINY_EN, "-q"];
        args.extend_from_slice(extra);
        args.push(&wav);
        let out = common::run(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let plain = run(&[
        "--logprob-threshold",
        "none",
        "--no-speech-threshold",
        "none",
    ]);
    assert_eq!(plain.trim(), want["text"].as_str().unwrap().trim());
    let threshold = format!("{}", want["avg_logprob"].as_f64().unwrap() + 0.1);
    assert_eq!(run(&["--logprob-threshold", &threshold]), "\n");
}

/// `--matmul-precision bf16` (bf16 products, AMX tiles where the CPU has them) prints the
/// reference transcript; with an ANE target, whose programs are fp16, it is refused by name.
#[test]
fn bf16_products_print_the_reference_transcript_and_need_the_cpu_target() {
    let _ = require_model!(TINY_EN);
    let Some(speech) = speech_dir_or_skip() else {
        return;
    };
    let fx = fixture();
    let (clip, entry) = fx["models"][TINY_EN]["clips"]
        .as_object()
        .unwrap()
        .iter()
        .next()
        .unwrap();
    let path = speech.join(clip).display().to_string();
    let bf16 = ["--matmul-precision", "bf16"];
    let mut args = vec!["transcribe", "-m", TINY_EN, "-q"];
    args.extend(bf16);
    args.push(&path);
    let out = common::run(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8(out.stdout).unwrap().trim(),
        entry["text"].as_str().unwrap().trim()
    );
    args.extend(["--target", "h16"]);
    let out = common::run(&args);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("error: ") && err.contains("--matmul-precision bf16"),
        "{err}"
    );
}
