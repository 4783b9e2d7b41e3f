//! One spelling of each flag across commands: `--format text|json|jsonl` (with `--json` kept),
//! `-o/--output`, `--compress`, `-t/--threads`, and llama.cpp's `-p`, `--temp`, `-c`, `-s`, `-f`
//! and an unmistakable `--draft-model`.

use crate::common;

use std::process::Output;

fn aneforge(args: &[&str]) -> Output {
    common::run(args)
}

fn stdout(args: &[&str]) -> String {
    let out = aneforge(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn stderr(args: &[&str]) -> String {
    let out = aneforge(args);
    assert!(!out.status.success(), "{args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn json_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

#[test]
fn format_json_and_jsonl_mean_the_same_everywhere() {
    let ce = common::repo("tools/fixtures/encoders/out/ce_bert");
    let rerank = |format: &[&str]| {
        let mut args = vec!["rerank", "-m", &ce, "--query", "q", "a horse", "a king"];
        args.extend(format);
        stdout(&args)
    };
    let array: Vec<serde_json::Value> =
        serde_json::from_str(&rerank(&["--format", "json"])).unwrap();
    assert_eq!(array.len(), 2);
    assert_eq!(json_lines(&rerank(&["--format", "jsonl"])), array);
    assert_eq!(json_lines(&rerank(&["--json"])), array);
    assert_eq!(rerank(&[]).lines().count(), 2);

    let st = common::repo("tools/fixtures/out/st_tiny");
    let rows: Vec<serde_json::Value> =
        serde_json::from_str(&stdout(&["embed", "-m", &st, "a", "b"])).unwrap();
    let lines = json_lines(&stdout(&[
        "embed", "-m", &st, "a", "b", "--format", "jsonl",
    ]));
    assert_eq!(lines, rows);

    let targets: Vec<serde_json::Value> =
        serde_json::from_str(&stdout(&["targets", "--format", "json"])).unwrap();
    let h13 = targets.iter().find(|t| t["arch"] == "h13").unwrap();
    assert_eq!(h13["family"], "A13/M1");
    assert!(
        h13["aliases"].as_array().unwrap().contains(&"m1".into()),
        "{h13}"
    );
    let ops = json_lines(&stdout(&["ops", "--target", "m1", "--format", "jsonl"]));
    let sin = ops
        .iter()
        .find(|r| r["kind"] == "graph" && r["op"] == "sin")
        .unwrap();
    assert_eq!(sin["status"], "rewritten");

    let tmp = tempfile::tempdir().unwrap();
    let prog = tmp.path().join("mlp");
    stdout(&[
        "compile",
        "mlp",
        "--target",
        "h16",
        "-o",
        prog.to_str().unwrap(),
    ]);
    let ports = json_lines(&stdout(&[
        "run",
        prog.to_str().unwrap(),
        "--ports",
        "--format",
        "jsonl",
    ]));
    assert!(ports.iter().any(|p| p["role"] == "input"), "{ports:?}");
    assert!(ports.iter().all(|p| p["shape"].is_array()), "{ports:?}");

    let o = stdout(&["bench", "overhead", "--reps", "1", "--format", "json"]);
    assert!(json_lines(&o)[0]["best_us"].as_f64().is_some(), "{o}");
    assert!(
        stderr(&["rerank", "-m", &ce, "--query", "q", "--format", "xml", "a"]).contains("jsonl")
    );
}

#[test]
fn threads_size_the_cpu_engine() {
    let llama = common::repo("tools/fixtures/llm/out/tiny/llama");
    for threads in ["1", "3"] {
        let text = stdout(&[
            "bench",
            "llm",
            "-m",
            &llama,
            "--prompt-tokens",
            "4",
            "--decode-tokens",
            "2",
            "--repeat",
            "1",
            "-t",
            threads,
            "--format",
            "jsonl",
        ]);
        let v = &json_lines(&text)[0];
        assert_eq!(v["threads"].to_string(), threads, "{v}");
    }
    let st = common::repo("tools/fixtures/out/st_tiny");
    stdout(&["embed", "-m", &st, "--threads", "1", "x"]);
    assert!(stderr(&["embed", "-m", &st, "-t", "0", "x"]).contains("--threads"));
}

#[test]
fn llama_cpp_spellings_of_the_sampling_and_context_flags() {
    let llama = common::repo("tools/fixtures/llm/out/tiny/llama");
    let long = stdout(&[
        "generate",
        "-m",
        &llama,
        "ROMEO:",
        "-n",
        "12",
        "--temperature",
        "0.9",
        "--seed",
        "7",
        "--ctx",
        "256",
    ]);
    let short = stdout(&[
        "generate", "-m", &llama, "-p", "ROMEO:", "-n", "12", "--temp", "0.9", "-s", "7", "-c",
        "256",
    ]);
    assert_eq!(short, long);
    let err = stderr(&["generate", "-m", &llama, "-p", "ROMEO:", "-c", "4"]);
    assert!(err.contains("context of 4"), "{err}");
}

#[test]
fn draft_model_is_spelled_out_and_the_old_flag_still_works() {
    let llama = common::repo("tools/fixtures/llm/out/tiny/llama");
    let args = [
        "generate", "-m", &llama, "ROMEO:", "-n", "10", "--temp", "0",
    ];
    let plain = stdout(&args);
    for flag in ["--draft-model", "--draft"] {
        let mut with = args.to_vec();
        with.extend([flag, &llama, "--draft-k", "3"]);
        let out = aneforge(&with);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8(out.stdout).unwrap(), plain);
        assert!(String::from_utf8_lossy(&out.stderr).contains("speculative:"));
    }
}

#[test]
fn compress_takes_the_same_values_everywhere() {
    let llama = common::repo("tools/fixtures/llm/out/tiny/llama");
    let args = ["generate", "-m", &llama, "ROMEO:", "-n", "6", "--temp", "0"];
    let plain = stdout(&args);
    for value in ["none", "dense", "stored"] {
        let mut with = args.to_vec();
        with.extend(["--compress", value]);
        assert_eq!(stdout(&with), plain, "--compress {value}");
    }
    let st = common::repo("tools/fixtures/out/st_tiny");
    let vit = common::repo("tools/fixtures/vision/out/hf_vit/vit");
    let clip = common::repo("tools/fixtures/vision/out/hf_vit/clip");
    for err in [
        stderr(&["embed", "-m", &st, "--compress", "int3", "x"]),
        stderr(&[
            "compile",
            "mlp",
            "-o",
            "/nonexistent/x",
            "--compress",
            "int3",
        ]),
        stderr(&["generate", "-m", &llama, "x", "--compress", "int3"]),
        stderr(&["classify", "-m", &vit, "--compress", "int3", "x.png"]),
        stderr(&["embed", "-m", &clip, "--compress", "int3", "a cat"]),
    ] {
        assert!(
            err.contains("--compress int3: expected none") && err.contains("int8"),
            "{err}"
        );
    }
    let err = stderr(&["classify", "-m", &vit, "--compress", "int8", "x.png"]);
    assert!(
        err.contains("--compress int8 re-encodes the weights of ANE programs"),
        "{err}"
    );
}

#[test]
fn output_is_dash_o_for_files_and_directories() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = tmp.path().join("mlp");
    stdout(&[
        "compile",
        "mlp",
        "--target",
        "h16",
        "-o",
        prog.to_str().unwrap(),
    ]);
    assert!(prog.join("model.mil").is_file());
    let legacy = tmp.path().join("legacy");
    stdout(&[
        "compile",
        "mlp",
        "--target",
        "h16",
        "--out",
        legacy.to_str().unwrap(),
    ]);
    assert!(legacy.join("model.mil").is_file());

    let st = common::repo("tools/fixtures/out/st_tiny");
    let npy = tmp.path().join("e.npy");
    stdout(&[
        "embed",
        "-m",
        &st,
        "x",
        "--format",
        "npy",
        "-o",
        npy.to_str().unwrap(),
    ]);
    assert!(npy.is_file());
}
