//! Block-quantized weights (`constexpr_blockwise_shift_scale`) computed on directly by `linear`
//! (GEMV for few rows, dequantized tiles + GEMM for many) and `gather`, against an f64 reference
//! that dequantizes by the op's definition: `scale · (data − offset)` per block of the last axis.

use crate::common;
use aneforge_cpu::{compile, Activations, BlobStore, CompileOptions, HostSlice};
use aneforge_mil::{
    Argument, BlobFile, BlobWriter, DType, Literal, Operation, Program, TensorType,
};
use common::*;

const PATH: &str = "@model_path/weights/weight.bin";

struct QuantCase {
    data: DType,
    scale: DType,
    rows: usize,
    cols: usize,
    block: usize,
    offset: bool,
    /// f32 scales and offsets whose values are all exactly f16 (the CPU engine may narrow them).
    f16_values: bool,
}

/// Random quantized values, their packed payload, per-block scales/offsets and the f64 weights.
struct Built {
    blobs: BlobStore,
    data_off: u64,
    scale_off: u64,
    offset_off: Option<u64>,
    weights: Vec<f64>,
    q: Vec<i64>,
    scales: Vec<f64>,
    offsets: Vec<f64>,
}

fn pack(case: &QuantCase, q: &[i64]) -> Vec<u8> {
    match case.data {
        DType::Uint4 | DType::Int4 => q
            .chunks(2)
            .map(|p| ((p[0] & 15) as u8) | (((p[1] & 15) as u8) << 4))
            .collect(),
        _ => q.iter().map(|&v| v as u8).collect(),
    }
}

fn build(case: &QuantCase, rng: &mut Rng) -> Built {
    let (lo, hi) = match case.data {
        DType::Uint4 => (0, 15),
        DType::Int4 => (-8, 7),
        DType::Uint8 => (0, 255),
        _ => (-128, 127),
    };
    let n = case.rows * case.cols;
    let q: Vec<i64> = (0..n)
        .map(|_| lo + rng.below((hi - lo + 1) as usize) as i64)
        .collect();
    let nb = case.rows * case.cols / case.block;
    let round = |d: DType, v: f64| {
        if d == DType::Fp16 || case.f16_values {
            half::f16::from_f64(v).to_f64()
        } else {
            v as f32 as f64
        }
    };
    let scales: Vec<f64> = rng
        .vec(nb, -0.05, 0.05)
        .into_iter()
        .map(|v| round(case.scale, v))
        .collect();
    let offsets: Vec<f64> = rng
        .vec(nb, -3.0, 12.0)
        .into_iter()
        .map(|v| round(case.scale, v))
        .collect();
    let mut w = BlobWriter::new();
    let data_off = w.add(case.data, n, &pack(case, &q)).unwrap();
    let add = |w: &mut BlobWriter, v: &[f64]| match case.scale {
        DType::Fp16 => w.add_f16(
            &v.iter()
                .map(|&x| half::f16::from_f64(x))
                .collect::<Vec<_>>(),
        ),
        _ => w.add_f32(&v.iter().map(|&x| x as f32).collect::<Vec<_>>()),
    };
    let scale_off = add(&mut w, &scales);
    let offset_off = case.offset.then(|| add(&mut w, &offsets));
    let weights = (0..n)
        .map(|i| {
            let (r, c) = (i / case.cols, i % case.cols);
            let b = r * (case.cols / case.block) + c / case.block;
            let o = if case.offset { offsets[b] } else { 0.0 };
            scales[b] * (q[i] as f64 - o)
        })
        .collect();
    let mut blobs = BlobStore::new();
    blobs.insert(
        PATH.to_string(),
        BlobFile::from_vec("weight.bin", w.finish()).unwrap(),
    );
    Built {
        blobs,
        data_off,
        scale_off,
        offset_off,
        weights,
        q,
        scales,
        offsets,
    }
}

fn blob(d: DType, shape: &[usize], offset: u64) -> Argument {
    Argument::Literal(Literal::Blob {
        ty: TensorType::new(d, shape),
        path: PATH.to_string(),
        offset,
    })
}

/// `w = constexpr_blockwise_shift_scale(...)` pushed into `p`; returns its name.
fn quant_const(p: &mut Prog, case: &QuantCase, b: &Built) -> String {
    let sshape = [case.rows, case.cols / case.block];
    let mut op = Operation::new("constexpr_blockwise_shift_scale")
        .with_input("data", blob(case.data, &[case.rows, case.cols], b.data_off))
        .with_input("scale", blob(case.scale, &sshape, b.scale_off));
    if let Some(o) = b.offset_off {
        op = op.with_input("offset", blob(case.scale, &sshape, o));
    }
    let op = op
        .with_output("w", TensorType::new(case.scale, &[case.rows, case.cols]))
        .with_attribute("name", Literal::string("w"));
    p.ops.push(op);
    "w".to_string()
}

/// `y = linear(x [m, cols], w)` over the case's quantized weight: the weights, the program and
/// the output's name.
fn linear_program(case: &QuantCase, m: usize, rng: &mut Rng) -> (Built, Program, String) {
    let b = build(case, rng);
    let mut p = Prog::new();
    let x = p.input("x", case.scale, &[m, case.cols]);
    let w = quant_const(&mut p, case, &b);
    let y = p.op(
        "linear",
        &[("x", v(&x)), ("weight", v(&w))],
        case.scale,
        &[m, case.rows],
    );
    p.output(&y);
    (b, p.build(), y)
}

fn check_linear(case: &QuantCase, m: usize, seed: u64) {
    let mut rng = Rng(seed);
    let (b, program, y) = linear_program(case, m, &mut rng);
    let d = case.scale;
    let plan = compile(&program, "main", &b.blobs, &CompileOptions::default()).unwrap();
    let kinds = plan.schedule().join(" ");
    assert!(kinds.contains("matmul-quant"), "{kinds}");
    let xv = quantize(d, &rng.vec(m * case.cols, -1.0, 1.0));
    let mut inst = plan.instantiate();
    set(&mut inst, "x", d, &xv);
    inst.execute().unwrap();
    let got: Vec<f64> = inst
        .read_output_f32(&y)
        .unwrap()
        .iter()
        .map(|&v| f64::from(v))
        .collect();
    let (xs, ws) = (&xv, &b.weights);
    let terms = |i: usize| {
        let (r, j) = (i / case.rows, i % case.rows);
        (0..case.cols).map(move |c| xs[r * case.cols + c] * ws[j * case.cols + c])
    };
    let want: Vec<f64> = (0..m * case.rows).map(|i| terms(i).sum()).collect();
    let what = format!(
        "{:?} x {:?} m={m} block={} offset={}",
        case.data, case.scale, case.block, case.offset
    );
    if d == DType::Fp16 {
        assert_close_rel(&what, &got, &want, 2e-3, 1.0);
        return;
    }
    // f32 sums of `cols` products: error relative to Σ|x·w| (at least 1), which bounds it
    for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
        let magnitude: f64 = terms(i).map(f64::abs).sum();
        let tol = 1e-5 * magnitude.max(1.0);
        assert!(
            (g - w).abs() <= tol,
            "{what}: element {i}: got {g}, want {w} (tol {tol}, Σ|x·w| = {magnitude})"
        );
    }
}

#[test]
fn linear_on_quantized_weights_matches_the_definition() {
    let cases = [
        QuantCase {
            data: DType::Uint4,
            scale: DType::Fp32,
            rows: 72,
            cols: 96,
            block: 32,
            offset: true,
            f16_values: false,
        },
        QuantCase {
            data: DType::Int4,
            scale: DType::Fp32,
            rows: 40,
            cols: 128,
            block: 64,
            offset: false,
            f16_values: false,
        },
        QuantCase {
            data: DType::Int8,
            scale: DType::Fp32,
            rows: 50,
            cols: 64,
            block: 32,
            offset: false,
            f16_values: false,
        },
        QuantCase {
            data: DType::Uint8,
            scale: DType::Fp32,
            rows: 33,
            cols: 48,
            block: 16,
            offset: true,
            f16_values: false,
        },
        QuantCase {
            data: DType::Uint4,
            scale: DType::Fp16,
            rows: 24,
            cols: 64,
            block: 32,
            offset: true,
            f16_values: false,
        },
        // a block of 16 nibbles: the portable path
        QuantCase {
            data: DType::Uint4,
            scale: DType::Fp32,
            rows: 20,
            cols: 48,
            block: 16,
            offset: true,
            f16_values: false,
        },
        // the forms GGUF's other block types load as (crates/models/src/llm/matrix.rs), with
        // block counts past a group of 16 and a tail: Q6_K (int8, blocks of 16)
        QuantCase {
            data: DType::Int8,
            scale: DType::Fp32,
            rows: 24,
            cols: 528,
            block: 16,
            offset: false,
            f16_values: false,
        },
        // Q3_K (int4, blocks of 16)
        QuantCase {
            data: DType::Int4,
            scale: DType::Fp32,
            rows: 20,
            cols: 272,
            block: 16,
            offset: false,
            f16_values: false,
        },
        // Q2_K (uint4 with offsets, blocks of 16)
        QuantCase {
            data: DType::Uint4,
            scale: DType::Fp32,
            rows: 18,
            cols: 512,
            block: 16,
            offset: true,
            f16_values: false,
        },
        // Q5_K, Q5_1 (uint8 with offsets, blocks of 32)
        QuantCase {
            data: DType::Uint8,
            scale: DType::Fp32,
            rows: 18,
            cols: 544,
            block: 32,
            offset: true,
            f16_values: false,
        },
        // row-concatenations of mixed types widened to int8 with offsets, blocks of 16
        QuantCase {
            data: DType::Int8,
            scale: DType::Fp32,
            rows: 18,
            cols: 256,
            block: 16,
            offset: true,
            f16_values: false,
        },
    ];
    for (i, case) in cases.iter().enumerate() {
        for m in [1, 2, 3, 8, 9, 40] {
            check_linear(case, m, 17 + i as u64 * 31 + m as u64);
        }
    }
}

#[test]
fn gather_dequantizes_the_picked_rows() {
    let case = QuantCase {
        data: DType::Int8,
        scale: DType::Fp32,
        rows: 30,
        cols: 64,
        block: 32,
        offset: false,
        f16_values: false,
    };
    let mut rng = Rng(5);
    let b = build(&case, &mut rng);
    let mut p = Prog::new();
    let ids = p.input("ids", DType::Int32, &[4]);
    let w = quant_const(&mut p, &case, &b);
    let y = p.op(
        "gather",
        &[("x", v(&w)), ("indices", v(&ids)), ("axis", A::I(0))],
        DType::Fp32,
        &[4, case.cols],
    );
    p.output(&y);
    let plan = compile(&p.build(), "main", &b.blobs, &CompileOptions::default()).unwrap();
    assert!(
        plan.schedule().join(" ").contains("gather-quant"),
        "{:?}",
        plan.schedule()
    );
    let mut inst = plan.instantiate();
    let pick = [3, 29, 0, -1];
    inst.set_input("ids", HostSlice::I32(&pick)).unwrap();
    inst.execute().unwrap();
    let got = inst.read_output_f32(&y).unwrap();
    for (t, &r) in pick.iter().enumerate() {
        let r = if r < 0 { case.rows as i32 + r } else { r } as usize;
        for c in 0..case.cols {
            let want = b.weights[r * case.cols + c];
            assert!(
                (f64::from(got[t * case.cols + c]) - want).abs() <= 1e-6 * want.abs().max(1e-3)
            );
        }
    }
    inst.set_input("ids", HostSlice::I32(&[0, 1, 30, 2]))
        .unwrap();
    let e = inst.execute().unwrap_err().to_string();
    assert!(e.contains("out of range"), "{e}");
}

#[test]
fn other_consumers_see_dequantized_values() {
    let case = QuantCase {
        data: DType::Uint4,
        scale: DType::Fp32,
        rows: 4,
        cols: 32,
        block: 32,
        offset: true,
        f16_values: false,
    };
    let mut rng = Rng(9);
    let b = build(&case, &mut rng);
    let mut p = Prog::new();
    let x = p.input("x", DType::Fp32, &[4, 32]);
    let w = quant_const(&mut p, &case, &b);
    let y = p.op("add", &[("x", v(&x)), ("y", v(&w))], DType::Fp32, &[4, 32]);
    p.output(&y);
    let plan = compile(&p.build(), "main", &b.blobs, &CompileOptions::default()).unwrap();
    let mut inst = plan.instantiate();
    inst.set_input("x", HostSlice::F32(&[0.0; 128])).unwrap();
    inst.execute().unwrap();
    let got = inst.read_output_f32(&y).unwrap();
    for (g, w) in got.iter().zip(&b.weights) {
        assert!(
            (f64::from(*g) - w).abs() <= 1e-6 * w.abs().max(1e-3),
            "{g} vs {w}"
        );
    }
}

/// The integer activation schemes, independently: per 32 columns `s = max|x| / qmax`,
/// `q = round_half_even(x / s)`, both in f32 arithmetic as the option specifies, with
/// `qmax = 127` (llama.cpp's 8 bits) or `127·128` (15 bits).
fn quantize_activations(x: &[f64], mode: Activations) -> (Vec<i64>, Vec<f64>) {
    let qmax: f32 = match mode {
        Activations::Int8 => 127.0,
        Activations::Int16 => 16256.0,
        Activations::F32 => unreachable!("f32 activations are not quantized"),
    };
    let mut qs = Vec::with_capacity(x.len());
    let mut scales = Vec::new();
    for chunk in x.chunks(32) {
        let amax = chunk
            .iter()
            .map(|v| (*v as f32).abs())
            .fold(0.0f32, f32::max);
        let s = amax / qmax;
        for v in chunk {
            qs.push(if s > 0.0 {
                ((*v as f32) / s).round_ties_even() as i64
            } else {
                0
            });
        }
        scales.push(f64::from(s));
    }
    (qs, scales)
}

fn vnni() -> bool {
    aneforge_cpu::simd::has_avx512_vnni()
}

/// Integer activations (`mode`): the product against an f64 evaluation of the same scheme —
/// activations quantized as specified, exact integer sums per 32 columns, then
/// `s_w·s_x·(Σ q_w·q_x − o_w·Σ q_x)`.
fn check_quantized_activations(case: &QuantCase, m: usize, seed: u64, mode: Activations) {
    check_quantized_activations_on(case, m, seed, None, mode);
}

fn check_quantized_activations_on(
    case: &QuantCase,
    m: usize,
    seed: u64,
    threads: Option<usize>,
    mode: Activations,
) {
    let mut rng = Rng(seed);
    let (b, program, y) = linear_program(case, m, &mut rng);
    let d = case.scale;
    let opts = CompileOptions {
        activations: mode,
        threads,
        ..Default::default()
    };
    let plan = compile(&program, "main", &b.blobs, &opts).unwrap();
    let kinds = plan.schedule().join(" ");
    let kernel = format!("matmul-quant-gemv-i{}", 8 * mode.planes());
    assert!(kinds.contains(&kernel), "{kinds}");
    let k = case.cols;
    let mut xv = quantize(d, &rng.vec(m * k, -1.0, 1.0));
    // an all-zero chunk (scale 0) and one whose scaled values tie at halves
    xv[..32].fill(0.0);
    if k >= 64 {
        for (t, v) in xv[32..64].iter_mut().enumerate() {
            *v = (t as f64 - 16.0) * 0.25;
        }
    }
    let mut inst = plan.instantiate();
    set(&mut inst, "x", d, &xv);
    inst.execute().unwrap();
    let got = inst.read_output_f32(&y).unwrap();
    let nb = k / case.block;
    for r in 0..m {
        let (qx, sx) = quantize_activations(&xv[r * k..(r + 1) * k], mode);
        for j in 0..case.rows {
            let (mut want, mut size) = (0.0f64, 0.0f64);
            // each chunk of 32 columns against each weight block it meets (two of 16, or one)
            let part = case.block.min(32);
            for (c, &s_x) in sx.iter().enumerate() {
                for start in (c * 32..(c + 1) * 32).step_by(part) {
                    let bi = j * nb + start / case.block;
                    let cols = start..start + part;
                    let dot: i64 = cols.clone().map(|t| b.q[j * k + t] * qx[t]).sum();
                    let sum_q: i64 = cols.clone().map(|t| qx[t]).sum();
                    let o = if case.offset { b.offsets[bi] } else { 0.0 };
                    let term = b.scales[bi] * s_x * (dot as f64 - o * sum_q as f64);
                    want += term;
                    // the integer path sums Σ u·q_x (u = q_w + bias) in f32 lanes of partial
                    // integer sums and (bias + o)·Σ q_x apart: rounding scales with Σ |u·q_x|
                    let bias = match case.data {
                        DType::Int4 => 8,
                        DType::Int8 => 128,
                        _ => 0,
                    };
                    let abs_dot: i64 = cols.map(|t| ((b.q[j * k + t] + bias) * qx[t]).abs()).sum();
                    size += (b.scales[bi] * s_x).abs()
                        * (abs_dot as f64 + (o + bias as f64).abs() * (sum_q as f64).abs());
                }
            }
            let g = f64::from(got[r * case.rows + j]);
            // f32 rounding of the per-chunk terms and of their sum (plus the output's own
            // rounding for fp16 programs)
            let mut tol = 1e-6 * (size + 1e-6) * ((k / 32) as f64).sqrt().max(1.0);
            if d == DType::Fp16 {
                tol += want.abs() * 2f64.powi(-11);
            }
            assert!(
                (g - want).abs() <= tol,
                "{mode:?}: {:?} x {:?} block={} offset={} k={k} m={m} row {r} column {j}: \
                 got {g}, want {want} (tol {tol})",
                case.data,
                case.scale,
                case.block,
                case.offset
            );
        }
    }
}

#[test]
fn quantized_activations_match_the_integer_scheme() {
    if !vnni() {
        eprintln!("no AVX-512 VNNI: integer activations keep the f32 path tested above");
        return;
    }
    let mut cases = Vec::new();
    // 64 columns: one chunk pair; 96: a pair and a lone chunk; 800: 25 chunks (a group of 16 and
    // one of 9, whose 18 blocks of 16 straddle two vectors); 1248: 39 chunks (groups of 16
    // and a tail group ending in a lone chunk); 1536: 48 chunks (whole groups)
    for cols in [64usize, 96, 800, 1248, 1536] {
        for (data, block, offset, scale) in [
            (DType::Int4, 32, false, DType::Fp16),
            (DType::Int4, 32, true, DType::Fp32),
            (DType::Uint4, 32, true, DType::Fp16),
            (DType::Uint4, 64, true, DType::Fp32),
            (DType::Int8, 32, false, DType::Fp16),
            (DType::Int8, 64, true, DType::Fp32),
            (DType::Uint8, 32, true, DType::Fp32),
            // blocks of 16, two per activation chunk: Q6_K (int8), Q3_K (int4), Q2_K (uint4
            // with offsets), the widened row-concatenations (int8 with offsets)
            (DType::Int8, 16, false, DType::Fp32),
            (DType::Int8, 16, false, DType::Fp16),
            (DType::Int4, 16, false, DType::Fp32),
            (DType::Uint4, 16, true, DType::Fp32),
            (DType::Uint4, 16, true, DType::Fp16),
            (DType::Int8, 16, true, DType::Fp32),
        ] {
            if cols % block == 0 {
                cases.push(QuantCase {
                    data,
                    scale,
                    rows: 21,
                    cols,
                    block,
                    offset,
                    f16_values: false,
                });
            }
        }
    }
    for mode in [Activations::Int8, Activations::Int16] {
        for (i, case) in cases.iter().enumerate() {
            for m in [1, 3, 8] {
                check_quantized_activations(case, m, 101 + i as u64 * 13 + m as u64, mode);
            }
        }
    }
}

/// The decode GEMV (one activation row, blocks of 32) takes weight rows four at a time: row
/// counts around and below that (tails of 1–3 rows, matrices of 1–8 rows), lone last chunks, and
/// work split between two workers at row boundaries that are not multiples of four.
#[test]
fn quantized_activations_by_four_rows_cover_every_row_count() {
    if !vnni() {
        eprintln!("no AVX-512 VNNI: integer activations keep the f32 path tested above");
        return;
    }
    let mut seed = 700;
    // f32 parameters that are exactly f16 (as GGUF's) are narrowed to f16 by the engine
    for (data, offset, scale, f16_values) in [
        (DType::Int8, false, DType::Fp16, false),
        (DType::Int8, false, DType::Fp32, true),
        (DType::Uint8, true, DType::Fp32, false),
        (DType::Int4, false, DType::Fp16, false),
        (DType::Uint4, true, DType::Fp16, false),
        (DType::Uint4, true, DType::Fp32, true),
    ] {
        for cols in [96usize, 160, 576, 1248] {
            for rows in (1..=9).chain([21]) {
                let case = QuantCase {
                    data,
                    scale,
                    rows,
                    cols,
                    block: 32,
                    offset,
                    f16_values,
                };
                for mode in [Activations::Int8, Activations::Int16] {
                    seed += 1;
                    check_quantized_activations_on(&case, 1, seed, Some(1), mode);
                }
            }
        }
        let case = QuantCase {
            data,
            scale,
            rows: 203,
            cols: 1248,
            block: 32,
            offset,
            f16_values,
        };
        for mode in [Activations::Int8, Activations::Int16] {
            seed += 1;
            check_quantized_activations_on(&case, 1, seed, Some(2), mode);
        }
    }
}

#[test]
fn quantized_activations_are_an_explicit_option() {
    let case = QuantCase {
        data: DType::Int4,
        scale: DType::Fp32,
        rows: 8,
        cols: 64,
        block: 32,
        offset: false,
        f16_values: false,
    };
    let b = build(&case, &mut Rng(3));
    let mut p = Prog::new();
    let x = p.input("x", DType::Fp32, &[1, 64]);
    let w = quant_const(&mut p, &case, &b);
    let y = p.op(
        "linear",
        &[("x", v(&x)), ("weight", v(&w))],
        DType::Fp32,
        &[1, 8],
    );
    p.output(&y);
    let plan = compile(&p.build(), "main", &b.blobs, &CompileOptions::default()).unwrap();
    let kinds = plan.schedule().join(" ");
    assert!(
        kinds.contains("matmul-quant-gemv") && !kinds.contains("gemv-i"),
        "{kinds}"
    );
}
