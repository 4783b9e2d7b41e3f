//! The ANE-engine suite on the e5rt simulator: results must equal the CPU engine's bit for bit.

mod ane_support;

use ane_support::suite::{self, Agreement};
use ane_support::{sim_engine, sim_engine_with};
use aneforge::engine::AneOptions;

const SAME: Agreement = Agreement::Identical;

#[test]
fn fp16_programs_match_the_cpu_engine() {
    let scratch = tempfile::tempdir().unwrap();
    suite::fp16_programs_match_the_cpu_engine(&sim_engine(scratch.path()), scratch.path(), SAME);
}

#[test]
fn accumulator_state_stays_resident() {
    let scratch = tempfile::tempdir().unwrap();
    suite::accumulator(&sim_engine(scratch.path()), scratch.path(), SAME);
}

#[test]
fn kv_cache_one_hot_writes() {
    let scratch = tempfile::tempdir().unwrap();
    suite::kv_cache_onehot(&sim_engine(scratch.path()), scratch.path(), SAME);
}

#[test]
fn kv_cache_slice_update_writes() {
    let scratch = tempfile::tempdir().unwrap();
    suite::kv_cache_slice_update(&sim_engine(scratch.path()), scratch.path(), SAME);
}

#[test]
fn training_steps_update_a_resident_weight() {
    let scratch = tempfile::tempdir().unwrap();
    suite::training_step(&sim_engine(scratch.path()), scratch.path(), SAME);
}

#[test]
fn misuse_is_reported() {
    let scratch = tempfile::tempdir().unwrap();
    suite::misuse_is_reported(&sim_engine(scratch.path()), scratch.path());
}

#[test]
fn resident_state_survives_release_under_the_program_limit() {
    let scratch = tempfile::tempdir().unwrap();
    // one program loaded at a time: the two programs evict each other on every execute
    let engine = sim_engine_with(
        AneOptions {
            max_loaded_programs: 1,
            ..AneOptions::default()
        },
        scratch.path(),
    );
    let a = scratch.path().join("a");
    let b = scratch.path().join("b");
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    suite::accumulator(&engine, &a, SAME);
    suite::training_step(&engine, &b, SAME);
    let evicting = engine.stats().evictions;
    // interleave two resident programs
    let mut first = engine.load_dir(&a.join("accumulator")).unwrap();
    let mut second = engine.load_dir(&b.join("training_step")).unwrap();
    first.share_buffer("acc_out", "acc").unwrap();
    second.share_buffer("w_out", "w").unwrap();
    use aneforge::engine::{Executable, HostSlice};
    first.set_input("acc", HostSlice::F32(&[0.0; 6])).unwrap();
    first.set_input("x", HostSlice::F32(&[1.0; 6])).unwrap();
    second.set_input("x", HostSlice::F32(&[0.0; 8])).unwrap();
    second.set_input("y", HostSlice::F32(&[0.0; 6])).unwrap();
    for k in 1..=4 {
        first.execute().unwrap();
        second.execute().unwrap();
        assert_eq!(first.read_output_f32("acc_out").unwrap(), vec![k as f32; 6]);
    }
    assert!(
        engine.stats().evictions >= evicting + 8,
        "every execute reloaded: {:?}",
        engine.stats()
    );
    assert_eq!(engine.stats().loaded, 1);
}

#[test]
fn programs_on_several_threads_share_one_engine() {
    let scratch = tempfile::tempdir().unwrap();
    let engine = sim_engine(scratch.path());
    let dir = ane_support::write_program(
        scratch.path(),
        "acc",
        "program(1.3)\n{\n    func main<ios18>(tensor<fp32, [16]> x, tensor<fp32, [16]> acc) {\n            tensor<fp32, [16]> acc_out = add(x = acc, y = x)[name = string(\"acc_out\")];\n        } -> (acc_out);\n}\n",
        None,
    );
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let engine = engine.clone();
            let dir = dir.clone();
            std::thread::spawn(move || {
                use aneforge::engine::{Executable, HostSlice};
                let mut program = engine.load_dir(&dir).unwrap();
                program.share_buffer("acc_out", "acc").unwrap();
                program
                    .set_input("x", HostSlice::F32(&[t as f32 + 1.0; 16]))
                    .unwrap();
                for _ in 0..25 {
                    program.execute().unwrap();
                }
                program.read_output_f32("acc_out").unwrap()
            })
        })
        .collect();
    for (t, handle) in threads.into_iter().enumerate() {
        assert_eq!(handle.join().unwrap(), vec![25.0 * (t as f32 + 1.0); 16]);
    }
}

#[test]
fn the_op_suite_hook_runs_an_in_memory_program_on_both_engines() {
    let scratch = tempfile::tempdir().unwrap();
    let engine = sim_engine(scratch.path());
    let mut blob = aneforge_mil::BlobWriter::new();
    let w: Vec<half::f16> = suite::data(12, 5)
        .into_iter()
        .map(half::f16::from_f32)
        .collect();
    let at = blob.add_f16(&w);
    let text = format!(
        "program(1.3)\n{{\n    func main<ios18>(tensor<fp16, [2, 4]> x) {{\n            tensor<fp16, [3, 4]> w = const()[name = string(\"w\"), val = tensor<fp16, [3, 4]>(BLOBFILE(path = string(\"@model_path/weights/weight.bin\"), offset = uint64({at})))];\n            tensor<fp16, [2, 3]> y = linear(x = x, weight = w)[name = string(\"y\")];\n        }} -> (y);\n}}\n"
    );
    let program =
        aneforge_mil::ProgramDir::with_weights(aneforge_mil::parse(&text).unwrap(), blob.finish())
            .unwrap();
    let trace = suite::run_program_dir(
        &engine,
        &program,
        &[],
        &[vec![("x", suite::data(8, 6))]],
        SAME,
    );
    assert_eq!(trace[0]["y"].len(), 6);
}

#[test]
fn a_w8a8_program_matches_the_cpu_engine() {
    use aneforge::graph::{constant, input, DType, HostArray};
    use aneforge::{
        compile_program, AneArch, Calibration, FunctionSpec, ParameterMode, ProgramOptions,
        Quantize, Target, W8A8,
    };
    let scratch = tempfile::tempdir().unwrap();
    let weight = |shape: &[usize], seed: u64| {
        let n = shape.iter().product();
        constant(HostArray::from_f32(shape, suite::data(n, seed)).unwrap())
    };
    let x = input("x", &[2, 16], DType::F32).unwrap();
    let h = x
        .linear(&weight(&[32, 16], 11), None)
        .unwrap()
        .relu()
        .unwrap();
    let y = h.linear(&weight(&[8, 32], 12), None).unwrap();
    let compiled = compile_program(
        &[FunctionSpec {
            name: "main",
            outputs: &[("y", &y)],
        }],
        &ProgramOptions {
            target: Target::Ane(AneArch::new("h16").unwrap()),
            parameters: ParameterMode::Constant,
            quantize: Quantize::W8A8(W8A8::new(
                Calibration::stacked("x", 4, &suite::data(4 * 32, 13)).unwrap(),
            )),
            ..ProgramOptions::default()
        },
    )
    .unwrap();
    let artifact = compiled.into_artifact().unwrap();
    assert!(artifact.mil_text().contains("= quantize("));
    let dir = scratch.path().join("w8a8");
    artifact.save(&dir).unwrap();
    let engine = sim_engine(scratch.path());
    suite::compare(
        &engine,
        &dir,
        &[],
        &[vec![("x", suite::data(32, 14))]],
        SAME,
    );
}
