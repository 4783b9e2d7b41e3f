//! fp16 matrices in an fp32 program (`constexpr_cast` of an fp16 blob entry to fp32) stay fp16:
//! `linear` computes on them directly (GEMV for few rows, widened tiles + GEMM for many) and
//! `gather` widens only the rows it picks, against an f64 reference over the same f16 values.

use crate::common;
use aneforge_cpu::{compile, Activations, BlobStore, CompileOptions, HostSlice};
use aneforge_mil::{
    Argument, BlobFile, BlobWriter, DType, Literal, Operation, Program, TensorType,
};
use common::*;

const PATH: &str = "@model_path/weights/weight.bin";

/// Random f16 weights `[rows, cols]` in a blob: the store, the entry's offset and the values.
fn half_blob(rows: usize, cols: usize, rng: &mut Rng) -> (BlobStore, u64, Vec<f64>) {
    let w: Vec<half::f16> = rng
        .vec(rows * cols, -0.5, 0.5)
        .into_iter()
        .map(half::f16::from_f64)
        .collect();
    let mut writer = BlobWriter::new();
    let off = writer.add_f16(&w);
    let mut blobs = BlobStore::new();
    blobs.insert(
        PATH.to_string(),
        BlobFile::from_vec("weight.bin", writer.finish()).unwrap(),
    );
    (blobs, off, w.iter().map(|v| v.to_f64()).collect())
}

/// `w = constexpr_cast(source_val = fp16 blob, output_dtype = "fp32")` pushed into `p`.
fn half_const(p: &mut Prog, rows: usize, cols: usize, off: u64) -> String {
    let op = Operation::new("constexpr_cast")
        .with_input(
            "source_val",
            Argument::Literal(Literal::Blob {
                ty: TensorType::new(DType::Fp16, &[rows, cols]),
                path: PATH.to_string(),
                offset: off,
            }),
        )
        .with_input("output_dtype", Argument::Literal(Literal::string("fp32")))
        .with_output("w", TensorType::new(DType::Fp32, &[rows, cols]))
        .with_attribute("name", Literal::string("w"));
    p.ops.push(op);
    "w".to_string()
}

fn linear_program(rows: usize, cols: usize, m: usize, off: u64) -> (Program, String) {
    let mut p = Prog::new();
    let x = p.input("x", DType::Fp32, &[m, cols]);
    let w = half_const(&mut p, rows, cols, off);
    let y = p.op(
        "linear",
        &[("x", v(&x)), ("weight", v(&w))],
        DType::Fp32,
        &[m, rows],
    );
    p.output(&y);
    (p.build(), y)
}

#[test]
fn linear_on_fp16_weights_matches_f64() {
    // columns: blocks of 64 (the four-accumulator GEMV), of 16 only, and neither (portable)
    for (rows, cols) in [(72, 128), (33, 48), (20, 40), (24, 576)] {
        for m in [1, 2, 3, 8, 9, 40] {
            for activations in [Activations::F32, Activations::Int8, Activations::Int16] {
                let mut rng = Rng(3 + (rows * cols + m) as u64);
                let (blobs, off, ws) = half_blob(rows, cols, &mut rng);
                let (program, y) = linear_program(rows, cols, m, off);
                let options = CompileOptions {
                    activations,
                    ..CompileOptions::default()
                };
                let plan = compile(&program, "main", &blobs, &options).unwrap();
                let kinds = plan.schedule().join(" ");
                assert!(kinds.contains("matmul-"), "{kinds}");
                assert!(
                    !kinds.contains("packed"),
                    "fp16 weights were widened: {kinds}"
                );
                let xs = rng.vec(m * cols, -1.0, 1.0);
                let x32: Vec<f32> = xs.iter().map(|&v| v as f32).collect();
                let mut inst = plan.instantiate();
                inst.set_input("x", HostSlice::F32(&x32)).unwrap();
                inst.execute().unwrap();
                let got = inst.read_output_f32(&y).unwrap();
                for (i, g) in got.iter().enumerate() {
                    let (r, j) = (i / rows, i % rows);
                    let terms = (0..cols).map(|c| f64::from(x32[r * cols + c]) * ws[j * cols + c]);
                    let want: f64 = terms.clone().sum();
                    let magnitude: f64 = terms.map(f64::abs).sum();
                    let tol = 1e-5 * magnitude.max(1.0);
                    assert!(
                        (f64::from(*g) - want).abs() <= tol,
                        "{rows}x{cols} m={m} {activations:?}: element {i}: \
                         got {g}, want {want} (tol {tol})"
                    );
                }
            }
        }
    }
}

#[test]
fn gather_widens_the_picked_fp16_rows() {
    let (rows, cols) = (30, 64);
    let mut rng = Rng(11);
    let (blobs, off, ws) = half_blob(rows, cols, &mut rng);
    let mut p = Prog::new();
    let ids = p.input("ids", DType::Int32, &[3]);
    let w = half_const(&mut p, rows, cols, off);
    let y = p.op(
        "gather",
        &[("x", v(&w)), ("indices", v(&ids)), ("axis", A::I(0))],
        DType::Fp32,
        &[3, cols],
    );
    p.output(&y);
    let plan = compile(&p.build(), "main", &blobs, &CompileOptions::default()).unwrap();
    assert!(
        plan.schedule().join(" ").contains("gather-quant"),
        "{:?}",
        plan.schedule()
    );
    let mut inst = plan.instantiate();
    let pick = [29, 0, -2];
    inst.set_input("ids", HostSlice::I32(&pick)).unwrap();
    inst.execute().unwrap();
    let got = inst.read_output_f32(&y).unwrap();
    for (t, &r) in pick.iter().enumerate() {
        let r = if r < 0 { rows as i32 + r } else { r } as usize;
        for c in 0..cols {
            // widening f16 to f32 is exact
            assert_eq!(f64::from(got[t * cols + c]), ws[r * cols + c]);
        }
    }
}

#[test]
fn other_consumers_see_the_widened_values() {
    let (rows, cols) = (4, 24);
    let mut rng = Rng(13);
    let (blobs, off, ws) = half_blob(rows, cols, &mut rng);
    let mut p = Prog::new();
    let x = p.input("x", DType::Fp32, &[rows, cols]);
    let w = half_const(&mut p, rows, cols, off);
    let y = p.op(
        "add",
        &[("x", v(&x)), ("y", v(&w))],
        DType::Fp32,
        &[rows, cols],
    );
    p.output(&y);
    let plan = compile(&p.build(), "main", &blobs, &CompileOptions::default()).unwrap();
    let mut inst = plan.instantiate();
    inst.set_input("x", HostSlice::F32(&vec![0.0; rows * cols]))
        .unwrap();
    inst.execute().unwrap();
    let got = inst.read_output_f32(&y).unwrap();
    let got: Vec<f64> = got.iter().map(|&g| f64::from(g)).collect();
    assert_eq!(got, ws);
}
