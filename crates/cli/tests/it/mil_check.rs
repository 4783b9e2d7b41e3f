//! `aneforge mil check` as a process: summary on success, non-zero exit with the error otherwise.

use aneforge_mil::*;
use std::process::Command;

fn write_program_dir(dir: &std::path::Path) {
    let mut w = BlobWriter::new();
    let payload: Vec<u8> = (0..4 * 8).flat_map(|_| 0x3c00u16.to_le_bytes()).collect();
    let offset = w.add(DType::Fp16, 32, &payload).unwrap();
    let text = format!(
        "program(1.3)\n{{\n    func main<ios18>(tensor<fp16, [2, 8]> x) {{\n            \
         tensor<fp16, [4, 8]> w = const()[name = string(\"w\"), val = tensor<fp16, [4, 8]>(BLOBFILE(path = string(\"@model_path/weights/weight.bin\"), offset = uint64({offset})))];\n            \
         tensor<fp16, [2, 4]> y = linear(x = x, weight = w)[name = string(\"y\")];\n            \
         tensor<fp16, [2, 4]> z = relu(x = y)[name = string(\"z\")];\n        \
         }} -> (z);\n}}"
    );
    ProgramDir::with_weights(parse(&text).unwrap(), w.finish())
        .unwrap()
        .save(dir)
        .unwrap();
}

fn check(dir: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_aneforge"))
        .args(["mil", "check"])
        .arg(dir)
        .output()
        .unwrap()
}

#[test]
fn a_valid_directory_is_summarized() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("prog");
    write_program_dir(&dir);
    let out = check(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("main<ios18>: 1 inputs, 1 outputs, 3 ops"),
        "{stdout}"
    );
    assert!(
        stdout.contains("  const: 1\n  linear: 1\n  relu: 1\n"),
        "{stdout}"
    );
    assert!(stdout.contains("parameters: 32\n"), "{stdout}");
    assert!(stdout.contains("  fp16: 64\n"), "{stdout}");
}

#[test]
fn an_invalid_directory_fails_with_the_error() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("prog");
    write_program_dir(&dir);
    let text = std::fs::read_to_string(dir.join("model.mil")).unwrap();
    std::fs::write(
        dir.join("model.mil"),
        text.replace("relu(x = y)", "relu(x = q)"),
    )
    .unwrap();
    let out = check(&dir);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("is not a valid program directory"),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "op 'z' (relu #2): argument 'x' uses 'q', which is not defined before this op"
        ),
        "{stderr}"
    );

    std::fs::write(dir.join("weights/weight.bin"), b"short").unwrap();
    std::fs::write(dir.join("model.mil"), text).unwrap();
    let out = check(&dir);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("weight.bin: 5 bytes is shorter than the 64-byte weights.bin header"),
        "{stderr}"
    );
}

/// Endless inputs (a `model.mil` that is a symlink to /dev/zero, `run -i x=/dev/zero`,
/// `embed -f /dev/zero`) end in an error naming the file, not in reading until memory runs out.
#[cfg(unix)]
#[test]
fn endless_inputs_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let zero_prog = tmp.path().join("zero");
    std::fs::create_dir(&zero_prog).unwrap();
    std::os::unix::fs::symlink("/dev/zero", zero_prog.join("model.mil")).unwrap();
    let out = check(&zero_prog);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("model.mil: a NUL byte at 0: binary data, not MIL text"),
        "{stderr}"
    );

    let dir = tmp.path().join("prog");
    write_program_dir(&dir);
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_aneforge"))
            .args(args)
            .output()
            .unwrap()
    };
    let out = run(&["run", dir.to_str().unwrap(), "-i", "x=/dev/zero"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("/dev/zero") && stderr.contains("not a .npy file"),
        "{stderr}"
    );

    let out = run(&["embed", "-m", dir.to_str().unwrap(), "-f", "/dev/zero"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("cannot read /dev/zero")
            && stderr.contains("longer than 268435456 bytes, the limit for text input"),
        "{stderr}"
    );
}

/// `mil check` reports each function's activation arena; `--max-memory` lowers the limit a
/// program's run-time memory is checked against, and a bad value is a usage error.
#[test]
fn the_arena_is_reported_and_max_memory_applies() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("prog");
    write_program_dir(&dir);
    let out = check(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("main: activation arena ") && stdout.contains("(CPU engine)"),
        "{stdout}"
    );
    let with_limit = |limit: &str| {
        Command::new(env!("CARGO_BIN_EXE_aneforge"))
            .args(["--max-memory", limit, "mil", "check"])
            .arg(&dir)
            .output()
            .unwrap()
    };
    let out = with_limit("16");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a 16-byte limit passed");
    assert!(stderr.contains("16"), "{stderr}");
    assert!(with_limit("1G").status.success());
    let out = with_limit("lots");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("expected a positive byte count"));
}
