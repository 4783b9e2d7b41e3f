//! Audio in: any file symphonia decodes (WAV, FLAC, MP3, OGG/Vorbis), downmixed to mono (the mean
//! of the channels) and resampled to 16 kHz with rubato, streamed: at most a window and one
//! decoded packet of samples are held, whatever the file's length.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use rubato::{FftFixedIn, Resampler};
use symphonia::core::audio::SampleBuffer;
use symphonia::core::codecs::{Decoder, DecoderOptions, CODEC_TYPE_NULL};
use symphonia::core::errors::Error as SymphoniaError;
use symphonia::core::formats::{FormatOptions, FormatReader};
use symphonia::core::io::MediaSourceStream;
use symphonia::core::meta::MetadataOptions;
use symphonia::core::probe::Hint;

use super::WhisperError;

/// Whisper's sample rate.
pub const SAMPLE_RATE: usize = 16_000;

/// Input frames per resampler call.
const RESAMPLE_CHUNK: usize = 1024;
/// Sample rates read. The FFT resampler's transforms grow with the rate ratio reduced by the
/// rates' common divisor (a 1 Hz or 800 MHz header asks for FFTs of millions of points per
/// chunk); real audio lies well inside (8 kHz telephone to 384 kHz studio).
const SOURCE_RATES: std::ops::RangeInclusive<usize> = 1_000..=768_000;

/// A decoded, mono, 16 kHz sample stream over one file.
pub struct AudioStream {
    path: PathBuf,
    format: Box<dyn FormatReader>,
    decoder: Box<dyn Decoder>,
    track: u32,
    source_rate: usize,
    /// Frames the container promises, when it says.
    promised_frames: Option<u64>,
    decoded_frames: u64,
    resampler: Option<FftFixedIn<f32>>,
    /// Mono source-rate samples waiting for the resampler.
    pending: Vec<f32>,
    /// Resampled frames still to drop (the resampler's delay).
    skip: usize,
    /// Resampled frames produced so far, the delay included.
    emitted: u64,
    /// 16 kHz samples ready to be read.
    ready: VecDeque<f32>,
    finished: bool,
}

impl std::fmt::Debug for AudioStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AudioStream")
            .field("path", &self.path)
            .field("source_rate", &self.source_rate)
            .finish()
    }
}

impl AudioStream {
    pub fn open(path: impl AsRef<Path>) -> Result<AudioStream, WhisperError> {
        let path = path.as_ref().to_path_buf();
        let bad = |reason: String| WhisperError::Audio {
            path: path.clone(),
            reason,
        };
        let file = File::open(&path).map_err(|e| WhisperError::Io {
            path: path.clone(),
            source: e,
        })?;
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        if len == 0 {
            return Err(bad("the file is empty".into()));
        }
        check_wav_header(&path)?;
        check_flac_comments(&path)?;
        let mss = MediaSourceStream::new(Box::new(file), Default::default());
        let mut hint = Hint::new();
        if let Some(ext) = path.extension().and_then(|e| e.to_str()) {
            hint.with_extension(ext);
        }
        let probed = guarded(&path, || {
            symphonia::default::get_probe().format(
                &hint,
                mss,
                // trims MP3 encoder delay and padding (LAME/Xing headers)
                &FormatOptions {
                    enable_gapless: true,
                    ..FormatOptions::default()
                },
                &MetadataOptions::default(),
            )
        })?
        .map_err(|e| {
            bad(format!(
                "not a readable audio file (WAV, FLAC, MP3 or OGG/Vorbis expected): {e}"
            ))
        })?;
        let format = probed.format;
        let track = format
            .tracks()
            .iter()
            .find(|t| t.codec_params.codec != CODEC_TYPE_NULL)
            .ok_or_else(|| bad("no audio track".into()))?;
        let params = track.codec_params.clone();
        let source_rate = params.sample_rate.unwrap_or(0) as usize;
        if source_rate == 0 {
            return Err(bad("the sample rate is 0 (or missing)".into()));
        }
        if !SOURCE_RATES.contains(&source_rate) {
            return Err(bad(format!(
                "the sample rate {source_rate} Hz is outside {}..={} Hz",
                SOURCE_RATES.start(),
                SOURCE_RATES.end()
            )));
        }
        let decoder = symphonia::default::get_codecs()
            .make(&params, &DecoderOptions::default())
            .map_err(|e| bad(format!("unsupported codec: {e}")))?;
        let resampler = if source_rate == SAMPLE_RATE {
            None
        } else {
            Some(
                FftFixedIn::<f32>::new(source_rate, SAMPLE_RATE, RESAMPLE_CHUNK, 2, 1)
                    .map_err(|e| bad(format!("cannot resample {source_rate} Hz: {e}")))?,
            )
        };
        let skip = resampler.as_ref().map_or(0, |r| r.output_delay());
        Ok(AudioStream {
            track: track.id,
            path,
            format,
            decoder,
            source_rate,
            promised_frames: params.n_frames,
            decoded_frames: 0,
            resampler,
            pending: Vec::new(),
            skip,
            emitted: 0,
            ready: VecDeque::new(),
            finished: false,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's own sample rate.
    pub fn source_rate(&self) -> usize {
        self.source_rate
    }

    /// The length in 16 kHz samples when the container states it.
    pub fn expected_samples(&self) -> Option<u64> {
        self.promised_frames
            .map(|n| (n * SAMPLE_RATE as u64).div_ceil(self.source_rate as u64))
    }

    fn bad(&self, reason: String) -> WhisperError {
        WhisperError::Audio {
            path: self.path.clone(),
            reason,
        }
    }

    /// Decodes until at least `n` samples are ready or the file ends.
    fn fill(&mut self, n: usize) -> Result<(), WhisperError> {
        while self.ready.len() < n && !self.finished {
            let format = &mut self.format;
            let packet = match guarded(&self.path, || format.next_packet())? {
                Ok(p) => p,
                Err(SymphoniaError::IoError(e))
                    if e.kind() == std::io::ErrorKind::UnexpectedEof =>
                {
                    self.finish()?;
                    continue;
                }
                Err(SymphoniaError::ResetRequired) => {
                    return Err(self.bad("the stream changes its parameters midway".into()))
                }
                Err(e) => return Err(self.bad(format!("corrupt audio data: {e}"))),
            };
            if packet.track_id() != self.track {
                continue;
            }
            let decoder = &mut self.decoder;
            let pending = &mut self.pending;
            let decoded = guarded(&self.path, || {
                decoder.decode(&packet).map(|decoded| {
                    let spec = *decoded.spec();
                    let channels = spec.channels.count().max(1);
                    let mut buf = SampleBuffer::<f32>::new(decoded.capacity() as u64, spec);
                    buf.copy_interleaved_ref(decoded);
                    let scale = 1.0 / channels as f32;
                    for frame in buf.samples().chunks_exact(channels) {
                        pending.push(frame.iter().sum::<f32>() * scale);
                    }
                    buf.samples().len() / channels
                })
            })?;
            match decoded {
                // the FFT resampler fails on NaN or infinity (float WAVs can hold them)
                Ok(_) if self.pending.iter().any(|v| !v.is_finite()) => {
                    return Err(self.bad(format!(
                        "non-finite (NaN or infinite) samples after {:.2} s",
                        self.decoded_frames as f64 / self.source_rate as f64
                    )))
                }
                Ok(frames) => self.decoded_frames += frames as u64,
                Err(e) => {
                    return Err(self.bad(format!(
                        "corrupt audio data after {:.2} s: {e}",
                        self.decoded_frames as f64 / self.source_rate as f64
                    )))
                }
            }
            self.drain_pending(false)?;
        }
        Ok(())
    }

    /// Moves pending source samples through the resampler (all of them at the end).
    fn drain_pending(&mut self, end: bool) -> Result<(), WhisperError> {
        let Some(resampler) = self.resampler.as_mut() else {
            self.ready.extend(self.pending.drain(..));
            return Ok(());
        };
        let mut out = Vec::new();
        let mut used = 0;
        loop {
            let need = resampler.input_frames_next();
            let rest = self.pending.len() - used;
            if rest >= need {
                let chunk = &self.pending[used..used + need];
                out.extend(
                    guarded(&self.path, || resampler.process(&[chunk], None))?
                        .map_err(|e| WhisperError::Invalid(format!("resampler: {e}")))?
                        .remove(0),
                );
                used += need;
            } else {
                if end {
                    let chunk = &self.pending[used..];
                    out.extend(
                        guarded(&self.path, || {
                            resampler.process_partial(Some(&[chunk]), None)
                        })?
                        .map_err(|e| WhisperError::Invalid(format!("resampler: {e}")))?
                        .remove(0),
                    );
                    used = self.pending.len();
                }
                break;
            }
        }
        self.pending.drain(..used);
        if end {
            // flush the resampler's delay line until every input frame has come out
            let total = (self.decoded_frames * SAMPLE_RATE as u64).div_ceil(self.source_rate as u64)
                as usize;
            let delay = resampler.output_delay();
            while self.emitted as usize + out.len() < total + delay {
                let more = guarded(&self.path, || {
                    resampler.process_partial::<&[f32]>(None, None)
                })?
                .map_err(|e| WhisperError::Invalid(format!("resampler: {e}")))?
                .remove(0);
                if more.is_empty() {
                    break;
                }
                out.extend(more);
            }
            out.truncate((total + delay).saturating_sub(self.emitted as usize));
        }
        self.emitted += out.len() as u64;
        let skip = self.skip.min(out.len());
        self.skip -= skip;
        self.ready.extend(&out[skip..]);
        Ok(())
    }

    fn finish(&mut self) -> Result<(), WhisperError> {
        self.finished = true;
        if let Some(promised) = self.promised_frames {
            if self.decoded_frames < promised {
                return Err(self.bad(format!(
                    "truncated: the header promises {promised} frames, the file holds {}",
                    self.decoded_frames
                )));
            }
        }
        if self.decoded_frames == 0 {
            return Err(self.bad("no audio samples".into()));
        }
        self.drain_pending(true)
    }

    /// Up to `n` next samples (fewer only at the end of the file), without consuming them.
    pub fn peek(&mut self, n: usize) -> Result<Vec<f32>, WhisperError> {
        self.fill(n)?;
        Ok(self.ready.iter().take(n).copied().collect())
    }

    /// Drops the next `n` samples (fewer at the end of the file); returns how many were dropped.
    pub fn consume(&mut self, n: usize) -> Result<usize, WhisperError> {
        let mut dropped = 0;
        while dropped < n {
            self.fill((n - dropped).min(SAMPLE_RATE * 30))?;
            let k = (n - dropped).min(self.ready.len());
            if k == 0 {
                break;
            }
            self.ready.drain(..k);
            dropped += k;
        }
        Ok(dropped)
    }

    /// Whether every sample has been consumed.
    pub fn at_end(&mut self) -> Result<bool, WhisperError> {
        self.fill(1)?;
        Ok(self.ready.is_empty())
    }

    /// The whole rest of the stream (for short clips and tests).
    pub fn read_all(mut self) -> Result<Vec<f32>, WhisperError> {
        self.fill(usize::MAX)?;
        Ok(self.ready.into_iter().collect())
    }
}

/// Runs a call into the decoder library, turning a panic on malformed input into an error.
fn guarded<T>(path: &Path, f: impl FnOnce() -> T) -> Result<T, WhisperError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|_| WhisperError::Audio {
        path: path.to_path_buf(),
        reason: "malformed audio data (the decoder gave up)".into(),
    })
}

/// RIFF/WAVE files: the `fmt ` chunk's sample rate must not be 0 (the decoder library cannot
/// represent such a stream). Other files pass unchecked.
fn check_wav_header(path: &Path) -> Result<(), WhisperError> {
    let mut head = Vec::new();
    let io = |e| WhisperError::Io {
        path: path.to_path_buf(),
        source: e,
    };
    File::open(path)
        .map_err(io)?
        .take(4096)
        .read_to_end(&mut head)
        .map_err(io)?;
    if head.len() < 12 || &head[..4] != b"RIFF" || &head[8..12] != b"WAVE" {
        return Ok(());
    }
    let mut at = 12;
    while at + 8 <= head.len() {
        let id = &head[at..at + 4];
        let len = u32::from_le_bytes([head[at + 4], head[at + 5], head[at + 6], head[at + 7]]);
        if id == b"fmt " && at + 16 <= head.len() {
            let rate =
                u32::from_le_bytes([head[at + 12], head[at + 13], head[at + 14], head[at + 15]]);
            if rate == 0 {
                return Err(WhisperError::Audio {
                    path: path.to_path_buf(),
                    reason: "the sample rate is 0".into(),
                });
            }
            return Ok(());
        }
        at += 8 + len as usize + (len as usize & 1);
    }
    Ok(())
}

/// FLAC files: every length inside a Vorbis comment block (the vendor string, each comment) must
/// lie inside the block; the decoder library allocates what they claim, up to 4 GiB, before
/// reading. Other files pass unchecked.
fn check_flac_comments(path: &Path) -> Result<(), WhisperError> {
    const VORBIS_COMMENT: u8 = 4;
    let io = |e| WhisperError::Io {
        path: path.to_path_buf(),
        source: e,
    };
    let mut file = File::open(path).map_err(io)?;
    let mut marker = [0u8; 4];
    if file.read_exact(&mut marker).is_err() || &marker != b"fLaC" {
        return Ok(());
    }
    loop {
        let mut head = [0u8; 4];
        if file.read_exact(&mut head).is_err() {
            return Ok(());
        }
        let len = u32::from_be_bytes([0, head[1], head[2], head[3]]) as usize;
        if head[0] & 0x7f == VORBIS_COMMENT {
            // a metadata block is at most 16 MiB (a 24-bit length)
            let mut block = Vec::new();
            (&mut file)
                .take(len as u64)
                .read_to_end(&mut block)
                .map_err(io)?;
            let le32 = |at: usize| {
                block
                    .get(at..at + 4)
                    .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
            };
            let past = || WhisperError::Audio {
                path: path.to_path_buf(),
                reason: "a Vorbis comment runs past its FLAC metadata block (a corrupt file)"
                    .into(),
            };
            let vendor = le32(0).ok_or_else(past)?;
            let mut at = 4usize.checked_add(vendor).ok_or_else(past)?;
            let count = le32(at).ok_or_else(past)?;
            at += 4;
            for _ in 0..count {
                let n = le32(at).ok_or_else(past)?;
                at = (at + 4).checked_add(n).ok_or_else(past)?;
                if at > block.len() {
                    return Err(past());
                }
            }
        } else {
            file.seek(SeekFrom::Current(len as i64)).map_err(io)?;
        }
        if head[0] & 0x80 != 0 {
            return Ok(());
        }
    }
}

/// A whole file as mono 16 kHz samples.
pub fn load_audio(path: impl AsRef<Path>) -> Result<Vec<f32>, WhisperError> {
    AudioStream::open(path)?.read_all()
}
