//! The ANE engine driven through the e5rt simulator: loading, ports, buffers, sharing, process
//! limits, and errors for misuse.

mod ane_support;

use ane_support::{sim_engine, sim_engine_with, simulator_library, write_program};
use aneforge::engine::ane::{library_path, AneError};
use aneforge::engine::{AneEngine, AneOptions};
use aneforge::engine::{BufferMut, BufferRef, Executable, HostSlice, Port};
use aneforge_mil::DType;
use half::f16;
use std::path::PathBuf;
use std::time::Duration;

const ACCUMULATE: &str = r#"program(1.3)
{
    func main<ios18>(tensor<fp16, [2, 3]> x, tensor<fp16, [2, 3]> acc) {
            tensor<fp16, [2, 3]> acc_out = add(x = acc, y = x)[name = string("acc_out")];
        } -> (acc_out);
}
"#;

fn accumulate_variant(k: usize) -> String {
    ACCUMULATE.replace("[2, 3]", &format!("[2, {}]", 3 + k))
}

#[test]
fn without_a_library_path_off_macos_the_error_says_what_is_needed() {
    if cfg!(target_os = "macos") {
        assert!(library_path(None).is_ok());
        return;
    }
    let err = library_path(None).unwrap_err();
    assert!(
        err.to_string().starts_with(
            "the ANE engine needs macOS on Apple Silicon, or ANEFORGE_E5RT_LIB pointing at an \
             e5rt implementation (such as this repo's simulator)"
        ),
        "{err}"
    );
    assert_eq!(
        library_path(Some("/x/libe5rt.so".into())).unwrap(),
        PathBuf::from("/x/libe5rt.so")
    );
}

#[test]
fn a_missing_library_is_an_error_naming_it() {
    let err = AneEngine::open(AneOptions {
        library: Some("/nonexistent/libe5rt_nothing.so".into()),
        ..AneOptions::default()
    })
    .unwrap_err();
    assert!(matches!(err, AneError::Library { .. }), "{err:?}");
    assert!(
        err.to_string().contains("/nonexistent/libe5rt_nothing.so"),
        "{err}"
    );
}

#[test]
fn a_library_without_the_e5rt_symbols_is_an_error_naming_the_first_missing_one() {
    let other = if cfg!(target_os = "macos") {
        "/usr/lib/libSystem.B.dylib"
    } else {
        "libc.so.6"
    };
    let err = AneEngine::open(AneOptions {
        library: Some(other.into()),
        ..AneOptions::default()
    })
    .unwrap_err();
    assert!(
        err.to_string().contains(
            "does not export e5rt_e5_compiler_config_options_create (looked up with and without \
             a leading underscore)"
        ),
        "{err}"
    );
}

#[test]
fn ports_come_from_function_main_and_unknown_names_are_errors() {
    let scratch = tempfile::tempdir().unwrap();
    let engine = sim_engine(scratch.path());
    let dir = write_program(scratch.path(), "acc", ACCUMULATE, None);
    let mut program = engine.load_dir(&dir).unwrap();
    let names = |ports: &[Port]| {
        ports
            .iter()
            .map(|p| (p.name.clone(), p.dtype, p.shape.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(program.inputs()),
        [
            ("x".to_string(), DType::Fp16, vec![2, 3]),
            ("acc".to_string(), DType::Fp16, vec![2, 3])
        ]
    );
    assert_eq!(
        names(program.outputs()),
        [("acc_out".to_string(), DType::Fp16, vec![2, 3])]
    );
    let err = program
        .set_input("y", HostSlice::F32(&[0.0; 6]))
        .unwrap_err();
    assert_eq!(err.to_string(), "no input port named `y` (ports: x, acc)");
    let err = program.read_output("x").unwrap_err();
    assert_eq!(err.to_string(), "no output port named `x` (ports: acc_out)");
    let err = program.share_buffer("acc_out", "nope").unwrap_err();
    assert!(err.to_string().contains("`nope`"), "{err}");
}

#[test]
fn host_data_converts_into_port_buffers_and_views_see_it() {
    let scratch = tempfile::tempdir().unwrap();
    let engine = sim_engine(scratch.path());
    let dir = write_program(scratch.path(), "acc", ACCUMULATE, None);
    let mut program = engine.load_dir(&dir).unwrap();
    let values = [0.5f32, -1.25, 3.0, 65504.0, 1e-3, -0.0];
    program.set_input("x", HostSlice::F32(&values)).unwrap();
    match program.input_view_mut("x").unwrap() {
        BufferMut::F16(v) => {
            let expected: Vec<f16> = values.iter().map(|&x| f16::from_f32(x)).collect();
            assert_eq!(v, expected.as_slice());
            v[0] = f16::from_f32(7.0);
        }
        other => panic!("fp16 port gave {other:?}"),
    }
    match program.input_view_mut("x").unwrap() {
        BufferMut::F16(v) => assert_eq!(v[0], f16::from_f32(7.0)),
        other => panic!("fp16 port gave {other:?}"),
    }
    match program.output_view("acc_out").unwrap() {
        BufferRef::F16(v) => assert!(v.iter().all(|x| *x == f16::ZERO) && v.len() == 6),
        other => panic!("fp16 port gave {other:?}"),
    }
    let err = program.set_input("x", HostSlice::I32(&[1; 6])).unwrap_err();
    assert_eq!(err.to_string(), "port `x` is fp16, host data is i32");
    let err = program
        .set_input("x", HostSlice::F32(&[1.0; 5]))
        .unwrap_err();
    assert_eq!(err.to_string(), "port `x` [2, 3] holds 6 elements, got 5");
}

#[test]
fn share_buffer_checks_its_ports() {
    let scratch = tempfile::tempdir().unwrap();
    let engine = sim_engine(scratch.path());
    let text = r#"program(1.3)
{
    func main<ios18>(tensor<fp16, [2, 3]> x, tensor<fp16, [3, 2]> other, tensor<fp16, [2, 3]> acc) {
            tensor<fp16, [2, 3]> acc_out = add(x = acc, y = x)[name = string("acc_out")];
        } -> (acc_out);
}
"#;
    let dir = write_program(scratch.path(), "p", text, None);
    let mut program = engine.load_dir(&dir).unwrap();
    let err = program.share_buffer("acc_out", "other").unwrap_err();
    assert!(
        err.to_string()
            .contains("output is fp16 [2, 3] but input is fp16 [3, 2]"),
        "{err}"
    );
    program.share_buffer("acc_out", "acc").unwrap();
    let err = program.share_buffer("acc_out", "x").unwrap_err();
    assert!(
        err.to_string().contains("output is already shared"),
        "{err}"
    );
    let err = program.share_buffer("acc_out", "acc").unwrap_err();
    assert!(err.to_string().contains("input is already shared"), "{err}");
}

#[test]
fn share_buffer_keeps_the_inputs_value_as_the_initial_state() {
    let scratch = tempfile::tempdir().unwrap();
    let engine = sim_engine(scratch.path());
    let dir = write_program(scratch.path(), "acc", ACCUMULATE, None);
    let mut program = engine.load_dir(&dir).unwrap();
    let initial = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
    program.set_input("acc", HostSlice::F32(&initial)).unwrap();
    program.share_buffer("acc_out", "acc").unwrap();
    assert_eq!(program.read_output_f32("acc_out").unwrap(), initial);
    // the input and the output are now one buffer
    match program.input_view_mut("acc").unwrap() {
        BufferMut::F16(v) => v[5] = f16::from_f32(-6.0),
        other => panic!("{other:?}"),
    }
    assert_eq!(program.read_output_f32("acc_out").unwrap()[5], -6.0);
}

#[test]
fn a_program_our_parser_rejects_is_an_error_naming_the_file_and_line() {
    let scratch = tempfile::tempdir().unwrap();
    let engine = sim_engine(scratch.path());
    let dir = write_program(
        scratch.path(),
        "bad",
        "program(1.3)\n{\n    func main<ios18>(tensor<fp16, [2]> x) {\n  junk\n    } -> (x);\n}\n",
        None,
    );
    let err = engine.load_dir(&dir).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("model.mil") && text.contains("line 4"),
        "{text}"
    );
}

const WITH_WEIGHTS: &str = r#"program(1.3)
{
    func main<ios18>(tensor<fp16, [2]> x) {
            tensor<fp16, [2]> w = const()[name = string("w"), val = tensor<fp16, [2]>(BLOBFILE(path = string("@model_path/weights/weight.bin"), offset = uint64(64)))];
            tensor<fp16, [2]> y = add(x = x, y = w)[name = string("y")];
        } -> (y);
}
"#;

#[test]
fn a_program_the_runtime_rejects_is_an_error_naming_the_call_then_backs_off() {
    let scratch = tempfile::tempdir().unwrap();
    let engine = sim_engine_with(
        AneOptions {
            compile_backoff: Duration::from_secs(3600),
            ..AneOptions::default()
        },
        scratch.path(),
    );
    // parses, but the weights file it references is missing: the simulator's compile fails
    let dir = write_program(scratch.path(), "noweights", WITH_WEIGHTS, None);
    let err = engine.load_dir(&dir).unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with("e5rt_e5_compiler_compile failed with error code"),
        "{text}"
    );
    assert!(
        text.contains("weight.bin"),
        "the runtime's message is included: {text}"
    );
    assert_eq!(engine.stats().compiles, 1);

    let again = engine.load_dir(&dir).unwrap_err();
    assert!(
        matches!(again, AneError::CompileBackoff { failures: 1, .. }),
        "{again:?}"
    );
    assert!(again.to_string().contains("weight.bin"), "{again}");
    assert_eq!(engine.stats().compiles, 1, "no compile while backing off");

    // a changed program directory is a different program: compiled at once
    let mut writer = aneforge_mil::BlobWriter::new();
    writer.add_f16(&[f16::ONE, f16::ONE]);
    std::fs::write(dir.join("weights/weight.bin"), writer.finish()).unwrap();
    engine.load_dir(&dir).unwrap();
    assert_eq!(engine.stats().compiles, 2);
}

#[test]
fn loaded_programs_stay_under_the_limit_by_releasing_the_least_recently_used() {
    let scratch = tempfile::tempdir().unwrap();
    let engine = sim_engine_with(
        AneOptions {
            max_loaded_programs: 2,
            ..AneOptions::default()
        },
        scratch.path(),
    );
    let programs: Vec<_> = (0..4)
        .map(|k| {
            let dir = write_program(
                scratch.path(),
                &format!("p{k}"),
                &accumulate_variant(k),
                None,
            );
            engine.load_dir(&dir).unwrap()
        })
        .collect();
    let stats = engine.stats();
    assert_eq!(stats.loaded, 2);
    assert_eq!(stats.evictions, 2);
    assert_eq!(stats.compiles, 4);
    drop(programs);
    assert_eq!(engine.stats().loaded, 0);
}

#[test]
fn load_caches_program_directories_by_content() {
    let scratch = tempfile::tempdir().unwrap();
    let engine = sim_engine(scratch.path());
    let program = aneforge_mil::parse(ACCUMULATE).unwrap();
    let dir = aneforge_mil::ProgramDir {
        program,
        blobs: Default::default(),
    };
    let a = engine.load(&dir).unwrap();
    let b = engine.load(&dir).unwrap();
    assert_eq!(a.dir(), b.dir());
    assert!(a
        .dir()
        .starts_with(scratch.path().join("cache").join("programs")));
    assert!(a.dir().join("model.mil").is_file());
    assert_eq!(
        std::fs::read_dir(scratch.path().join("cache").join("programs"))
            .unwrap()
            .count(),
        1,
        "no staging directories are left behind"
    );
}

#[test]
fn the_simulator_is_found_next_to_the_test_binaries() {
    assert!(simulator_library().is_file());
}

#[test]
fn opening_an_engine_removes_bundle_directories_of_ended_processes() {
    let temp = std::env::temp_dir();
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let ended = child.id();
    child.wait().unwrap();
    let dead = temp.join(format!("aneforge-e5rt-{ended}-1"));
    let live = temp.join(format!(
        "aneforge-e5rt-{}-1",
        std::os::unix::process::parent_id()
    ));
    for dir in [&dead, &live] {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("bundle"), b"x").unwrap();
    }
    let engine = AneEngine::open(AneOptions {
        library: Some(simulator_library()),
        ..AneOptions::default()
    })
    .unwrap();
    assert!(!dead.exists(), "{} was kept", dead.display());
    assert!(live.exists(), "{} was removed", live.display());
    drop(engine);
    std::fs::remove_dir_all(&live).unwrap();
}
