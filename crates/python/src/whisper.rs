//! `Whisper`: `aneforge_models::whisper::Whisper` (`aneforge transcribe`) with the CLI's options
//! and defaults.

use std::path::PathBuf;
use std::sync::Mutex;

use aneforge_models::whisper::fallback::temperatures;
use aneforge_models::whisper::{
    DecodeOptions, Fallback, Transcript, Whisper as RsWhisper, WhisperOptions,
};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::{errors, options};

fn transcript<'py>(py: Python<'py>, t: &Transcript) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("text", t.text.trim())?;
    d.set_item("language", &t.language)?;
    d.set_item("duration", t.duration)?;
    let segments = t
        .segments
        .iter()
        .map(|s| {
            let seg = PyDict::new(py);
            seg.set_item("start", s.start)?;
            seg.set_item("end", s.end)?;
            seg.set_item("text", s.text.trim())?;
            seg.set_item("tokens", &s.tokens)?;
            Ok(seg)
        })
        .collect::<PyResult<Vec<_>>>()?;
    d.set_item("segments", PyList::new(py, segments)?)?;
    Ok(d)
}

/// A Whisper model (transformers safetensors or a CTranslate2 `model.bin`), loaded and compiled
/// as `aneforge transcribe -m MODEL` does.
#[pyclass(module = "aneforge", frozen)]
pub struct Whisper {
    /// The decoder's caches live in the model: one transcription at a time.
    inner: Mutex<RsWhisper>,
    /// The configuration summary, taken at load so `repr` never waits on a transcription.
    summary: String,
}

#[pymethods]
impl Whisper {
    #[new]
    #[pyo3(signature = (model, *, engine = "cpu", target = None, matmul_precision = "f32"))]
    fn new(
        py: Python<'_>,
        model: &str,
        engine: &str,
        target: Option<&str>,
        matmul_precision: &str,
    ) -> PyResult<Self> {
        let (engine, target) = options::select(py, engine, target)?;
        let options = WhisperOptions {
            matmul: options::matmul(matmul_precision, engine, &target)?,
            target,
            engine,
            ..WhisperOptions::default()
        };
        let model = model.to_string();
        let inner = py
            .detach(move || RsWhisper::open(&model, &options))
            .map_err(errors::whisper)?;
        let c = inner.config();
        let summary = format!(
            "Whisper(d_model={}, encoder_layers={}, decoder_layers={}, vocab={})",
            c.d_model, c.encoder_layers, c.decoder_layers, c.vocab_size
        );
        Ok(Whisper {
            inner: Mutex::new(inner),
            summary,
        })
    }

    /// Transcribes an audio file (WAV, FLAC, MP3, OGG/Vorbis; any rate and channel count).
    /// Returns a dict: `text`, `language`, `duration` (seconds) and `segments` (`start`, `end`,
    /// `text`, `tokens`). Options and defaults are `aneforge transcribe`'s (openai-whisper's):
    /// greedy at temperature 0 with fallback to sampling at 0.2, 0.4, ... 1.0 when a window fails
    /// the compression-ratio or log-probability threshold (`None` turns a threshold off), and
    /// over 30 s each window conditioned on the previous windows' text.
    #[pyo3(signature = (audio, *, language = None, task = "transcribe", beam_size = 1, timestamps = false, temperature = 0.0, temperature_increment_on_fallback = 0.2, compression_ratio_threshold = Some(2.4), logprob_threshold = Some(-1.0), no_speech_threshold = Some(0.6), best_of = 5, seed = 0, condition_on_previous_text = true, initial_prompt = None))]
    #[allow(clippy::too_many_arguments)]
    fn transcribe<'py>(
        &self,
        py: Python<'py>,
        audio: PathBuf,
        language: Option<String>,
        task: &str,
        beam_size: usize,
        timestamps: bool,
        temperature: f32,
        temperature_increment_on_fallback: f32,
        compression_ratio_threshold: Option<f64>,
        logprob_threshold: Option<f64>,
        no_speech_threshold: Option<f64>,
        best_of: usize,
        seed: u64,
        condition_on_previous_text: bool,
        initial_prompt: Option<String>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let translate = match task {
            "transcribe" => false,
            "translate" => true,
            other => {
                return Err(errors::invalid(format!(
                    "task: expected \"transcribe\" or \"translate\", found {other:?}"
                )))
            }
        };
        if beam_size == 0 {
            return Err(errors::invalid("beam_size takes a count of at least 1"));
        }
        let fallback = Fallback {
            temperatures: temperatures(temperature, temperature_increment_on_fallback),
            compression_ratio_threshold,
            logprob_threshold,
            no_speech_threshold,
            best_of,
            seed,
        };
        fallback.validate().map_err(errors::invalid)?;
        let decode = DecodeOptions {
            language,
            translate,
            timestamps,
            beam_size,
            fallback,
            condition_on_previous_text,
            initial_prompt,
        };
        let result = py.detach(|| {
            let mut whisper = self
                .inner
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            whisper.transcribe(&audio, &decode, &mut |_, _| {})
        });
        transcript(py, &result.map_err(errors::whisper)?)
    }

    fn __repr__(&self) -> String {
        self.summary.clone()
    }
}
