//! `aneforge finetune` as a process on the tiny random-weight models (tools/fixtures/llm): a
//! learning-rate schedule with warmup drives the steps and the result is written as the family's
//! Hugging Face checkpoint; bad schedule settings are refused before anything is loaded.

use crate::common::{repo, run};
use safetensors::SafeTensors;

fn tiny(family: &str) -> String {
    repo(&format!("tools/fixtures/llm/out/tiny/{family}"))
}

/// A small training text in `dir`.
fn write_text(dir: &std::path::Path) -> std::path::PathBuf {
    let data = dir.join("d.txt");
    std::fs::write(
        &data,
        "to be or not to be, that is the question ".repeat(20),
    )
    .unwrap();
    data
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn bad_schedules_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("d.txt");
    std::fs::write(&data, "to be or not to be ".repeat(20)).unwrap();
    let base = |extra: &[&str]| {
        let mut args = vec![
            "finetune",
            "-m",
            "MODEL",
            "--data",
            data.to_str().unwrap(),
            "-o",
            dir.path().to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        args.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    let model = tiny("llama");
    let call = |extra: &[&str]| {
        let args: Vec<String> = base(extra)
            .into_iter()
            .map(|a| if a == "MODEL" { model.clone() } else { a })
            .collect();
        run(&args.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let out = call(&["--lr-schedule", "cosine_with_restarts"]);
    let e = stderr(&out);
    assert!(!out.status.success());
    assert!(
        e.contains("unknown learning-rate schedule \"cosine_with_restarts\"")
            && e.contains("valid: constant, linear, cosine"),
        "{e}"
    );
    let out = call(&["--merged-out", dir.path().to_str().unwrap()]);
    let e = stderr(&out);
    assert!(!out.status.success());
    assert!(
        e.contains("--merged-out") && e.contains("needs --lora-rank"),
        "{e}"
    );
    let out = call(&["--steps", "10", "--warmup-steps", "11"]);
    let e = stderr(&out);
    assert!(!out.status.success());
    assert!(
        e.contains("--warmup-steps")
            && e.contains("11 warmup steps are more than the 10 training steps"),
        "{e}"
    );
}

/// Ten steps of GPT-2 under a linear schedule with three warmup steps print the rates
/// transformers' `get_linear_schedule_with_warmup(3, 10)` gives at lr 1e-3 (`lr.linear_10_3` of
/// tools/fixtures/train/export_check.py) and write GPT-2's checkpoint layout (Conv1D `[in, out]`
/// matrices, fused `c_attn`, the tied head left out).
#[test]
fn finetune_follows_the_schedule_and_writes_the_family_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let data = write_text(dir.path());
    let out_dir = dir.path().join("out");
    let model = tiny("gpt2");
    let out = run(&[
        "finetune",
        "-m",
        &model,
        "--data",
        data.to_str().unwrap(),
        "--steps",
        "10",
        "--batch",
        "1",
        "--seq",
        "16",
        "--lr",
        "1e-3",
        "--lr-schedule",
        "linear",
        "--warmup-steps",
        "3",
        "-o",
        out_dir.to_str().unwrap(),
    ]);
    let e = stderr(&out);
    assert!(out.status.success(), "{e}");
    let fixture = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tools/fixtures/train/out/export_check.safetensors"),
    )
    .unwrap();
    let fixture = SafeTensors::deserialize(&fixture).unwrap();
    let rates: Vec<f64> = fixture
        .tensor("lr.linear_10_3")
        .unwrap()
        .data()
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(rates.len(), 10);
    for (i, rate) in rates.iter().enumerate() {
        let step = i + 1;
        let line = e
            .lines()
            .find(|l| l.starts_with(&format!("step {step:>5}/10: ")))
            .unwrap_or_else(|| panic!("no step {step} in {e}"));
        assert!(line.contains(&format!("lr {rate:.3e},")), "{line}");
    }
    let bytes = std::fs::read(out_dir.join("model.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let c_attn = st.tensor("transformer.h.0.attn.c_attn.weight").unwrap();
    assert_eq!(c_attn.shape(), [64, 192]);
    assert!(st.tensor("lm_head.weight").is_err());
    assert!(st.tensor("transformer.wpe.weight").is_ok());
}

/// LoRA on Gemma with --merged-out: the adapters in PEFT's layout and the merged weights as
/// Gemma's checkpoint (norms stored as `w` of `1 + w`, tied head left out).
#[test]
fn lora_run_writes_merged_weights() {
    let dir = tempfile::tempdir().unwrap();
    let data = write_text(dir.path());
    let (adapter, merged) = (dir.path().join("adapter"), dir.path().join("merged"));
    let model = tiny("gemma");
    let out = run(&[
        "finetune",
        "-m",
        &model,
        "--data",
        data.to_str().unwrap(),
        "--steps",
        "2",
        "--batch",
        "1",
        "--seq",
        "16",
        "--lora-rank",
        "4",
        "-o",
        adapter.to_str().unwrap(),
        "--merged-out",
        merged.to_str().unwrap(),
    ]);
    let e = stderr(&out);
    assert!(out.status.success(), "{e}");
    assert!(adapter.join("adapter_model.safetensors").exists());
    let bytes = std::fs::read(merged.join("model.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    assert_eq!(
        st.tensor("model.layers.0.self_attn.q_proj.weight")
            .unwrap()
            .shape(),
        [128, 64]
    );
    assert!(st.tensor("model.layers.0.input_layernorm.weight").is_ok());
    assert!(st.tensor("lm_head.weight").is_err());
}

/// The printed step lines of a finetune run (the tokens/s at their end aside).
fn losses_printed(e: &str) -> Vec<String> {
    e.lines()
        .filter(|l| l.starts_with("step "))
        .map(|l| l.split(", lr").next().unwrap_or(l).to_string())
        .collect()
}

/// `--checkpointing` recomputes each layer in the backward and trains as the run without it:
/// the same printed losses, full and LoRA, and the same written weights to f32 rounding.
#[test]
fn checkpointing_trains_as_without() {
    let dir = tempfile::tempdir().unwrap();
    let data = write_text(dir.path());
    let model = tiny("llama");
    for lora in [false, true] {
        let mut runs = Vec::new();
        for checkpointing in [false, true] {
            let out_dir = dir.path().join(format!("out_{lora}_{checkpointing}"));
            let mut args = vec![
                "finetune",
                "-m",
                &model,
                "--data",
                data.to_str().unwrap(),
                "--steps",
                "3",
                "--batch",
                "2",
                "--seq",
                "16",
                "--lr",
                "1e-3",
                "-o",
                out_dir.to_str().unwrap(),
            ];
            if lora {
                args.extend(["--lora-rank", "4", "--lora-targets", "all-linear"]);
            }
            if checkpointing {
                args.push("--checkpointing");
            }
            let out = run(&args);
            let e = stderr(&out);
            assert!(out.status.success(), "{e}");
            assert_eq!(
                e.contains("layers recomputed in the backward"),
                checkpointing,
                "{e}"
            );
            let losses = losses_printed(&e);
            assert_eq!(losses.len(), 3, "{e}");
            let file = if lora {
                "adapter_model.safetensors"
            } else {
                "model.safetensors"
            };
            runs.push((losses, std::fs::read(out_dir.join(file)).unwrap()));
        }
        assert_eq!(runs[0].0, runs[1].0, "lora {lora}: printed losses");
        let (a, b) = (
            SafeTensors::deserialize(&runs[0].1).unwrap(),
            SafeTensors::deserialize(&runs[1].1).unwrap(),
        );
        assert_eq!(a.len(), b.len());
        for (name, want) in a.tensors() {
            let got = b.tensor(&name).unwrap();
            let (got, want) = (floats_of(got.data()), floats_of(want.data()));
            let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
            let err = got
                .iter()
                .zip(&want)
                .fold(0f32, |m, (x, y)| m.max((x - y).abs()));
            // AdamW turns the rounding of near-zero gradient elements into differences of their
            // updates (finetune_tiny's recomputation test measures them)
            assert!(err <= 5e-4 * scale, "lora {lora}: {name}: {err} of {scale}");
        }
    }
}

fn floats_of(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}
