//! A 2-hour 16 kHz WAV is streamed window by window: its first pass (every 30 s window's log-mel
//! frames, for the file's maximum) and a second pass of window features allocate a few MB at most,
//! never the whole file (2 h × 16 kHz × 4 B = 460 MB of float samples). The counting global
//! allocator (`testing::CountingAllocator`) measures the peak of live heap and engine buffer bytes;
//! the binary holds one test.

use std::io::Write;

use aneforge_models::testing::CountingAllocator;
use aneforge_models::whisper::audio::{AudioStream, SAMPLE_RATE};
use aneforge_models::whisper::mel::{LogMel, N_FFT, WINDOW_FRAMES, WINDOW_SAMPLES};

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

const SECONDS: usize = 2 * 3600;

/// A 440 Hz tone at amplitude 0.01 (16-bit PCM), mono 16 kHz, written in chunks.
fn write_tone(path: &std::path::Path, samples: usize) {
    let data = (2 * samples) as u32;
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut header = Vec::new();
    for part in [
        &b"RIFF"[..],
        &(36 + data).to_le_bytes(),
        b"WAVEfmt ",
        &16u32.to_le_bytes(),
        &1u16.to_le_bytes(),
        &1u16.to_le_bytes(),
        &(SAMPLE_RATE as u32).to_le_bytes(),
        &(2 * SAMPLE_RATE as u32).to_le_bytes(),
        &2u16.to_le_bytes(),
        &16u16.to_le_bytes(),
        b"data",
        &data.to_le_bytes(),
    ] {
        header.extend_from_slice(part);
    }
    f.write_all(&header).unwrap();
    let mut chunk = Vec::with_capacity(2 * SAMPLE_RATE);
    for second in 0..samples.div_ceil(SAMPLE_RATE) {
        chunk.clear();
        for i in 0..SAMPLE_RATE.min(samples - second * SAMPLE_RATE) {
            let t = i as f64 / SAMPLE_RATE as f64;
            let v = (0.01 * 32767.0 * (2.0 * std::f64::consts::PI * 440.0 * t).sin()) as i16;
            chunk.extend_from_slice(&v.to_le_bytes());
        }
        f.write_all(&chunk).unwrap();
    }
    f.flush().unwrap();
}

#[test]
fn a_two_hour_file_is_streamed_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let wav = dir.path().join("two_hours.wav");
    let total = SECONDS * SAMPLE_RATE;
    write_tone(&wav, total);
    let mel = LogMel::new(80);
    let ((first_pass, windows), peak) = CountingAllocator::measure(|| {
        // first pass: every window's log-mel frames
        let started = std::time::Instant::now();
        let file_max = mel.file_log10_max(&wav).unwrap();
        let first_pass = started.elapsed();
        // the tone's loudest mel bin, well above the floor of silence (log10 1e-10)
        assert!(file_max > -4.0 && file_max < 0.0, "{file_max}");

        // second pass: the samples window by window, features of every 10th window
        let mut stream = AudioStream::open(&wav).unwrap();
        assert_eq!(stream.expected_samples(), Some(total as u64));
        let mut seen = 0usize;
        let mut windows = 0usize;
        let mut before: Vec<f32> = Vec::new();
        loop {
            let mut window = stream.peek(WINDOW_SAMPLES + N_FFT / 2).unwrap();
            if window.is_empty() {
                break;
            }
            let after = window.split_off(window.len().min(WINDOW_SAMPLES));
            if windows.is_multiple_of(10) {
                let features = mel.file_window(&before, &window, &after, file_max);
                assert_eq!(features.len(), 80 * WINDOW_FRAMES);
                assert!(features.iter().all(|x| x.is_finite()));
            }
            let n = window.len();
            seen += stream.consume(n).unwrap();
            before = window[n - N_FFT / 2..].to_vec();
            windows += 1;
        }
        assert_eq!(seen, total);
        assert_eq!(windows, SECONDS / 30);
        (first_pass, windows)
    });
    eprintln!(
        "2 h ({total} samples, {windows} windows): peak held {:.1} MB over both passes; \
         first pass {:.1} s",
        peak as f64 / 1e6,
        first_pass.as_secs_f64()
    );
    // one window of samples is 1.9 MB and its features 0.96 MB; the whole file is 460 MB
    assert!(peak < 32_000_000, "peak held {peak} bytes");
}
