//! The `Model` API on `Engine::Ane` (the simulator installed as the process-wide ANE engine):
//! ANE-target graphs give exactly the CPU engine's results, state stays resident, and parameters
//! start at their initial values.

mod ane_support;

use aneforge::engine::{Engine, EngineKind, HostSlice};
use aneforge::graph::{constant, input, parameter, DType, HostArray, Tensor};
use aneforge::{compile_named, AneArch, CompileOptions, Target};

fn options(engine: Engine) -> CompileOptions {
    CompileOptions {
        target: Target::Ane(AneArch::default()),
        engine,
        ..CompileOptions::default()
    }
}

fn mlp() -> Tensor {
    let x = input("x", &[2, 4], DType::F32).unwrap();
    let w: Vec<f32> = (0..32).map(|i| (i as f32 - 16.0) * 0.07).collect();
    let w = constant(HostArray::from_f32(&[8, 4], w).unwrap());
    x.linear(&w, None)
        .unwrap()
        .gelu()
        .unwrap()
        .softmax(-1)
        .unwrap()
}

#[test]
fn ane_target_graphs_match_the_cpu_engine_exactly() {
    ane_support::install_simulator();
    let y = mlp();
    let mut on_cpu = compile_named(&[("y", &y)], &options(Engine::Cpu)).unwrap();
    let mut on_ane = compile_named(&[("y", &y)], &options(Engine::Ane)).unwrap();
    let x: Vec<f32> = (0..8).map(|i| i as f32 * 0.3 - 1.0).collect();
    let cpu = on_cpu.run_f32(&[("x", HostSlice::F32(&x))]).unwrap();
    let ane = on_ane.run_f32(&[("x", HostSlice::F32(&x))]).unwrap();
    ane_support::suite::Agreement::Identical.check("mlp", &ane[0], &cpu[0]);
}

#[test]
fn resident_state_and_parameters_through_the_model_api() {
    ane_support::install_simulator();
    let init = vec![0.5f32, -1.0, 2.0, 0.25];
    let w = parameter("w", HostArray::from_f32(&[4], init.clone()).unwrap()).unwrap();
    let x = input("x", &[4], DType::F32).unwrap();
    let next = w.mul_scalar(0.5).unwrap().add(&x).unwrap();
    let mut models: Vec<_> = [Engine::Cpu, Engine::Ane]
        .into_iter()
        .map(|engine| {
            let mut m = compile_named(&[("w_next", &next)], &options(engine)).unwrap();
            m.share_buffer("w_next", "w").unwrap();
            m
        })
        .collect();
    for step in 0..5 {
        let xs: Vec<f32> = (0..4).map(|i| (i + step) as f32 * 0.125).collect();
        let outs: Vec<Vec<f32>> = models
            .iter_mut()
            .map(|m| {
                m.run_f32(&[("x", HostSlice::F32(&xs))]).unwrap();
                m.read_output_f32("w_next").unwrap()
            })
            .collect();
        ane_support::suite::Agreement::Identical.check("w_next", &outs[1], &outs[0]);
    }
}

#[test]
fn engine_selection_resolves_to_the_installed_simulator() {
    let engine = ane_support::install_simulator();
    assert_eq!(EngineKind::Ane.select().unwrap(), Engine::Ane);
    assert_eq!(EngineKind::Auto.select().unwrap(), Engine::Ane);
    assert_eq!(Engine::auto(), Engine::Ane);
    // installing again on the same library is fine; on another one it is an error
    ane_support::install_simulator();
    let err = aneforge::engine::AneEngine::install_global(aneforge::engine::AneOptions {
        library: Some("/elsewhere/libe5rt.so".into()),
        ..Default::default()
    })
    .unwrap_err();
    assert!(err.to_string().contains("already open on"), "{err}");
    assert_eq!(engine.library_path(), ane_support::simulator_library());
}
