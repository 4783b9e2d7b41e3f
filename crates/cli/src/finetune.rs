//! `aneforge finetune`: causal-LM fine-tuning of a decoder LLM on a text or chat `.jsonl` file,
//! every weight (full) or LoRA adapters, with AdamW; progress, checkpoints and resume. Training
//! runs on the CPU engine in f32.

use std::path::PathBuf;
use std::time::Instant;

use aneforge::autograd::Optimizer;
use aneforge::train::{Checkpoint, LrSchedule, ScheduleKind, Trainer, TrainerOptions};
use aneforge_models::llm::lora::{
    lora_model, merged_tensors, peft_init, save_adapter, Adapter, LoraConfig,
};
use aneforge_models::llm::training::{
    causal_lm, check_export, checkpoint_tensors, save_safetensors, trainable, TrainBatch,
};
use aneforge_models::llm::{train_data, Llm, LoadOptions, WeightFormat};
use anyhow::{bail, Context};

use crate::model_hints::{self, Wants};

#[derive(clap::Args, Debug)]
pub struct FinetuneArgs {
    /// Model: an id (ORG/NAME, from the Hugging Face cache), a model directory or a .gguf file
    /// (quantized weights are expanded to f32 for training).
    #[arg(short = 'm', long = "model")]
    pub model: String,
    /// Training data: a text file (packed into sequences) or a chat .jsonl file (one
    /// {"messages": [...]} per line; only the assistant answers are trained).
    #[arg(long)]
    pub data: PathBuf,
    /// Train LoRA adapters of this rank instead of every weight.
    #[arg(long)]
    pub lora_rank: Option<usize>,
    /// LoRA alpha (the adapter output is scaled by alpha / rank).
    #[arg(long, default_value_t = 16.0)]
    pub lora_alpha: f32,
    /// LoRA target modules: a comma-separated list of q_proj, k_proj, v_proj, o_proj, gate_proj,
    /// up_proj, down_proj, or all-linear.
    #[arg(long, default_value = "q_proj,v_proj")]
    pub lora_targets: String,
    /// Optimizer steps.
    #[arg(long, default_value_t = 100)]
    pub steps: u64,
    /// Sequences per micro-batch (one forward and backward pass).
    #[arg(long, default_value_t = 4)]
    pub batch: usize,
    /// Micro-batches whose gradients are summed into one update (the loss is the mean over all
    /// their trained tokens, as transformers' gradient accumulation computes it).
    #[arg(long, default_value_t = 1)]
    pub grad_accum: u32,
    /// Tokens per sequence (at most the model's context).
    #[arg(long, default_value_t = 256)]
    pub seq: usize,
    /// AdamW peak learning rate (after warmup).
    #[arg(long, default_value_t = 1e-4)]
    pub lr: f32,
    /// Learning-rate schedule after warmup: constant, linear (to 0 at the last step) or cosine
    /// (half a cycle to 0), as transformers' get_*_schedule_with_warmup.
    #[arg(long, default_value = "constant")]
    pub lr_schedule: ScheduleKind,
    /// Steps over which the learning rate rises linearly from 0 (at most --steps).
    #[arg(long, default_value_t = 0)]
    pub warmup_steps: u64,
    /// AdamW decoupled weight decay.
    #[arg(long, default_value_t = 0.0)]
    pub weight_decay: f32,
    /// Seed of the LoRA adapters' initial values.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Where to write the result: a PEFT adapter directory (LoRA) or a directory with
    /// model.safetensors (full fine-tune, Hugging Face tensor names).
    #[arg(short = 'o', long)]
    pub out: PathBuf,
    /// With --lora-rank: also write the base weights with the trained adapters merged, as the
    /// model's full Hugging Face checkpoint, to DIR/model.safetensors.
    #[arg(long, value_name = "DIR")]
    pub merged_out: Option<PathBuf>,
    /// A training checkpoint file, written every --save-every steps and at the end; an existing
    /// one is resumed from.
    #[arg(long)]
    pub checkpoint: Option<PathBuf>,
    #[arg(long, default_value_t = 50)]
    pub save_every: u64,
    /// Gradient checkpointing: recompute each decoder layer's forward in the backward from the
    /// layer's input instead of keeping its activations from the forward (less memory, about
    /// one more forward of compute per step; the same results).
    #[arg(long)]
    pub checkpointing: bool,
    #[command(flatten)]
    pub threads: crate::engine_args::ThreadArgs,
}

pub fn run(args: FinetuneArgs) -> anyhow::Result<()> {
    if args.batch == 0 || args.steps == 0 || args.grad_accum == 0 {
        bail!("--batch, --grad-accum and --steps must be at least 1");
    }
    let schedule = LrSchedule::new(args.lr_schedule, args.warmup_steps, args.steps)
        .context("--warmup-steps")?;
    args.threads.apply()?;
    let llm = load_dense(&args.model)?;
    let config = llm.config.clone();
    let cfg = &config;
    if args.seq > cfg.max_positions {
        bail!(
            "--seq {} is longer than the context of {} ({} positions)",
            args.seq,
            args.model,
            cfg.max_positions
        );
    }
    if args.merged_out.is_some() && args.lora_rank.is_none() {
        bail!("--merged-out merges LoRA adapters and needs --lora-rank");
    }
    if args.lora_rank.is_none() || args.merged_out.is_some() {
        check_export(cfg)?;
    }
    let data = train_data::load(&llm, &args.data, args.seq)?;
    let lora = match args.lora_rank {
        Some(rank) => Some(LoraConfig {
            rank,
            alpha: args.lora_alpha,
            targets: LoraConfig::parse_targets(&args.lora_targets)?,
        }),
        None => None,
    };
    let started = Instant::now();
    let mut trainer = compile_step(&args, llm, lora.as_ref())?;
    return_free_heap();
    let trained = trainer.parameter_count();
    eprintln!(
        "{}: {} examples of {} tokens; {} {trained} parameters{}; AdamW lr {} ({:?}, {} \
         warmup steps); compiled in {:.1} s",
        args.data.display(),
        data.len(),
        args.seq,
        if lora.is_some() { "LoRA," } else { "full," },
        if args.checkpointing {
            ", layers recomputed in the backward"
        } else {
            ""
        },
        args.lr,
        args.lr_schedule,
        args.warmup_steps,
        started.elapsed().as_secs_f64()
    );
    if let Some(m) = trainer.model().memory().engine {
        eprintln!(
            "training memory: {:.0} MB of parameters and optimizer state, {:.0} MB activation \
             arena, {:.0} MB staged updates",
            m.ports as f64 / 1e6,
            m.arena as f64 / 1e6,
            m.staging as f64 / 1e6
        );
    }
    if let Some(path) = args.checkpoint.as_ref().filter(|p| p.exists()) {
        let ckpt = Checkpoint::load(path)?;
        trainer
            .restore(&ckpt)
            .with_context(|| format!("resuming from {}", path.display()))?;
        eprintln!("resumed from {} at step {}", path.display(), ckpt.step);
    }
    let save = |trainer: &Trainer| -> anyhow::Result<()> {
        if let Some(path) = &args.checkpoint {
            let step = trainer.step_count();
            trainer.save_checkpoint(path, &step.to_string())?;
        }
        Ok(())
    };
    let per_update = args.batch * args.grad_accum as usize;
    while trainer.step_count() < args.steps {
        let step = trainer.step_count();
        let (ids, labels) = data.batch(step, per_update);
        let batch = TrainBatch::new(per_update, args.seq, &ids, &labels, cfg.vocab_size)?;
        let t = Instant::now();
        let lr = schedule.lr(f64::from(args.lr), step) as f32;
        let mut loss = 0.0;
        for m in 0..args.grad_accum as usize {
            let micro = batch.rows(m * args.batch..(m + 1) * args.batch);
            loss += trainer.step(&micro.ports(), lr)?.loss;
        }
        let secs = t.elapsed().as_secs_f64();
        eprintln!(
            "step {:>5}/{}: loss {:.4}, lr {:.3e}, {:.0} tokens/s",
            step + 1,
            args.steps,
            loss,
            lr,
            (per_update * args.seq) as f64 / secs
        );
        if (step + 1) % args.save_every == 0 {
            save(&trainer)?;
        }
    }
    save(&trainer)?;
    // no more steps: the activation arena (as large as the gradients and activations of a step)
    // and then the resident parameters and moments are not needed for writing the result
    aneforge::engine::release_thread_arena();
    let params = trainer.read_params()?;
    drop(trainer);
    let tensors = checkpoint_tensors(cfg, params)?;
    match &lora {
        Some(lc) => save_adapter(&args.out, lc, &tensors, &args.model)?,
        None => save_safetensors(&args.out.join("model.safetensors"), &tensors)?,
    }
    eprintln!("wrote {}", args.out.display());
    if let (Some(dir), Some(lc)) = (&args.merged_out, &lora) {
        let adapter = Adapter {
            config: lc.clone(),
            tensors,
        };
        // the base weights were let go for training: read again
        let llm = load_dense(&args.model)?;
        let merged = merged_tensors(cfg, &llm.weights, &adapter)?;
        save_safetensors(&dir.join("model.safetensors"), &merged)?;
        eprintln!("wrote {} (adapters merged)", dir.display());
    }
    Ok(())
}

fn load_dense(model: &str) -> anyhow::Result<Llm> {
    Llm::load(model, LoadOptions::new(WeightFormat::Dense))
        .with_context(|| format!("loading {model}"))
        .map_err(|e| model_hints::explain(e, model, Wants::Decoder))
}

/// Compiles the training step of `llm` (LoRA adapters with `lora`, every weight without) and lets
/// go of the model: the loaded weights, the trainable parameters and the loss graph all hold the
/// parameters' initial values (or, for LoRA, the frozen weights the step's blob has its own copy
/// of), which the step's engine holds from here on.
fn compile_step(
    args: &FinetuneArgs,
    llm: Llm,
    lora: Option<&LoraConfig>,
) -> anyhow::Result<Trainer> {
    let cfg = &llm.config;
    let model = match lora {
        Some(lc) => lora_model(cfg, &llm.weights, lc, peft_init(args.seed))?,
        None => trainable(cfg, &llm.weights)?,
    };
    let lm = causal_lm(cfg, &model, args.batch, args.seq)?;
    let optimizer = Optimizer::AdamW {
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: args.weight_decay,
    };
    let options = TrainerOptions {
        accumulation_steps: args.grad_accum,
        recompute: if args.checkpointing {
            lm.layers
        } else {
            Vec::new()
        },
        ..TrainerOptions::new(optimizer)
    };
    Trainer::new(&lm.loss, &model.params, &[], options).context("compiling the training step")
}

/// Hands the heap pages freed with the loaded model back to the system. The weights were
/// hundreds of blocks of a few MB, below glibc's adaptive mmap threshold, so they sit in the heap
/// between blocks still in use, where `free` keeps their pages resident (about one copy of the
/// parameters, 540 MB for SmolLM2-135M).
fn return_free_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free pages of the allocator's own heaps.
    unsafe {
        libc::malloc_trim(0);
    }
}
