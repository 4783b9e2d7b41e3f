//! Bad input to the LLM stack is an error naming what is wrong, never a panic: unsupported
//! architectures (Hugging Face config and GGUF metadata), GGUF files that are truncated or hold an
//! unknown tensor type, prompts longer than the context, token ids outside the vocabulary, chat
//! templates that fail to compile or render. The GGUF reader's own cases (every truncation,
//! impossible fields) are in gguf_reader.rs; these go through `Llm::load` and the runner.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use aneforge_models::llm::{
    generate, ChatMessage, ChatTemplate, GenerateOptions, KvStorage, Llm, LlmError, LoadOptions,
    Runner, RunnerOptions, SamplingOptions, WeightFormat,
};
use aneforge_models::require_model;

fn tiny(family: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tools/fixtures/llm/out/tiny")
        .join(family)
}

fn load(path: &Path) -> Result<Llm, LlmError> {
    Llm::load(
        path.to_str().unwrap(),
        LoadOptions::new(WeightFormat::Stored),
    )
}

/// A copy of a tiny fixture model whose `file` is rewritten by `edit`.
fn edited_copy(
    family: &str,
    file: &str,
    edit: impl Fn(&mut serde_json::Value),
) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(tiny(family)).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), tmp.path().join(entry.file_name())).unwrap();
    }
    let path = tmp.path().join(file);
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut json);
    std::fs::write(&path, serde_json::to_string_pretty(&json).unwrap()).unwrap();
    tmp
}

fn gguf_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// A GGUF v3 file with no tensors and one metadata entry, `general.architecture`.
fn gguf_with_architecture(arch: &str) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes());
    b.extend_from_slice(&1u64.to_le_bytes());
    gguf_string(&mut b, "general.architecture");
    b.extend_from_slice(&8u32.to_le_bytes()); // string
    gguf_string(&mut b, arch);
    b
}

#[test]
fn unsupported_architectures_are_named() {
    let dir = edited_copy("llama", "config.json", |c| {
        c["model_type"] = "mamba".into();
        c["architectures"] = serde_json::json!(["MambaForCausalLM"]);
    });
    let msg = load(dir.path()).unwrap_err().to_string();
    assert!(
        msg.contains("unsupported architecture 'mamba'") && msg.contains("llama"),
        "{msg}"
    );
    for name in [
        "qwen3_moe",
        "mixtral",
        "phi3",
        "gemma2",
        "qwen2_moe",
        "olmoe",
    ] {
        assert!(msg.contains(name), "{name} missing from: {msg}");
    }

    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("rwkv.gguf");
    std::fs::write(&file, gguf_with_architecture("rwkv6")).unwrap();
    let msg = load(&file).unwrap_err().to_string();
    assert!(
        msg.contains("unsupported architecture 'rwkv6'") && msg.contains("rwkv.gguf"),
        "{msg}"
    );
    for name in ["qwen3moe", "phi3", "gemma2", "qwen2moe", "olmoe"] {
        assert!(msg.contains(name), "{name} missing from: {msg}");
    }
}

#[test]
fn a_mixture_of_experts_missing_experts_is_an_error() {
    // the config promises a ninth expert the checkpoint does not have
    let dir = edited_copy("qwen3_moe", "config.json", |c| {
        c["num_local_experts"] = 9.into();
    });
    let msg = load(dir.path()).unwrap_err().to_string();
    assert!(
        msg.contains("model.layers.0.mlp.experts.8.gate_proj.weight"),
        "{msg}"
    );
    let dir = edited_copy("mixtral", "config.json", |c| {
        c["num_experts_per_tok"] = 5.into();
    });
    let msg = load(dir.path()).unwrap_err().to_string();
    assert!(
        msg.contains("num_local_experts") && msg.contains("4 experts cannot supply 5"),
        "{msg}"
    );
}

/// A copy of a tiny fixture model whose `model.safetensors` lacks the tensor `drop`.
fn copy_without_tensor(family: &str, drop: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(tiny(family)).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), tmp.path().join(entry.file_name())).unwrap();
    }
    let bytes = std::fs::read(tiny(family).join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut kept: Vec<(String, safetensors::tensor::TensorView)> = st
        .tensors()
        .into_iter()
        .filter(|(name, _)| name != drop)
        .collect();
    assert_eq!(kept.len() + 1, st.len(), "{family} has no {drop}");
    kept.sort_by(|a, b| a.0.cmp(&b.0));
    safetensors::tensor::serialize_to_file(kept, None, &tmp.path().join("model.safetensors"))
        .unwrap();
    tmp
}

#[test]
fn a_shared_expert_missing_a_tensor_is_named() {
    for drop in [
        "model.layers.2.mlp.shared_expert.up_proj.weight",
        "model.layers.0.mlp.shared_expert.down_proj.weight",
        "model.layers.0.mlp.shared_expert_gate.weight",
    ] {
        let dir = copy_without_tensor("qwen2_moe", drop);
        let msg = load(dir.path()).unwrap_err().to_string();
        assert!(msg.contains(drop), "{drop}: {msg}");
    }
    // the dense layer (mlp_only_layers) has no experts to look for
    let dir = copy_without_tensor("qwen2_moe", "model.layers.1.mlp.up_proj.weight");
    let msg = load(dir.path()).unwrap_err().to_string();
    assert!(msg.contains("model.layers.1.mlp.up_proj.weight"), "{msg}");
    // a config that makes the dense layer sparse names the first expert tensor it lacks
    let dir = edited_copy("qwen2_moe", "config.json", |c| {
        c["mlp_only_layers"] = serde_json::json!([]);
    });
    let msg = load(dir.path()).unwrap_err().to_string();
    assert!(
        msg.contains("model.layers.1.mlp.experts.0.gate_proj.weight"),
        "{msg}"
    );
}

/// The tiny `family`.gguf with the first occurrence of `from` in its bytes replaced by `to` (of
/// the same length: a tensor name or metadata key renamed in place).
fn gguf_renamed(family: &str, from: &str, to: &str) -> tempfile::TempDir {
    assert_eq!(from.len(), to.len());
    let path = tiny(family).with_extension("gguf");
    let mut bytes = std::fs::read(path).unwrap();
    let at = bytes
        .windows(from.len())
        .position(|w| w == from.as_bytes())
        .unwrap_or_else(|| panic!("{family}.gguf has no {from}"));
    bytes[at..at + to.len()].copy_from_slice(to.as_bytes());
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join(format!("{family}.gguf")), bytes).unwrap();
    tmp
}

#[test]
fn a_qwen2moe_gguf_missing_its_shared_expert_is_an_error() {
    let dir = gguf_renamed(
        "qwen2_moe",
        "blk.0.ffn_gate_inp_shexp",
        "blk.0.ffn_gate_inp_shexq",
    );
    let msg = load(&dir.path().join("qwen2_moe.gguf"))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("blk.0.ffn_gate_inp_shexp.weight"), "{msg}");
    let dir = gguf_renamed("qwen2_moe", "blk.2.ffn_up_shexp", "blk.2.ffn_up_shexq");
    let msg = load(&dir.path().join("qwen2_moe.gguf"))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("blk.2.ffn_up_shexp.weight"), "{msg}");
    // without its width the shared expert is taken as feed_forward_length (128) wide, which its
    // tensors are not
    let dir = gguf_renamed(
        "qwen2_moe",
        "expert_shared_feed_forward_length",
        "expert_shared_feed_forward_lengtX",
    );
    let msg = load(&dir.path().join("qwen2_moe.gguf"))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("blk.0.ffn_gate_shexp.weight") && msg.contains("128"),
        "{msg}"
    );
}

#[test]
fn more_experts_per_token_than_experts_is_an_error() {
    for family in ["qwen2_moe", "olmoe"] {
        let dir = edited_copy(family, "config.json", |c| {
            c["num_experts_per_tok"] = 9.into();
        });
        let msg = load(dir.path()).unwrap_err().to_string();
        assert!(
            msg.contains("'num_experts'") && msg.contains("8 experts cannot supply 9"),
            "{family}: {msg}"
        );
    }
    let dir = edited_copy("qwen2_moe", "config.json", |c| {
        c["decoder_sparse_step"] = 0.into();
    });
    let msg = load(dir.path()).unwrap_err().to_string();
    assert!(
        msg.contains("decoder_sparse_step") && msg.contains("must be positive"),
        "{msg}"
    );
    let dir = edited_copy("olmoe", "config.json", |c| {
        c["clip_qkv"] = 8.0.into();
    });
    let msg = load(dir.path()).unwrap_err().to_string();
    assert!(
        msg.contains("clip_qkv") && msg.contains("not supported"),
        "{msg}"
    );
}

/// A q8_0 KV cache on an ANE target (its programs keep fp16 caches) is refused by name; an fp16
/// cache there is what the target does anyway.
#[test]
fn a_q8_0_cache_on_an_ane_target_is_refused() {
    let llm = Arc::new(load(&tiny("qwen3")).unwrap());
    let target = aneforge::Target::Ane(aneforge::AneArch::default());
    let opts = |kv_cache| RunnerOptions {
        target: target.clone(),
        max_context: 64,
        min_context: 64,
        kv_cache,
        ..RunnerOptions::default()
    };
    let err = Runner::new(llm.clone(), opts(KvStorage::Q8_0))
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("q8_0") && err.contains("CPU target"), "{err}");
    let runner = Runner::new(llm, opts(KvStorage::F16)).unwrap();
    assert_eq!(runner.options().kv_cache, KvStorage::F32);
}

#[test]
fn phi3_long_rope_is_refused() {
    let dir = edited_copy("phi3", "config.json", |c| {
        c["rope_parameters"]["rope_type"] = "longrope".into();
    });
    let msg = load(dir.path()).unwrap_err().to_string();
    assert!(msg.contains("'longrope' is not supported"), "{msg}");
}

/// A GGUF v3 file for `llama` with the metadata the config needs, `extra` f32 entries, and a
/// `token_embd.weight` [16, 8] f32 tensor.
fn llama_gguf(extra: &[(&str, f32)]) -> Vec<u8> {
    let mut kv: Vec<(String, u32, Vec<u8>)> = Vec::new();
    let mut s = Vec::new();
    gguf_string(&mut s, "llama");
    kv.push(("general.architecture".into(), 8, s));
    for (k, v) in [
        ("embedding_length", 8u32),
        ("block_count", 1),
        ("attention.head_count", 2),
        ("context_length", 32),
        ("feed_forward_length", 16),
    ] {
        kv.push((format!("llama.{k}"), 4, v.to_le_bytes().to_vec()));
    }
    for (k, v) in extra {
        kv.push((k.to_string(), 6, v.to_le_bytes().to_vec()));
    }
    let mut b = b"GGUF".to_vec();
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&1u64.to_le_bytes());
    b.extend_from_slice(&(kv.len() as u64).to_le_bytes());
    for (k, ty, v) in &kv {
        gguf_string(&mut b, k);
        b.extend_from_slice(&ty.to_le_bytes());
        b.extend_from_slice(v);
    }
    gguf_string(&mut b, "token_embd.weight");
    b.extend_from_slice(&2u32.to_le_bytes());
    b.extend_from_slice(&8u64.to_le_bytes());
    b.extend_from_slice(&16u64.to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes()); // f32
    b.extend_from_slice(&0u64.to_le_bytes());
    b.resize(b.len().div_ceil(32) * 32, 0);
    b.extend_from_slice(&[0u8; 16 * 8 * 4]);
    b
}

#[test]
fn non_finite_or_negative_epsilons_and_rope_bases_are_errors() {
    use aneforge_models::gguf::GgufFile;
    use aneforge_models::llm::LlmConfig;
    const EPS: &str = "llama.attention.layer_norm_rms_epsilon";
    const BASE: &str = "llama.rope.freq_base";
    let good = llama_gguf(&[(EPS, 1e-5), (BASE, 10_000.0)]);
    LlmConfig::from_gguf(&GgufFile::from_bytes("good.gguf", good).unwrap()).unwrap();
    for bad in [f32::NAN, f32::INFINITY, -1.0] {
        for (key, other) in [(EPS, BASE), (BASE, EPS)] {
            let bytes = llama_gguf(&[(key, bad), (other, 1.0)]);
            let file = GgufFile::from_bytes("bad.gguf", bytes).unwrap();
            let msg = LlmConfig::from_gguf(&file).unwrap_err().to_string();
            assert!(
                msg.contains("bad.gguf") && msg.contains(key) && msg.contains(&bad.to_string()),
                "{msg}"
            );
        }
    }
    // JSON has no NaN or inf (serde_json writes null, read as absent): a negative value
    for field in ["rms_norm_eps", "rope_theta"] {
        let dir = edited_copy("llama", "config.json", |c| match field {
            "rope_theta" => c["rope_parameters"][field] = (-1.0).into(),
            _ => c[field] = (-1.0).into(),
        });
        let msg = load(dir.path()).unwrap_err().to_string();
        assert!(
            msg.contains("config.json") && msg.contains(field) && msg.contains("-1"),
            "{field}: {msg}"
        );
    }
}

#[test]
fn a_config_missing_its_sizes_is_an_error() {
    let dir = edited_copy("qwen2", "config.json", |c| {
        c.as_object_mut().unwrap().remove("hidden_size");
    });
    let msg = load(dir.path()).unwrap_err().to_string();
    assert!(msg.contains("hidden_size"), "{msg}");
}

#[test]
fn broken_smollm2_gguf_files_are_errors() {
    let model = require_model!("HuggingFaceTB/SmolLM2-135M-Instruct");
    let path = match &model.source {
        aneforge_models::ModelSource::GgufFile(file) => file.clone(),
        aneforge_models::ModelSource::Dir(dir) => dir.join("SmolLM2-135M-Instruct.Q4_1.gguf"),
    };
    let data = std::fs::read(&path).unwrap();
    let tmp = tempfile::tempdir().unwrap();

    let cut = tmp.path().join("cut.gguf");
    std::fs::write(&cut, &data[..data.len() / 2]).unwrap();
    let msg = load(&cut).unwrap_err().to_string();
    assert!(
        msg.contains("cut.gguf") && msg.contains("runs past the end"),
        "{msg}"
    );

    // the type id of the first tensor info (right after its name and dimensions) set to 99
    let file = aneforge_models::gguf::GgufFile::open(&path).unwrap();
    let first = &file.tensors()[0];
    let needle: Vec<u8> = [
        &(first.name.len() as u64).to_le_bytes()[..],
        first.name.as_bytes(),
    ]
    .concat();
    let at = data
        .windows(needle.len())
        .rposition(|w| w == needle.as_slice())
        .unwrap();
    let type_at = at + needle.len() + 4 + 8 * first.dims.len();
    let mut unknown = data.clone();
    unknown[type_at..type_at + 4].copy_from_slice(&99u32.to_le_bytes());
    let bad = tmp.path().join("unknown_type.gguf");
    std::fs::write(&bad, unknown).unwrap();
    let msg = load(&bad).unwrap_err().to_string();
    assert!(
        msg.contains("unknown_type.gguf") && msg.contains("99") && msg.contains(&first.name),
        "{msg}"
    );
}

fn small_runner(llm: Arc<Llm>, max_context: usize) -> Runner {
    let opts = RunnerOptions {
        max_context,
        min_context: 16,
        prefill_chunks: vec![8],
        ..RunnerOptions::default()
    };
    Runner::new(llm, opts).unwrap()
}

fn greedy(n: usize) -> GenerateOptions {
    GenerateOptions {
        max_new_tokens: n,
        sampling: SamplingOptions::greedy(),
        stop: Vec::new(),
        stop_at_eos: false,
    }
}

#[test]
fn prompts_longer_than_the_context_and_full_contexts() {
    let llm = Arc::new(load(&tiny("llama")).unwrap());
    let mut r = small_runner(llm.clone(), 32);
    let prompt: Vec<u32> = (0..40).map(|i| 5 + i % 50).collect();
    let err = generate(&mut r, &prompt, &greedy(4), &mut |_| true).unwrap_err();
    assert!(
        matches!(
            err,
            LlmError::ContextFull {
                tokens: 40,
                context: 32,
                ..
            }
        ),
        "{err}"
    );
    assert!(err
        .to_string()
        .contains("40 tokens do not fit the context of 32"));

    // a prompt that fits leaves room for fewer tokens than asked: generation ends with the
    // context full (28 prompt and 4 generated tokens in the caches, a 5th sampled from the last)
    let g = generate(&mut r, &prompt[..28], &greedy(10), &mut |_| true).unwrap();
    assert_eq!((g.tokens.len(), r.len()), (5, 32));
    assert_eq!(
        g.finish,
        aneforge_models::llm::FinishReason::ContextFull,
        "{:?}",
        g.finish
    );
    let err = r.feed(&[5]).unwrap_err();
    assert!(matches!(err, LlmError::ContextFull { .. }), "{err}");

    assert!(matches!(
        generate(&mut r, &[], &greedy(1), &mut |_| true).unwrap_err(),
        LlmError::EmptyPrompt
    ));
}

#[test]
fn token_ids_outside_the_vocabulary_are_refused() {
    let llm = Arc::new(load(&tiny("gpt2")).unwrap());
    let vocab = llm.config.vocab_size as u32;
    let mut r = small_runner(llm, 32);
    for bad in [vocab, vocab + 7, u32::MAX] {
        let err = generate(&mut r, &[1, 2, bad], &greedy(2), &mut |_| true).unwrap_err();
        match &err {
            LlmError::TokenOutOfRange { id, vocab: v } => {
                assert_eq!((*id, *v), (u64::from(bad), vocab as usize));
            }
            other => panic!("{other}"),
        }
        assert!(err.to_string().contains(&bad.to_string()), "{err}");
    }
    // the runner is still usable and holds nothing of the refused prompts
    assert_eq!(r.len(), 0);
    let g = generate(&mut r, &[1, 2, vocab - 1], &greedy(2), &mut |_| true).unwrap();
    assert_eq!(g.tokens.len(), 2);
}

#[test]
fn chat_templates_that_fail_are_errors() {
    let messages = [ChatMessage::new("user", "hello")];
    let cases: [(&str, &str); 4] = [
        (
            "{% if messages[0]['role'] == 'user' %}{{ raise_exception('Conversations must start with a system message') }}{% endif %}",
            "Conversations must start with a system message",
        ),
        ("{% for message in messages %}{{ message.content }", "does not compile"),
        ("{{ messages[0].content | no_such_filter }}", "no_such_filter"),
        (
            "{% for i in range(5000) %}{% for j in range(5000) %}x{% endfor %}{% endfor %}",
            "failed to render",
        ),
    ];
    for (template, expected) in cases {
        let dir = edited_copy("qwen2", "tokenizer_config.json", |c| {
            c["chat_template"] = template.into();
        });
        let llm = load(dir.path()).unwrap();
        let err = match llm.chat() {
            Err(e) => e,
            Ok(t) => t.render(&messages, true).unwrap_err().into(),
        };
        let msg = err.to_string();
        assert!(msg.contains(expected), "{template}: {msg}");
    }

    // a string doubled 64 times, printed as it grows: the output is capped, not the machine's RAM
    let doubling = "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{{ ns.s }}{% set ns.s = ns.s ~ ns.s %}{% endfor %}";
    let template = ChatTemplate::new(doubling, None, None).unwrap();
    let msg = template.render(&messages, true).unwrap_err().to_string();
    assert!(msg.contains("exceeds") && msg.contains("bytes"), "{msg}");

    let dir = edited_copy("qwen2", "tokenizer_config.json", |c| {
        c.as_object_mut().unwrap().remove("chat_template");
    });
    let msg = load(dir.path()).unwrap().chat().unwrap_err().to_string();
    assert!(msg.contains("chat template"), "{msg}");
}

/// The decode count is the tokens generated: a one-token prompt (or the one uncached token of a
/// repeated prompt) is prefill, so `max_new_tokens = 0` reports no decode.
#[test]
fn decode_counts_only_generated_tokens() {
    let llm = Arc::new(load(&tiny("llama")).unwrap());
    let mut r = small_runner(llm, 32);
    for (prompt, n) in [(&[1u32][..], 0), (&[1, 2, 3][..], 0), (&[1, 2, 3][..], 2)] {
        let g = generate(&mut r, prompt, &greedy(n), &mut |_| true).unwrap();
        assert_eq!(g.tokens.len(), n);
        assert_eq!(
            g.timings.decode_tokens,
            g.tokens.len().saturating_sub(1),
            "{prompt:?} -n {n}"
        );
        assert_eq!(
            g.timings.prefill_tokens, g.prefill_tokens,
            "{prompt:?} -n {n}"
        );
    }
}
