//! The compiled encoder and decoder-step programs of one model, with the decoder's resident
//! self-attention caches and the window's cross-attention keys and values.

use std::sync::Arc;

use aneforge::engine::{BufferMut, BufferRef, EngineOptions, HostSlice, MatmulPrecision};
use aneforge::graph::HostData;
use aneforge::{compile_named, CompileOptions, Compress, Engine, Model, ParameterMode, Target};

use super::config::WhisperConfig;
use super::graph;
use super::weights::WhisperWeights;
use super::WhisperError;

/// How the programs are compiled and run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WhisperOptions {
    /// `Target::Cpu` (fp32) or `Target::Ane(arch)` (fp16 programs).
    pub target: Target,
    pub engine: Engine,
    pub compress: Compress,
    /// The CPU engine's arithmetic for the fp32 programs' many-row products (the encoder's,
    /// and the decoder's cross-attention keys and values over the encoder's rows).
    pub matmul: MatmulPrecision,
}

impl Default for WhisperOptions {
    fn default() -> Self {
        WhisperOptions {
            target: Target::Cpu,
            engine: Engine::Cpu,
            compress: Compress::None,
            matmul: MatmulPrecision::F32,
        }
    }
}

pub struct Programs {
    cfg: WhisperConfig,
    weights: Arc<WhisperWeights>,
    target: Target,
    engine: Engine,
    engine_options: EngineOptions,
    encoder: Model,
    /// One decoder step program per hypothesis (beam search keeps several), each with its own
    /// resident caches; they share one artifact and its weights.
    decoders: Vec<Model>,
    /// Self-attention cache positions of the decoder program.
    context: usize,
    hidden: Vec<f32>,
    mask: Vec<f32>,
}

impl std::fmt::Debug for Programs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Programs")
            .field("target", &self.target)
            .field("context", &self.context)
            .finish()
    }
}

fn share_caches(decoder: &mut Model, layers: usize) -> Result<(), WhisperError> {
    for l in 0..layers {
        decoder.share_buffer(&graph::k_cache_out(l), &graph::k_cache(l))?;
        decoder.share_buffer(&graph::v_cache_out(l), &graph::v_cache(l))?;
    }
    Ok(())
}

/// One hypothesis's cache prefix, as stored.
enum Prefix {
    F32(Vec<f32>),
    F16(Vec<half::f16>),
}

fn engine_options(options: &WhisperOptions) -> EngineOptions {
    EngineOptions {
        matmul: options.matmul,
        ..Default::default()
    }
}

fn compile(
    outputs: &[(String, aneforge::Tensor)],
    options: &WhisperOptions,
) -> Result<Model, WhisperError> {
    let named: Vec<(&str, &aneforge::Tensor)> =
        outputs.iter().map(|(n, t)| (n.as_str(), t)).collect();
    Ok(compile_named(
        &named,
        &CompileOptions {
            target: options.target.clone(),
            compress: options.compress,
            parameters: ParameterMode::Constant,
            engine: options.engine,
            engine_options: engine_options(options),
        },
    )?)
}

/// Zeroes the self-attention caches (positions past the current one are masked, but a NaN left
/// there would still poison the attention's weighted sum).
fn clear_caches(decoder: &mut Model, layers: usize) -> Result<(), WhisperError> {
    for l in 0..layers {
        for name in [graph::k_cache(l), graph::v_cache(l)] {
            match decoder.input_view_mut(&name)? {
                BufferMut::F32(b) => b.fill(0.0),
                BufferMut::F16(b) => b.fill(half::f16::ZERO),
                _ => return Err(WhisperError::Invalid(format!("{name} is not float"))),
            }
        }
    }
    Ok(())
}

impl Programs {
    pub fn new(
        cfg: WhisperConfig,
        weights: Arc<WhisperWeights>,
        options: &WhisperOptions,
    ) -> Result<Programs, WhisperError> {
        let context = cfg.max_target_positions;
        let encoder = compile(&graph::encoder(&cfg, &weights)?, options)?;
        let mut decoder = compile(&graph::decoder_step(&cfg, &weights, context)?, options)?;
        share_caches(&mut decoder, cfg.decoder_layers)?;
        Ok(Programs {
            hidden: vec![0.0; cfg.d_model],
            mask: vec![0.0; context],
            cfg,
            weights,
            target: options.target.clone(),
            engine: options.engine,
            engine_options: engine_options(options),
            encoder,
            decoders: vec![decoder],
            context,
        })
    }

    pub fn config(&self) -> &WhisperConfig {
        &self.cfg
    }

    /// The most tokens (prompt included) one window's decoding may hold.
    pub fn context(&self) -> usize {
        self.context
    }

    /// Runs the encoder on one window's `[n_mels, frames]` features, hands its cross-attention
    /// keys and values to the decoder and empties the self-attention caches.
    pub fn encode(&mut self, mel: &[f32]) -> Result<(), WhisperError> {
        let want = self.cfg.n_mels * self.cfg.n_frames();
        if mel.len() != want {
            return Err(WhisperError::Invalid(format!(
                "features hold {} values, the encoder takes [{}, {}]",
                mel.len(),
                self.cfg.n_mels,
                self.cfg.n_frames()
            )));
        }
        self.encoder.set_input(graph::MEL, HostSlice::F32(mel))?;
        self.encoder.execute()?;
        for l in 0..self.cfg.decoder_layers {
            for name in [graph::cross_k(l), graph::cross_v(l)] {
                let values = self.encoder.read_output_f32(&name)?;
                for decoder in &mut self.decoders {
                    decoder.set_input(&name, HostSlice::F32(&values))?;
                }
            }
        }
        for decoder in &mut self.decoders {
            clear_caches(decoder, self.cfg.decoder_layers)?;
        }
        Ok(())
    }

    /// Keeps `n` hypotheses' decoders loaded; new ones get the current window's cross-attention
    /// keys and values (call after [`Programs::encode`]).
    pub fn ensure_hypotheses(&mut self, n: usize) -> Result<(), WhisperError> {
        while self.decoders.len() < n {
            let artifact = self.decoders[0].artifact().clone();
            let main = artifact.functions()[0].name.clone();
            let mut decoder =
                Model::load_function_with(artifact, &main, self.engine, self.engine_options)?;
            share_caches(&mut decoder, self.cfg.decoder_layers)?;
            clear_caches(&mut decoder, self.cfg.decoder_layers)?;
            for l in 0..self.cfg.decoder_layers {
                for name in [graph::cross_k(l), graph::cross_v(l)] {
                    let values = self.encoder.read_output_f32(&name)?;
                    decoder.set_input(&name, HostSlice::F32(&values))?;
                }
            }
            self.decoders.push(decoder);
        }
        Ok(())
    }

    /// Reorders the hypotheses' caches: hypothesis `i` continues from what hypothesis
    /// `sources[i]` held in its first `len` positions.
    pub fn reorder(&mut self, sources: &[usize], len: usize) -> Result<(), WhisperError> {
        if sources.iter().enumerate().all(|(i, &s)| i == s) {
            return Ok(());
        }
        let heads = self.cfg.decoder_heads;
        let hd = self.cfg.d_model / heads;
        let s = self.context;
        let n = len.min(s) * hd;
        let layers = self.cfg.decoder_layers;
        let mut distinct: Vec<usize> = sources.to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        // snapshot every source's prefixes first: a source may itself be overwritten
        let mut saved: Vec<(usize, Vec<Prefix>)> = Vec::new();
        for &src in &distinct {
            let d = &self.decoders[src];
            let mut prefixes = Vec::new();
            for l in 0..layers {
                for name in [graph::k_cache_out(l), graph::v_cache_out(l)] {
                    prefixes.push(match d.output_view(&name)? {
                        BufferRef::F32(b) => Prefix::F32(
                            (0..heads)
                                .flat_map(|h| b[h * s * hd..h * s * hd + n].iter().copied())
                                .collect(),
                        ),
                        BufferRef::F16(b) => Prefix::F16(
                            (0..heads)
                                .flat_map(|h| b[h * s * hd..h * s * hd + n].iter().copied())
                                .collect(),
                        ),
                        _ => return Err(WhisperError::Invalid(format!("{name} is not float"))),
                    });
                }
            }
            saved.push((src, prefixes));
        }
        for (i, &src) in sources.iter().enumerate() {
            if i == src {
                continue;
            }
            let prefixes = &saved
                .iter()
                .find(|(s, _)| *s == src)
                .ok_or_else(|| WhisperError::Invalid("reorder source missing".into()))?
                .1;
            let d = &mut self.decoders[i];
            let mut at = 0;
            for l in 0..layers {
                for name in [graph::k_cache(l), graph::v_cache(l)] {
                    match (d.input_view_mut(&name)?, &prefixes[at]) {
                        (BufferMut::F32(b), Prefix::F32(p)) => {
                            for h in 0..heads {
                                b[h * s * hd..h * s * hd + n]
                                    .copy_from_slice(&p[h * n..(h + 1) * n]);
                            }
                        }
                        (BufferMut::F16(b), Prefix::F16(p)) => {
                            for h in 0..heads {
                                b[h * s * hd..h * s * hd + n]
                                    .copy_from_slice(&p[h * n..(h + 1) * n]);
                            }
                        }
                        _ => return Err(WhisperError::Invalid(format!("{name}: dtypes differ"))),
                    }
                    at += 1;
                }
            }
        }
        Ok(())
    }

    /// Feeds `token` at position `pos` (the tokens before it are in the caches) and returns the
    /// next token's raw logits (`[vocab]`).
    pub fn step(&mut self, token: u32, pos: usize) -> Result<Vec<f32>, WhisperError> {
        self.step_on(0, token, pos)
    }

    /// [`Programs::step`] on hypothesis `which`'s decoder.
    pub fn step_on(
        &mut self,
        which: usize,
        token: u32,
        pos: usize,
    ) -> Result<Vec<f32>, WhisperError> {
        let cfg = &self.cfg;
        if pos >= self.context {
            return Err(WhisperError::Invalid(format!(
                "position {pos} is past the decoder's {} positions",
                self.context
            )));
        }
        let d = cfg.d_model;
        if token as usize >= cfg.vocab_size {
            return Err(WhisperError::Invalid(format!(
                "token {token} is outside the {}-token vocabulary",
                cfg.vocab_size
            )));
        }
        // the embedding table is read from the checkpoint when deferred
        let row = &mut self.hidden;
        match self.weights.token_embeddings.data() {
            HostData::F32(table) => row.copy_from_slice(&table[token as usize * d..][..d]),
            HostData::Deferred(table) => table
                .read(token as usize * d, row)
                .map_err(|e| WhisperError::Invalid(format!("the token embeddings: {e}")))?,
            _ => {
                return Err(WhisperError::Invalid(
                    "the token embeddings are not floats".into(),
                ))
            }
        }
        let positions = self.weights.decoder_positions.as_f32().unwrap_or(&[]);
        let prow = &positions[pos * d..(pos + 1) * d];
        for (h, p) in self.hidden.iter_mut().zip(prow) {
            *h += p;
        }
        let masked = if self.target == Target::Cpu {
            f32::NEG_INFINITY
        } else {
            aneforge::graph::nn::MASKED
        };
        for (j, m) in self.mask.iter_mut().enumerate() {
            *m = if j <= pos { 0.0 } else { masked };
        }
        self.decoders[which].set_input(graph::HIDDEN_IN, HostSlice::F32(&self.hidden))?;
        self.decoders[which].set_input(graph::WRITE_POS, HostSlice::I32(&[0, pos as i32, 0]))?;
        self.decoders[which].set_input(graph::MASK, HostSlice::F32(&self.mask))?;
        self.decoders[which].execute()?;
        let vocab = cfg.vocab_size;
        let logits = if self.decoders[which].tiled_output(graph::LOGITS).is_some() {
            let mut v = self.decoders[which].read_output_f32(graph::LOGITS)?;
            v.truncate(vocab);
            v
        } else {
            match self.decoders[which].output_view(graph::LOGITS)? {
                BufferRef::F32(v) => v[..vocab].to_vec(),
                BufferRef::F16(v) => v[..vocab].iter().map(|x| x.to_f32()).collect(),
                _ => return Err(WhisperError::Invalid("logits are not float".into())),
            }
        };
        let bad = logits.iter().filter(|x| !x.is_finite()).count();
        if bad > 0 {
            return Err(WhisperError::Invalid(format!(
                "{bad} non-finite logits at position {pos} on target {}",
                self.target
            )));
        }
        Ok(logits)
    }
}
