//! The tiny fixture models compiled for an ANE target (fp16, host embeddings, one-hot cache
//! writes, the target's legalization) and run on the CPU engine's fp16 semantics, against the fp32
//! CPU target (itself checked against transformers in llm_tiny.rs); and prefill plus one decode
//! step through the ANE engine on the e5rt simulator.
//!
//! fp16 moves logits, so a greedy token is only required to match where the fp32 run's top-2
//! margin exceeds twice the fp16 run's largest logit deviation at that step (then no deviation
//! of that size can reorder the top two). Both runs see the same tokens (teacher forcing), so the
//! free-running fp16 generation must equal transformers' tokens up to the first step without
//! that guarantee.

use crate::llm_fixtures;
use aneforge_models::llm::sampling::{argmax, top2_margin as margin};
use std::path::PathBuf;
use std::sync::Arc;

use aneforge::engine::{AneEngine, AneOptions};
use aneforge::{AneArch, Engine, Target};
use aneforge_models::llm::{
    generate, GenerateOptions, Llm, LoadOptions, Runner, SamplingOptions, WeightFormat,
};
use llm_fixtures::{file_ints, tiny};

use aneforge_models::testing::TINY_LLM_FAMILIES as FAMILIES;

/// A tiny fixture model as stored, its prompt and transformers' greedy tokens.
fn tiny_with_greedy(family: &str) -> (Arc<Llm>, Vec<u32>, Vec<u32>) {
    let llm = Llm::load(
        tiny(family).to_str().unwrap(),
        LoadOptions::new(WeightFormat::Stored),
    )
    .unwrap();
    let expected = tiny(family).join("expected.safetensors");
    (
        Arc::new(llm),
        file_ints(&expected, "prompt_ids"),
        file_ints(&expected, "greedy_ids"),
    )
}

fn runner(llm: Arc<Llm>, target: Target, engine: Engine) -> Runner {
    llm_fixtures::small_runner(llm, target, engine, 16)
}

fn ane() -> Target {
    Target::Ane(AneArch::default())
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .fold(0f32, |m, (&x, &y)| m.max((x - y).abs()))
}

/// Largest fp16 logit deviation relative to the largest |logit|: fp16 keeps 11 significant bits
/// (unit roundoff 4.9e-4) and every op rounds its result, so a two-layer model's logits stay
/// within a few dozen roundoffs of fp32.
const FP16_RELATIVE: f32 = 2e-2;

#[test]
fn ane_target_in_fp16_follows_the_greedy_tokens_where_margins_allow() {
    for family in FAMILIES {
        let (llm, prompt, want) = tiny_with_greedy(family);
        let mut fp32 = runner(llm.clone(), Target::Cpu, Engine::Cpu);
        let mut fp16 = runner(llm.clone(), ane(), Engine::Cpu);
        let text = fp16.artifact(0).unwrap().mil_text().to_string();
        assert!(text.contains("fp16"), "{family}: not an fp16 program");

        let mut a = fp32.feed(&prompt).unwrap();
        let mut b = fp16.feed(&prompt).unwrap();
        let mut guaranteed = want.len();
        let (mut checked, mut worst) = (0, 0f32);
        for (i, &tok) in want.iter().enumerate() {
            assert_eq!(argmax(&a), tok, "{family} step {i}: fp32 run");
            let dev = max_abs_diff(&a, &b);
            let scale = a.iter().fold(0f32, |m, &x| m.max(x.abs()));
            worst = worst.max(dev / scale);
            assert!(
                dev <= FP16_RELATIVE * scale,
                "{family} step {i}: fp16 logits deviate by {dev} (largest |logit| {scale})"
            );
            if margin(&a) > 2.0 * dev {
                assert_eq!(
                    argmax(&b),
                    tok,
                    "{family} step {i}: margin {} > 2 × {dev}",
                    margin(&a)
                );
                checked += 1;
            } else {
                guaranteed = guaranteed.min(i);
            }
            a = fp32.feed(&[tok]).unwrap();
            b = fp16.feed(&[tok]).unwrap();
        }
        assert!(
            checked > want.len() / 2,
            "{family}: only {checked} steps had a safe margin"
        );

        let mut free = runner(llm, ane(), Engine::Cpu);
        let opts = GenerateOptions {
            max_new_tokens: want.len(),
            sampling: SamplingOptions::greedy(),
            stop: Vec::new(),
            stop_at_eos: false,
        };
        let g = generate(&mut free, &prompt, &opts, &mut |_| true).unwrap();
        assert_eq!(g.tokens[..guaranteed], want[..guaranteed], "{family}");
        eprintln!(
            "{family}: largest relative fp16 logit deviation {worst:.2e}; {checked}/{} steps with a safe margin; identical through step {guaranteed}; free run identical: {}",
            want.len(),
            g.tokens == want
        );
    }
}

fn simulator_library() -> PathBuf {
    e5rt_sim::test_library_path().unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn prefill_and_a_decode_step_through_the_ane_engine_on_the_simulator() {
    AneEngine::install_global(AneOptions {
        library: Some(simulator_library()),
        program_cache: Some(std::env::temp_dir().join("aneforge-llm-test-programs")),
        ..AneOptions::default()
    })
    .unwrap();
    // a dense family, the mixtures of experts (routing by compare/select in the program; a
    // shared expert and a dense layer among sparse ones in Qwen2-MoE, whole-projection q/k norms
    // in OLMoE), fused projections and soft-capped attention
    for family in [
        "llama",
        "qwen3_moe",
        "mixtral",
        "phi3",
        "gemma2",
        "qwen2_moe",
        "olmoe",
    ] {
        let (llm, prompt, want) = tiny_with_greedy(family);
        let mut on_ane = runner(llm.clone(), ane(), Engine::Ane);
        let mut on_cpu = runner(llm.clone(), ane(), Engine::Cpu);
        let mut fp32 = runner(llm, Target::Cpu, Engine::Cpu);
        for (step, tokens) in [&prompt[..], &want[..1]].into_iter().enumerate() {
            let a = on_ane.feed(tokens).unwrap();
            let c = on_cpu.feed(tokens).unwrap();
            let r = fp32.feed(tokens).unwrap();
            // the simulator executes the same fp16 program with the CPU engine's fp16 semantics
            let dev = max_abs_diff(&a, &c);
            assert_eq!(dev, 0.0, "{family} step {step}: ANE engine vs CPU engine");
            let to_fp32 = max_abs_diff(&a, &r);
            let want_tok = want[step];
            assert_eq!(argmax(&r), want_tok, "{family}");
            if margin(&r) > 2.0 * to_fp32 {
                assert_eq!(argmax(&a), want_tok, "{family} step {step}");
            }
        }
        assert_eq!(on_ane.len(), prompt.len() + 1);
        // sliding-window layers keep rings here (16-token steps in a 128-token bucket): the
        // rest of the greedy tokens wrap them, the one-hot writes landing at ring rows
        let llm = on_ane.llm().clone();
        let cfg = &llm.config;
        if cfg.attention_window().is_some() {
            let a = on_ane.feed(&want[1..]).unwrap();
            let c = on_cpu.feed(&want[1..]).unwrap();
            assert_eq!(max_abs_diff(&a, &c), 0.0, "{family}: wrapped rings");
            // against fp32 over whole-context caches (one 128-token step: no ring)
            let mut whole =
                llm_fixtures::small_runner(on_ane.llm().clone(), Target::Cpu, Engine::Cpu, 128);
            let r = whole.feed(&[&prompt[..], &want[..]].concat()).unwrap();
            let scale = r.iter().fold(0f32, |m, x| m.max(x.abs()));
            let dev = max_abs_diff(&a, &r) / scale;
            assert!(dev < FP16_RELATIVE, "{family}: {dev} from fp32");
            let l = (0..cfg.n_layers).find(|&l| cfg.window_at(l).is_some());
            let ring = on_ane.cache_layout(l.unwrap(), 128);
            assert!(
                ring.rows() < 128 && on_ane.len() > ring.capacity(),
                "{family}: {ring:?} for {} tokens",
                on_ane.len()
            );
        }
    }
}
