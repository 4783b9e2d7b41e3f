//! Program directories: save/load round trip, atomic replacement, errors naming the file, and
//! the byte-exact size of a weights.bin.

use aneforge_mil::*;
use std::path::Path;

fn linear_program(weight_offset: u64, bias_offset: u64) -> Program {
    let blob = |shape: &[usize], offset| Literal::Blob {
        ty: TensorType::new(DType::Fp16, shape),
        path: WEIGHTS_PATH.into(),
        offset,
    };
    let mut f = Function::new("main", "ios18");
    f.inputs
        .push(NamedValue::new("x", TensorType::new(DType::Fp16, &[1, 64])));
    f.body.operations = vec![
        Operation::new("const")
            .with_output("w", TensorType::new(DType::Fp16, &[32, 64]))
            .with_attribute("name", Literal::string("w"))
            .with_attribute("val", blob(&[32, 64], weight_offset)),
        Operation::new("const")
            .with_output("b", TensorType::new(DType::Fp16, &[32]))
            .with_attribute("name", Literal::string("b"))
            .with_attribute("val", blob(&[32], bias_offset)),
        Operation::new("linear")
            .with_input("x", Argument::name("x"))
            .with_input("weight", Argument::name("w"))
            .with_input("bias", Argument::name("b"))
            .with_output("y", TensorType::new(DType::Fp16, &[1, 32]))
            .with_attribute("name", Literal::string("y")),
    ];
    f.body.outputs = vec!["y".into()];
    Program {
        version: "1.3".into(),
        attributes: vec![],
        functions: vec![f],
    }
}

fn linear_dir() -> ProgramDir {
    let mut w = BlobWriter::new();
    let weights: Vec<half::f16> = (0..32 * 64)
        .map(|i| half::f16::from_f32(i as f32 / 64.0))
        .collect();
    let wo = w.add_f16(&weights);
    let bo = w.add_f16(&[half::f16::from_f32(0.5); 32]);
    ProgramDir::with_weights(linear_program(wo, bo), w.finish()).unwrap()
}

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn save_then_load_gives_the_same_program_and_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("prog");
    let original = linear_dir();
    original.save(&dir).unwrap();
    assert_eq!(entries(&dir), vec!["model.mil", "weights"]);
    assert_eq!(entries(&dir.join("weights")), vec!["weight.bin"]);
    assert_eq!(
        std::fs::read_to_string(dir.join("model.mil")).unwrap(),
        print(&original.program)
    );

    let loaded = ProgramDir::load(&dir).unwrap();
    assert_eq!(loaded.program, original.program);
    assert_eq!(
        loaded.blobs[WEIGHTS_PATH].bytes(),
        original.blobs[WEIGHTS_PATH].bytes()
    );
    let s = loaded.summary();
    assert_eq!(s.parameters, 32 * 64 + 32);
    assert_eq!(s.bytes_by_dtype[&DType::Fp16], (32 * 64 + 32) * 2);
    assert_eq!(s.ops_by_kind["const"], 2);
    assert_eq!(s.ops_by_kind["linear"], 1);
    assert!(
        s.to_string()
            .contains("main<ios18>: 1 inputs, 1 outputs, 3 ops"),
        "{s}"
    );
}

#[test]
fn save_replaces_an_existing_directory_and_leaves_no_staging() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("prog");
    std::fs::create_dir_all(dir.join("weights")).unwrap();
    std::fs::write(dir.join("stale.txt"), "old").unwrap();
    linear_dir().save(&dir).unwrap();
    assert_eq!(entries(&dir), vec!["model.mil", "weights"]);
    assert_eq!(entries(tmp.path()), vec!["prog"]);
}

#[test]
fn an_invalid_program_is_not_saved() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("prog");
    let mut bad = linear_dir();
    bad.program.functions[0].body.outputs = vec!["nowhere".into()];
    let e = bad.save(&dir).unwrap_err();
    assert!(
        e.to_string().contains("output 'nowhere' is not defined"),
        "{e}"
    );
    assert!(!dir.exists());
    assert!(entries(tmp.path()).is_empty());
}

#[test]
fn load_errors_name_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("prog");
    linear_dir().save(&dir).unwrap();

    let e = ProgramDir::load(tmp.path().join("absent")).unwrap_err();
    assert!(e.to_string().contains("absent/model.mil"), "{e}");

    std::fs::remove_file(dir.join("weights/weight.bin")).unwrap();
    let e = ProgramDir::load(&dir).unwrap_err();
    assert!(e.to_string().contains("weights/weight.bin"), "{e}");

    let text = std::fs::read_to_string(dir.join("model.mil")).unwrap();
    std::fs::write(dir.join("model.mil"), text.replace("linear(", "linear(,")).unwrap();
    let e = ProgramDir::load(&dir).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("model.mil: line 6, column"), "{msg}");

    std::fs::write(
        dir.join("model.mil"),
        text.replace(WEIGHTS_PATH, "@model_path/../escape.bin"),
    )
    .unwrap();
    let e = ProgramDir::load(&dir).unwrap_err();
    assert!(
        e.to_string()
            .contains("must name a file inside the program directory"),
        "{e}"
    );

    std::fs::write(
        dir.join("model.mil"),
        text.replace(WEIGHTS_PATH, "/etc/passwd"),
    )
    .unwrap();
    let e = ProgramDir::load(&dir).unwrap_err();
    assert!(e.to_string().contains("starting with @model_path/"), "{e}");

    // A weights file whose descriptor disagrees with the program.
    let mut w = BlobWriter::new();
    let wo = w.add_f16(&[half::f16::ZERO; 16]);
    let bo = w.add_f16(&[half::f16::ZERO; 32]);
    std::fs::write(dir.join("weights/weight.bin"), w.finish()).unwrap();
    std::fs::write(dir.join("model.mil"), print(&linear_program(wo, bo))).unwrap();
    let e = ProgramDir::load(&dir).unwrap_err().to_string();
    assert!(e.contains("model.mil: 1 problem:"), "{e}");
    assert!(e.contains("op 'w' (const #0)"), "{e}");
    assert!(
        e.contains("holds 32 payload bytes, but tensor<fp16, [32, 64]> needs 4096"),
        "{e}"
    );
}

#[test]
fn a_1024_by_1024_fp16_matrix_gives_a_2097280_byte_weights_bin() {
    let values = vec![half::f16::from_f32(0.25); 1024 * 1024];
    let mut w = BlobWriter::new();
    let offset = w.add_f16(&values);
    assert_eq!(offset, 64);
    let bytes = w.finish();
    assert_eq!(bytes.len(), 2_097_280);

    let mut f = Function::new("main", "ios18");
    f.body.operations.push(
        Operation::new("const")
            .with_output("w", TensorType::new(DType::Fp16, &[1024, 1024]))
            .with_attribute(
                "val",
                Literal::Blob {
                    ty: TensorType::new(DType::Fp16, &[1024, 1024]),
                    path: WEIGHTS_PATH.into(),
                    offset,
                },
            ),
    );
    f.body.outputs.push("w".into());
    let program = Program {
        version: "1.3".into(),
        attributes: vec![],
        functions: vec![f],
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("big");
    ProgramDir::with_weights(program, bytes)
        .unwrap()
        .save(&dir)
        .unwrap();
    assert_eq!(
        std::fs::metadata(dir.join("weights/weight.bin"))
            .unwrap()
            .len(),
        2_097_280
    );
    let loaded = ProgramDir::load(&dir).unwrap();
    let payload = loaded.blobs[WEIGHTS_PATH]
        .payload(64, &TensorType::new(DType::Fp16, &[1024, 1024]))
        .unwrap();
    assert_eq!(payload.len(), 2 * 1024 * 1024);
    assert_eq!(&payload[..2], &half::f16::from_f32(0.25).to_le_bytes());
    assert_eq!(loaded.summary().parameters, 1024 * 1024);
}
