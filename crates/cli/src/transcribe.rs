//! `aneforge transcribe`: speech to text with a Whisper model, as plain text, JSON, SubRip or
//! WebVTT.

use std::fmt::Write as _;
use std::io::Write;
use std::path::PathBuf;

use aneforge_models::whisper::fallback::temperatures;
use aneforge_models::whisper::{DecodeOptions, Fallback, Transcript, Whisper, WhisperOptions};
use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressStyle};

use crate::encoder_args::parse_compress;
use crate::engine_args::{EngineArgs, MatmulArgs};

#[derive(clap::Args)]
pub struct TranscribeArgs {
    /// Whisper model id (ORG/NAME in the Hugging Face cache) or directory: transformers
    /// safetensors or a CTranslate2 model.bin.
    #[arg(short = 'm', long = "model")]
    pub model: String,
    /// Audio files (WAV, FLAC, MP3, OGG/Vorbis; any sample rate and channel count).
    #[arg(required = true)]
    pub audio: Vec<PathBuf>,
    /// txt (the text), json (text, language and timed segments per file), srt or vtt
    /// (subtitles).
    #[arg(long, value_enum, default_value_t = TranscriptFormat::Txt)]
    pub format: TranscriptFormat,
    /// Spoken language code (en, de, fr, …) for multilingual models; default: detected per
    /// window.
    #[arg(long)]
    pub language: Option<String>,
    /// transcribe, or translate (to English; multilingual models).
    #[arg(long, value_enum, default_value_t = Task::Transcribe)]
    pub task: Task,
    /// Beam search with N beams (1: greedy).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub beam_size: usize,
    /// Predict timestamps also for txt and json output (always on for srt, vtt and audio over
    /// 30 s; without them a window is one segment).
    #[arg(long)]
    pub timestamps: bool,
    /// Temperature of the first decoding (0: greedy or beam search; above 0: sampling).
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    /// Temperature added on each fallback (0: no fallback), up to 1.0: a window is decoded
    /// again when it fails the compression-ratio or log-probability threshold.
    #[arg(long, default_value_t = 0.2, value_name = "STEP")]
    pub temperature_increment_on_fallback: f32,
    /// Fall back when the text's gzip compression ratio is above this (none: off).
    #[arg(long, default_value = "2.4", value_name = "RATIO|none")]
    pub compression_ratio_threshold: Threshold,
    /// Fall back when the average token log-probability is below this (none: off).
    #[arg(
        long,
        default_value = "-1.0",
        value_name = "LOGPROB|none",
        allow_hyphen_values = true
    )]
    pub logprob_threshold: Threshold,
    /// A window whose no-speech probability is above this and whose average log-probability is
    /// below --logprob-threshold is silent and skipped (none: off).
    #[arg(long, default_value = "0.6", value_name = "P|none")]
    pub no_speech_threshold: Threshold,
    /// Candidates sampled at a temperature above 0 (the most likely is kept).
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub best_of: usize,
    /// Seed of the sampling at temperatures above 0.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Audio over 30 s: decode each window after the previous windows' text (up to 223 tokens),
    /// as openai-whisper does by default; restarts after a window decoded above temperature 0.5.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "true|false")]
    pub condition_on_previous_text: bool,
    /// Text to condition the first window on, as if spoken before the audio: names,
    /// spellings, punctuation style.
    #[arg(long, value_name = "TEXT")]
    pub initial_prompt: Option<String>,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub matmul: MatmulArgs,
    /// Weight compression of ANE-target programs: none, auto, int8 or int4.
    #[arg(long, default_value = "none")]
    pub compress: String,
    /// Write to this file instead of stdout.
    #[arg(long, short = 'o')]
    pub output: Option<PathBuf>,
    /// No progress bar.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// Print each file's audio length and transcription time to stderr (one JSON object per
    /// file), and the model's load and compile time.
    #[arg(long)]
    pub timings: bool,
}

/// A threshold or `none`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Threshold(pub Option<f64>);

impl std::str::FromStr for Threshold {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s.eq_ignore_ascii_case("none") {
            return Ok(Threshold(None));
        }
        match s.parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(Threshold(Some(v))),
            _ => Err(format!("expected a number or none, found '{s}'")),
        }
    }
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TranscriptFormat {
    Txt,
    Json,
    Srt,
    Vtt,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Task {
    Transcribe,
    Translate,
}

/// Seconds rounded to milliseconds.
fn ms(seconds: f64) -> f64 {
    (seconds * 1000.0).round() / 1000.0
}

/// `HH:MM:SS{sep}mmm`.
fn clock(seconds: f64, sep: char) -> String {
    let ms = (seconds.max(0.0) * 1000.0).round() as u64;
    format!(
        "{:02}:{:02}:{:02}{sep}{:03}",
        ms / 3_600_000,
        ms / 60_000 % 60,
        ms / 1000 % 60,
        ms % 1000
    )
}

fn subtitles(t: &Transcript, vtt: bool) -> String {
    let mut out = String::new();
    if vtt {
        out.push_str("WEBVTT\n\n");
    }
    let sep = if vtt { '.' } else { ',' };
    for (i, s) in t.segments.iter().enumerate() {
        if !vtt {
            let _ = writeln!(out, "{}", i + 1);
        }
        let _ = writeln!(
            out,
            "{} --> {}\n{}\n",
            clock(s.start, sep),
            clock(s.end, sep),
            s.text.trim()
        );
    }
    out
}

pub fn run(args: TranscribeArgs) -> anyhow::Result<()> {
    if args.beam_size == 0 {
        bail!("--beam-size takes a count of at least 1");
    }
    let (engine, target) = args.engine.select()?;
    let options = WhisperOptions {
        compress: parse_compress(&args.compress, &target)?,
        matmul: args.matmul.precision(engine, &target)?,
        target,
        engine,
    };
    let started = std::time::Instant::now();
    let mut whisper = Whisper::open(&args.model, &options)
        .with_context(|| format!("cannot load the Whisper model {}", args.model))?;
    if args.timings {
        eprintln!(
            "{}",
            serde_json::json!({"load_seconds": started.elapsed().as_secs_f64()})
        );
    }
    let fallback = Fallback {
        temperatures: temperatures(args.temperature, args.temperature_increment_on_fallback),
        compression_ratio_threshold: args.compression_ratio_threshold.0,
        logprob_threshold: args.logprob_threshold.0,
        no_speech_threshold: args.no_speech_threshold.0,
        best_of: args.best_of,
        seed: args.seed,
    };
    if let Err(e) = fallback.validate() {
        bail!("{e}");
    }
    let mut transcripts = Vec::new();
    for path in &args.audio {
        let bar = if args.quiet {
            ProgressBar::hidden()
        } else {
            let bar = ProgressBar::new(0);
            bar.set_style(
                ProgressStyle::with_template("{bar:40} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            bar
        };
        let decode = DecodeOptions {
            language: args.language.clone(),
            translate: args.task == Task::Translate,
            timestamps: args.timestamps
                || matches!(args.format, TranscriptFormat::Srt | TranscriptFormat::Vtt),
            beam_size: args.beam_size,
            fallback: fallback.clone(),
            condition_on_previous_text: args.condition_on_previous_text,
            initial_prompt: args.initial_prompt.clone(),
        };
        let mut progress = |done: f64, total: Option<f64>| {
            if let Some(total) = total {
                bar.set_length((total * 10.0) as u64);
                bar.set_position((done * 10.0) as u64);
            }
            bar.set_message(format!(
                "{}: {done:.0} s of {}",
                path.display(),
                total.map_or("?".into(), |t| format!("{t:.0} s"))
            ));
        };
        let started = std::time::Instant::now();
        let transcript = whisper.transcribe(path, &decode, &mut progress)?;
        bar.finish_and_clear();
        if args.timings {
            eprintln!(
                "{}",
                serde_json::json!({
                    "file": path.display().to_string(),
                    "audio_seconds": transcript.duration,
                    "seconds": started.elapsed().as_secs_f64(),
                })
            );
        }
        transcripts.push((path, transcript));
    }
    let mut text = String::new();
    match args.format {
        TranscriptFormat::Txt => {
            for (_, t) in &transcripts {
                text.push_str(t.text.trim());
                text.push('\n');
            }
        }
        TranscriptFormat::Json => {
            let files: Vec<serde_json::Value> = transcripts
                .iter()
                .map(|(path, t)| {
                    serde_json::json!({
                        "file": path.display().to_string(),
                        "text": t.text.trim(),
                        "language": t.language,
                        "duration": ms(t.duration),
                        "segments": t.segments.iter().map(|s| serde_json::json!({
                            "start": ms(s.start), "end": ms(s.end), "text": s.text.trim(),
                        })).collect::<Vec<_>>(),
                    })
                })
                .collect();
            text = serde_json::to_string(&files)?;
            text.push('\n');
        }
        TranscriptFormat::Srt | TranscriptFormat::Vtt => {
            if transcripts.len() > 1 && args.output.is_some() {
                bail!("--format srt/vtt with --output takes one audio file");
            }
            for (_, t) in &transcripts {
                text.push_str(&subtitles(t, args.format == TranscriptFormat::Vtt));
            }
        }
    }
    match &args.output {
        Some(path) => aneforge::output::write_output(path, text.as_bytes())
            .with_context(|| format!("cannot write {}", path.display())),
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes())?;
            Ok(out.flush()?)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_take_none() {
        assert_eq!("none".parse::<Threshold>(), Ok(Threshold(None)));
        assert_eq!("-1.5".parse::<Threshold>(), Ok(Threshold(Some(-1.5))));
        assert!("x".parse::<Threshold>().is_err());
    }

    #[test]
    fn clocks_round_to_milliseconds() {
        assert_eq!(clock(3723.4567, ','), "01:02:03,457");
        assert_eq!(clock(0.0, '.'), "00:00:00.000");
    }
}
