//! Temperature fallback and no-speech detection as openai-whisper's `decode_with_fallback` and
//! `transcribe` do them: a window's result is rejected and decoded again at the next temperature
//! when its text compresses too well (repetition) or its tokens are too unlikely, unless the
//! window looks silent; a silent window is skipped.

use std::io::Write;

use flate2::write::ZlibEncoder;
use flate2::Compression;

/// The fallback settings. The default is one greedy pass with no thresholds (transformers'
/// `generate` defaults); [`Fallback::openai`] is openai-whisper's `transcribe` defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct Fallback {
    /// Tried in order until a result passes the thresholds; 0 decodes greedily (or with beam
    /// search), above 0 samples `best_of` candidates.
    pub temperatures: Vec<f32>,
    /// Reject a result whose text's gzip compression ratio is above this.
    pub compression_ratio_threshold: Option<f64>,
    /// Reject a result whose average token log-probability is below this.
    pub logprob_threshold: Option<f64>,
    /// A window whose `<|nospeech|>` probability is above this (and whose average
    /// log-probability is below `logprob_threshold`) is silent.
    pub no_speech_threshold: Option<f64>,
    /// Candidates sampled at a temperature above 0; the most likely (summed log-probability
    /// over length) wins.
    pub best_of: usize,
    /// Seed of the sampling; each window's sampling restarts from it.
    pub seed: u64,
}

impl Default for Fallback {
    fn default() -> Self {
        Fallback {
            temperatures: vec![0.0],
            compression_ratio_threshold: None,
            logprob_threshold: None,
            no_speech_threshold: None,
            best_of: 5,
            seed: 0,
        }
    }
}

/// What one decoding of a window scored.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WindowScores {
    pub compression_ratio: f64,
    pub avg_logprob: f64,
    pub no_speech_prob: f64,
}

impl Fallback {
    /// openai-whisper's defaults: temperatures 0, 0.2, ..., 1.0, compression ratio 2.4,
    /// log-probability -1, no-speech 0.6, best of 5.
    pub fn openai() -> Fallback {
        Fallback {
            temperatures: temperatures(0.0, 0.2),
            compression_ratio_threshold: Some(2.4),
            logprob_threshold: Some(-1.0),
            no_speech_threshold: Some(0.6),
            best_of: 5,
            seed: 0,
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.temperatures.is_empty() {
            return Err("no temperature to decode at".into());
        }
        if let Some(t) = self
            .temperatures
            .iter()
            .find(|t| !(t.is_finite() && **t >= 0.0))
        {
            return Err(format!(
                "temperature must be a finite number >= 0, found {t}"
            ));
        }
        if self.best_of == 0 {
            return Err("best_of must be at least 1".into());
        }
        Ok(())
    }

    /// openai-whisper's `needs_fallback`: too repetitive or too unlikely, unless silent.
    pub fn needs_fallback(&self, s: &WindowScores) -> bool {
        let repetitive = self
            .compression_ratio_threshold
            .is_some_and(|t| s.compression_ratio > t);
        let unlikely = self.logprob_threshold.is_some_and(|t| s.avg_logprob < t);
        let silent = unlikely
            && self
                .no_speech_threshold
                .is_some_and(|t| s.no_speech_prob > t);
        (repetitive || unlikely) && !silent
    }

    /// openai-whisper's skip of a window without speech: its no-speech probability is above
    /// the threshold and its average log-probability is not above the log-probability
    /// threshold (when there is one).
    pub fn is_silent(&self, s: &WindowScores) -> bool {
        self.no_speech_threshold
            .is_some_and(|t| s.no_speech_prob > t)
            && !self.logprob_threshold.is_some_and(|t| s.avg_logprob > t)
    }
}

/// openai-whisper's schedule: `start`, `start + increment`, ... up to 1.0; only `start` when
/// `increment` is 0.
pub fn temperatures(start: f32, increment: f32) -> Vec<f32> {
    if increment <= 0.0 {
        return vec![start];
    }
    // numpy.arange(start, 1.0 + 1e-6, increment), computed as start + i·increment
    (0..)
        .map(|i| start + i as f32 * increment)
        .take_while(|&t| t < 1.0 + 1e-6)
        .collect()
}

/// openai-whisper's `compression_ratio`: UTF-8 length over its zlib-compressed length (default
/// level).
pub fn compression_ratio(text: &str) -> f64 {
    let bytes = text.as_bytes();
    let mut z = ZlibEncoder::new(Vec::new(), Compression::default());
    // writing into a Vec cannot fail
    let compressed = z
        .write_all(bytes)
        .and_then(|_| z.finish())
        .map_or(1, |c| c.len());
    bytes.len() as f64 / compressed.max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_schedule_has_six_temperatures() {
        let t = temperatures(0.0, 0.2);
        assert_eq!(t.len(), 6);
        assert!((t[5] - 1.0).abs() < 1e-6);
        assert_eq!(temperatures(0.3, 0.0), vec![0.3]);
    }

    #[test]
    fn a_silent_window_is_not_retried_and_is_skipped() {
        let f = Fallback::openai();
        let silent = WindowScores {
            compression_ratio: 1.0,
            avg_logprob: -1.5,
            no_speech_prob: 0.9,
        };
        assert!(!f.needs_fallback(&silent));
        assert!(f.is_silent(&silent));
        let unsure = WindowScores {
            no_speech_prob: 0.1,
            ..silent
        };
        assert!(f.needs_fallback(&unsure));
        assert!(!f.is_silent(&unsure));
        // likely enough text is kept even when <|nospeech|> is likely
        let kept = WindowScores {
            avg_logprob: -0.4,
            ..silent
        };
        assert!(!f.needs_fallback(&kept));
        assert!(!f.is_silent(&kept));
        let repetitive = WindowScores {
            compression_ratio: 3.0,
            ..kept
        };
        assert!(f.needs_fallback(&repetitive));
    }
}
