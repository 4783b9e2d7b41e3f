//! `aneforge targets`, `aneforge ops` and `aneforge compile` as processes.

use crate::common;

use std::process::Output;

fn aneforge(args: &[&str], env: &[(&str, &str)]) -> Output {
    common::run_with(args, env)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn targets_lists_every_architecture_and_the_host() {
    let o = aneforge(&["targets"], &[("ANEFORGE_TARGET", "h15g")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    let rows = text
        .lines()
        .filter(|l| {
            let first = l.split_whitespace().next().unwrap_or("");
            aneforge::arch::ARCHS.iter().any(|a| a.name == first)
        })
        .count();
    assert_eq!(rows, 28, "{text}");
    assert!(
        text.contains("below MIL") && text.contains("m1=h13"),
        "{text}"
    );
    assert!(text.contains("host: h15g"), "{text}");

    let o = aneforge(&["targets"], &[]);
    assert!(o.status.success());
    assert!(stderr(&o).contains("ANEFORGE_TARGET"), "fallback warns");
}

#[test]
fn ops_prints_the_family_status_table() {
    let m1 = stdout(&aneforge(&["ops", "--target", "m1"], &[]));
    let m3 = stdout(&aneforge(&["ops", "--target", "m3"], &[]));
    let status = |text: &str, op: &str| {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(op))
            .and_then(|l| l.split_whitespace().nth(1))
            .map(str::to_string)
    };
    assert_eq!(status(&m1, "sin").as_deref(), Some("rewritten"));
    assert_eq!(status(&m3, "sin").as_deref(), Some("native"));
    assert_eq!(status(&m1, "cumsum").as_deref(), Some("rewritten"));
    assert_eq!(status(&m1, "topk").as_deref(), Some("walled"));
    assert_eq!(status(&m3, "topk").as_deref(), Some("native"));
    assert_eq!(status(&m3, "one_hot").as_deref(), Some("walled"));
    let all = stdout(&aneforge(&["ops", "--target", "h16", "--mil"], &[]));
    assert_eq!(status(&all, "conv").as_deref(), Some("native"));

    let bad = aneforge(&["ops", "--target", "h99"], &[]);
    assert!(!bad.status.success());
    assert!(
        stderr(&bad).contains("h17d") && stderr(&bad).contains("a18"),
        "{}",
        stderr(&bad)
    );
}

#[test]
fn compile_writes_program_directories_plan_and_reports() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("head");
    let o = aneforge(
        &[
            "compile",
            "lm-head",
            "--target",
            "m1",
            "--out",
            out.to_str().unwrap(),
            "--compress",
            "auto",
        ],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let program = aneforge_mil::ProgramDir::load(&out).unwrap();
    assert_eq!(program.program.functions[0].body.outputs.len(), 10);
    let plan = std::fs::read_to_string(out.join("plan.txt")).unwrap();
    assert!(
        plan.contains("output logits [1, 1, 151936] = concat(axis 2) of 0:logits__0"),
        "{plan}"
    );
    let report = std::fs::read_to_string(out.join("preflight.txt")).unwrap();
    for needle in [
        "preflight for h13",
        "wide matmul",
        "compression:",
        "not a measurement",
    ] {
        assert!(report.contains(needle), "{needle}: {report}");
    }

    let seg = dir.path().join("mlp");
    let o = aneforge(
        &[
            "compile",
            "mlp",
            "--target",
            "h16",
            "--out",
            seg.to_str().unwrap(),
            "--weight-ceiling",
            "600000",
        ],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    for i in 0..2 {
        aneforge_mil::ProgramDir::load(seg.join(format!("segment_{i}"))).unwrap();
    }
    let plan = std::fs::read_to_string(seg.join("plan.txt")).unwrap();
    assert!(plan.contains("<- segment 0 output"), "{plan}");
}

#[test]
fn compile_fails_with_the_preflight_report_or_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x");
    let o = aneforge(
        &[
            "compile",
            "embedding",
            "--target",
            "h16",
            "--out",
            out.to_str().unwrap(),
        ],
        &[],
    );
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("preflight for h16") && err.contains("gather on the host"),
        "{err}"
    );
    assert!(!out.join("model.mil").exists());

    let o = aneforge(
        &[
            "compile",
            "nope",
            "--target",
            "h16",
            "--out",
            out.to_str().unwrap(),
        ],
        &[],
    );
    assert!(stderr(&o).contains("decoder-step"), "{}", stderr(&o));
    let o = aneforge(
        &[
            "compile",
            "mlp",
            "--target",
            "h11",
            "--out",
            out.to_str().unwrap(),
        ],
        &[],
    );
    assert!(stderr(&o).contains("below the MIL floor"), "{}", stderr(&o));
    let o = aneforge(
        &[
            "compile",
            "mlp",
            "--target",
            "h16",
            "--out",
            out.to_str().unwrap(),
            "--compress",
            "int3",
        ],
        &[],
    );
    assert!(stderr(&o).contains("blockwise"), "{}", stderr(&o));
}
