//! The fuzz targets are meaningful (each accepts some of its seeds, so mutations start from valid
//! files), and every input the fuzzer found crashing, aborting or hanging a parser is now rejected
//! with an error naming the file, promptly.

use aneforge_fuzz::{targets, TARGETS};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn regressions() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("regressions")
}

#[test]
fn every_target_accepts_one_of_its_seeds() {
    for target in TARGETS {
        let seeds = (target.seeds)();
        assert!(!seeds.is_empty(), "{}: no seeds", target.name);
        let accepted = seeds.iter().filter(|s| (target.run)(s)).count();
        assert!(
            accepted > 0,
            "{}: none of its {} seeds is accepted",
            target.name,
            seeds.len()
        );
    }
}

/// Every committed crash input (`<target>-<what>.<ext>`) goes through its target without a panic
/// or an abort, and takes well under the driver's per-input limit.
#[test]
fn saved_crash_inputs_run_cleanly() {
    let mut seen = 0;
    for entry in std::fs::read_dir(regressions()).unwrap() {
        let path = entry.unwrap().path();
        let file = path.file_name().unwrap().to_string_lossy().to_string();
        let name = file.split('-').next().unwrap();
        let target = targets::find(name).unwrap_or_else(|| panic!("{file}: no target {name}"));
        let data = std::fs::read(&path).unwrap();
        let started = Instant::now();
        (target.run)(&data);
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{file} took {:?}",
            started.elapsed()
        );
        seen += 1;
    }
    assert!(seen >= 5, "only {seen} regression inputs");
}

fn error_of<T, E: std::fmt::Display>(result: Result<T, E>) -> String {
    match result {
        Ok(_) => panic!("accepted"),
        Err(e) => e.to_string(),
    }
}

/// A WAV header claiming 805 MHz asked the resampler for FFTs of millions of points per chunk
/// (the fuzzer's watchdog fired at 5 s).
#[test]
fn an_absurd_sample_rate_is_an_error() {
    let path = regressions().join("audio-rate-800mhz.wav");
    let message = error_of(aneforge_models::whisper::audio::load_audio(&path));
    assert!(message.contains("audio-rate-800mhz.wav"), "{message}");
    assert!(message.contains("outside 1000..=768000 Hz"), "{message}");
}

/// Float samples the FFT resampler cannot take made rubato panic on an `unwrap`.
#[test]
fn samples_the_resampler_rejects_are_an_error() {
    let path = regressions().join("audio-nonfinite.wav");
    let message = error_of(aneforge_models::whisper::audio::load_audio(&path));
    assert!(message.contains("audio-nonfinite.wav"), "{message}");
}

/// A decoder section the tokenizers crate cannot deserialize panicked inside it (`expect`).
#[test]
fn a_tokenizer_the_library_panics_on_is_an_error() {
    let path = regressions().join("tokenizer_json-decoder.json");
    let message = error_of(aneforge_models::TextTokenizer::from_file(&path));
    assert!(message.contains("tokenizer_json-decoder.json"), "{message}");
}

/// A zip entry claiming an enormous uncompressed size was reserved before reading: the
/// allocation aborted the process.
#[test]
fn a_zip_entry_size_claim_is_not_trusted() {
    let path = regressions().join("pth-zip-size.pt");
    let message = error_of(aneforge_models::weights::TorchCheckpoint::open(&path));
    assert!(message.contains("pth-zip-size.pt"), "{message}");
}

/// A GGUF tokenizer whose scores hold a NaN made the merge sort panic (not a total order); the
/// scores rank merges, so encoding must not panic either.
#[test]
fn a_nan_token_score_does_not_break_the_merge_order() {
    use aneforge_models::gguf::{GgufFile, GgufTokenizer};
    let path = regressions().join("gguf-nan-score.gguf");
    let file = GgufFile::open(&path).unwrap();
    let tokenizer = GgufTokenizer::from_gguf(&file).unwrap();
    let ids = tokenizer.tokenizer.encode("hello world").unwrap().ids;
    assert!(!ids.is_empty());
}

/// A FLAC Vorbis comment claiming a length up to 4 GiB was allocated by the decoder library
/// before the read failed (an abort under the fuzzer's address-space cap).
#[test]
fn a_flac_comment_longer_than_its_block_is_an_error() {
    let path = regressions().join("audio-flac-comment-length.flac");
    let message = error_of(aneforge_models::whisper::audio::load_audio(&path));
    assert!(
        message.contains("audio-flac-comment-length.flac"),
        "{message}"
    );
    assert!(message.contains("Vorbis comment runs past"), "{message}");
}
