//! `aneforge export DIR -o NAME.mlpackage` and `compile --mlpackage`: Core ML packages of program
//! directories.

use crate::common;

use std::path::Path;
use std::process::Output;

fn aneforge(args: &[&str]) -> Output {
    common::run(args)
}

fn ok(args: &[&str]) {
    let out = aneforge(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The package holds a manifest naming the model spec, a model spec (protobuf, whose strings are
/// stored as they are) describing the program's function, and the program's weights unchanged.
fn assert_package(package: &Path, program: &Path) {
    let manifest = std::fs::read_to_string(package.join("Manifest.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&manifest).unwrap();
    let root = v["rootModelIdentifier"].as_str().unwrap();
    assert_eq!(
        v["itemInfoEntries"][root]["path"],
        "com.apple.CoreML/model.mlmodel"
    );
    let data = package.join("Data/com.apple.CoreML");
    let spec = std::fs::read(data.join("model.mlmodel")).unwrap();
    let dir = aneforge_mil::ProgramDir::load(program).unwrap();
    let contains = |needle: &str| spec.windows(needle.len()).any(|w| w == needle.as_bytes());
    assert!(contains("exported by aneforge"));
    for op in &dir.program.functions[0].body.operations {
        assert!(contains(&op.op_type), "{}", op.op_type);
    }
    assert_eq!(
        std::fs::read(data.join("weights/weight.bin")).unwrap(),
        std::fs::read(program.join("weights/weight.bin")).unwrap()
    );
}

#[test]
fn export_writes_a_core_ml_package_of_a_program_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = tmp.path().join("mlp");
    ok(&[
        "compile",
        "mlp",
        "--target",
        "h16",
        "-o",
        prog.to_str().unwrap(),
    ]);
    let package = tmp.path().join("mlp.mlpackage");
    ok(&[
        "export",
        prog.to_str().unwrap(),
        "-o",
        package.to_str().unwrap(),
    ]);
    assert_package(&package, &prog);

    let direct = tmp.path().join("direct.mlpackage");
    let prog2 = tmp.path().join("mlp2");
    ok(&[
        "compile",
        "mlp",
        "--target",
        "h16",
        "-o",
        prog2.to_str().unwrap(),
        "--mlpackage",
        direct.to_str().unwrap(),
    ]);
    assert_package(&direct, &prog2);

    let out = aneforge(&["export", prog.to_str().unwrap(), "-o", "x.zip"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains(".mlpackage"));
}
