//! Audio decoding and Whisper log-mel features against transformers' WhisperFeatureExtractor
//! (fixture: tools/fixtures/whisper/reference.py on the shared speech clips), and the errors for
//! bad audio files.

use aneforge_models::testing::speech_dir_or_skip;
use aneforge_models::whisper::audio::{load_audio, AudioStream, SAMPLE_RATE};
use aneforge_models::whisper::mel::{LogMel, WINDOW_FRAMES, WINDOW_SAMPLES};
use serde_json::Value;

fn fixture(name: &str) -> Value {
    let path = format!(
        "{}/../../tools/fixtures/whisper/out/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn check_features(got: &[f32], n_mels: usize, want: &Value, frames: &Value, what: &str) {
    assert_eq!(got.len(), n_mels * WINDOW_FRAMES, "{what}");
    let mut worst = 0.0f64;
    for (slice, range) in want["slices"]
        .as_array()
        .unwrap()
        .iter()
        .zip(frames.as_array().unwrap())
    {
        let (a, b) = (
            range[0].as_u64().unwrap() as usize,
            range[1].as_u64().unwrap() as usize,
        );
        let expected = floats(slice);
        for m in 0..n_mels {
            for t in a..b {
                let e = expected[m * (b - a) + (t - a)];
                worst = worst.max((f64::from(got[m * WINDOW_FRAMES + t]) - e).abs());
            }
        }
    }
    for (m, e) in floats(&want["bin_means"]).iter().enumerate() {
        let row = &got[m * WINDOW_FRAMES..(m + 1) * WINDOW_FRAMES];
        let mean = row.iter().map(|&v| f64::from(v)).sum::<f64>() / WINDOW_FRAMES as f64;
        worst = worst.max((mean - e).abs());
    }
    let max = got.iter().copied().fold(f32::MIN, f32::max);
    let min = got.iter().copied().fold(f32::MAX, f32::min);
    worst = worst.max((f64::from(max) - want["max"].as_f64().unwrap()).abs());
    worst = worst.max((f64::from(min) - want["min"].as_f64().unwrap()).abs());
    assert!(worst < 1e-4, "{what}: worst difference {worst}");
    eprintln!("{what}: worst difference {worst:.2e}");
}

#[test]
fn log_mel_matches_whisper_feature_extractor() {
    let Some(dir) = speech_dir_or_skip() else {
        return;
    };
    let fx = fixture("features.json");
    let mel80 = LogMel::new(80);
    for (name, want) in fx["clips"].as_object().unwrap() {
        let samples = load_audio(dir.join(name)).unwrap();
        assert_eq!(samples.len() as u64, want["samples"].as_u64().unwrap());
        check_features(&mel80.window(&samples), 80, want, &fx["frames"], name);
    }
    let want = &fx["mel128"];
    let samples = load_audio(dir.join(want["clip"].as_str().unwrap())).unwrap();
    check_features(
        &LogMel::new(128).window(&samples),
        128,
        want,
        &fx["frames"],
        "128 bins",
    );
}

/// A PCM WAV file: `format` tag, channels, rate, bits, and interleaved i16 samples.
fn wav_bytes(
    format: u16,
    channels: u16,
    rate: u32,
    samples: &[i16],
    data_len: Option<u32>,
) -> Vec<u8> {
    let data: Vec<u8> = samples.iter().flat_map(|s| s.to_le_bytes()).collect();
    let data_len = data_len.unwrap_or(data.len() as u32);
    let mut out = Vec::new();
    out.extend_from_slice(b"RIFF");
    out.extend_from_slice(&(36 + data_len).to_le_bytes());
    out.extend_from_slice(b"WAVEfmt ");
    out.extend_from_slice(&16u32.to_le_bytes());
    out.extend_from_slice(&format.to_le_bytes());
    out.extend_from_slice(&channels.to_le_bytes());
    out.extend_from_slice(&rate.to_le_bytes());
    out.extend_from_slice(&(rate * u32::from(channels) * 2).to_le_bytes());
    out.extend_from_slice(&(channels * 2).to_le_bytes());
    out.extend_from_slice(&16u16.to_le_bytes());
    out.extend_from_slice(b"data");
    out.extend_from_slice(&data_len.to_le_bytes());
    out.extend_from_slice(&data);
    out
}

fn sine(rate: u32, seconds: f64, hz: f64, amp: f64) -> Vec<f64> {
    (0..(rate as f64 * seconds) as usize)
        .map(|i| amp * (2.0 * std::f64::consts::PI * hz * i as f64 / rate as f64).sin())
        .collect()
}

#[test]
fn stereo_44k_downmixes_and_resamples_to_16k() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tone.wav");
    let rate = 44_100;
    let left = sine(rate, 2.0, 440.0, 0.5);
    let right = sine(rate, 2.0, 440.0, 0.25);
    let inter: Vec<i16> = left
        .iter()
        .zip(&right)
        .flat_map(|(l, r)| [(l * 32768.0) as i16, (r * 32768.0) as i16])
        .collect();
    std::fs::write(&path, wav_bytes(1, 2, rate, &inter, None)).unwrap();
    let got = load_audio(&path).unwrap();
    let want = sine(SAMPLE_RATE as u32, 2.0, 440.0, 0.375);
    assert_eq!(got.len(), want.len());
    // away from the edges (the resampler's filter sees silence beyond them)
    let worst = got[200..got.len() - 200]
        .iter()
        .zip(&want[200..])
        .map(|(g, w)| (f64::from(*g) - w).abs())
        .fold(0.0, f64::max);
    assert!(worst < 2e-3, "worst {worst}");
}

#[test]
fn stream_windows_equal_the_whole_file() {
    let Some(dir) = speech_dir_or_skip() else {
        return;
    };
    let path = dir.join("sense_and_sensibility_01_austen_64kb-0870.wav");
    let all = load_audio(&path).unwrap();
    let mut stream = AudioStream::open(&path).unwrap();
    let mut at = 0;
    let step = 30_001;
    while !stream.at_end().unwrap() {
        let part = stream.peek(50_000).unwrap();
        assert_eq!(part, all[at..(at + 50_000).min(all.len())]);
        at += stream.consume(step).unwrap();
    }
    assert_eq!(at, all.len());
}

fn error_of(name: &str, bytes: &[u8]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, bytes).unwrap();
    let err = load_audio(&path).unwrap_err().to_string();
    assert!(err.contains(&path.display().to_string()), "{err}");
    err
}

#[test]
fn bad_audio_files_get_errors_naming_them() {
    let tone: Vec<i16> = sine(16_000, 0.5, 300.0, 0.3)
        .iter()
        .map(|v| (v * 32768.0) as i16)
        .collect();
    let err = error_of("empty.wav", &[]);
    assert!(err.contains("empty"), "{err}");
    let err = error_of("noise.wav", &[0x5a; 4096]);
    assert!(err.contains("not a readable audio file"), "{err}");
    let err = error_of("rate0.wav", &wav_bytes(1, 1, 0, &tone, None));
    assert!(err.contains("sample rate"), "{err}");
    // IMA ADPCM (format tag 0x11) is not among the codecs built in
    let err = error_of("adpcm.wav", &wav_bytes(0x11, 1, 16_000, &tone, None));
    assert!(
        err.contains("unsupported") || err.contains("not a readable"),
        "{err}"
    );
    // the header promises twice the data the file holds
    let whole = wav_bytes(1, 1, 16_000, &tone, Some(4 * tone.len() as u32));
    let err = error_of("truncated.wav", &whole);
    assert!(err.contains("truncated"), "{err}");
    let err = error_of("header_only.wav", &whole[..44]);
    assert!(
        err.contains("truncated") || err.contains("no audio"),
        "{err}"
    );
}

/// FLAC is decoded bit-exactly; OGG/Vorbis at 44.1 kHz stereo and MP3 decode to the length and
/// loudness libsndfile finds (tools/fixtures/whisper/codecs.py), resampled to 16 kHz and
/// downmixed.
#[test]
fn flac_ogg_and_mp3_decode_like_libsndfile() {
    let dir = format!(
        "{}/../../tools/fixtures/whisper/out/codecs",
        env!("CARGO_MANIFEST_DIR")
    );
    let fx: Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{dir}/decoded.json")).unwrap())
            .unwrap();
    let rms = |v: &[f32]| {
        (v.iter().map(|&x| f64::from(x) * f64::from(x)).sum::<f64>() / v.len() as f64).sqrt()
    };
    for (name, want) in fx["files"].as_object().unwrap() {
        let got = load_audio(format!("{dir}/{name}")).unwrap();
        let frames = want["frames"].as_u64().unwrap();
        let rate = want["rate"].as_u64().unwrap();
        let expected = (frames * SAMPLE_RATE as u64).div_ceil(rate);
        assert!(
            (got.len() as i64 - expected as i64).abs() <= 1,
            "{name}: {} samples, libsndfile's length gives {expected}",
            got.len()
        );
        let (r, w) = (rms(&got), want["rms"].as_f64().unwrap());
        assert!(
            (r - w).abs() < 0.01 * w,
            "{name}: rms {r} vs libsndfile {w}"
        );
        eprintln!(
            "{name}: {} samples, rms {r:.6} (libsndfile {w:.6})",
            got.len()
        );
    }
    if let Some(speech) = speech_dir_or_skip() {
        let wav = load_audio(speech.join(fx["clip"].as_str().unwrap())).unwrap();
        assert_eq!(load_audio(format!("{dir}/clip.flac")).unwrap(), wav);
    }
}

/// Long audio (fixture: tools/fixtures/whisper/long_features.py): windows of the whole file's
/// spectrogram, clamped to the whole file's maximum, against transformers' long-form features.
#[test]
fn long_audio_windows_slice_the_whole_file_spectrogram() {
    let Some(dir) = speech_dir_or_skip() else {
        return;
    };
    let fx = fixture("long_features.json");
    let mut clips: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "wav"))
        .collect();
    clips.sort();
    let mut audio: Vec<f32> = Vec::new();
    for step in fx["plan"].as_array().unwrap() {
        let step = step.as_array().unwrap();
        if step[0] == "clip" {
            let gain = step[2].as_f64().unwrap() as f32;
            let samples = load_audio(&clips[step[1].as_u64().unwrap() as usize]).unwrap();
            audio.extend(samples.iter().map(|&s| s * gain));
        } else {
            let n = (step[1].as_f64().unwrap() * SAMPLE_RATE as f64) as usize;
            audio.resize(audio.len() + n, 0.0);
        }
    }
    assert_eq!(audio.len() as u64, fx["samples"].as_u64().unwrap());
    let mel = LogMel::new(80);
    let ctx = 200;
    let parts = |start: usize| {
        let end = (start + WINDOW_SAMPLES).min(audio.len());
        let after = &audio[end..(end + ctx).min(audio.len())];
        (
            &audio[start.saturating_sub(ctx)..start],
            &audio[start..end],
            after,
        )
    };
    let file_max = (0..audio.len())
        .step_by(WINDOW_SAMPLES)
        .map(|s| {
            let (b, w, a) = parts(s);
            mel.log10_max(b, w, a)
        })
        .fold(f32::NEG_INFINITY, f32::max);
    let mut worst = 0.0f64;
    let mut clamped_differently = false;
    for w in fx["windows"].as_array().unwrap() {
        let start = w["start"].as_u64().unwrap() as usize * 160;
        let (b, s, a) = parts(start);
        let got = mel.file_window(b, s, a, file_max);
        let own_max = mel.log10_max(b, s, a);
        clamped_differently |= own_max < file_max - 1.0;
        for (key, first) in [("head", 0), ("middle", 1500)] {
            let want = floats(&w[key]);
            for m in 0..80 {
                for t in 0..8 {
                    let e = want[m * 8 + t];
                    let g = f64::from(got[m * WINDOW_FRAMES + first + t]);
                    worst = worst.max((g - e).abs());
                }
            }
        }
        let inside = w["inside"].as_u64().unwrap() as usize;
        for (m, e) in floats(&w["bin_means"]).iter().enumerate() {
            let row = &got[m * WINDOW_FRAMES..m * WINDOW_FRAMES + inside];
            let mean = row.iter().map(|&v| f64::from(v)).sum::<f64>() / inside as f64;
            worst = worst.max((mean - e).abs());
        }
    }
    // the quiet windows would be clamped to their own, lower maximum by a per-window spectrogram
    assert!(
        clamped_differently,
        "the fixture's windows all share the file's maximum"
    );
    assert!(worst < 1e-4, "worst difference {worst}");
    eprintln!("long audio: worst difference {worst:.2e}");
}
