//! An installed binary works outside the checkout: run from an empty directory, the demo and the
//! digits CNN use their built-in data and write nothing to the working directory (checkpoints go
//! to `--output` or `$XDG_DATA_HOME/aneforge`).

use std::path::Path;
use std::process::{Command, Output};

/// The binary, copied out of the build tree and run with `cwd` as the working directory.
fn installed(bin_dir: &Path, cwd: &Path, args: &[&str], data_home: &Path) -> Output {
    let bin = bin_dir.join("aneforge");
    if !bin.exists() {
        std::fs::copy(env!("CARGO_BIN_EXE_aneforge"), &bin).unwrap();
    }
    let out = Command::new(&bin)
        .args(args)
        .current_dir(cwd)
        .env("XDG_DATA_HOME", data_home)
        .env_remove("ANEFORGE_TARGET")
        .env_remove("ANEFORGE_E5RT_LIB")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn demo_and_digits_run_from_any_directory_with_built_in_data() {
    let tmp = tempfile::tempdir().unwrap();
    let (bin, cwd, data) = (
        tmp.path().join("bin"),
        tmp.path().join("cwd"),
        tmp.path().join("data"),
    );
    for d in [&bin, &cwd, &data] {
        std::fs::create_dir_all(d).unwrap();
    }
    let demo = [
        "demo",
        "--steps",
        "1",
        "--val-batches",
        "1",
        "--eval-every",
        "0",
        "--sample-chars",
        "4",
    ];
    let out = installed(&bin, &cwd, &demo, &data);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("data/shakespeare.txt (built in)"), "{text}");
    let checkpoint = data.join("aneforge/demo/checkpoint.safetensors");
    assert!(checkpoint.is_file(), "{text}");
    assert!(text.contains(&checkpoint.display().to_string()), "{text}");
    assert!(entries(&cwd).is_empty(), "{:?}", entries(&cwd));

    let chosen = tmp.path().join("chosen");
    let mut args = demo.to_vec();
    args.extend(["-o", chosen.to_str().unwrap()]);
    installed(&bin, &cwd, &args, &data);
    assert!(chosen.join("checkpoint.safetensors").is_file());
    assert!(entries(&cwd).is_empty(), "{:?}", entries(&cwd));

    let out = installed(&bin, &cwd, &["train-digits", "--epochs", "1"], &data);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("data/digits.csv (built in)") && text.contains("test accuracy"),
        "{text}"
    );
    assert!(entries(&cwd).is_empty(), "{:?}", entries(&cwd));
}
