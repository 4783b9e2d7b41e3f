//! Whisper's log-mel spectrogram, as transformers' `WhisperFeatureExtractor` (and openai-whisper)
//! compute it: a 30 s window of 16 kHz samples (zero-padded), periodic Hann window of 400, hop 160,
//! centred frames with reflect padding, power spectrum, slaney-scale slaney-normalised mel filters
//! over 0–8000 Hz, `log10(max(mel, 1e-10))`, the last frame dropped, clamped to 8 below the
//! file's maximum, then `(x + 4) / 4`. A file longer than 30 s is one spectrogram that windows
//! slice: a window's edge frames see the neighbouring samples, and the clamp uses the maximum
//! over every window (a first pass).

use std::path::Path;
use std::sync::Arc;

use realfft::{RealFftPlanner, RealToComplex};

use super::audio::{AudioStream, SAMPLE_RATE};
use super::WhisperError;

pub const N_FFT: usize = 400;
pub const HOP: usize = 160;
/// Samples of one window (30 s).
pub const WINDOW_SAMPLES: usize = 30 * SAMPLE_RATE;
/// Frames of one window's features.
pub const WINDOW_FRAMES: usize = WINDOW_SAMPLES / HOP;

/// slaney mel scale: linear below 1 kHz, logarithmic above.
fn hz_to_mel(hz: f64) -> f64 {
    let f_sp = 200.0 / 3.0;
    let min_log_hz = 1000.0;
    let min_log_mel = min_log_hz / f_sp;
    let logstep = 6.4f64.ln() / 27.0;
    if hz >= min_log_hz {
        min_log_mel + (hz / min_log_hz).ln() / logstep
    } else {
        hz / f_sp
    }
}

fn mel_to_hz(mel: f64) -> f64 {
    let f_sp = 200.0 / 3.0;
    let min_log_hz = 1000.0;
    let min_log_mel = min_log_hz / f_sp;
    let logstep = 6.4f64.ln() / 27.0;
    if mel >= min_log_mel {
        min_log_hz * (logstep * (mel - min_log_mel)).exp()
    } else {
        f_sp * mel
    }
}

/// `[n_mels, N_FFT / 2 + 1]` triangular filters, slaney-normalised (constant energy per filter).
pub fn mel_filters(n_mels: usize) -> Vec<f64> {
    let bins = N_FFT / 2 + 1;
    let nyquist = SAMPLE_RATE as f64 / 2.0;
    let fft_freqs: Vec<f64> = (0..bins)
        .map(|i| nyquist * i as f64 / (bins - 1) as f64)
        .collect();
    let (lo, hi) = (hz_to_mel(0.0), hz_to_mel(8000.0));
    let points: Vec<f64> = (0..n_mels + 2)
        .map(|i| mel_to_hz(lo + (hi - lo) * i as f64 / (n_mels + 1) as f64))
        .collect();
    let mut out = vec![0.0; n_mels * bins];
    for m in 0..n_mels {
        let (left, centre, right) = (points[m], points[m + 1], points[m + 2]);
        let norm = 2.0 / (right - left);
        for (b, &f) in fft_freqs.iter().enumerate() {
            let down = (f - left) / (centre - left);
            let up = (right - f) / (right - centre);
            out[m * bins + b] = down.min(up).max(0.0) * norm;
        }
    }
    out
}

/// A reusable feature extractor for one mel bin count.
pub struct LogMel {
    n_mels: usize,
    filters: Vec<f32>,
    /// each filter's bins from its first to its last nonzero weight: the sum over them is the
    /// sum over all bins, term for term (the others add exact zeros)
    spans: Vec<std::ops::Range<usize>>,
    window: Vec<f32>,
    fft: Arc<dyn RealToComplex<f32>>,
}

impl std::fmt::Debug for LogMel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogMel")
            .field("n_mels", &self.n_mels)
            .finish()
    }
}

impl LogMel {
    pub fn new(n_mels: usize) -> LogMel {
        let window = (0..N_FFT)
            .map(|n| {
                (0.5 - 0.5 * (2.0 * std::f64::consts::PI * n as f64 / N_FFT as f64).cos()) as f32
            })
            .collect();
        let filters: Vec<f32> = mel_filters(n_mels).iter().map(|&v| v as f32).collect();
        let spans = filters
            .chunks(N_FFT / 2 + 1)
            .map(|row| {
                let first = row.iter().position(|&w| w != 0.0).unwrap_or(0);
                let last = row.iter().rposition(|&w| w != 0.0).map_or(first, |i| i + 1);
                first..last
            })
            .collect();
        LogMel {
            n_mels,
            filters,
            spans,
            window,
            fft: RealFftPlanner::<f32>::new().plan_fft_forward(N_FFT),
        }
    }

    pub fn n_mels(&self) -> usize {
        self.n_mels
    }

    /// `[n_mels, WINDOW_FRAMES]` features of a file of up to 30 s (zero-padded to 30 s; longer
    /// input is cut): the whole file's spectrogram, clamped to its own maximum.
    pub fn window(&self, samples: &[f32]) -> Vec<f32> {
        let mut mel = self.log10_frames(&[], samples, &[]);
        let max = max_of(&mel);
        normalize(&mut mel, max);
        mel
    }

    /// `[n_mels, WINDOW_FRAMES]` features of one 30 s window of a longer file, as openai-whisper
    /// and transformers compute long-form features: frames of the whole file's spectrogram
    /// (`before`: up to `N_FFT / 2` samples preceding the window, empty at the file's start;
    /// `after`: up to `N_FFT / 2` samples following it, empty at its end), clamped to 8 below
    /// `file_max`, the whole file's [`log10_max`](Self::log10_max).
    pub fn file_window(
        &self,
        before: &[f32],
        samples: &[f32],
        after: &[f32],
        file_max: f32,
    ) -> Vec<f32> {
        let mut mel = self.log10_frames(before, samples, after);
        normalize(&mut mel, file_max);
        mel
    }

    /// Long-form's last window, shorter than 30 s: openai-whisper and transformers slice the
    /// file's spectrogram to the `content` frames the audio covers and pad the slice with zeros
    /// (normalised log-mel values), not with the spectrogram of silence.
    pub fn pad_tail(mel: &mut [f32], content: usize) {
        for row in mel.chunks_mut(WINDOW_FRAMES) {
            row[content.min(WINDOW_FRAMES)..].fill(0.0);
        }
    }

    /// The largest `log10` mel energy of a window's frames (arguments as
    /// [`file_window`](Self::file_window)); the maximum over a file's windows is its `file_max`.
    pub fn log10_max(&self, before: &[f32], samples: &[f32], after: &[f32]) -> f32 {
        max_of(&self.log10_frames(before, samples, after))
    }

    /// The whole file's largest `log10` mel energy: a first pass over its 30 s windows (one
    /// window of samples held at a time), so that every window is clamped as the file's one
    /// spectrogram is.
    pub fn file_log10_max(&self, path: &Path) -> Result<f32, WhisperError> {
        let mut stream = AudioStream::open(path)?;
        let mut before: Vec<f32> = Vec::new();
        let mut max = f32::NEG_INFINITY;
        loop {
            let mut window = stream.peek(WINDOW_SAMPLES + N_FFT / 2)?;
            if window.is_empty() {
                break;
            }
            let after = window.split_off(window.len().min(WINDOW_SAMPLES));
            max = max.max(self.log10_max(&before, &window, &after));
            let n = window.len();
            before = window[n.saturating_sub(N_FFT / 2)..].to_vec();
            stream.consume(n)?;
            if n < WINDOW_SAMPLES {
                break;
            }
        }
        Ok(max)
    }

    /// `log10(max(mel, 1e-10))` of the window's `WINDOW_FRAMES` frames. Frame `t` is centred on
    /// sample `t·HOP` of the window; samples outside it come from `before`/`after` where given,
    /// else by reflection of the window zero-padded to 30 s (transformers' padding of one window).
    fn log10_frames(&self, before: &[f32], samples: &[f32], after: &[f32]) -> Vec<f32> {
        let n = samples.len().min(WINDOW_SAMPLES);
        let pad = N_FFT / 2;
        let before = &before[before.len().saturating_sub(pad)..];
        let after = &after[..after.len().min(pad)];
        let total = WINDOW_SAMPLES + 2 * pad;
        let at = |i: usize| -> f32 {
            let j = i as isize - pad as isize;
            if j < 0 {
                let back = (-j) as usize;
                if before.is_empty() {
                    // reflect about sample 0, as numpy's pad(mode="reflect")
                    samples.get(back).copied().unwrap_or(0.0)
                } else {
                    before.len().checked_sub(back).map_or(0.0, |k| before[k])
                }
            } else if (j as usize) < n {
                samples[j as usize]
            } else if (j as usize) < WINDOW_SAMPLES {
                0.0
            } else if n == WINDOW_SAMPLES && !after.is_empty() {
                after
                    .get(j as usize - WINDOW_SAMPLES)
                    .copied()
                    .unwrap_or(0.0)
            } else {
                // reflect about the window's last sample, as numpy's pad(mode="reflect") of the
                // zero-padded window
                let k = 2 * (WINDOW_SAMPLES - 1) - j as usize;
                if k < n {
                    samples[k]
                } else {
                    0.0
                }
            }
        };
        let padded: Vec<f32> = (0..total).map(at).collect();
        let bins = N_FFT / 2 + 1;
        let frames = WINDOW_FRAMES;
        let mut input = self.fft.make_input_vec();
        let mut spectrum = self.fft.make_output_vec();
        let mut scratch = self.fft.make_scratch_vec();
        let mut power = vec![0.0f32; bins];
        let mut mel = vec![0.0f32; self.n_mels * frames];
        for t in 0..frames {
            let start = t * HOP;
            for (k, v) in input.iter_mut().enumerate() {
                *v = padded[start + k] * self.window[k];
            }
            self.fft
                .process_with_scratch(&mut input, &mut spectrum, &mut scratch)
                .unwrap_or_else(|_| unreachable!("buffers come from the plan"));
            for (p, c) in power.iter_mut().zip(&spectrum) {
                *p = c.norm_sqr();
            }
            for (m, span) in self.spans.iter().enumerate() {
                let row = &self.filters[m * bins..(m + 1) * bins];
                let e: f32 = row[span.clone()]
                    .iter()
                    .zip(&power[span.clone()])
                    .map(|(w, p)| w * p)
                    .sum();
                mel[m * frames + t] = e.max(1e-10).log10();
            }
        }
        mel
    }
}

fn max_of(v: &[f32]) -> f32 {
    v.iter().copied().fold(f32::NEG_INFINITY, f32::max)
}

/// Whisper's dynamic-range clamp and scaling: `(max(x, max − 8) + 4) / 4`.
fn normalize(mel: &mut [f32], max: f32) {
    for v in mel {
        *v = (v.max(max - 8.0) + 4.0) / 4.0;
    }
}
