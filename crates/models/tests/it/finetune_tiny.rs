//! The training forward, data preparation, LoRA and checkpoints on the tiny random decoders of
//! tools/fixtures/llm (transformers' fp32 prompt logits in `expected.safetensors`): the training
//! loss of every family equals the cross-entropy of transformers' logits, chat data trains only
//! the answers, bad input gets an error naming what is wrong, and resuming a checkpoint
//! continues exactly where training stopped.

use crate::llm_fixtures;

use aneforge::autograd::Optimizer;
use aneforge::train::{Checkpoint, Evaluator, Trainer, TrainerOptions};
use aneforge::{Engine, Target};
use aneforge_models::llm::lora::{
    load_adapter, lora_model, merge, peft_init, save_adapter, LoraConfig,
};
use aneforge_models::llm::train_data;
use aneforge_models::llm::training::{
    causal_lm, causal_lm_loss, checkpoint_tensors, trainable, TrainBatch, TrainableModel,
    IGNORE_INDEX,
};
use aneforge_models::llm::{Llm, LoadOptions, WeightFormat};
use llm_fixtures::{floats, ints, tiny};
use safetensors::SafeTensors;

const FAMILIES: [&str; 8] = [
    "llama", "llama3", "mistral", "qwen2", "qwen3", "gemma", "gemma3", "gpt2",
];

fn load(family: &str) -> Llm {
    Llm::from_hf_dir(&tiny(family), LoadOptions::new(WeightFormat::Dense)).unwrap()
}

fn eval_loss(
    llm: &Llm,
    model: &aneforge_models::llm::training::TrainableModel,
    b: &TrainBatch,
) -> f32 {
    let loss = causal_lm_loss(&llm.config, model, b.batch, b.seq).unwrap();
    let mut eval = Evaluator::new(&[("loss", &loss)], Target::Cpu, Engine::Cpu).unwrap();
    eval.run(&b.ports()).unwrap()[0][0]
}

/// The mean of `−log softmax(logits[t])[ids[t + 1]]` over the counted positions, in f64.
fn reference_loss(
    logits: &[f32],
    vocab: usize,
    ids: &[u32],
    counted: impl Fn(usize) -> bool,
) -> f64 {
    let mut total = 0.0;
    let mut n = 0;
    for t in 0..ids.len() - 1 {
        if !counted(t + 1) {
            continue;
        }
        let row = &logits[t * vocab..(t + 1) * vocab];
        let max = row.iter().fold(f64::MIN, |m, &v| m.max(f64::from(v)));
        let lse = max
            + row
                .iter()
                .map(|&v| (f64::from(v) - max).exp())
                .sum::<f64>()
                .ln();
        total += lse - f64::from(row[ids[t + 1] as usize]);
        n += 1;
    }
    total / f64::from(n)
}

#[test]
fn training_loss_of_every_family_matches_transformers_logits() {
    for family in FAMILIES {
        let llm = load(family);
        let bytes = std::fs::read(tiny(family).join("expected.safetensors")).unwrap();
        let st = SafeTensors::deserialize(&bytes).unwrap();
        let ids = ints(&st, "prompt_ids");
        let logits = floats(&st, "prompt_logits");
        let vocab = llm.config.vocab_size;
        let t = ids.len();
        let model = trainable(&llm.config, &llm.weights).unwrap();
        // one row with every position counted, then two rows: the same and one whose first half
        // is ignored (labels -100), so the mean runs over the counted positions of both rows
        let all: Vec<i64> = ids.iter().map(|&i| i64::from(i)).collect();
        let b = TrainBatch::new(1, t, &ids, &all, vocab).unwrap();
        let want = reference_loss(&logits, vocab, &ids, |_| true);
        let got = f64::from(eval_loss(&llm, &model, &b));
        assert!(
            (got - want).abs() <= 1e-4 * want,
            "{family}: loss {got} vs transformers {want}"
        );

        let half: Vec<i64> = all
            .iter()
            .enumerate()
            .map(|(i, &l)| if i < t / 2 { IGNORE_INDEX } else { l })
            .collect();
        let ids2: Vec<u32> = ids.iter().chain(&ids).copied().collect();
        let labels2: Vec<i64> = all.iter().chain(&half).copied().collect();
        let b2 = TrainBatch::new(2, t, &ids2, &labels2, vocab).unwrap();
        let full_sum = want * (t - 1) as f64;
        let half_mean = reference_loss(&logits, vocab, &ids, |i| i >= t / 2);
        let half_n = (t - t / 2) as f64;
        let want2 = (full_sum + half_mean * half_n) / ((t - 1) as f64 + half_n);
        let got2 = f64::from(eval_loss(&llm, &model, &b2));
        assert!(
            (got2 - want2).abs() <= 1e-4 * want2,
            "{family} batch of 2: {got2} vs {want2}"
        );
    }
}

fn write(dir: &std::path::Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn chat_data_trains_only_the_answers() {
    let llm = load("llama");
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        dir.path(),
        "chat.jsonl",
        concat!(
            r#"{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello there"}]}"#,
            "\n\n",
            r#"{"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}, {"role": "assistant", "content": "d e"}]}"#,
            "\n"
        ),
    );
    let ex = train_data::load(&llm, &p, 96).unwrap();
    assert_eq!(ex.len(), 2);
    let trained = |i: usize| -> String {
        let ids: Vec<u32> = ex.ids[i]
            .iter()
            .zip(&ex.labels[i])
            .filter(|(_, &l)| l != IGNORE_INDEX)
            .map(|(&id, _)| id)
            .collect();
        llm.tokenizer.decode(&ids, false).unwrap()
    };
    assert_eq!(trained(0), "hello there<|im_end|>\n");
    assert_eq!(trained(1), "b<|im_end|>\nd e<|im_end|>\n");
    // the untrained positions decode to the prompts around the answers
    let (ids, labels) = ex.batch(0, 2);
    let b = TrainBatch::new(2, 96, &ids, &labels, llm.config.vocab_size).unwrap();
    let answer_tokens = labels.iter().filter(|&&l| l != IGNORE_INDEX).count();
    assert_eq!(b.counted, answer_tokens);
}

fn err_of<T>(r: Result<T, aneforge_models::llm::LlmError>) -> String {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn bad_input_gets_clear_errors() {
    let llm = load("llama");
    let cfg = &llm.config;
    let dir = tempfile::tempdir().unwrap();
    let empty = write(dir.path(), "empty.txt", " \n");
    let e = err_of(train_data::load(&llm, &empty, 16));
    assert!(e.contains("empty.txt") && e.contains("empty"), "{e}");
    let short = write(dir.path(), "short.txt", "hi");
    let e = err_of(train_data::load(&llm, &short, 16));
    assert!(
        e.contains("short.txt") && e.contains("fewer than one training sequence"),
        "{e}"
    );
    let bad = write(dir.path(), "bad.jsonl", "{\"messages\": [}\n");
    let e = err_of(train_data::load(&llm, &bad, 16));
    assert!(e.contains("bad.jsonl") && e.contains("line 1"), "{e}");
    let no_answer = write(
        dir.path(),
        "q.jsonl",
        r#"{"messages": [{"role": "user", "content": "hi"}]}"#,
    );
    let e = err_of(train_data::load(&llm, &no_answer, 16));
    assert!(
        e.contains("q.jsonl") && e.contains("no assistant message"),
        "{e}"
    );
    let long = write(
        dir.path(),
        "long.jsonl",
        r#"{"messages": [{"role": "user", "content": "a long question indeed"}, {"role": "assistant", "content": "and a long answer too"}]}"#,
    );
    let e = err_of(train_data::load(&llm, &long, 8));
    assert!(
        e.contains("long.jsonl") && e.contains("longer than the training sequence of 8"),
        "{e}"
    );

    let model = trainable(cfg, &llm.weights).unwrap();
    let e = err_of(causal_lm_loss(cfg, &model, 1, cfg.max_positions + 1));
    assert!(e.contains("longer than the model's context"), "{e}");
    let e = err_of(TrainBatch::new(
        1,
        4,
        &[1, 2, 3, 4],
        &[IGNORE_INDEX; 4],
        cfg.vocab_size,
    ));
    assert!(e.contains("no position whose next token is trained"), "{e}");
    let e = err_of(TrainBatch::new(
        1,
        2,
        &[1, 100_000],
        &[1, 2],
        cfg.vocab_size,
    ));
    assert!(e.contains("100000") && e.contains("vocabulary"), "{e}");

    let too_big = LoraConfig {
        rank: cfg.hidden_size + 1,
        alpha: 16.0,
        targets: LoraConfig::parse_targets("q_proj,v_proj").unwrap(),
    };
    let e = err_of(lora_model(cfg, &llm.weights, &too_big, peft_init(0)));
    assert!(e.contains("rank 65") && e.contains("q_proj"), "{e}");
    let e = err_of(LoraConfig::parse_targets("q_proj,qq_proj"));
    assert!(e.contains("qq_proj"), "{e}");
    let e = err_of(load_adapter(dir.path()));
    assert!(e.contains("adapter_config.json"), "{e}");
}

fn adamw() -> TrainerOptions {
    TrainerOptions::new(Optimizer::AdamW {
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 0.01,
    })
}

/// Four steps in one go, and two steps, a checkpoint file, a fresh trainer resumed from it and
/// two more: the same losses and parameters, bit for bit.
#[test]
fn resuming_a_checkpoint_continues_exactly() {
    let llm = load("qwen3");
    let cfg = &llm.config;
    let text = "the quick brown fox jumps over the lazy dog ".repeat(20);
    let ex =
        train_data::packed(std::path::Path::new("mem"), &llm.encode(&text).unwrap(), 16).unwrap();
    let model = trainable(cfg, &llm.weights).unwrap();
    let loss = causal_lm_loss(cfg, &model, 2, 16).unwrap();
    let batch = |step: u64| {
        let (ids, labels) = ex.batch(step, 2);
        TrainBatch::new(2, 16, &ids, &labels, cfg.vocab_size).unwrap()
    };
    let mut straight = Trainer::new(&loss, &model.params, &[], adamw()).unwrap();
    let mut want = Vec::new();
    for s in 0..4 {
        want.push(straight.step(&batch(s).ports(), 1e-3).unwrap().loss);
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ckpt.safetensors");
    let mut first = Trainer::new(&loss, &model.params, &[], adamw()).unwrap();
    let mut got = Vec::new();
    for s in 0..2 {
        got.push(first.step(&batch(s).ports(), 1e-3).unwrap().loss);
    }
    first.checkpoint("2").unwrap().save(&path).unwrap();
    drop(first);
    let ckpt = Checkpoint::load(&path).unwrap();
    let mut resumed = Trainer::new(&loss, &model.params, &[], adamw()).unwrap();
    resumed.restore(&ckpt).unwrap();
    assert_eq!(resumed.step_count(), 2);
    for s in 2..4 {
        got.push(resumed.step(&batch(s).ports(), 1e-3).unwrap().loss);
    }
    assert_eq!(got, want);
    assert!(want[3] < want[0], "training lowers the loss: {want:?}");
    assert_eq!(
        resumed.read_params().unwrap(),
        straight.read_params().unwrap()
    );
}

/// LoRA on every linear layer: with B at zero the adapted model is the base model; after
/// training, the saved PEFT directory merged into the base scores a batch as the adapters do.
#[test]
fn lora_adapters_save_and_merge_consistently() {
    let llm = load("llama");
    let cfg = &llm.config;
    let bytes = std::fs::read(tiny("llama").join("expected.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let ids = ints(&st, "prompt_ids");
    let t = ids.len();
    let labels: Vec<i64> = ids.iter().map(|&i| i64::from(i)).collect();
    let b = TrainBatch::new(1, t, &ids, &labels, cfg.vocab_size).unwrap();
    let lc = LoraConfig {
        rank: 4,
        alpha: 8.0,
        targets: LoraConfig::parse_targets("all-linear").unwrap(),
    };
    let model = lora_model(cfg, &llm.weights, &lc, peft_init(7)).unwrap();
    assert_eq!(model.params.len(), cfg.n_layers * 7 * 2);
    let base = eval_loss(&llm, &trainable(cfg, &llm.weights).unwrap(), &b);
    let loss = causal_lm_loss(cfg, &model, 1, t).unwrap();
    let mut trainer = Trainer::new(&loss, &model.params, &[], adamw()).unwrap();
    let mut losses = Vec::new();
    for step in 0..6 {
        let lr = if step < 5 { 1e-2 } else { 0.0 };
        losses.push(trainer.step(&b.ports(), lr).unwrap().loss);
    }
    // B = 0: the adapted model is the base model (another program: rounding only)
    assert!(
        (losses[0] - base).abs() <= 1e-6 * base,
        "{} vs base {base}",
        losses[0]
    );
    assert!(losses[5] < losses[0], "{losses:?}");
    let dir = tempfile::tempdir().unwrap();
    let adapters = checkpoint_tensors(cfg, trainer.read_params().unwrap()).unwrap();
    save_adapter(dir.path(), &lc, &adapters, "tiny").unwrap();
    let adapter = load_adapter(dir.path()).unwrap();
    let merged = merge(cfg, &llm.weights, &adapter).unwrap();
    let got = eval_loss(&llm, &trainable(cfg, &merged).unwrap(), &b);
    let rel = (got - losses[5]).abs() / losses[5];
    assert!(rel <= 1e-5, "merged {got} vs adapters {}", losses[5]);
}

/// Two micro-batches of one sequence accumulated into one update train as the batch of both:
/// the summed micro-batch losses are the batch loss and the parameters after three updates agree
/// to rounding.
#[test]
fn gradient_accumulation_equals_the_whole_batch() {
    let llm = load("llama");
    let cfg = &llm.config;
    let text = "the quick brown fox jumps over the lazy dog ".repeat(20);
    let ex =
        train_data::packed(std::path::Path::new("mem"), &llm.encode(&text).unwrap(), 16).unwrap();
    let model = trainable(cfg, &llm.weights).unwrap();
    let batch = |step: u64| {
        let (ids, labels) = ex.batch(step, 2);
        TrainBatch::new(2, 16, &ids, &labels, cfg.vocab_size).unwrap()
    };
    let whole_loss = causal_lm_loss(cfg, &model, 2, 16).unwrap();
    let mut whole = Trainer::new(&whole_loss, &model.params, &[], adamw()).unwrap();
    let micro_loss = causal_lm_loss(cfg, &model, 1, 16).unwrap();
    let mut options = adamw();
    options.accumulation_steps = 2;
    let mut micro = Trainer::new(&micro_loss, &model.params, &[], options).unwrap();
    for step in 0..3 {
        let b = batch(step);
        let want = whole.step(&b.ports(), 1e-3).unwrap();
        assert!(want.updated);
        let first = micro.step(&b.rows(0..1).ports(), 1e-3).unwrap();
        assert!(!first.updated && micro.step_count() == step);
        let e = micro.checkpoint("").unwrap_err().to_string();
        assert!(e.contains("1 of 2 micro-batches"), "{e}");
        let second = micro.step(&b.rows(1..2).ports(), 1e-3).unwrap();
        assert!(second.updated && micro.step_count() == step + 1);
        let sum = first.loss + second.loss;
        assert!(
            (sum - want.loss).abs() <= 1e-5 * want.loss,
            "step {step}: {sum} vs {}",
            want.loss
        );
    }
    for ((name, _, got), (_, _, want)) in micro
        .read_params()
        .unwrap()
        .iter()
        .zip(whole.read_params().unwrap())
    {
        let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        let err = got
            .iter()
            .zip(&want)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(
            err <= 1e-4 * scale,
            "{name}: max difference {err} (scale {scale})"
        );
    }
}

/// Losses and parameters of three AdamW steps on two packed sequences, with each decoder layer
/// recomputed in the backward or kept from the forward.
fn train_three_steps(
    llm: &Llm,
    model: &TrainableModel,
    recompute: bool,
) -> (Vec<f32>, Vec<aneforge::train::NamedArray>) {
    let cfg = &llm.config;
    let text = "the quick brown fox jumps over the lazy dog ".repeat(20);
    let ex =
        train_data::packed(std::path::Path::new("mem"), &llm.encode(&text).unwrap(), 16).unwrap();
    let lm = causal_lm(cfg, model, 2, 16).unwrap();
    assert_eq!(lm.layers.len(), cfg.n_layers);
    let mut options = adamw();
    if recompute {
        options.recompute = lm.layers;
    }
    let mut trainer = Trainer::new(&lm.loss, &model.params, &[], options).unwrap();
    let losses = (0..3)
        .map(|step| {
            let (ids, labels) = ex.batch(step, 2);
            let b = TrainBatch::new(2, 16, &ids, &labels, cfg.vocab_size).unwrap();
            trainer.step(&b.ports(), 1e-3).unwrap().loss
        })
        .collect();
    (losses, trainer.read_params().unwrap())
}

/// The step program fuses the forward differently once the backward no longer reads the layers'
/// intermediates (f32 rounding: losses measured within 1.3e-7), and AdamW normalises each
/// gradient element by its own magnitude, so the rounding of a near-zero gradient element can
/// turn into a difference of its update of up to the learning rate (parameters measured within
/// 1.1e-4 of each tensor's largest value, Llama's fused qkv projection).
const LOSS_TOL: f32 = 1e-6;
const PARAM_TOL: f32 = 5e-4;

/// Gradient checkpointing changes where the layers' activations come from, not the numbers:
/// three AdamW steps of full fine-tunes of every family and of LoRA (all linear layers) of two
/// give the losses and parameters of the run that keeps the activations, to f32 rounding.
#[test]
fn recomputing_each_layer_trains_as_keeping_its_activations() {
    let lora = LoraConfig {
        rank: 4,
        alpha: 8.0,
        targets: LoraConfig::parse_targets("all-linear").unwrap(),
    };
    let mut runs: Vec<(String, Llm, TrainableModel)> = Vec::new();
    for family in FAMILIES {
        let llm = load(family);
        let model = trainable(&llm.config, &llm.weights).unwrap();
        runs.push((format!("{family} full"), llm, model));
    }
    for family in ["llama", "gemma3"] {
        let llm = load(family);
        let model = lora_model(&llm.config, &llm.weights, &lora, peft_init(3)).unwrap();
        runs.push((format!("{family} LoRA"), llm, model));
    }
    for (label, llm, model) in &runs {
        let (want_losses, want_params) = train_three_steps(llm, model, false);
        let (got_losses, got_params) = train_three_steps(llm, model, true);
        let mut worst = 0f32;
        for (got, want) in got_losses.iter().zip(&want_losses) {
            worst = worst.max((got - want).abs() / want.abs());
            assert!(
                (got - want).abs() <= LOSS_TOL * want.abs(),
                "{label}: losses {got_losses:?} recomputed vs {want_losses:?} kept"
            );
        }
        assert!(want_losses[2] != want_losses[0], "{label}: {want_losses:?}");
        assert_eq!(got_params.len(), want_params.len());
        let mut worst_param = 0f32;
        for ((name, _, got), (_, _, want)) in got_params.iter().zip(&want_params) {
            let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
            let err = got
                .iter()
                .zip(want)
                .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
            worst_param = worst_param.max(err / scale);
            assert!(
                err <= PARAM_TOL * scale,
                "{label}: {name}: max difference {err} (scale {scale})"
            );
        }
        eprintln!("{label}: losses within {worst:.1e}, parameters within {worst_param:.1e}");
    }
}
