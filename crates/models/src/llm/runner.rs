//! Compiles a model's step programs and runs one sequence through them with resident KV caches.
//!
//! Programs: for each context bucket `S` (powers of two up to the maximum context) a decode
//! program (`T` = 1) and prefill programs for each chunk size `T` (plus verification programs of
//! `K + 1` tokens for speculative decoding); all of one segment are functions of one program and
//! share its weights blob. The function that ran last holds the caches resident (`share_buffer`):
//! moving to another function of the same bucket (prefill → decode) hands the cache buffers over
//! (the CPU engine moves them; engines that cannot copy them), so a bucket keeps one set of
//! caches; moving to a bigger bucket copies the filled rows into its caches. Decode work
//! therefore grows with the context bucket in use, not with the maximum. Sliding-window layers
//! keep rings of a few hundred rows once the bucket is larger ([`CacheLayout`]): their memory and
//! decode work stay bounded by the window.
//!
//! Layers are split into segments when a program's weights would exceed `segment_bytes` (the ANE
//! compiler's practical limit); segments run in order, passing the hidden state.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aneforge::engine::{Accumulation, Activations, ValueStats};
use aneforge::engine::{BufferMut, BufferRef, HostSlice};
use aneforge::{
    compile_functions, Artifact, Engine, FunctionSpec, Model, ParameterMode, ProgramOptions, Target,
};

use super::cache::{moved_rows, CacheLayout, KvStorage, Q8_BLOCK};
use super::config::Positions;
use super::step::{self, EmbedInput, LogitsRows, StepSpec};
use super::{Llm, LlmError};

#[derive(Clone, Debug, PartialEq)]
pub struct RunnerOptions {
    pub target: Target,
    pub engine: Engine,
    /// The largest context (prompt + generated tokens); capped by the model's own limit.
    pub max_context: usize,
    /// The smallest context bucket; buckets double up to `max_context`.
    pub min_context: usize,
    /// Prefill chunk sizes (tokens per program), ascending.
    pub prefill_chunks: Vec<usize>,
    /// Programs that return the logits of every position, for these token counts (speculative
    /// verification uses `K + 1`; scoring uses the prefill chunks).
    pub all_logits_chunks: Vec<usize>,
    /// Split the layers into segments whose weights stay under this many bytes.
    pub segment_bytes: Option<usize>,
    /// Embeddings on the host (always for ANE targets, which cannot gather at run time).
    pub host_embeddings: bool,
    /// CPU engine: the activations of decode and verification steps against block-quantized
    /// weights: f32, or quantized per 32 columns for integer dot products (`Int8` is llama.cpp's
    /// scheme; logits then differ from the exact f32 computation by that rounding). The default
    /// is `Int16`, the coarsest mode whose logits are no further from transformers' than
    /// llama.cpp's on every measure of the real-model comparisons (about 100 times closer; `Int8`
    /// is further on some): it decodes about as fast as `Int8`, and more than twice as fast as
    /// f32 on one core. CPU target only: ANE-target (fp16) programs keep fp16 activations on
    /// either engine.
    pub activations: Activations,
    /// CPU engine: the width of running sums in fp16 (ANE-target) programs.
    pub accumulation: Accumulation,
    /// Numerics audit: step programs also return every layer's hidden states
    /// ([`step::PROBE_PREFIX`] outputs, read by [`Runner::probes`]) and the CPU engine runs each
    /// op unfused, recording what it wrote ([`Runner::inspection`]). Slow.
    pub probes: bool,
    /// How the KV caches store keys and values (CPU target; ANE-target programs keep every value
    /// in fp16, so `F16` changes nothing there and `Q8_0` is refused).
    pub kv_cache: KvStorage,
    /// Mixtures of experts: decode and short verification steps compute only each token's
    /// chosen experts' gate and up projections (`linear_experts`). Off by default: the CPU
    /// engine expands the chosen experts' quantized rows to f32 before multiplying, which at
    /// 8-of-32 or 2-of-8 routing costs more than the dense 8-bit GEMV over every expert
    /// (docs/llm.md). Off, every expert is computed and weighted by the router (the form ANE targets always run: the ANE cannot address
    /// weights by a runtime index).
    pub sparse_experts: bool,
}

impl Default for RunnerOptions {
    fn default() -> Self {
        RunnerOptions {
            target: Target::Cpu,
            engine: Engine::Cpu,
            max_context: 2048,
            min_context: 256,
            prefill_chunks: vec![16, 32, 64, 128],
            all_logits_chunks: Vec::new(),
            segment_bytes: None,
            host_embeddings: false,
            activations: Activations::Int16,
            accumulation: Accumulation::F32,
            probes: false,
            kv_cache: KvStorage::F32,
            sparse_experts: false,
        }
    }
}

/// Time spent in steps, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StepTimings {
    pub prefill_tokens: usize,
    pub prefill: Duration,
    pub decode_tokens: usize,
    pub decode: Duration,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct FnKey {
    tokens: usize,
    context: usize,
    all: bool,
}

impl FnKey {
    fn name(&self) -> String {
        format!(
            "step_t{}_s{}{}",
            self.tokens,
            self.context,
            if self.all { "_all" } else { "" }
        )
    }
}

struct Segment {
    layers: Range<usize>,
    artifact: Arc<Artifact>,
    loaded: HashMap<FnKey, Model>,
    /// The function whose caches hold the sequence.
    owner: Option<FnKey>,
    /// Per context bucket, the function holding its cache buffers (the CPU engine moves them
    /// between a bucket's functions, so the others hold none).
    holders: HashMap<usize, FnKey>,
    /// Use order of `loaded`, most recent last.
    recent: Vec<FnKey>,
}

impl Segment {
    /// Moves the cache buffers (`ports`, with their layers) of `from` to `to`, two functions of
    /// one bucket; `false` when the engine cannot move buffers (each keeps its own).
    fn hand_over(
        &mut self,
        from: FnKey,
        to: FnKey,
        ports: &[(usize, step::CachePort)],
    ) -> Result<bool, LlmError> {
        let mut a = self.loaded.remove(&from).ok_or_else(|| {
            LlmError::Internal(format!("the cache holder {} is not loaded", from.name()))
        })?;
        let result = (|| -> Result<bool, LlmError> {
            let b = self.loaded.get_mut(&to).ok_or_else(|| {
                LlmError::Internal(format!("the cache taker {} is not loaded", to.name()))
            })?;
            for (_, p) in ports {
                if !a.move_state(&p.input, b)? {
                    return Ok(false);
                }
            }
            Ok(true)
        })();
        self.loaded.insert(from, a);
        result
    }
}

/// Loaded functions kept per segment.
const MAX_LOADED: usize = 6;

/// One sequence's state over a model's compiled step programs.
pub struct Runner {
    llm: Arc<Llm>,
    opts: RunnerOptions,
    contexts: Vec<usize>,
    segments: Vec<Segment>,
    functions: Vec<FnKey>,
    /// Tokens whose keys and values are in the caches.
    len: usize,
    history: Vec<u32>,
    inv_freq: Vec<f32>,
    rope_dims: usize,
    /// The sliding-window layers' inverse frequencies ([`LlmConfig::local_attention`]).
    local_inv_freq: Vec<f32>,
    /// The sliding-window layers' window ([`super::LlmConfig::attention_window`]).
    window: Option<usize>,
    /// The most tokens of any step (sets the ring size).
    max_tokens: usize,
    /// One past the last position whose ring row any step since the last reset overwrote.
    ring_written: usize,
    timings: StepTimings,
    hidden: Vec<f32>,
    /// With [`RunnerOptions::probes`]: the probe outputs and op statistics of the last step.
    probes: Vec<(String, Vec<f32>)>,
    inspection: Vec<ValueStats>,
}

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner")
            .field("len", &self.len)
            .field("contexts", &self.contexts)
            .field("segments", &self.segments.len())
            .finish()
    }
}

/// Splits `0..n_layers` so each segment's layer weights stay under `limit` bytes.
fn segment_ranges(layer_bytes: &[usize], limit: Option<usize>) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let Some(limit) = limit else {
        out.push(0..layer_bytes.len());
        return out;
    };
    let (mut start, mut acc) = (0, 0usize);
    for (i, &b) in layer_bytes.iter().enumerate() {
        if i > start && acc + b > limit {
            out.push(start..i);
            start = i;
            acc = 0;
        }
        acc += b;
    }
    out.push(start..layer_bytes.len());
    out
}

impl Runner {
    /// Lowers every step program of `llm` (loading happens lazily, on first use).
    pub fn new(llm: Arc<Llm>, mut opts: RunnerOptions) -> Result<Runner, LlmError> {
        let cfg = &llm.config;
        if opts.target.is_ane() {
            opts.host_embeddings = true;
            // the CPU engine previews what the ANE computes, which takes fp16 activations
            opts.activations = Activations::F32;
            match opts.kv_cache {
                KvStorage::F32 | KvStorage::F16 => opts.kv_cache = KvStorage::F32,
                KvStorage::Q8_0 => {
                    return Err(LlmError::Invalid(format!(
                        "a q8_0 KV cache needs the CPU target: {} programs keep their caches in \
                         fp16",
                        opts.target
                    )))
                }
            }
        }
        if opts.kv_cache == KvStorage::Q8_0 && !cfg.head_dim.is_multiple_of(Q8_BLOCK) {
            return Err(LlmError::Invalid(format!(
                "a q8_0 KV cache needs a head size that is a multiple of {Q8_BLOCK}; this model's \
                 is {}",
                cfg.head_dim
            )));
        }
        let max = opts.max_context.min(cfg.max_positions);
        if max == 0 || opts.min_context == 0 {
            return Err(LlmError::Invalid(
                "the context must hold at least one token".into(),
            ));
        }
        let mut contexts = Vec::new();
        let mut s = opts.min_context.min(max);
        loop {
            contexts.push(s);
            if s >= max {
                break;
            }
            s = (s * 2).min(max);
        }
        opts.max_context = max;
        opts.prefill_chunks.retain(|&t| t > 1 && t <= max);
        opts.prefill_chunks.sort_unstable();
        opts.prefill_chunks.dedup();
        opts.all_logits_chunks.retain(|&t| t >= 1 && t <= max);
        opts.all_logits_chunks.sort_unstable();
        opts.all_logits_chunks.dedup();
        let mut functions = Vec::new();
        for &s in &contexts {
            functions.push(FnKey {
                tokens: 1,
                context: s,
                all: false,
            });
            for &t in &opts.prefill_chunks {
                if t <= s {
                    functions.push(FnKey {
                        tokens: t,
                        context: s,
                        all: false,
                    });
                }
            }
            for &t in &opts.all_logits_chunks {
                if t <= s {
                    functions.push(FnKey {
                        tokens: t,
                        context: s,
                        all: true,
                    });
                }
            }
        }
        let window = cfg.attention_window();
        let max_tokens = functions.iter().map(|f| f.tokens).max().unwrap_or(1);
        let embed = if opts.host_embeddings {
            EmbedInput::Hidden
        } else {
            EmbedInput::TokenIds
        };
        let mut segments = Vec::new();
        for layers in segment_ranges(&llm.weights.layer_bytes, opts.segment_bytes) {
            let mut graphs = Vec::new();
            for f in &functions {
                let spec = StepSpec {
                    tokens: f.tokens,
                    context: f.context,
                    window_rows: CacheLayout::new(window, f.context, max_tokens).rows(),
                    cache: opts.kv_cache,
                    layers: layers.clone(),
                    embed,
                    logits: if f.all {
                        LogitsRows::All
                    } else {
                        LogitsRows::Last
                    },
                    probes: opts.probes,
                    // ANE programs keep the dense form built before tiling, so wide expert
                    // projections are tiled under the family's output-channel cap
                    sparse_expert_rows: if opts.sparse_experts && !opts.target.is_ane() {
                        super::block::SPARSE_EXPERT_ROWS
                    } else {
                        0
                    },
                };
                graphs.push((f.name(), step::build_step(cfg, &llm.weights, &spec)?));
            }
            let named: Vec<Vec<(&str, &aneforge::Tensor)>> = graphs
                .iter()
                .map(|(_, outs)| outs.iter().map(|(n, t)| (n.as_str(), t)).collect())
                .collect();
            let specs: Vec<FunctionSpec<'_>> = graphs
                .iter()
                .zip(&named)
                .map(|((name, _), outputs)| FunctionSpec { name, outputs })
                .collect();
            let artifact = compile_functions(
                &specs,
                &ProgramOptions::new(&opts.target, ParameterMode::Constant),
            )
            .map_err(aneforge::Error::from)?;
            segments.push(Segment {
                layers,
                artifact: Arc::new(artifact),
                loaded: HashMap::new(),
                owner: None,
                holders: HashMap::new(),
                recent: Vec::new(),
            });
        }
        let local_inv_freq = cfg
            .local_attention
            .as_ref()
            .map(|a| a.rope.inv_freq().iter().map(|&f| f as f32).collect())
            .unwrap_or_default();
        let (inv_freq, rope_dims) = match &cfg.positions {
            Positions::Rope(r) => (r.inv_freq().iter().map(|&f| f as f32).collect(), r.dims),
            Positions::Learned { .. } => (Vec::new(), 0),
        };
        Ok(Runner {
            llm,
            opts,
            contexts,
            segments,
            functions,
            len: 0,
            history: Vec::new(),
            inv_freq,
            rope_dims,
            local_inv_freq,
            window,
            max_tokens,
            ring_written: 0,
            timings: StepTimings::default(),
            hidden: Vec::new(),
            probes: Vec::new(),
            inspection: Vec::new(),
        })
    }

    pub fn llm(&self) -> &Arc<Llm> {
        &self.llm
    }

    pub fn options(&self) -> &RunnerOptions {
        &self.opts
    }

    /// Tokens held in the KV caches.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The largest number of tokens a sequence may hold.
    pub fn max_context(&self) -> usize {
        self.opts.max_context
    }

    /// The context buckets (cache sizes of the compiled programs).
    pub fn contexts(&self) -> &[usize] {
        &self.contexts
    }

    /// Number of layer segments (programs per step).
    pub fn segments(&self) -> usize {
        self.segments.len()
    }

    /// The compiled program of segment `i` (all its functions).
    pub fn artifact(&self, segment: usize) -> Option<&Arc<Artifact>> {
        self.segments.get(segment).map(|s| &s.artifact)
    }

    /// With [`RunnerOptions::probes`]: each layer's probe outputs of the last step (for all
    /// `tokens` rows of its program, padding rows included), in layer order.
    pub fn probes(&self) -> &[(String, Vec<f32>)] {
        &self.probes
    }

    /// With [`RunnerOptions::probes`]: what every op of the last step's programs wrote, in order.
    pub fn inspection(&self) -> &[ValueStats] {
        &self.inspection
    }

    pub fn timings(&self) -> StepTimings {
        self.timings
    }

    pub fn reset_timings(&mut self) {
        self.timings = StepTimings::default();
    }

    /// Forgets the sequence (the caches' contents become irrelevant).
    pub fn reset(&mut self) {
        self.len = 0;
        self.history.clear();
        self.ring_written = 0;
    }

    /// Keeps only the first `len` tokens (positions past it are masked and later overwritten)
    /// and returns how many are kept: all of them, or none when the sliding-window layers' rings
    /// no longer hold the window before `len` (cutting back further than the ring's spare rows).
    pub fn truncate(&mut self, len: usize) -> usize {
        let len = self.len.min(len);
        let layout = self.window_layout(self.opts.max_context);
        if len < self.len && !layout.keeps(self.window, len, self.ring_written) {
            self.reset();
            return 0;
        }
        self.len = len;
        self.history.truncate(len);
        len
    }

    /// The step functions loaded (each with its own caches), by program function name, per
    /// segment in use order.
    pub fn loaded_functions(&self) -> Vec<String> {
        let names = self.segments.iter().flat_map(|s| s.recent.iter());
        names.map(FnKey::name).collect()
    }

    /// What each loaded step function holds, by program function name, per segment.
    pub fn memory(&self) -> Vec<(String, aneforge::MemoryReport)> {
        let mut all: Vec<(String, aneforge::MemoryReport)> = Vec::new();
        for seg in &self.segments {
            for (key, model) in &seg.loaded {
                all.push((key.name(), model.memory()));
            }
        }
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// Where the caches of layer `l` keep positions in the functions of context `context`.
    pub fn cache_layout(&self, l: usize, context: usize) -> CacheLayout {
        let window = self.llm.config.window_at(l);
        CacheLayout::new(window, context, self.max_tokens)
    }

    /// The layout of the sliding-window layers' caches in the functions of context `context`.
    fn window_layout(&self, context: usize) -> CacheLayout {
        CacheLayout::new(self.window, context, self.max_tokens)
    }

    /// The tokens in the caches, in order.
    pub fn history(&self) -> &[u32] {
        &self.history
    }

    fn check_tokens(&self, tokens: &[u32]) -> Result<(), LlmError> {
        let vocab = self.llm.config.vocab_size;
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= vocab) {
            return Err(LlmError::TokenOutOfRange {
                id: u64::from(bad),
                vocab,
            });
        }
        let total = self.len + tokens.len();
        if total > self.opts.max_context {
            return Err(LlmError::ContextFull {
                tokens: total,
                context: self.opts.max_context,
                hint: " (raise the context with a larger max_context, up to the model's limit)",
            });
        }
        Ok(())
    }

    /// Appends `tokens` to the sequence and returns the logits of the last one (`[vocab]`).
    pub fn feed(&mut self, tokens: &[u32]) -> Result<Vec<f32>, LlmError> {
        let mut logits = Vec::new();
        self.feed_into(tokens, false, &mut logits)?;
        Ok(logits)
    }

    /// [`Runner::feed`] for (the uncached rest of) a prompt: timed as prefill even when it is a
    /// single token, so a generation's decode count is the tokens it generated.
    pub fn feed_prompt(&mut self, tokens: &[u32]) -> Result<Vec<f32>, LlmError> {
        let before = self.timings;
        let logits = self.feed(tokens)?;
        let decoded = self.timings.decode_tokens - before.decode_tokens;
        if decoded > 0 {
            let spent = self.timings.decode - before.decode;
            self.timings.decode = before.decode;
            self.timings.decode_tokens = before.decode_tokens;
            self.timings.prefill += spent;
            self.timings.prefill_tokens += decoded;
        }
        Ok(logits)
    }

    /// Appends `tokens` and returns the logits of every one (`[tokens.len(), vocab]` row-major).
    pub fn feed_all(&mut self, tokens: &[u32]) -> Result<Vec<f32>, LlmError> {
        if self.opts.all_logits_chunks.is_empty() {
            return Err(LlmError::Invalid(
                "this runner was built without all-position logits (RunnerOptions::all_logits_chunks)".into(),
            ));
        }
        let mut logits = Vec::new();
        self.feed_into(tokens, true, &mut logits)?;
        Ok(logits)
    }

    fn feed_into(
        &mut self,
        tokens: &[u32],
        all: bool,
        logits: &mut Vec<f32>,
    ) -> Result<(), LlmError> {
        if tokens.is_empty() {
            return Err(LlmError::EmptyPrompt);
        }
        self.check_tokens(tokens)?;
        let started = Instant::now();
        logits.clear();
        let mut done = 0;
        while done < tokens.len() {
            let rest = tokens.len() - done;
            let key = self.pick(rest, all)?;
            // a step's real tokens never cross a ring's end
            let ring = self.window_layout(key.context);
            let n = rest.min(key.tokens).min(ring.room(self.len));
            self.step(key, &tokens[done..done + n], all, logits)?;
            done += n;
        }
        let spent = started.elapsed();
        if tokens.len() == 1 && !all {
            self.timings.decode_tokens += 1;
            self.timings.decode += spent;
        } else {
            self.timings.prefill_tokens += tokens.len();
            self.timings.prefill += spent;
        }
        Ok(())
    }

    /// The function for the next chunk of (up to) `rest` tokens at the current position.
    fn pick(&self, rest: usize, all: bool) -> Result<FnKey, LlmError> {
        let pos = self.len;
        // a sequence stays in its bucket or grows until it starts over: moving down would copy
        // its caches into a bucket whose functions were dropped
        let bucket = match pos {
            0 => 0,
            _ => self.segments[0].owner.map_or(0, |o| o.context),
        };
        let fits = |k: &FnKey| pos + k.tokens <= k.context && k.context >= bucket;
        let candidates = self.functions.iter().filter(|k| k.all == all && fits(k));
        // the fewest padded tokens, then the smallest context
        let best = candidates.min_by_key(|k| {
            let chunk = rest.min(k.tokens);
            let steps = rest.div_ceil(k.tokens);
            let waste = k.tokens - chunk;
            (
                if k.tokens >= rest { 0 } else { steps },
                waste,
                k.context,
                usize::MAX - k.tokens,
            )
        });
        match best {
            Some(k) if all || rest == 1 || k.tokens > 1 => Ok(*k),
            Some(_) | None => self
                .functions
                .iter()
                .filter(|k| k.all == all && fits(k))
                .min_by_key(|k| (k.context, k.tokens))
                .copied()
                .ok_or_else(|| {
                    LlmError::Internal(format!(
                        "no step program for {rest} tokens at position {pos} (all logits: {all})"
                    ))
                }),
        }
    }

    fn ensure_loaded(&mut self, seg: usize, key: FnKey) -> Result<(), LlmError> {
        let segment = &mut self.segments[seg];
        if !segment.loaded.contains_key(&key) {
            if segment.loaded.len() >= MAX_LOADED {
                if let Some(pos) = segment
                    .recent
                    .iter()
                    .position(|k| Some(*k) != segment.owner)
                {
                    let old = segment.recent.remove(pos);
                    // a bucket's holder is its most recently used function (every use makes it
                    // the owner), so it leaves after the bucket's other functions
                    if segment.holders.get(&old.context) == Some(&old) {
                        segment.holders.remove(&old.context);
                    }
                    segment.loaded.remove(&old);
                }
            }
            let mut model = Model::load_function_with(
                segment.artifact.clone(),
                &key.name(),
                self.opts.engine,
                aneforge::engine::EngineOptions {
                    activations: self.opts.activations,
                    accumulation: self.opts.accumulation,
                    inspect: self.opts.probes,
                    ..Default::default()
                },
            )?;
            let hd = self.llm.config.head_dim;
            for (_, p) in step::layers_cache_ports(segment.layers.clone(), hd, self.opts.kv_cache) {
                model.share_buffer(&p.output, &p.input)?;
            }
            segment.loaded.insert(key, model);
        }
        segment.recent.retain(|k| *k != key);
        segment.recent.push(key);
        Ok(())
    }

    /// Makes `key` the function holding the sequence: it takes its bucket's cache buffers from
    /// the function of that bucket holding them, and the filled rows are copied in from the
    /// previous owner when that was of another bucket (or the engine cannot move buffers).
    fn migrate(&mut self, seg: usize, key: FnKey) -> Result<(), LlmError> {
        let cfg = &self.llm.config;
        let (kv, hd) = (cfg.n_kv_heads, cfg.head_dim);
        let len = self.len;
        let max_tokens = self.max_tokens;
        let storage = self.opts.kv_cache;
        let segment = &mut self.segments[seg];
        let ports = step::layers_cache_ports(segment.layers.clone(), hd, storage);
        let moved = match segment.holders.get(&key.context).copied() {
            Some(h) if h != key && segment.loaded.contains_key(&h) => {
                segment.hand_over(h, key, &ports)?
            }
            _ => false,
        };
        segment.holders.insert(key.context, key);
        let Some(owner) = segment.owner.filter(|o| *o != key) else {
            segment.owner = Some(key);
            return Ok(());
        };
        if len > 0 && (owner.context != key.context || !moved) {
            let mut from = segment.loaded.remove(&owner).ok_or_else(|| {
                LlmError::Internal(format!("the cache owner {} is not loaded", owner.name()))
            })?;
            // a smaller bucket's functions leave below, so each of its caches is freed once
            // copied: the peak holds one layer of both layouts, not every layer
            let leaving = owner.context < key.context;
            let result = (|| -> Result<(), LlmError> {
                let to = segment
                    .loaded
                    .get_mut(&key)
                    .ok_or_else(|| LlmError::Internal("migration target not loaded".into()))?;
                for (l, p) in &ports {
                    let layouts = [owner.context, key.context]
                        .map(|s| CacheLayout::new(cfg.window_at(*l), s, max_tokens));
                    move_cache(&from, &p.output, to, &p.input, layouts, kv, len, p.width)?;
                    if leaving {
                        from.release_state(&p.input)?;
                    }
                }
                Ok(())
            })();
            segment.loaded.insert(owner, from);
            result?;
        }
        segment.owner = Some(key);
        // functions of smaller buckets serve this sequence no more (it only grows), nor those of
        // other buckets once it starts over: their caches would stay allocated beside the new
        // bucket's
        let keep = |c: usize| c == key.context || (len > 0 && c > key.context);
        segment.loaded.retain(|k, _| keep(k.context));
        segment.recent.retain(|k| keep(k.context));
        segment.holders.retain(|&c, _| keep(c));
        Ok(())
    }

    /// One program call per segment for `tokens` (at most `key.tokens`) at the current position.
    fn step(
        &mut self,
        key: FnKey,
        tokens: &[u32],
        all: bool,
        logits: &mut Vec<f32>,
    ) -> Result<(), LlmError> {
        let cfg = self.llm.config.clone();
        let (t, s) = (key.tokens, key.context);
        let n = tokens.len();
        let pos = self.len;
        let d = cfg.hidden_size;
        if self.opts.host_embeddings {
            self.host_embed(tokens, t, pos)?;
        }
        let nseg = self.segments.len();
        let ring = self.window_layout(s);
        for seg in 0..nseg {
            self.ensure_loaded(seg, key)?;
            self.migrate(seg, key)?;
            let first = seg == 0;
            let last = seg + 1 == nseg;
            let inv_freq = &self.inv_freq;
            let rope_dims = self.rope_dims;
            let window = self.window;
            let host_embeddings = self.opts.host_embeddings;
            let cpu_target = self.opts.target == Target::Cpu;
            let hidden = &mut self.hidden;
            let model = self.segments[seg]
                .loaded
                .get_mut(&key)
                .ok_or_else(|| LlmError::Internal("step function not loaded".into()))?;
            if first && !host_embeddings {
                let mut ids: Vec<i32> = tokens.iter().map(|&x| x as i32).collect();
                ids.resize(t, 0);
                model.set_input(step::INPUT_IDS, HostSlice::I32(&ids))?;
                if matches!(cfg.positions, Positions::Learned { .. }) {
                    let max = match cfg.positions {
                        Positions::Learned { max } => max,
                        _ => 0,
                    };
                    let p: Vec<i32> = (0..t).map(|i| (pos + i).min(max - 1) as i32).collect();
                    model.set_input(step::POSITIONS, HostSlice::I32(&p))?;
                }
            } else {
                model.set_input(step::HIDDEN_IN, HostSlice::F32(hidden))?;
            }
            let ports = [step::ROPE_COS, step::ROPE_SIN];
            if rope_dims > 0 {
                write_rope(model, ports, inv_freq, rope_dims, cfg.head_dim, pos, t)?;
            }
            let inputs = model.input_names();
            let (has_whole, has_window) = (
                inputs.contains(&step::MASK),
                inputs.contains(&step::MASK_WINDOW),
            );
            let has_local_rope = inputs.contains(&step::ROPE_COS_LOCAL);
            let whole = CacheLayout::Linear { context: s };
            for (has, layout, write, mask, window) in [
                (has_whole, whole, step::WRITE_POS, step::MASK, None),
                (
                    has_window,
                    ring,
                    step::WRITE_POS_WINDOW,
                    step::MASK_WINDOW,
                    window,
                ),
            ] {
                if has {
                    let row = layout.row(pos) as i32;
                    model.set_input(write, HostSlice::I32(&[0, row, 0]))?;
                    write_mask(model, mask, layout, pos, n, t, window, cpu_target)?;
                }
            }
            if let (Some(local), true) = (&cfg.local_attention, has_local_rope) {
                let ports = [step::ROPE_COS_LOCAL, step::ROPE_SIN_LOCAL];
                let (freq, dims) = (&self.local_inv_freq, local.rope.dims);
                write_rope(model, ports, freq, dims, cfg.head_dim, pos, t)?;
            }
            if last && !all && t > 1 {
                model.set_input(step::LAST_INDEX, HostSlice::I32(&[(n - 1) as i32]))?;
            }
            if self.opts.probes {
                if first {
                    self.probes.clear();
                    self.inspection.clear();
                }
                self.inspection.extend(model.execute_inspected()?);
                for port in model.outputs() {
                    if port.name.starts_with(step::PROBE_PREFIX) {
                        let v = model.read_output_f32(&port.name)?;
                        self.probes.push((port.name.clone(), v));
                    }
                }
            } else {
                model.execute()?;
            }
            if last {
                let vocab = cfg.vocab_size;
                if !all {
                    logits.clear();
                }
                let rows = if all { n } else { 1 };
                if model.tiled_output(step::LOGITS).is_some() {
                    // a vocabulary head over an ANE family's width cap comes in tiles
                    let v = model.read_output_f32(step::LOGITS)?;
                    logits.extend_from_slice(&v[..rows * vocab]);
                } else {
                    match model.output_view(step::LOGITS)? {
                        BufferRef::F32(v) => logits.extend_from_slice(&v[..rows * vocab]),
                        BufferRef::F16(v) => {
                            logits.extend(v[..rows * vocab].iter().map(|x| x.to_f32()))
                        }
                        _ => return Err(LlmError::Internal("logits are not float".into())),
                    }
                }
                let bad = logits.iter().filter(|x| !x.is_finite()).count();
                if bad > 0 {
                    return Err(LlmError::NonFinite {
                        target: self.opts.target.to_string(),
                        bad,
                        tokens: pos + n,
                    });
                }
            } else {
                hidden.clear();
                match model.output_view(step::HIDDEN_OUT)? {
                    BufferRef::F32(v) => hidden.extend_from_slice(&v[..t * d]),
                    BufferRef::F16(v) => hidden.extend(v[..t * d].iter().map(|x| x.to_f32())),
                    _ => return Err(LlmError::Internal("hidden state is not float".into())),
                }
            }
        }
        self.ring_written = self.ring_written.max(ring.reach(pos, t));
        self.len += n;
        self.history.extend_from_slice(tokens);
        Ok(())
    }

    /// Embeddings (and learned positions, scale) of `tokens`, padded to `t` rows, into `hidden`.
    fn host_embed(&mut self, tokens: &[u32], t: usize, pos: usize) -> Result<(), LlmError> {
        let cfg = &self.llm.config;
        let d = cfg.hidden_size;
        self.hidden.clear();
        self.hidden.resize(t * d, 0.0);
        let w = &self.llm.weights;
        for (i, &tok) in tokens.iter().enumerate() {
            let row = &mut self.hidden[i * d..(i + 1) * d];
            w.embed.row_f32(tok as usize, row)?;
            // the step graph carries the residual stream at `residual_scale`
            let scale = cfg.embed_scale.unwrap_or(1.0) * cfg.residual_scale();
            if scale != 1.0 {
                row.iter_mut().for_each(|v| *v *= scale);
            }
            if let Some(p) = &w.pos_embed {
                let max = p.shape()[0];
                let at = (pos + i).min(max - 1);
                let table = p.as_f32().unwrap_or(&[]);
                for (v, e) in row.iter_mut().zip(&table[at * d..(at + 1) * d]) {
                    *v += e * cfg.residual_scale();
                }
            }
        }
        Ok(())
    }
}

/// Copies the positions `from`'s cache `out` holds of a sequence of `len` into `to`'s cache
/// `inp`, each to its row in the new layout (`[from, to]` layouts).
#[allow(clippy::too_many_arguments)]
fn move_cache(
    from: &Model,
    out: &str,
    to: &mut Model,
    inp: &str,
    layouts: [CacheLayout; 2],
    kv: usize,
    len: usize,
    hd: usize,
) -> Result<(), LlmError> {
    fn copy<T: Copy>(
        a: &[T],
        b: &mut [T],
        layouts: [CacheLayout; 2],
        kv: usize,
        len: usize,
        hd: usize,
    ) {
        let [rows_a, rows_b] = layouts.map(|l| l.rows() * hd);
        for (ra, rb, k) in moved_rows(layouts[0], layouts[1], len) {
            for h in 0..kv {
                let (a0, b0) = (h * rows_a + ra * hd, h * rows_b + rb * hd);
                b[b0..b0 + k * hd].copy_from_slice(&a[a0..a0 + k * hd]);
            }
        }
    }
    match (from.output_view(out)?, to.input_view_mut(inp)?) {
        (BufferRef::F32(a), BufferMut::F32(b)) => copy(a, b, layouts, kv, len, hd),
        (BufferRef::F16(a), BufferMut::F16(b)) => copy(a, b, layouts, kv, len, hd),
        (BufferRef::I8(a), BufferMut::I8(b)) => copy(a, b, layouts, kv, len, hd),
        _ => {
            return Err(LlmError::Internal(format!(
                "cache {out} and {inp} differ in dtype"
            )))
        }
    }
    Ok(())
}

/// The rotary tables ([`super::block::rope_rows`]) of positions `pos..pos + t`.
fn write_rope(
    model: &mut Model,
    [cos_port, sin_port]: [&str; 2],
    inv_freq: &[f32],
    dims: usize,
    hd: usize,
    pos: usize,
    t: usize,
) -> Result<(), LlmError> {
    let fill = |buf: &mut [f32], cos: bool| {
        super::block::rope_rows(inv_freq, dims, hd, pos..pos + t, cos, buf)
    };
    for (name, cos) in [(cos_port, true), (sin_port, false)] {
        match model.input_view_mut(name)? {
            BufferMut::F32(b) => fill(b, cos),
            BufferMut::F16(b) => {
                let mut tmp = vec![0.0f32; b.len()];
                fill(&mut tmp, cos);
                for (d, s) in b.iter_mut().zip(&tmp) {
                    *d = half::f16::from_f32(*s);
                }
            }
            _ => return Err(LlmError::Internal(format!("{name} is not float"))),
        }
    }
    Ok(())
}

/// The additive mask of a step of `n` real tokens (of `t` rows) at `pos` over a cache of
/// `layout` ([`CacheLayout::fill_mask`]). Hidden keys get −∞ on the CPU target (the CPU engine's
/// attention then skips the cache rows no query sees; softmax weights are exactly zero either
/// way) and the finite fp16-safe `MASKED` on ANE targets.
#[allow(clippy::too_many_arguments)]
fn write_mask(
    model: &mut Model,
    port: &str,
    layout: CacheLayout,
    pos: usize,
    n: usize,
    t: usize,
    window: Option<usize>,
    cpu_target: bool,
) -> Result<(), LlmError> {
    let masked = if cpu_target {
        f32::NEG_INFINITY
    } else {
        aneforge::graph::nn::MASKED
    };
    match model.input_view_mut(port)? {
        BufferMut::F32(b) => layout.fill_mask(pos, n, t, window, masked, b),
        BufferMut::F16(b) => {
            let mut m = vec![0.0f32; b.len()];
            layout.fill_mask(pos, n, t, window, masked, &mut m);
            for (d, s) in b.iter_mut().zip(&m) {
                *d = half::f16::from_f32(*s);
            }
        }
        _ => return Err(LlmError::Internal("mask is not float".into())),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_respect_the_ceiling() {
        assert_eq!(segment_ranges(&[10, 10, 10], None), vec![0..3]);
        assert_eq!(segment_ranges(&[10, 10, 10], Some(20)), vec![0..2, 2..3]);
        assert_eq!(
            segment_ranges(&[10, 10, 10], Some(5)),
            vec![0..1, 1..2, 2..3]
        );
        assert_eq!(segment_ranges(&[10, 10, 10], Some(30)), vec![0..3]);
    }
}
