//! The benchmark scripts in tools/bench run on any machine: their Python defaults to an argument,
//! `$PYTHON` or `python3` on the PATH (the Python peers to their own interpreter), their data to
//! the repository's, never a path of one machine; the shell scripts parse.

use std::path::PathBuf;

#[test]
fn bench_scripts_name_no_machine_specific_python() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tools/bench");
    let mut scripts = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let Some(ext) = path.extension().and_then(|e| e.to_str()) else {
            continue;
        };
        if ext != "sh" && ext != "py" {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for line in text.lines() {
            assert!(
                !line.contains("venv-") && !line.contains("/work/"),
                "{}: {line}",
                path.display()
            );
        }
        if ext == "py" {
            continue;
        }
        scripts += 1;
        let parsed = std::process::Command::new("bash")
            .arg("-n")
            .arg(&path)
            .status()
            .unwrap();
        assert!(parsed.success(), "{}", path.display());
    }
    assert!(scripts >= 3);
}
