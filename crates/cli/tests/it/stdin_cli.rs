//! Texts and prompts from stdin: `embed`, `rerank` and `generate` read stdin when given no texts,
//! and take `-` for stdin wherever they take a file; `-f/--file` reads a file.

use crate::common;

use std::io::Write;
use std::process::{Command, Output, Stdio};

fn aneforge(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_aneforge"))
        .args(args)
        .env_remove("RUST_BACKTRACE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.as_bytes()).unwrap();
    drop(input);
    child.wait_with_output().unwrap()
}

fn stdout(args: &[&str], stdin: &str) -> String {
    let out = aneforge(args, stdin);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn embed_reads_texts_from_stdin_a_dash_or_a_file() {
    let model = common::repo("tools/fixtures/out/st_tiny");
    let want = stdout(&["embed", "-m", &model, "the king", "a queen"], "");
    let rows: Vec<Vec<f32>> = serde_json::from_str(&want).unwrap();
    assert_eq!(rows.len(), 2);
    let piped = "the king\na queen\n";
    assert_eq!(stdout(&["embed", "-m", &model], piped), want);
    assert_eq!(stdout(&["embed", "-m", &model, "-"], piped), want);
    assert_eq!(stdout(&["embed", "-m", &model, "-f", "-"], piped), want);
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("texts.txt");
    std::fs::write(&file, piped).unwrap();
    assert_eq!(
        stdout(
            &["embed", "-m", &model, "-f", file.to_str().unwrap()],
            "ignored\n"
        ),
        want
    );
    assert_eq!(stdout(&["embed", "-m", &model], ""), "[]\n");
}

#[test]
fn rerank_reads_passages_from_stdin() {
    let model = common::repo("tools/fixtures/encoders/out/ce_bert");
    let args = [
        "rerank", "-m", &model, "--query", "love", "--format", "json",
    ];
    let mut with_passages = args.to_vec();
    with_passages.extend(["to be or not to be", "a horse"]);
    let want = stdout(&with_passages, "");
    let entries: Vec<serde_json::Value> = serde_json::from_str(&want).unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!(stdout(&args, "to be or not to be\na horse\n"), want);
}

#[test]
fn generate_reads_the_prompt_from_stdin_a_dash_or_a_file() {
    let model = common::repo("tools/fixtures/llm/out/tiny/llama");
    let prompt = "ROMEO: But soft, what light";
    let common = ["generate", "-m", &model, "-n", "8", "--temperature", "0"];
    let with = |extra: &[&str], stdin: &str| {
        let mut args = common.to_vec();
        args.extend(extra);
        stdout(&args, stdin)
    };
    let want = with(&[prompt], "");
    assert!(!want.trim().is_empty());
    assert_eq!(with(&[], &format!("{prompt}\n")), want);
    assert_eq!(with(&["-"], &format!("{prompt}\n")), want);
    assert_eq!(with(&["-p", prompt], ""), want);
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("prompt.txt");
    std::fs::write(&file, format!("{prompt}\n")).unwrap();
    assert_eq!(with(&["-f", file.to_str().unwrap()], ""), want);
    assert_ne!(with(&["a different prompt"], ""), want);
}
