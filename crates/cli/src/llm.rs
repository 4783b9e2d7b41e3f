//! `aneforge generate`, `aneforge chat` and `aneforge bench llm`: decoder LLMs from a model id, a
//! directory or a `.gguf` file.

use std::io::{BufRead, IsTerminal, Write};
use std::sync::Arc;
use std::time::Instant;

use aneforge::engine::Activations;
use aneforge_models::llm::sampling::argmax;
use aneforge_models::llm::{
    generate, speculative_generate, ChatMessage, FinishReason, GenerateOptions, Generation,
    KvStorage, Llm, LoadOptions, Runner, RunnerOptions, SamplingOptions, WeightFormat,
};
use anyhow::{bail, Context};

use crate::model_hints::{self, Wants};

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActivationsArg {
    F32,
    Int16,
    Int8,
}

impl ActivationsArg {
    pub fn mode(self) -> Activations {
        match self {
            ActivationsArg::F32 => Activations::F32,
            ActivationsArg::Int16 => Activations::Int16,
            ActivationsArg::Int8 => Activations::Int8,
        }
    }
}

#[derive(clap::Args, Clone)]
pub struct ModelArgs {
    /// Model: an id (ORG/NAME, from the Hugging Face cache), a model directory or a .gguf file.
    #[arg(short = 'm', long = "model")]
    pub model: String,
    #[command(flatten)]
    pub engine: crate::engine_args::EngineArgs,
    /// Weight compression: none (the weights as stored: GGUF Q4_0/Q4_1/Q5_0/Q5_1/Q8_0, K-quant
    /// and IQ4 blocks kept, others f32), dense (every weight expanded to f32), int8 or int4 (every matrix quantized in blocks
    /// of 32).
    #[arg(long, default_value = "none")]
    pub compress: String,
    /// Activations of decode steps against block-quantized weights: f32 is the exact mode;
    /// int16 and int8 quantize each row per 32 values for integer dot products on AVX-512 VNNI
    /// CPUs (f32 elsewhere), about 3x faster decode on one core (SmolLM2 Q4_1, Intel Xeon). int16 rounds to 2^-15 of
    /// each 32 values' largest (logits within about 1e-3 of f32's); int8 is llama.cpp's scheme,
    /// logits a few percent off transformers' as llama.cpp's are, so greedy picks can differ at
    /// near ties. [default: int16]
    #[arg(long, value_enum)]
    pub activations: Option<ActivationsArg>,
    /// KV cache storage: f32 (exact), f16 (half the memory; llama.cpp's default) or q8_0
    /// (llama.cpp's int8 blocks of 32 values with an fp16 scale, 8.5 bits a value; head sizes
    /// that are multiples of 32). CPU target: ANE-target programs keep their caches in fp16.
    #[arg(long = "cache-type", visible_alias = "kv-cache", default_value = "f32", value_parser = ["f32", "f16", "q8_0"])]
    pub cache_type: String,
    /// Mixtures of experts in decode steps: dense (every expert, weighted by the router) or
    /// sparse (only each token's chosen experts' gate/up rows, expanded to f32 first).
    #[arg(long, default_value = "dense", value_parser = ["sparse", "dense"])]
    pub experts: String,
    /// Largest context in tokens (prompt and generated), up to the model's own limit [default:
    /// 2048; bench llm: its prompt and decoded tokens].
    #[arg(short = 'c', long = "ctx", visible_alias = "ctx-size")]
    pub ctx: Option<usize>,
    /// A LoRA adapter directory in PEFT's layout (adapter_config.json,
    /// adapter_model.safetensors), merged into the weights (which are then f32).
    #[arg(long)]
    pub lora: Option<std::path::PathBuf>,
}

/// The largest context of `generate` and `chat` without `--ctx`.
const DEFAULT_CONTEXT: usize = 2048;

#[derive(clap::Args, Clone)]
pub struct SamplingArgs {
    /// Sampling temperature; 0 picks the most likely token (greedy).
    #[arg(long, visible_alias = "temp", default_value_t = 0.8)]
    pub temperature: f32,
    /// Keep the k most likely tokens (0: off).
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    /// Nucleus sampling: the smallest set of tokens reaching this probability (1: off).
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    /// Drop tokens less likely than this fraction of the most likely one (0: off).
    #[arg(long, default_value_t = 0.05)]
    pub min_p: f32,
    /// Penalty on tokens already in the sequence (1: off).
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// Random seed (default: from the clock; printed with the statistics).
    #[arg(short = 's', long)]
    pub seed: Option<u64>,
}

impl SamplingArgs {
    fn options(&self) -> SamplingOptions {
        let seed = self.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
        });
        SamplingOptions {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repetition_penalty: self.repeat_penalty,
            seed,
        }
    }
}

#[derive(clap::Args)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The prompt (`-`: read it from stdin; without a prompt or --file, stdin is read).
    #[arg(value_name = "PROMPT", conflicts_with_all = ["prompt_flag", "file"])]
    pub prompt: Option<String>,
    /// The prompt, as a flag.
    #[arg(
        short = 'p',
        long = "prompt",
        value_name = "TEXT",
        conflicts_with = "file"
    )]
    pub prompt_flag: Option<String>,
    /// Read the prompt from this file (`-`: stdin).
    #[arg(short = 'f', long = "file", value_name = "PATH")]
    pub file: Option<std::path::PathBuf>,
    /// Most tokens to generate.
    #[arg(short = 'n', long = "max-tokens", default_value_t = 256)]
    pub max_tokens: usize,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Wrap the prompt in the model's chat template (as one user message).
    #[arg(long)]
    pub chat: bool,
    /// A system message (with --chat).
    #[arg(long)]
    pub system: Option<String>,
    /// Stop when the output contains this text (repeatable).
    #[arg(long)]
    pub stop: Vec<String>,
    /// Keep generating past end-of-sequence tokens.
    #[arg(long)]
    pub ignore_eos: bool,
    /// A second, smaller model (id, directory or .gguf) that drafts tokens for exact speculative
    /// decoding (greedy only).
    #[arg(long = "draft-model", alias = "draft", value_name = "MODEL")]
    pub draft_model: Option<String>,
    /// Tokens the draft model proposes per target call.
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub draft_k: usize,
}

#[derive(clap::Args)]
pub struct ChatArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// A system message.
    #[arg(long)]
    pub system: Option<String>,
    /// Most tokens per answer.
    #[arg(short = 'n', long = "max-tokens", default_value_t = 512)]
    pub max_tokens: usize,
}

#[derive(clap::Args)]
pub struct BenchLlmArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Prompt length in tokens, fed in steps of at most 128 (as `generate` feeds a prompt).
    #[arg(long, default_value_t = 128)]
    pub prompt_tokens: usize,
    /// Tokens decoded after the prompt (greedy, end-of-sequence ignored).
    #[arg(long, default_value_t = 128)]
    pub decode_tokens: usize,
    /// Timed runs; the best is reported.
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// A text file the prompt's tokens are taken from (default: a built-in passage).
    #[arg(short = 'f', long = "file", alias = "prompt-file", value_name = "PATH")]
    pub prompt_file: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub format: crate::output::FormatArgs,
}

pub(crate) struct Loaded {
    pub(crate) llm: Arc<Llm>,
    pub(crate) opts: RunnerOptions,
    load_seconds: f64,
}

pub(crate) fn load(
    args: &ModelArgs,
    all_logits: Vec<usize>,
    prefill: Option<Vec<usize>>,
) -> anyhow::Result<Loaded> {
    let started = Instant::now();
    let (engine, target) = args.engine.select()?;
    let format = match (&args.lora, weight_format(&args.compress)?) {
        (None, f) => f,
        (Some(_), WeightFormat::Stored | WeightFormat::Dense) => WeightFormat::Dense,
        (Some(_), _) => {
            bail!("--lora merges into f32 weights; it cannot be combined with --compress int8/int4")
        }
    };
    let mut llm = Llm::load(&args.model, LoadOptions::new(format))
        .with_context(|| format!("loading {}", args.model))
        .map_err(|e| model_hints::explain(e, &args.model, Wants::Decoder))?;
    if let Some(dir) = &args.lora {
        let adapter = aneforge_models::llm::lora::load_adapter(dir)?;
        llm.weights = aneforge_models::llm::lora::merge(&llm.config, &llm.weights, &adapter)
            .with_context(|| format!("merging the LoRA adapter {}", dir.display()))?;
    }
    let activations = match (args.activations.map(ActivationsArg::mode), target.is_ane()) {
        (Some(a), true) if a != Activations::F32 => bail!(
            "--activations {} applies to the CPU target; ANE targets ({target}) compute with fp16 activations",
            a.name()
        ),
        (_, true) => Activations::F32,
        (a, false) => a.unwrap_or(RunnerOptions::default().activations),
    };
    let mut opts = RunnerOptions {
        target: target.clone(),
        engine,
        max_context: args.ctx.unwrap_or(DEFAULT_CONTEXT),
        all_logits_chunks: all_logits,
        activations,
        kv_cache: KvStorage::parse(&args.cache_type)
            .with_context(|| format!("unknown --cache-type {}", args.cache_type))?,
        sparse_experts: args.experts == "sparse",
        ..RunnerOptions::default()
    };
    if let Some(p) = prefill {
        opts.prefill_chunks = p;
    }
    if target.is_ane() {
        opts.segment_bytes = Some(aneforge::pipeline::WEIGHT_CEILING as usize);
    }
    Ok(Loaded {
        llm: Arc::new(llm),
        opts,
        load_seconds: started.elapsed().as_secs_f64(),
    })
}

/// `--compress` as the LLM loader takes it (`stored` is the old spelling of none).
pub fn weight_format(compress: &str) -> anyhow::Result<WeightFormat> {
    Ok(match compress {
        "none" | "stored" => WeightFormat::Stored,
        "dense" => WeightFormat::Dense,
        "int8" => WeightFormat::Int8,
        "int4" => WeightFormat::Int4,
        other => bail!(
            "--compress {other}: expected none (the weights as stored), dense (all f32), int8 or \
             int4 for an LLM"
        ),
    })
}

fn runner(loaded: &Loaded) -> anyhow::Result<Runner> {
    Runner::new(loaded.llm.clone(), loaded.opts.clone())
        .context("compiling the model's step programs")
}

fn report(g: &Generation, seed: u64, greedy: bool) {
    let finish = match &g.finish {
        FinishReason::Length => "token limit".to_string(),
        FinishReason::Eos(id) => format!("end of sequence ({id})"),
        FinishReason::Stop(s) => format!("stop string {s:?}"),
        FinishReason::ContextFull => "context full".into(),
        FinishReason::Cancelled => "cancelled".into(),
    };
    let sampling = if greedy {
        "greedy".to_string()
    } else {
        format!("seed {seed}")
    };
    eprintln!(
        "\nprefill: {} tokens, {:.1} tok/s | decode: {} tokens, {:.1} tok/s | first token after {:.0} ms | {finish} | {sampling}",
        g.prefill_tokens,
        g.prefill_tokens_per_second(),
        g.timings.decode_tokens,
        g.decode_tokens_per_second(),
        g.seconds_to_first_token * 1e3,
    );
}

fn stream_to_stdout() -> impl FnMut(&str) -> bool {
    |text: &str| {
        let mut out = std::io::stdout().lock();
        out.write_all(text.as_bytes()).is_ok() && out.flush().is_ok()
    }
}

pub fn generate_cmd(args: GenerateArgs) -> anyhow::Result<()> {
    let text = crate::input::prompt(
        args.prompt.as_deref().or(args.prompt_flag.as_deref()),
        args.file.as_deref(),
    )?;
    let all = if args.draft_model.is_some() {
        vec![args.draft_k + 1]
    } else {
        Vec::new()
    };
    let loaded = load(&args.model, all, None)?;
    let llm = loaded.llm.clone();
    let prompt = if args.chat {
        let template = llm.chat()?;
        let mut messages = Vec::new();
        if let Some(s) = &args.system {
            messages.push(ChatMessage::new("system", s));
        }
        messages.push(ChatMessage::new("user", &text));
        llm.encode_raw(&template.render(&messages, true)?)?
    } else {
        if args.system.is_some() {
            bail!("--system needs --chat");
        }
        llm.encode(&text)?
    };
    let mut r = runner(&loaded)?;
    eprintln!(
        "{}: {} ({} layers, {}), loaded and compiled in {:.2} s",
        args.model.model,
        llm.config.family.name(),
        llm.config.n_layers,
        loaded.opts.target,
        loaded.load_seconds
    );
    let sampling = args.sampling.options();
    let opts = GenerateOptions {
        max_new_tokens: args.max_tokens,
        sampling: sampling.clone(),
        stop: args.stop.clone(),
        stop_at_eos: !args.ignore_eos,
    };
    let mut out = stream_to_stdout();
    let g = match &args.draft_model {
        None => generate(&mut r, &prompt, &opts, &mut out)?,
        Some(draft) => {
            let draft_args = ModelArgs {
                model: draft.clone(),
                lora: None,
                ..args.model.clone()
            };
            let draft_loaded = load(&draft_args, Vec::new(), None)?;
            let mut d = runner(&draft_loaded)?;
            let started = Instant::now();
            let (g, stats) =
                speculative_generate(&mut r, &mut d, &prompt, args.draft_k, &opts, &mut out)?;
            let after_prompt = started.elapsed().as_secs_f64() - g.seconds_to_first_token;
            eprintln!(
                "\nspeculative: {} target calls, {} of {} drafted tokens accepted ({:.0}%); {} tokens in {:.2} s after the prompt ({:.1} tok/s)",
                stats.target_calls,
                stats.accepted,
                stats.drafted,
                100.0 * stats.acceptance(),
                g.tokens.len(),
                after_prompt,
                if after_prompt > 0.0 { g.tokens.len() as f64 / after_prompt } else { 0.0 }
            );
            g
        }
    };
    println!();
    report(&g, sampling.seed, sampling.is_greedy());
    Ok(())
}

pub fn chat_cmd(args: ChatArgs) -> anyhow::Result<()> {
    let loaded = load(&args.model, Vec::new(), None)?;
    let llm = loaded.llm.clone();
    let template = llm.chat()?;
    let mut r = runner(&loaded)?;
    crate::interrupt::install()?;
    let interactive = std::io::stdin().is_terminal();
    if interactive {
        eprintln!(
            "{} ready ({:.1} s). /help lists the commands; Ctrl-C stops a reply, Ctrl-D quits.",
            args.model.model, loaded.load_seconds
        );
    }
    let mut messages: Vec<ChatMessage> = Vec::new();
    if let Some(s) = &args.system {
        messages.push(ChatMessage::new("system", s));
    }
    let base = messages.len();
    let mut sampling = args.sampling.options();
    let stdin = std::io::stdin();
    let mut line = String::new();
    loop {
        if interactive {
            eprint!("> ");
        }
        line.clear();
        if stdin.lock().read_line(&mut line)? == 0 {
            break;
        }
        let text = line.trim_end_matches(['\n', '\r']);
        match ChatCommand::parse(text) {
            Some(ChatCommand::Empty) => continue,
            Some(ChatCommand::Bye) => break,
            Some(ChatCommand::Clear) => {
                messages.truncate(base);
                r.reset();
                continue;
            }
            Some(ChatCommand::Help) => {
                eprintln!("{CHAT_HELP}");
                continue;
            }
            Some(ChatCommand::Unknown(name)) => {
                eprintln!("unknown command /{name}; /help lists the commands");
                continue;
            }
            None => {}
        }
        messages.push(ChatMessage::new("user", text));
        let prompt = llm.encode_raw(&template.render(&messages, true)?)?;
        if prompt.len() + 1 > r.max_context() {
            messages.pop();
            eprintln!(
                "the conversation no longer fits the context of {} tokens; /reset to start over",
                r.max_context()
            );
            continue;
        }
        let opts = GenerateOptions {
            max_new_tokens: args.max_tokens.min(r.max_context() - prompt.len()),
            sampling: sampling.clone(),
            stop: Vec::new(),
            stop_at_eos: true,
        };
        let reply = crate::interrupt::Reply::begin();
        let mut stream = stream_to_stdout();
        let g = generate(&mut r, &prompt, &opts, &mut |text: &str| {
            !reply.stopped() && stream(text)
        })?;
        drop(reply);
        println!();
        if g.finish == FinishReason::Cancelled {
            eprintln!("(reply stopped)");
        }
        if interactive {
            report(&g, sampling.seed, sampling.is_greedy());
        }
        messages.push(ChatMessage::new("assistant", &g.text));
        sampling.seed = sampling.seed.wrapping_add(1);
    }
    Ok(())
}

const CHAT_HELP: &str = "/help           this list
/clear, /reset  forget the conversation (the system message stays)
/bye, /exit     quit (so do Ctrl-D and Ctrl-C at the prompt)
Ctrl-C during a reply stops the reply; any other line is a message.";

/// A line of `chat` input that is not a message.
#[derive(Debug, PartialEq, Eq)]
enum ChatCommand {
    Empty,
    Help,
    Clear,
    Bye,
    Unknown(String),
}

impl ChatCommand {
    /// A blank line, or one word of letters after a `/` (so a message such as "/usr/bin is…"
    /// stays a message).
    fn parse(line: &str) -> Option<ChatCommand> {
        let line = line.trim();
        if line.is_empty() {
            return Some(ChatCommand::Empty);
        }
        let name = line.strip_prefix('/')?;
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphabetic()) {
            return None;
        }
        Some(match name {
            "help" => ChatCommand::Help,
            "clear" | "reset" => ChatCommand::Clear,
            "bye" | "exit" | "quit" => ChatCommand::Bye,
            other => ChatCommand::Unknown(other.to_string()),
        })
    }
}

/// Public-domain text the benchmark prompt is cut from (repeated as needed).
const BENCH_TEXT: &str = "It was the best of times, it was the worst of times, it was the age of wisdom, \
it was the age of foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the \
season of Light, it was the season of Darkness, it was the spring of hope, it was the winter of \
despair, we had everything before us, we had nothing before us, we were all going direct to Heaven, \
we were all going direct the other way.";

/// Peak resident memory of this process in MiB (Linux `VmHWM`).
fn peak_rss_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// CPU time (user + system, all threads) this process has used, in seconds (Linux
/// `/proc/self/stat`, clock ticks of 1/100 s).
fn process_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // the fields after the parenthesised command name; utime and stime are fields 14 and 15
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let mut fields = rest.split_whitespace().skip(11);
    let utime: f64 = fields.next()?.parse().ok()?;
    let stime: f64 = fields.next()?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

/// Wall and CPU seconds of one timed phase.
#[derive(Clone, Copy, Default)]
struct Phase {
    wall: f64,
    cpu: Option<f64>,
}

fn timed<T>(f: impl FnOnce() -> anyhow::Result<T>) -> anyhow::Result<(T, Phase)> {
    let cpu0 = process_cpu_seconds();
    let t0 = Instant::now();
    let out = f()?;
    let wall = t0.elapsed().as_secs_f64();
    let cpu = process_cpu_seconds().zip(cpu0).map(|(b, a)| b - a);
    Ok((out, Phase { wall, cpu }))
}

/// The largest prefill step of `bench llm`: the runner's default largest chunk, as `generate`
/// prefills (steps of 512 were no faster on 6,000-token prompts and held 4x the activations).
const BENCH_PREFILL_CHUNK: usize = 128;

/// Prefill of the prompt, then greedy decode steps (the argmax on the host, end-of-sequence
/// ignored) — the loop the peers in tools/bench/llm_peers.py time.
fn bench_run(r: &mut Runner, ids: &[u32], decode: usize) -> anyhow::Result<(Phase, Phase)> {
    r.reset();
    let (logits, prefill) = timed(|| Ok(r.feed(ids)?))?;
    let mut next = argmax(&logits);
    let ((), decode) = timed(|| {
        for _ in 0..decode {
            next = argmax(&r.feed(&[next])?);
        }
        Ok(())
    })?;
    Ok((prefill, decode))
}

pub fn bench_llm(args: BenchLlmArgs) -> anyhow::Result<()> {
    if args.prompt_tokens == 0 {
        bail!("--prompt-tokens must be at least 1");
    }
    let chunks = vec![args.prompt_tokens.clamp(2, BENCH_PREFILL_CHUNK)];
    let mut margs = args.model.clone();
    // a run feeds the prompt, then one token per decode step: programs (and their KV caches) for
    // longer contexts would never run
    let used = args.prompt_tokens + args.decode_tokens;
    margs.ctx = Some(margs.ctx.map_or(used, |c| c.max(used)));
    let loaded = load(&margs, Vec::new(), Some(chunks))?;
    let llm = loaded.llm.clone();
    let text = match &args.prompt_file {
        Some(p) => crate::input::read_text(p)?,
        None => BENCH_TEXT.to_string(),
    };
    let mut ids = llm.encode_raw(&text)?;
    if ids.is_empty() {
        bail!("the prompt text has no tokens");
    }
    while ids.len() < args.prompt_tokens {
        ids.extend_from_within(..);
    }
    ids.truncate(args.prompt_tokens);
    let compile_start = Instant::now();
    let mut r = runner(&loaded)?;
    let setup = compile_start.elapsed().as_secs_f64();
    // first run: loads (compiles) the programs it uses
    let (first_prefill, _) = bench_run(&mut r, &ids, args.decode_tokens)?;
    let warmup = compile_start.elapsed().as_secs_f64();
    // from the start of loading the file to the first token's logits, in a fresh process
    let ttft = loaded.load_seconds + setup + first_prefill.wall;
    let mut best: Option<(Phase, Phase)> = None;
    for _ in 0..args.repeat.max(1) {
        let (p, d) = bench_run(&mut r, &ids, args.decode_tokens)?;
        best = Some(match best {
            None => (p, d),
            Some((bp, bd)) => (
                if p.wall < bp.wall { p } else { bp },
                if d.wall < bd.wall { d } else { bd },
            ),
        });
    }
    let (prefill, decode) = best.unwrap_or_default();
    let rate = |n: usize, s: f64| if s > 0.0 { n as f64 / s } else { 0.0 };
    let prefill_tok_s = rate(ids.len(), prefill.wall);
    let decode_tok_s = rate(args.decode_tokens, decode.wall);
    // the CPU engine runs on rayon's global pool, which --threads or RAYON_NUM_THREADS sizes
    let threads = rayon::current_num_threads();
    let peak = peak_rss_mb();
    let opt = |v: Option<f64>| v.map_or("null".to_string(), |x| format!("{x:.3}"));
    if !args.format.is_text() {
        println!(
            "{{\"peer\": \"aneforge\", \"model\": {:?}, \"target\": \"{}\", \"weights\": {:?}, \"activations\": {:?}, \"cache_type\": {:?}, \"experts\": {:?}, \"threads\": {threads}, \"prompt_tokens\": {}, \"prefill_tok_s\": {prefill_tok_s:.3}, \"prefill_cpu_s\": {}, \"decode_tokens\": {}, \"decode_tok_s\": {decode_tok_s:.3}, \"decode_wall_s\": {:.3}, \"decode_cpu_s\": {}, \"peak_rss_mb\": {}, \"load_s\": {:.3}, \"ttft_s\": {ttft:.3}, \"first_run_s\": {warmup:.3}}}",
            args.model.model,
            loaded.opts.target,
            args.model.compress,
            loaded.opts.activations.name(),
            loaded.opts.kv_cache.name(),
            args.model.experts,
            ids.len(),
            opt(prefill.cpu),
            args.decode_tokens,
            decode.wall,
            opt(decode.cpu),
            opt(peak),
            loaded.load_seconds,
        );
    } else {
        println!(
            "{} ({}, {} weights, {} activations, {} cache, {} threads): prefill {} tokens {:.1} tok/s, decode {} tokens {:.1} tok/s ({} CPU s for {:.2} s), peak RSS {}, load {:.2} s, first token {ttft:.2} s, first run {:.2} s",
            args.model.model,
            loaded.opts.target,
            args.model.compress,
            loaded.opts.activations.name(),
            loaded.opts.kv_cache.name(),
            threads,
            ids.len(),
            prefill_tok_s,
            args.decode_tokens,
            decode_tok_s,
            opt(decode.cpu),
            decode.wall,
            peak.map_or("n/a".to_string(), |p| format!("{p:.0} MiB")),
            loaded.load_seconds,
            warmup
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::ChatCommand;

    #[test]
    fn chat_commands_are_one_slashed_word_and_everything_else_is_a_message() {
        assert_eq!(ChatCommand::parse("  "), Some(ChatCommand::Empty));
        assert_eq!(ChatCommand::parse("/help"), Some(ChatCommand::Help));
        assert_eq!(ChatCommand::parse("/reset "), Some(ChatCommand::Clear));
        assert_eq!(ChatCommand::parse("/exit"), Some(ChatCommand::Bye));
        assert_eq!(
            ChatCommand::parse("/save"),
            Some(ChatCommand::Unknown("save".into()))
        );
        for message in ["hello", "/usr/bin is where", "/ what", "a /help", "/"] {
            assert_eq!(ChatCommand::parse(message), None, "{message}");
        }
    }
}
