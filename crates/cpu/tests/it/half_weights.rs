//! fp16 matrices in an fp32 program (`constexpr_cast` of an fp16 blob entry to fp32, or
//! `constexpr_blockwise_shift_scale` of one with a scale per row, a bf16 matrix's storage) stay
//! fp16: `linear` computes on them directly (GEMV for few rows, widened tiles + GEMM for many)
//! and `gather` widens only the rows it picks, against an f64 reference over the same values.

use crate::common;
use aneforge_cpu::{compile, Activations, BlobStore, CompileOptions, HostSlice};
use aneforge_mil::{
    Argument, BlobFile, BlobWriter, DType, Literal, Operation, Program, TensorType,
};
use common::*;

const PATH: &str = "@model_path/weights/weight.bin";

/// Random f16 weights `[rows, cols]` in a blob, with `scaled` a power-of-two scale per row
/// beside them (the storage of a bf16 matrix): the store, the matrix and the values.
fn half_blob(rows: usize, cols: usize, scaled: bool, rng: &mut Rng) -> (BlobStore, Half, Vec<f64>) {
    let w: Vec<half::f16> = rng
        .vec(rows * cols, -0.5, 0.5)
        .into_iter()
        .map(half::f16::from_f64)
        .collect();
    let mut writer = BlobWriter::new();
    let data = writer.add_f16(&w);
    let scales: Vec<f32> = (0..rows)
        .map(|r| {
            if scaled {
                2f32.powi((r % 7) as i32 * 6 - 20)
            } else {
                1.0
            }
        })
        .collect();
    let scale = scaled.then(|| writer.add_f32(&scales));
    let mut blobs = BlobStore::new();
    blobs.insert(
        PATH.to_string(),
        BlobFile::from_vec("weight.bin", writer.finish()).unwrap(),
    );
    let values = w
        .iter()
        .enumerate()
        .map(|(i, v)| v.to_f64() * f64::from(scales[i / cols]))
        .collect();
    (
        blobs,
        Half {
            rows,
            cols,
            data,
            scale,
        },
        values,
    )
}

/// An fp16 matrix in a blob: data at `data`, and per-row scales at `scale` if scaled.
struct Half {
    rows: usize,
    cols: usize,
    data: u64,
    scale: Option<u64>,
}

/// `w = constexpr_cast(source_val = fp16 blob, output_dtype = "fp32")`, or with scales
/// `constexpr_blockwise_shift_scale(data = fp16 blob, scale = fp32 [rows, 1] blob)`, pushed into
/// `p`.
fn half_const(p: &mut Prog, h: &Half) -> String {
    let blob = |dtype: DType, shape: &[usize], offset: u64| {
        Argument::Literal(Literal::Blob {
            ty: TensorType::new(dtype, shape),
            path: PATH.to_string(),
            offset,
        })
    };
    let data = blob(DType::Fp16, &[h.rows, h.cols], h.data);
    let op = match h.scale {
        None => Operation::new("constexpr_cast")
            .with_input("source_val", data)
            .with_input("output_dtype", Argument::Literal(Literal::string("fp32"))),
        Some(at) => Operation::new("constexpr_blockwise_shift_scale")
            .with_input("data", data)
            .with_input("scale", blob(DType::Fp32, &[h.rows, 1], at)),
    };
    let op = op
        .with_output("w", TensorType::new(DType::Fp32, &[h.rows, h.cols]))
        .with_attribute("name", Literal::string("w"));
    p.ops.push(op);
    "w".to_string()
}

fn linear_program(h: &Half, m: usize) -> (Program, String) {
    let mut p = Prog::new();
    let x = p.input("x", DType::Fp32, &[m, h.cols]);
    let w = half_const(&mut p, h);
    let y = p.op(
        "linear",
        &[("x", v(&x)), ("weight", v(&w))],
        DType::Fp32,
        &[m, h.rows],
    );
    p.output(&y);
    (p.build(), y)
}

#[test]
fn linear_on_fp16_weights_matches_f64() {
    // columns: blocks of 64 (the four-accumulator GEMV), of 16 only, and neither (portable)
    for (rows, cols) in [(72, 128), (33, 48), (20, 40), (24, 576)] {
        for m in [1, 2, 3, 8, 9, 40] {
            let cases = [Activations::F32, Activations::Int8, Activations::Int16]
                .into_iter()
                .flat_map(|a| [(a, false), (a, true)]);
            for (activations, scaled) in cases {
                let mut rng = Rng(3 + (rows * cols + m) as u64);
                let (blobs, h, ws) = half_blob(rows, cols, scaled, &mut rng);
                let (program, y) = linear_program(&h, m);
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
                    let tol = 1e-5 * magnitude;
                    assert!(
                        (f64::from(*g) - want).abs() <= tol,
                        "{rows}x{cols} m={m} {activations:?} scaled {scaled}: element {i}: \
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
    for scaled in [false, true] {
        let mut rng = Rng(11);
        let (blobs, h, ws) = half_blob(rows, cols, scaled, &mut rng);
        let mut p = Prog::new();
        let ids = p.input("ids", DType::Int32, &[3]);
        let w = half_const(&mut p, &h);
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
                // widening f16 to f32 and scaling by a power of two are exact
                assert_eq!(f64::from(got[t * cols + c]), ws[r * cols + c]);
            }
        }
    }
}

#[test]
fn other_consumers_see_the_widened_values() {
    let (rows, cols) = (4, 24);
    for scaled in [false, true] {
        let mut rng = Rng(13);
        let (blobs, h, ws) = half_blob(rows, cols, scaled, &mut rng);
        let mut p = Prog::new();
        let x = p.input("x", DType::Fp32, &[rows, cols]);
        let w = half_const(&mut p, &h);
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
}
