//! The `Model` runtime API: port metadata, errors for bad names, dtypes, lengths and unset inputs,
//! the compile cache, and program directories.

use aneforge::engine::{compile_count, HostSlice, HostTensor};
use aneforge::graph::{constant, input, DType, HostArray, Tensor};
use aneforge::{compile, compile_named, AneArch, CompileOptions, Target};

fn graph(weight_scale: f32) -> Tensor {
    let x = input("x", &[2, 4], DType::F32).unwrap();
    let w: Vec<f32> = (0..32).map(|i| (i as f32 - 16.0) * weight_scale).collect();
    let w = constant(HostArray::from_f32(&[8, 4], w).unwrap());
    x.linear(&w, None).unwrap().gelu().unwrap()
}

#[test]
fn ports_describe_the_program() {
    let y = graph(0.1);
    let m = compile(&[&y], &CompileOptions::default()).unwrap();
    assert_eq!(m.input_names(), ["x"]);
    assert_eq!(m.output_names(), ["output_0"]);
    assert_eq!(m.outputs()[0].shape, [2, 8]);
    assert_eq!(m.inputs()[0].mil_dtype, aneforge_mil::DType::Fp32);
    let ane = CompileOptions {
        target: Target::Ane(AneArch::default()),
        ..CompileOptions::default()
    };
    let m16 = compile(&[&y], &ane).unwrap();
    assert_eq!(m16.inputs()[0].mil_dtype, aneforge_mil::DType::Fp16);
    assert!(m16
        .mil_text()
        .contains("func main<ios18>(tensor<fp16, [2, 4]> x)"));
}

#[test]
fn bad_runtime_input_is_an_error() {
    let y = graph(0.1);
    let mut m = compile(&[&y], &CompileOptions::default()).unwrap();
    let eight = [0.0f32; 8];
    let msg = |e: aneforge::Error| e.to_string();
    let e = msg(m.run(&[("nope", HostSlice::F32(&eight))]).unwrap_err());
    assert!(e.contains("nope") && e.contains("ports: x"), "{e}");
    let e = msg(m.run(&[("x", HostSlice::F32(&[0.0; 7]))]).unwrap_err());
    assert!(e.contains("7") && e.contains("[2, 4]"), "{e}");
    let e = msg(m.run(&[("x", HostSlice::I32(&[0; 8]))]).unwrap_err());
    assert!(e.contains("i32") && e.contains("fp32"), "{e}");
    let e = msg(m.run(&[]).unwrap_err());
    assert!(e.contains("never set"), "{e}");
    let e = msg(m
        .run(&[("x", HostSlice::F32(&eight)), ("x", HostSlice::F32(&eight))])
        .unwrap_err());
    assert!(e.contains("twice"), "{e}");
    assert!(m.read_output("missing").is_err());
    let e = msg(m.share_buffer("output_0", "x").unwrap_err());
    assert!(e.contains("share_buffer"), "{e}");
    let out = m.run(&[("x", HostSlice::F32(&eight))]).unwrap();
    assert!(matches!(&out[0], HostTensor::F32(v) if v.len() == 16));
    let e = msg(m.share_buffer("output_0", "x").unwrap_err());
    assert!(e.contains("share_buffer"), "{e}");
}

#[test]
fn duplicate_and_invalid_names_are_errors() {
    let a = input("x", &[2], DType::F32).unwrap();
    let b = input("x", &[2], DType::F32).unwrap();
    let s = a.add(&b).unwrap();
    let e = compile(&[&s], &CompileOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("\"x\""), "{e}");
    let e = compile_named(&[("x", &a.relu().unwrap())], &CompileOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("\"x\""), "{e}");
    let e = compile_named(&[("bad name", &a)], &CompileOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("bad name"), "{e}");
    assert!(compile(&[], &CompileOptions::default()).is_err());
}

#[test]
fn identical_graphs_compile_once() {
    let first = compile(&[&graph(0.125)], &CompileOptions::default()).unwrap();
    let again = compile(&[&graph(0.125)], &CompileOptions::default()).unwrap();
    let hash = first.artifact().content_hash();
    assert_eq!(hash, again.artifact().content_hash());
    assert_eq!(first.mil_text(), again.mil_text());
    assert_eq!(compile_count(&hash), 1);
    let other = compile(&[&graph(0.25)], &CompileOptions::default()).unwrap();
    assert_ne!(other.artifact().content_hash(), hash);
    assert_eq!(compile_count(&other.artifact().content_hash()), 1);
}

/// Programs whose text is the same and whose blobs differ in one weight hash differently (the
/// hash covers the blob through its entries' content keys).
#[test]
fn a_changed_blob_weight_changes_the_hash() {
    let program = |bump: f32| {
        let x = input("x", &[2, 64], DType::F32).unwrap();
        let mut w: Vec<f32> = (0..64 * 64).map(|i| (i % 7) as f32 * 0.01).collect();
        w[1000] += bump;
        let w = constant(HostArray::from_f32(&[64, 64], w).unwrap());
        compile(&[&x.linear(&w, None).unwrap()], &CompileOptions::default()).unwrap()
    };
    let (a, b, c) = (program(0.0), program(0.5), program(0.0));
    assert_eq!(a.mil_text(), b.mil_text());
    assert_ne!(a.weights(), b.weights());
    assert_ne!(a.artifact().content_hash(), b.artifact().content_hash());
    assert_eq!(a.artifact().content_hash(), c.artifact().content_hash());
}

#[test]
fn constants_are_deduplicated_and_large_ones_go_to_the_blob() {
    let x = input("x", &[64], DType::F32).unwrap();
    let data: Vec<f32> = (0..64).map(|i| i as f32).collect();
    let c1 = constant(HostArray::from_f32(&[64], data.clone()).unwrap());
    let c2 = constant(HostArray::from_f32(&[64], data).unwrap());
    let y = x.add(&c1).unwrap().mul(&c2).unwrap();
    let m = compile(&[&y], &CompileOptions::default()).unwrap();
    assert_eq!(
        m.mil_text().matches("BLOBFILE").count(),
        1,
        "{}",
        m.mil_text()
    );
    let blob = aneforge_mil::BlobFile::from_vec("w", m.weights().to_vec()).unwrap();
    assert_eq!(blob.entries().count(), 1);
    let dead = x.sqrt().unwrap();
    drop(dead);
    assert!(!m.mil_text().contains("sqrt"));
}

#[test]
fn saved_program_directory_parses_back() {
    let y = graph(0.1);
    let m = compile(&[&y], &CompileOptions::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    m.save(dir.path()).unwrap();
    let text = std::fs::read_to_string(dir.path().join("model.mil")).unwrap();
    assert_eq!(&aneforge_mil::parse(&text).unwrap(), m.program());
    let weights = std::fs::read(dir.path().join("weights/weight.bin")).unwrap();
    assert_eq!(&weights, m.weights());
}

#[test]
fn zero_copy_views_feed_and_expose_ports() {
    use aneforge::engine::{BufferMut, BufferRef};
    for target in [Target::Cpu, Target::Ane(AneArch::default())] {
        let x = input("x", &[3], DType::F32).unwrap();
        let y = x.mul_scalar(2.0).unwrap().add_scalar(0.5).unwrap();
        let options = CompileOptions {
            target: target.clone(),
            ..CompileOptions::default()
        };
        let mut m = compile_named(&[("y", &y)], &options).unwrap();
        match m.input_view_mut("x").unwrap() {
            BufferMut::F32(v) => v.copy_from_slice(&[1.0, -2.0, 0.25]),
            BufferMut::F16(v) => {
                for (d, s) in v.iter_mut().zip([1.0f32, -2.0, 0.25]) {
                    *d = half::f16::from_f32(s);
                }
            }
            other => panic!(
                "{target}: unexpected input buffer {:?}",
                std::mem::discriminant(&other)
            ),
        }
        m.execute().unwrap();
        let got: Vec<f32> = match m.output_view("y").unwrap() {
            BufferRef::F32(v) => v.to_vec(),
            BufferRef::F16(v) => v.iter().map(|h| h.to_f32()).collect(),
            other => panic!(
                "{target}: unexpected output buffer {:?}",
                std::mem::discriminant(&other)
            ),
        };
        assert_eq!(got, [2.5, -3.5, 1.0], "{target}");
        m.release();
    }
}

#[test]
fn parameters_compile_as_preloaded_inputs_or_frozen_constants() {
    use aneforge::graph::parameter;
    use aneforge::ParameterMode;
    let w = parameter("w", HostArray::from_f32(&[2], vec![3.0, -1.0]).unwrap()).unwrap();
    let x = input("x", &[2], DType::F32).unwrap();
    let y = x.mul(&w).unwrap();
    let mut as_input = compile_named(&[("y", &y)], &CompileOptions::default()).unwrap();
    assert_eq!(as_input.input_names(), ["w", "x"]);
    let out = as_input
        .run_f32(&[("x", HostSlice::F32(&[2.0, 5.0]))])
        .unwrap();
    assert_eq!(out[0], [6.0, -5.0]);
    as_input
        .set_input("w", HostSlice::F32(&[1.0, 1.0]))
        .unwrap();
    let out = as_input
        .run_f32(&[("x", HostSlice::F32(&[2.0, 5.0]))])
        .unwrap();
    assert_eq!(out[0], [2.0, 5.0]);
    let frozen = CompileOptions {
        parameters: ParameterMode::Constant,
        ..CompileOptions::default()
    };
    let mut as_const = compile_named(&[("y", &y)], &frozen).unwrap();
    assert_eq!(as_const.input_names(), ["x"]);
    let out = as_const
        .run_f32(&[("x", HostSlice::F32(&[2.0, 5.0]))])
        .unwrap();
    assert_eq!(out[0], [6.0, -5.0]);
}

#[test]
fn bool_ports_take_and_give_bools() {
    let mask = input("mask", &[4], DType::Bool).unwrap();
    let x = input("x", &[4], DType::F32).unwrap();
    let picked = mask.select(&x, &x.neg().unwrap()).unwrap();
    let positive = x.gt(&aneforge::graph::scalar(0.0)).unwrap();
    let mut m = compile_named(
        &[("picked", &picked), ("positive", &positive)],
        &CompileOptions::default(),
    )
    .unwrap();
    assert_eq!(m.inputs()[0].mil_dtype, aneforge_mil::DType::Fp32);
    let out = m
        .run(&[
            ("mask", HostSlice::Bool(&[true, false, true, false])),
            ("x", HostSlice::F32(&[1.0, 2.0, -3.0, -4.0])),
        ])
        .unwrap();
    assert!(matches!(&out[0], HostTensor::F32(v) if v == &[1.0, -2.0, -3.0, 4.0]));
    assert!(matches!(&out[1], HostTensor::Bool(v) if v == &[true, true, false, false]));
}
