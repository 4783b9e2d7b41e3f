//! Lowering output: program structure, naming, constants, round trip through the MIL parser.

use aneforge::graph::{constant, input, DType, HostArray};
use aneforge::lower::ParameterMode;
use aneforge::{compile_artifact, ProgramOptions};
use aneforge::{AneArch, Target};

#[test]
fn small_program_prints_and_parses() {
    let x = input("x", &[2, 3], DType::F32).unwrap();
    let w = constant(
        HostArray::from_f32(&[4, 3], (0..12).map(|i| i as f32 * 0.5).collect::<Vec<_>>()).unwrap(),
    );
    let y = x
        .linear(&w, None)
        .unwrap()
        .relu()
        .unwrap()
        .add_scalar(1.0)
        .unwrap();
    let a = compile_artifact(
        &[("y", &y)],
        &ProgramOptions::new(&Target::Cpu, ParameterMode::Input),
    )
    .unwrap();
    println!("{}", a.mil_text());
    let parsed = aneforge_mil::parse(a.mil_text()).unwrap();
    assert_eq!(&parsed, a.program());
    let h = compile_artifact(
        &[("y", &y)],
        &ProgramOptions::new(&Target::Ane(AneArch::default()), ParameterMode::Input),
    )
    .unwrap();
    println!("{}", h.mil_text());
}
