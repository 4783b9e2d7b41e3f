//! `aneforge compile --quantize w8a8 --calibration FILE.npy` as a process: the W8A8 program, its
//! report, and the errors for unusable flags and calibration files.

use crate::common;

use std::path::Path;
use std::process::Output;

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Calibration samples for the `mlp` example (input `x` of shape [1, 256]).
fn write_calibration(path: &Path, shape: &[usize]) {
    let n: usize = shape.iter().product();
    let data: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin() * 1.5).collect();
    aneforge_models::npy::write(path, shape, &data).unwrap();
}

fn compile(dir: &Path, extra: &[&str]) -> Output {
    let out = dir.join("out");
    let mut args = vec!["compile", "mlp", "-o", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    common::run(&args)
}

#[test]
fn compile_w8a8_writes_a_quantized_program_and_its_scales() {
    let dir = tempfile::tempdir().unwrap();
    let calib = dir.path().join("calib.npy");
    write_calibration(&calib, &[4, 1, 256]);
    let o = compile(
        dir.path(),
        &[
            "--target",
            "m4",
            "--quantize",
            "w8a8",
            "--calibration",
            calib.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("w8a8: 2 activations, 4 calibration samples"),
        "{stdout}"
    );
    let report = std::fs::read_to_string(dir.path().join("out/preflight.txt")).unwrap();
    assert!(
        report.contains("'linear_0' (input 'x') [1, 256]"),
        "{report}"
    );
    assert!(report.contains("output 'y': cosine"), "{report}");
    let mil = std::fs::read_to_string(dir.path().join("out/model.mil")).unwrap();
    assert_eq!(mil.matches("= quantize(").count(), 2, "{mil}");
    assert_eq!(mil.matches("= dequantize(").count(), 2, "{mil}");
}

#[test]
fn compile_w8a8_refuses_bad_flags_files_and_targets() {
    let dir = tempfile::tempdir().unwrap();
    let calib = dir.path().join("calib.npy");
    write_calibration(&calib, &[2, 1, 256]);
    let calib = calib.to_str().unwrap();
    // exit code 1 for refused inputs, 2 for a command line clap rejects
    let fails_with = |code: i32, extra: &[&str], needles: &[&str]| {
        let o = compile(dir.path(), extra);
        assert_eq!(o.status.code(), Some(code), "{extra:?}: {}", stderr(&o));
        let err = stderr(&o);
        for n in needles {
            assert!(err.contains(n), "{extra:?}: {n:?} not in {err}");
        }
    };
    let fails = |extra: &[&str], needles: &[&str]| fails_with(1, extra, needles);
    fails(
        &["--calibration", calib],
        &["--calibration is only used with --quantize w8a8"],
    );
    fails(&["--quantize", "w8a8"], &["needs --calibration"]);
    fails_with(
        2,
        &["--quantize", "w4a4", "--calibration", calib],
        &[
            "invalid value 'w4a4' for '--quantize",
            "possible values: none, w8a8",
        ],
    );
    fails(
        &[
            "--quantize",
            "w8a8",
            "--calibration",
            calib,
            "--target",
            "m1",
        ],
        &["h13", "A16"],
    );
    let missing = dir.path().join("missing.npy");
    fails(
        &[
            "--quantize",
            "w8a8",
            "--calibration",
            missing.to_str().unwrap(),
        ],
        &["missing.npy"],
    );
    let garbage = dir.path().join("garbage.npy");
    std::fs::write(&garbage, b"not a numpy file").unwrap();
    fails(
        &[
            "--quantize",
            "w8a8",
            "--calibration",
            garbage.to_str().unwrap(),
        ],
        &["garbage.npy"],
    );
    let wrong = dir.path().join("wrong.npy");
    write_calibration(&wrong, &[3, 7]);
    fails(
        &[
            "--quantize",
            "w8a8",
            "--calibration",
            wrong.to_str().unwrap(),
        ],
        &["wrong.npy", "[3, 7]", "input 'x'", "[1, 256]"],
    );
    fails(
        &[
            "--quantize",
            "w8a8",
            "--calibration",
            calib,
            "--min-cosine",
            "1.5",
        ],
        &["--min-cosine 1.5"],
    );
}

#[test]
fn import_w8a8_quantizes_an_onnx_model_and_refuses_the_cpu_target() {
    let dir = tempfile::tempdir().unwrap();
    let model = common::repo("tools/fixtures/onnx/out/small_mlp.onnx");
    let calib = common::repo("tools/fixtures/onnx/out/small_mlp_input.npy");
    let import = |target: &str, out: &str| {
        let out = dir.path().join(out);
        common::run(&[
            "import",
            &model,
            "-o",
            out.to_str().unwrap(),
            "--target",
            target,
            "--input-shape",
            "batch=3",
            "--quantize",
            "w8a8",
            "--calibration",
            &calib,
        ])
    };
    let o = import("h16", "ane");
    assert!(o.status.success(), "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("w8a8: 2 activations, 1 calibration samples"),
        "{stdout}"
    );
    assert!(stdout.contains("output 'probs': cosine"), "{stdout}");
    let mil = std::fs::read_to_string(dir.path().join("ane/model.mil")).unwrap();
    assert_eq!(mil.matches("= quantize(").count(), 2, "{mil}");
    let o = import("cpu", "cpu");
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("CPU target"), "{}", stderr(&o));
}
