//! Tiny random-weight models of every family against transformers (fixtures from
//! tools/fixtures/llm/tiny_models.py): prompt logits at every position, 64 greedy tokens, a
//! 600-token context, the tokenizer, host-side embeddings and layer segments.

use crate::llm_fixtures;
use std::path::PathBuf;
use std::sync::Arc;

use aneforge_models::llm::cache::CacheLayout;
use aneforge_models::llm::{
    generate, GenerateOptions, KvStorage, Llm, LoadOptions, Runner, RunnerOptions, SamplingOptions,
    WeightFormat,
};
use llm_fixtures::{floats, ints};
use safetensors::SafeTensors;

use aneforge_models::testing::TINY_LLM_FAMILIES as FAMILIES;

/// Families also written as GGUF (`<family>.gguf`, llama.cpp's names and layout, the same
/// weights).
const GGUF_FAMILIES: [&str; 6] = [
    "qwen3_moe",
    "mixtral",
    "phi3",
    "gemma2",
    "qwen2_moe",
    "olmoe",
];

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tools/fixtures/llm/out/tiny")
}

struct Expected {
    prompt_ids: Vec<u32>,
    prompt_logits: Vec<f32>,
    greedy_ids: Vec<u32>,
    long_prompt_ids: Vec<u32>,
    long_greedy_ids: Vec<u32>,
}

fn expected(family: &str) -> Expected {
    let bytes = std::fs::read(fixture_dir().join(family).join("expected.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let ints = |n: &str| ints(&st, n);
    let floats = |n: &str| floats(&st, n);
    Expected {
        prompt_ids: ints("prompt_ids"),
        prompt_logits: floats("prompt_logits"),
        greedy_ids: ints("greedy_ids"),
        long_prompt_ids: ints("long_prompt_ids"),
        long_greedy_ids: ints("long_greedy_ids"),
    }
}

fn floats_of(family: &str, name: &str) -> Vec<f32> {
    let bytes = std::fs::read(fixture_dir().join(family).join("expected.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let t = st.tensor(name).unwrap();
    t.data()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn load(family: &str) -> Arc<Llm> {
    load_as(family, WeightFormat::Stored)
}

fn load_as(family: &str, format: WeightFormat) -> Arc<Llm> {
    let dir = fixture_dir().join(family);
    Arc::new(Llm::load(dir.to_str().unwrap(), LoadOptions::new(format)).unwrap())
}

fn options() -> RunnerOptions {
    RunnerOptions {
        max_context: 1024,
        min_context: 64,
        prefill_chunks: vec![16, 64],
        all_logits_chunks: vec![16],
        ..RunnerOptions::default()
    }
}

/// max |a − b| / max |b|.
fn relative_error(got: &[f32], want: &[f32]) -> f64 {
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(0f64, |m, &w| m.max(f64::from(w).abs()));
    let diff = got.iter().zip(want).fold(0f64, |m, (&g, &w)| {
        m.max((f64::from(g) - f64::from(w)).abs())
    });
    diff / scale
}

fn greedy(max_new: usize) -> GenerateOptions {
    GenerateOptions {
        max_new_tokens: max_new,
        sampling: SamplingOptions::greedy(),
        stop: Vec::new(),
        stop_at_eos: false,
    }
}

#[test]
fn tokenizer_matches_transformers() {
    let llm = load("llama");
    let want = expected("llama");
    let text = "ROMEO: But soft, what light through yonder window breaks?";
    assert_eq!(llm.encode(text).unwrap(), want.prompt_ids);
}

#[test]
fn prompt_logits_match_transformers() {
    for family in FAMILIES {
        let llm = load(family);
        let want = expected(family);
        let mut runner = Runner::new(llm.clone(), options()).unwrap();
        let got = runner.feed_all(&want.prompt_ids).unwrap();
        let err = relative_error(&got, &want.prompt_logits);
        assert!(err < 1e-4, "{family}: prompt logits relative error {err:e}");
        // the last row alone, through the generation programs
        runner.reset();
        let last = runner.feed(&want.prompt_ids).unwrap();
        let v = llm.config.vocab_size;
        let err = relative_error(&last, &want.prompt_logits[want.prompt_logits.len() - v..]);
        assert!(
            err < 1e-4,
            "{family}: last-row logits relative error {err:e}"
        );
    }
}

#[test]
fn greedy_tokens_match_transformers() {
    for family in FAMILIES {
        let llm = load(family);
        let want = expected(family);
        let mut runner = Runner::new(llm, options()).unwrap();
        let g = generate(&mut runner, &want.prompt_ids, &greedy(64), &mut |_| true).unwrap();
        assert_eq!(g.tokens, want.greedy_ids, "{family}");
    }
}

#[test]
fn six_hundred_token_context_matches_transformers() {
    for family in FAMILIES {
        let llm = load(family);
        let want = expected(family);
        let mut runner = Runner::new(llm, options()).unwrap();
        let g = generate(&mut runner, &want.long_prompt_ids, &greedy(40), &mut |_| {
            true
        })
        .unwrap_or_else(|e| panic!("{family}: {e}"));
        assert_eq!(g.tokens, want.long_greedy_ids, "{family}");
        assert_eq!(runner.len(), 600 - 1);
        // the smaller buckets' functions (and their caches) were dropped on the way
        let loaded = runner.loaded_functions();
        assert!(
            loaded.iter().all(|f| f.ends_with("_s1024")),
            "{family}: {loaded:?}"
        );
    }
}

/// Sliding-window layers keep rings once the bucket outgrows their window (Gemma 2/3's local
/// layers, every layer of Mistral and Phi-3): the long prompt fed in uneven pieces (pieces cut at
/// the ring's end, padding rows written past it) gives at every position the logits of caches
/// over the whole context; a cut back within the ring's spare rows keeps the window, a cut
/// further back starts the sequence over.
#[test]
fn sliding_window_rings_match_whole_context_caches() {
    for family in ["gemma2", "gemma3", "mistral", "phi3"] {
        let llm = load(family);
        let ids = expected(family).long_prompt_ids;
        let cfg = &llm.config;
        let windowed: Vec<usize> = (0..cfg.n_layers)
            .filter(|&l| cfg.window_at(l).is_some())
            .collect();
        assert!(!windowed.is_empty(), "{family}");
        // steps of 512 tokens would need a ring as large as the bucket: whole-context caches
        let whole_opts = RunnerOptions {
            max_context: 1024,
            min_context: 1024,
            prefill_chunks: vec![512],
            all_logits_chunks: vec![16],
            ..RunnerOptions::default()
        };
        let mut whole = Runner::new(llm.clone(), whole_opts).unwrap();
        let mut ring = Runner::new(llm.clone(), options()).unwrap();
        for l in 0..cfg.n_layers {
            assert_eq!(
                whole.cache_layout(l, 1024),
                CacheLayout::Linear { context: 1024 }
            );
            let layout = ring.cache_layout(l, 1024);
            if windowed.contains(&l) {
                assert!(layout.rows() < 256, "{family} layer {l}: {layout:?}");
            } else {
                assert_eq!(layout, CacheLayout::Linear { context: 1024 });
            }
        }
        let reference = whole.feed_all(&ids).unwrap();
        let v = cfg.vocab_size;
        let first = 7;
        ring.feed(&ids[..first]).unwrap();
        let mut got = Vec::new();
        let mut at = first;
        for piece in [16, 5, 1, 13, 16, 2, 9].into_iter().cycle() {
            if at == ids.len() {
                break;
            }
            let end = (at + piece).min(ids.len());
            got.extend(ring.feed_all(&ids[at..end]).unwrap());
            at = end;
        }
        let err = relative_error(&got, &reference[first * v..]);
        assert!(err < 1e-4, "{family}: relative error {err:e}");
        let len = ids.len();
        assert_eq!(ring.truncate(len - 3), len - 3, "{family}");
        let again = ring.feed_all(&ids[len - 3..]).unwrap();
        let err = relative_error(&again, &reference[(len - 3) * v..]);
        assert!(err < 1e-4, "{family} after a cut: relative error {err:e}");
        assert_eq!(ring.truncate(100), 0, "{family}");
        assert!(ring.is_empty());
    }
}

/// The long prompt fed in uneven pieces, alternately scored at every position and fed for the
/// last position's logits (prefill, one-token and scoring steps: moves between the functions of
/// a bucket and into larger buckets); the logits returned, in order.
fn pieces_logits(runner: &mut Runner, ids: &[u32]) -> Vec<f32> {
    let mut got = runner.feed_all(&ids[..7]).unwrap();
    let mut at = 7;
    let pieces = [16, 5, 1, 1, 13, 64, 2, 9, 1];
    for (k, piece) in pieces.into_iter().cycle().enumerate() {
        if at == ids.len() {
            return got;
        }
        let end = (at + piece).min(ids.len());
        if k % 2 == 0 {
            got.extend(runner.feed_all(&ids[at..end]).unwrap());
        } else {
            got.extend(runner.feed(&ids[at..end]).unwrap());
        }
        at = end;
    }
    got
}

/// fp16 and q8_0 KV caches (llama.cpp's cache types): the long prompt's logits stay within the
/// caches' rounding of the f32 caches' (and differ from them, so the stored form is used); the
/// CPU engine's attention reads the stored caches directly (no f32 copy of a cache in any
/// function's activations) and gives what the program's unfused ops give (`probes` runs every
/// op on its own; an fp16 rounding tie may fall the other way under fused arithmetic).
#[test]
fn fp16_and_q8_0_caches_round_only_the_cached_values() {
    for family in ["llama", "mistral", "gemma3", "qwen3"] {
        let llm = load(family);
        let ids = expected(family).long_prompt_ids;
        let mut exact_runner = Runner::new(llm.clone(), options()).unwrap();
        let exact = pieces_logits(&mut exact_runner, &ids);
        let exact_memory = exact_runner.memory();
        for (storage, bound) in [(KvStorage::F16, 2e-3), (KvStorage::Q8_0, 3e-2)] {
            let opts = RunnerOptions {
                kv_cache: storage,
                ..options()
            };
            if storage == KvStorage::Q8_0 && !llm.config.head_dim.is_multiple_of(32) {
                let err = Runner::new(llm.clone(), opts).err().unwrap().to_string();
                assert!(err.contains("multiple of 32"), "{family}: {err}");
                continue;
            }
            let mut runner = Runner::new(llm.clone(), opts.clone()).unwrap();
            let fused = pieces_logits(&mut runner, &ids);
            let err = relative_error(&fused, &exact);
            assert!(err < bound && err > 1e-6, "{family} {storage:?}: {err:e}");
            // every function left holds the 1024-position bucket's caches
            let cfg = &llm.config;
            let values: usize = (0..cfg.n_layers)
                .map(|l| 2 * cfg.n_kv_heads * runner.cache_layout(l, 1024).rows() * cfg.head_dim)
                .sum();
            let saved = KvStorage::F32.bytes(values) - storage.bytes(values);
            let memory = runner.memory();
            let ports = |m: &[(String, aneforge::MemoryReport)]| -> Vec<usize> {
                m.iter().map(|(_, r)| r.engine.unwrap().ports).collect()
            };
            let (got, f32_ports) = (ports(&memory), ports(&exact_memory));
            assert_eq!(memory.len(), exact_memory.len(), "{family} {storage:?}");
            assert!(memory.len() > 1, "{family}");
            // one function of the bucket holds the caches: the others' ports do not depend on
            // the cache type
            let differ: Vec<usize> = got
                .iter()
                .zip(&f32_ports)
                .filter(|(a, b)| a != b)
                .map(|(a, b)| b - a)
                .collect();
            assert_eq!(differ, vec![saved], "{family} {storage:?}: {memory:?}");
            for ((name, m), (_, e)) in memory.iter().zip(&exact_memory) {
                assert!(name.contains("_s1024"), "{family}: {name}");
                let (m, e) = (m.engine.unwrap(), e.engine.unwrap());
                assert!(
                    m.arena <= e.arena,
                    "{family} {storage:?} {name}: {m:?} vs f32 {e:?}"
                );
            }
            let unfused_opts = RunnerOptions {
                probes: true,
                ..opts
            };
            let unfused = pieces_logits(&mut Runner::new(llm.clone(), unfused_opts).unwrap(), &ids);
            let err = relative_error(&fused, &unfused);
            assert!(err < 2e-4, "{family} {storage:?} fused vs unfused: {err:e}");
        }
    }
}

/// The long prompt fed in pieces of the sizes `pieces`, repeated; the last position's logits
/// of each.
fn fed_logits(runner: &mut Runner, ids: &[u32], pieces: &[usize]) -> Vec<f32> {
    let mut got = Vec::new();
    for &piece in pieces.iter().cycle() {
        let at = runner.len();
        if at == ids.len() {
            return got;
        }
        got.extend(runner.feed(&ids[at..(at + piece).min(ids.len())]).unwrap());
    }
    got
}

/// The sequence started over after reaching the largest bucket, with each bucket's functions
/// still loaded (the caches are handed back to the function entering a bucket), and with more
/// step functions than a segment keeps loaded (buckets' functions evicted and reloaded): the
/// same logits.
#[test]
fn caches_follow_the_sequence_through_restarts_and_evictions() {
    let llm = load("llama");
    let ids = expected("llama").long_prompt_ids;
    // a long prefill then decode steps, started over (as `bench llm` repeats a run): the
    // prefill enters each bucket with the function the decode steps took the caches from
    let steps = (ids.len() - 48) / 64;
    let mut prefill_then_decode = vec![32];
    prefill_then_decode.resize(steps + 1, 64);
    prefill_then_decode.resize(steps + 1 + ids.len() - 32 - steps * 64, 1);
    let rounds = [
        &prefill_then_decode[..],
        &prefill_then_decode[..],
        &[5, 1, 16, 1, 3, 13][..],
    ];
    let exact: Vec<Vec<f32>> = rounds
        .iter()
        .map(|p| fed_logits(&mut Runner::new(llm.clone(), options()).unwrap(), &ids, p))
        .collect();
    for chunks in [vec![64], vec![2, 3, 5, 9, 13, 16, 64]] {
        let opts = RunnerOptions {
            prefill_chunks: chunks.clone(),
            all_logits_chunks: Vec::new(),
            ..options()
        };
        let mut runner = Runner::new(llm.clone(), opts).unwrap();
        for round in 0..3 {
            if round == 2 {
                for n in [2, 3, 5, 9, 13, 1] {
                    let at = runner.len();
                    runner.feed(&ids[at..at + n]).unwrap();
                    assert!(runner.loaded_functions().len() <= 6);
                }
                runner.reset();
            }
            let got = fed_logits(&mut runner, &ids, rounds[round]);
            let err = relative_error(&got, &exact[round]);
            assert!(err < 1e-5, "chunks {chunks:?}, round {round}: {err:e}");
            runner.reset();
        }
        // starting over keeps only the functions of the bucket the sequence is in
        runner.feed(&ids[..2]).unwrap();
        let loaded = runner.loaded_functions();
        assert!(loaded.iter().all(|f| f.ends_with("_s64")), "{loaded:?}");
    }
}

#[test]
fn host_embeddings_and_segments_give_the_same_tokens() {
    for family in ["llama", "gpt2", "gemma"] {
        let llm = load(family);
        let want = expected(family);
        let per_layer = llm.weights.layer_bytes[0];
        let opts = RunnerOptions {
            host_embeddings: true,
            segment_bytes: Some(per_layer),
            ..options()
        };
        let mut runner = Runner::new(llm, opts).unwrap();
        assert_eq!(runner.segments(), 2);
        let g = generate(&mut runner, &want.prompt_ids, &greedy(64), &mut |_| true).unwrap();
        assert_eq!(g.tokens, want.greedy_ids, "{family}");
    }
}

/// Weights quantized at load time (int8 and int4 blocks of 32) give transformers' logits for the
/// same quantized values, and the programs compute on the quantized form.
#[test]
fn requantized_weights_match_the_reference() {
    for (format, key) in [
        (WeightFormat::Int8, "prompt_logits_int8"),
        (WeightFormat::Int4, "prompt_logits_int4"),
    ] {
        for family in FAMILIES {
            let llm = load_as(family, format);
            let want = expected(family);
            let reference = floats_of(family, key);
            let mut runner = Runner::new(llm, options()).unwrap();
            let text = runner.artifact(0).unwrap().mil_text().to_string();
            assert!(
                text.contains("constexpr_blockwise_shift_scale"),
                "{family} {format:?}"
            );
            let got = runner.feed_all(&want.prompt_ids).unwrap();
            let err = relative_error(&got, &reference);
            assert!(err < 1e-4, "{family} {format:?}: relative error {err:e}");
        }
    }
}

/// The GGUF files of the same weights (llama.cpp's architecture names, stacked `ffn_*_exps`
/// experts, Llama's permuted q/k rows, the tokenizer in metadata) give transformers' logits and
/// greedy tokens.
/// Decode steps computing only the chosen experts (`linear_experts`) give transformers' greedy
/// tokens, from the Hugging Face checkpoints and the GGUF files.
#[test]
fn sparse_expert_decode_matches_transformers() {
    for family in ["qwen3_moe", "mixtral", "qwen2_moe", "olmoe"] {
        let gguf = fixture_dir().join(format!("{family}.gguf"));
        let from_gguf = Llm::load(gguf.to_str().unwrap(), LoadOptions::default()).unwrap();
        for llm in [load(family), Arc::new(from_gguf)] {
            let want = expected(family);
            let opts = RunnerOptions {
                sparse_experts: true,
                ..options()
            };
            let mut runner = Runner::new(llm, opts).unwrap();
            let g = generate(&mut runner, &want.prompt_ids, &greedy(64), &mut |_| true).unwrap();
            assert_eq!(g.tokens, want.greedy_ids, "{family}");
        }
    }
}

/// A runner that has fed `family`'s prompt, its logits checked against transformers', and the
/// MIL text of its first program.
fn prompt_logits_checked(family: &str, llm: &Arc<Llm>) -> (Runner, String) {
    let want = expected(family);
    let mut runner = Runner::new(llm.clone(), options()).unwrap();
    let got = runner.feed_all(&want.prompt_ids).unwrap();
    let err = relative_error(&got, &want.prompt_logits);
    assert!(err < 1e-4, "{family}: prompt logits relative error {err:e}");
    let text = runner.artifact(0).unwrap().mil_text().to_string();
    (runner, text)
}

/// F16 copies of the Mixtral and OLMoE GGUF files (tools/fixtures/llm/f16_gguf.py; their
/// checkpoints are F16, so the copies hold the same values): the matrices stay fp16 in the CPU
/// program (`constexpr_cast`) and the outputs are transformers' as before.
#[test]
fn f16_gguf_files_match_transformers() {
    for family in ["mixtral", "olmoe"] {
        let path = fixture_dir().join(format!("{family}_f16.gguf"));
        let llm = Arc::new(
            Llm::load(path.to_str().unwrap(), LoadOptions::default())
                .unwrap_or_else(|e| panic!("{family}: {e}")),
        );
        let want = expected(family);
        let (mut runner, text) = prompt_logits_checked(family, &llm);
        assert!(
            text.contains("constexpr_cast("),
            "{family}: no fp16 matrix kept"
        );
        runner.reset();
        let g = generate(&mut runner, &want.prompt_ids, &greedy(64), &mut |_| true).unwrap();
        assert_eq!(g.tokens, want.greedy_ids, "{family}");
    }
}

#[test]
fn gguf_files_match_transformers() {
    for family in GGUF_FAMILIES {
        let path = fixture_dir().join(format!("{family}.gguf"));
        let llm = Arc::new(
            Llm::load(path.to_str().unwrap(), LoadOptions::default())
                .unwrap_or_else(|e| panic!("{family}: {e}")),
        );
        let want = expected(family);
        let text = "ROMEO: But soft, what light through yonder window breaks?";
        assert_eq!(llm.encode(text).unwrap(), want.prompt_ids, "{family}");
        let mut runner = Runner::new(llm.clone(), options()).unwrap();
        let got = runner.feed_all(&want.prompt_ids).unwrap();
        let err = relative_error(&got, &want.prompt_logits);
        assert!(err < 1e-4, "{family}: prompt logits relative error {err:e}");
        runner.reset();
        let g = generate(&mut runner, &want.prompt_ids, &greedy(64), &mut |_| true).unwrap();
        assert_eq!(g.tokens, want.greedy_ids, "{family}");
    }
}

/// Checkpoints stored in bf16: every matrix of the CPU program stays 16 bits a value (fp16
/// scaled per row, `constexpr_blockwise_shift_scale`), and the logits are transformers' as
/// before.
#[test]
fn bf16_checkpoints_keep_their_matrices_in_fp16() {
    for family in ["llama3", "qwen2", "gemma3", "phi3"] {
        let (_, text) = prompt_logits_checked(family, &load(family));
        assert!(
            text.contains("constexpr_blockwise_shift_scale(data = tensor<fp16, ["),
            "{family}: no bf16 matrix kept in fp16"
        );
        // f32 blob entries: per-row scales, vectors and small tables, no weight matrix
        for entry in text.split("tensor<fp32, [").skip(1) {
            let Some((dims, rest)) = entry.split_once("]>") else {
                continue;
            };
            let dims: Vec<usize> = dims.split(", ").filter_map(|d| d.parse().ok()).collect();
            if rest.starts_with("(BLOBFILE") && dims.len() == 2 {
                assert!(
                    dims[1] == 1 || dims.iter().product::<usize>() <= 32 * 32,
                    "{family}: an f32 matrix {dims:?} in the program"
                );
            }
        }
    }
}
