//! Fine-tuned weights of every family written as the Hugging Face checkpoint transformers saves,
//! checked against transformers (tools/fixtures/train/export_check.py): the exported file holds
//! exactly the tensors `save_pretrained` writes (names, shapes, dtypes), our loader reads it back
//! as the trained model, and transformers computes the same logits from it as we do.
//!
//! transformers' logits come from exports of this test committed in
//! `tools/fixtures/train/out/export/` (written with `ANEFORGE_WRITE_EXPORT_FIXTURES=1`, then read
//! by the fixture script); the test also checks that today's export still equals the committed
//! one, so the logits check is about what the exporter writes now.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::llm_fixtures::{floats, ints, relative_error, tiny};

use aneforge::autograd::Optimizer;
use aneforge::train::{NamedArray, Trainer, TrainerOptions};
use aneforge::{Engine, Target};
use aneforge_models::llm::lora::{
    load_adapter, lora_model, merged_tensors, peft_init, save_adapter, LoraConfig,
};
use aneforge_models::llm::training::{
    causal_lm_loss, check_export, checkpoint_tensors, save_safetensors, trainable, TrainBatch,
    TrainableModel,
};
use aneforge_models::llm::{Llm, LoadOptions, Runner, RunnerOptions, WeightFormat};
use safetensors::SafeTensors;

const FAMILIES: [&str; 8] = [
    "llama", "llama3", "mistral", "qwen2", "qwen3", "gemma", "gemma3", "gpt2",
];
/// Families whose committed export transformers reads.
const READ_BY_TRANSFORMERS: [&str; 5] = ["llama", "qwen2", "gemma", "gemma3", "gpt2"];
const WRITE_FIXTURES: &str = "ANEFORGE_WRITE_EXPORT_FIXTURES";

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tools/fixtures/train/out")
}

fn writing_fixtures() -> bool {
    std::env::var_os(WRITE_FIXTURES).is_some()
}

fn transformers_outputs() -> Vec<u8> {
    std::fs::read(fixture_dir().join("export_check.safetensors")).unwrap()
}

fn load(dir: &Path) -> Llm {
    Llm::from_hf_dir(dir, LoadOptions::new(WeightFormat::Dense)).unwrap()
}

fn prompt(family: &str) -> Vec<u32> {
    let bytes = std::fs::read(tiny(family).join("expected.safetensors")).unwrap();
    ints(&SafeTensors::deserialize(&bytes).unwrap(), "prompt_ids")
}

fn adamw() -> TrainerOptions {
    TrainerOptions::new(Optimizer::AdamW {
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 0.01,
    })
}

/// Two AdamW steps (lr 1e-2) of `model` on `b`, then a step at lr 0: the losses before and
/// after, and the trained parameters.
fn train(llm: &Llm, model: &TrainableModel, b: &TrainBatch) -> (f32, f32, Vec<NamedArray>) {
    let loss = causal_lm_loss(&llm.config, model, b.batch, b.seq).unwrap();
    let mut trainer = Trainer::new(&loss, &model.params, &[], adamw()).unwrap();
    let losses: Vec<f32> = [1e-2, 1e-2, 0.0]
        .iter()
        .map(|&lr| trainer.step(&b.ports(), lr).unwrap().loss)
        .collect();
    (losses[0], losses[2], trainer.read_params().unwrap())
}

fn batch_of(llm: &Llm, ids: &[u32]) -> TrainBatch {
    let labels: Vec<i64> = ids.iter().map(|&i| i64::from(i)).collect();
    TrainBatch::new(1, ids.len(), ids, &labels, llm.config.vocab_size).unwrap()
}

fn eval_loss(llm: &Llm, b: &TrainBatch) -> f32 {
    let model = trainable(&llm.config, &llm.weights).unwrap();
    let loss = causal_lm_loss(&llm.config, &model, b.batch, b.seq).unwrap();
    let mut eval =
        aneforge::train::Evaluator::new(&[("loss", &loss)], Target::Cpu, Engine::Cpu).unwrap();
    eval.run(&b.ports()).unwrap()[0][0]
}

/// A model directory: the tiny `family`'s config and tokenizer with `weights` as its
/// `model.safetensors`.
fn model_dir(family: &str, weights: &Path) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for f in ["config.json", "tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(tiny(family).join(f), dir.path().join(f)).unwrap();
    }
    std::fs::copy(weights, dir.path().join("model.safetensors")).unwrap();
    dir
}

/// Our logits at every position of `ids`.
fn logits(llm: Llm, ids: &[u32]) -> Vec<f32> {
    let opts = RunnerOptions {
        max_context: 64,
        min_context: 64,
        prefill_chunks: vec![16],
        all_logits_chunks: vec![16],
        ..RunnerOptions::default()
    };
    let mut runner = Runner::new(Arc::new(llm), opts).unwrap();
    runner.feed_all(ids).unwrap()
}

/// `name → (shape, dtype)` of every tensor of a safetensors file.
fn layout_of_file(bytes: &[u8]) -> BTreeMap<String, (Vec<usize>, String)> {
    let st = SafeTensors::deserialize(bytes).unwrap();
    st.tensors()
        .into_iter()
        .map(|(name, view)| (name, (view.shape().to_vec(), format!("{:?}", view.dtype()))))
        .collect()
}

/// `name → (shape, dtype)` of transformers' `which` (`saved` or `state_dict`) for `family`.
fn transformers_layout(
    json: &serde_json::Value,
    family: &str,
    which: &str,
) -> BTreeMap<String, (Vec<usize>, String)> {
    let entries = json["families"][family][which]
        .as_object()
        .unwrap_or_else(|| panic!("export_check.json has no {which} of {family}"));
    entries
        .iter()
        .map(|(name, v)| {
            let shape = v["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap() as usize)
                .collect();
            (
                name.clone(),
                (shape, v["dtype"].as_str().unwrap().to_string()),
            )
        })
        .collect()
}

/// Every tensor of `got` within `1e-4 · max |want|` of `want`'s, by name.
fn assert_same_values(family: &str, got: &[u8], want: &[u8]) {
    let (got, want) = (
        SafeTensors::deserialize(got).unwrap(),
        SafeTensors::deserialize(want).unwrap(),
    );
    for name in want.names() {
        let g = floats(&got, name);
        let w = floats(&want, name);
        assert_eq!(g.len(), w.len(), "{family} {name}");
        let err = relative_error(&g, &w);
        assert!(
            err <= 1e-4,
            "{family} {name}: the export differs from the committed one by {err:e} of its \
             magnitude; rerun with {WRITE_FIXTURES}=1 and tools/fixtures/train/export_check.py"
        );
    }
}

#[test]
fn exported_weights_are_checkpoints_transformers_reads_as_we_do() {
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixture_dir().join("export_check.json")).unwrap())
            .unwrap();
    let outputs = transformers_outputs();
    let outputs = SafeTensors::deserialize(&outputs).unwrap();
    for family in FAMILIES {
        let llm = load(&tiny(family));
        let ids = prompt(family);
        let b = batch_of(&llm, &ids);
        let model = trainable(&llm.config, &llm.weights).unwrap();
        let (before, after, params) = train(&llm, &model, &b);
        assert!(after < before, "{family}: training lowers the loss");
        let tensors = checkpoint_tensors(&llm.config, params).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("model.safetensors");
        save_safetensors(&file, &tensors).unwrap();
        let bytes = std::fs::read(&file).unwrap();

        // exactly the tensors save_pretrained writes; a tied head is the one tensor of the
        // state dict it leaves out
        let got = layout_of_file(&bytes);
        let saved = transformers_layout(&json, family, "saved");
        let missing: Vec<_> = saved.keys().filter(|k| !got.contains_key(*k)).collect();
        let unexpected: Vec<_> = got.keys().filter(|k| !saved.contains_key(*k)).collect();
        assert!(
            missing.is_empty() && unexpected.is_empty(),
            "{family}: missing {missing:?}, unexpected {unexpected:?}"
        );
        assert_eq!(got, saved, "{family}: shapes or dtypes");
        let state = transformers_layout(&json, family, "state_dict");
        let left_out: Vec<_> = state.keys().filter(|k| !got.contains_key(*k)).collect();
        let tied: Vec<&String> = if llm.config.tied_embeddings {
            state.keys().filter(|k| *k == "lm_head.weight").collect()
        } else {
            Vec::new()
        };
        assert_eq!(left_out, tied, "{family}: state_dict keys not exported");

        // our loader reads the directory as the trained model
        let dir = model_dir(family, &file);
        let back = eval_loss(&load(dir.path()), &b);
        assert!(
            (back - after).abs() <= 1e-6 * after,
            "{family}: reloaded {back} vs trained {after}"
        );

        if !READ_BY_TRANSFORMERS.contains(&family) {
            continue;
        }
        let committed = fixture_dir().join(format!("export/{family}.safetensors"));
        if writing_fixtures() {
            std::fs::create_dir_all(committed.parent().unwrap()).unwrap();
            std::fs::copy(&file, &committed).unwrap();
            continue;
        }
        assert_same_values(family, &bytes, &std::fs::read(&committed).unwrap());
        let ours = logits(load(model_dir(family, &committed).path()), &ids);
        let want = floats(&outputs, &format!("{family}.logits"));
        let err = relative_error(&ours, &want);
        eprintln!("{family}: logits of the exported weights within {err:.1e} of transformers'");
        assert!(err <= 1e-4, "{family}: logits relative error {err:e}");
    }
}

/// Mixtures of experts are the one layout not written (their experts are not trained).
#[test]
fn mixture_of_experts_export_is_refused() {
    let moe = load(&tiny("qwen3_moe"));
    let e = check_export(&moe.config).unwrap_err().to_string();
    assert!(
        e.contains("Qwen3Moe") && e.contains("mixture-of-experts") && e.contains("--lora-rank"),
        "{e}"
    );
    let params = vec![("model__norm__weight".to_string(), vec![64], vec![1.0; 64])];
    let e = checkpoint_tensors(&moe.config, params)
        .unwrap_err()
        .to_string();
    assert!(e.contains("mixture-of-experts"), "{e}");
}

/// LoRA adapters of the tiny llama saved in PEFT's layout: our merge, exported as the full
/// checkpoint (the tensors `save_pretrained` writes) and read back, computes the logits of PEFT's
/// merged model (`merge_and_unload` of the committed adapters).
#[test]
fn merged_lora_export_matches_peft_merge() {
    let base = load(&tiny("llama"));
    let cfg = &base.config;
    let ids = prompt("llama");
    let b = batch_of(&base, &ids);
    let lc = LoraConfig {
        rank: 4,
        alpha: 8.0,
        targets: LoraConfig::parse_targets("all-linear").unwrap(),
    };
    let model = lora_model(cfg, &base.weights, &lc, peft_init(3)).unwrap();
    let (before, after, params) = train(&base, &model, &b);
    assert!(after < before, "training lowers the loss");
    let adapters = checkpoint_tensors(cfg, params).unwrap();
    let committed = fixture_dir().join("export/llama_lora");
    if writing_fixtures() {
        save_adapter(&committed, &lc, &adapters, "tiny llama").unwrap();
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    save_adapter(tmp.path(), &lc, &adapters, "tiny llama").unwrap();
    assert_same_values(
        "llama_lora",
        &std::fs::read(tmp.path().join("adapter_model.safetensors")).unwrap(),
        &std::fs::read(committed.join("adapter_model.safetensors")).unwrap(),
    );
    let adapter = load_adapter(&committed).unwrap();
    let file = tmp.path().join("merged.safetensors");
    save_safetensors(
        &file,
        &merged_tensors(cfg, &base.weights, &adapter).unwrap(),
    )
    .unwrap();
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixture_dir().join("export_check.json")).unwrap())
            .unwrap();
    assert_eq!(
        layout_of_file(&std::fs::read(&file).unwrap()),
        transformers_layout(&json, "llama", "saved")
    );
    let dir = model_dir("llama", &file);
    let ours = logits(load(dir.path()), &ids);
    let outputs = transformers_outputs();
    let want = floats(
        &SafeTensors::deserialize(&outputs).unwrap(),
        "llama_lora.logits",
    );
    let err = relative_error(&ours, &want);
    eprintln!("llama LoRA: logits of the merged export within {err:.1e} of PEFT's");
    assert!(err <= 1e-4, "merged logits relative error {err:e}");
}
