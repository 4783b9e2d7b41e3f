//! Block-quantized constants: lowered to `constexpr_blockwise_shift_scale` over blob entries,
//! computed on by the CPU engine, and equal to the dequantized values by definition.

mod common;

use aneforge::engine::HostSlice;
use aneforge::graph::{
    constant, input, scaled_half_rows, BlockParams, BlockQuantized, DType, DeferredBytes,
    DeferredF32, HalfStorage, HostArray, QuantFormat,
};
use aneforge::{compile_functions, ProgramOptions};
use aneforge::{
    compile_named, AneArch, CompileOptions, Engine, FunctionSpec, Model, ParameterMode, Target,
};
use std::sync::Arc;

const ROWS: usize = 12;
const COLS: usize = 64;
const BLOCK: usize = 32;

fn quantized(seed: u32) -> BlockQuantized {
    let n = ROWS * COLS;
    let q: Vec<u8> = (0..n).map(|i| ((i as u32 * 7 + seed) % 16) as u8).collect();
    let data: Vec<u8> = q.chunks(2).map(|p| p[0] | (p[1] << 4)).collect();
    let blocks = ROWS * COLS / BLOCK;
    let scale: Vec<f32> = (0..blocks).map(|b| 0.01 + b as f32 * 0.003).collect();
    let offset: Vec<f32> = (0..blocks).map(|b| 7.5 - b as f32 * 0.25).collect();
    BlockQuantized::new(
        QuantFormat::U4,
        ROWS,
        COLS,
        BLOCK,
        data,
        scale,
        Some(offset.into()),
    )
    .unwrap()
}

fn reference_linear(x: &[f32], w: &[f32], m: usize) -> Vec<f64> {
    (0..m * ROWS)
        .map(|i| {
            let (r, j) = (i / ROWS, i % ROWS);
            (0..COLS)
                .map(|c| f64::from(x[r * COLS + c]) * f64::from(w[j * COLS + c]))
                .sum()
        })
        .collect()
}

#[test]
fn dequantization_follows_the_definition() {
    let q = quantized(3);
    let dense = q.dequantize().unwrap();
    for r in 0..ROWS {
        for c in 0..COLS {
            let b = r * (COLS / BLOCK) + c / BLOCK;
            let (scale, offset) = (q.scale().unwrap(), q.offset().unwrap().unwrap());
            let want = scale[b] * (q.q(r, c).unwrap() as f32 - offset[b]);
            assert_eq!(dense[r * COLS + c], want);
        }
    }
    let p = q
        .permute_rows(&(0..ROWS).rev().collect::<Vec<_>>())
        .unwrap();
    assert_eq!(p.dequantize().unwrap()[..COLS], dense[(ROWS - 1) * COLS..]);
    let both = BlockQuantized::concat_rows(&[&q, &p]).unwrap();
    assert_eq!(both.rows(), 2 * ROWS);
    assert_eq!(both.dequantize().unwrap()[..ROWS * COLS], dense[..]);
}

/// Packed bytes read on demand, counting the reads.
#[derive(Debug)]
struct Source {
    bytes: Vec<u8>,
    reads: std::sync::atomic::AtomicUsize,
    /// Every read fails, naming this.
    broken: Option<&'static str>,
}

impl DeferredBytes for Source {
    fn len(&self) -> usize {
        self.bytes.len()
    }

    fn read(&self, start: usize, out: &mut [u8]) -> Result<(), String> {
        self.reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Some(what) = self.broken {
            return Err(format!("{what} cannot be read"));
        }
        let got = self
            .bytes
            .get(start..start + out.len())
            .ok_or_else(|| format!("bytes {start}..{} of {}", start + out.len(), self.len()))?;
        out.copy_from_slice(got);
        Ok(())
    }
}

/// Scales or offsets read on demand, counting the reads.
#[derive(Debug)]
struct Floats {
    values: Arc<[f32]>,
    reads: std::sync::atomic::AtomicUsize,
}

impl DeferredF32 for Floats {
    fn len(&self) -> usize {
        self.values.len()
    }

    fn read(&self, start: usize, out: &mut [f32]) -> Result<(), String> {
        self.reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        out.copy_from_slice(&self.values[start..start + out.len()]);
        Ok(())
    }
}

/// Deferred packed values, scales and offsets give the held ones' values through every view (rows
/// picked, permuted, stacked with held parts, reshaped), are read only when asked, and a failing
/// read is an error.
#[test]
fn deferred_data_reads_the_same_values() {
    let held = quantized(5);
    let source = Arc::new(Source {
        bytes: held.data().unwrap(),
        reads: Default::default(),
        broken: None,
    });
    let floats = |values: Arc<[f32]>| {
        Arc::new(Floats {
            values,
            reads: Default::default(),
        })
    };
    let (scale, offset) = (
        floats(held.scale().unwrap()),
        floats(held.offset().unwrap().unwrap()),
    );
    let deferred = BlockQuantized::deferred(
        held.format(),
        ROWS,
        COLS,
        BLOCK,
        source.clone(),
        BlockParams::Deferred(scale.clone()),
        Some(BlockParams::Deferred(offset.clone())),
    )
    .unwrap();
    assert!(deferred.is_deferred() && !held.is_deferred());
    assert!(deferred.params_deferred() && !held.params_deferred());
    let reversed: Vec<usize> = (0..ROWS).rev().collect();
    let views = |q: &BlockQuantized| -> Vec<Vec<f32>> {
        let p = q.permute_rows(&reversed).unwrap();
        let s = q.slice_rows(3, 6).unwrap();
        let both = BlockQuantized::concat_rows(&[&held, &p, &s]).unwrap();
        let wide = both.reshaped(both.rows() / 2, 2 * COLS).unwrap();
        let mut row = vec![0.0; COLS];
        q.dequantize_row(7, &mut row).unwrap();
        vec![
            q.dequantize().unwrap(),
            p.dequantize().unwrap(),
            s.dequantize().unwrap(),
            both.dequantize().unwrap(),
            wide.dequantize().unwrap(),
            row,
        ]
    };
    let reads = || {
        [&source.reads, &scale.reads, &offset.reads]
            .map(|r| r.load(std::sync::atomic::Ordering::Relaxed))
    };
    assert_eq!(reads(), [0; 3]);
    assert_eq!(views(&deferred), views(&held));
    assert!(reads().iter().all(|&n| n > 0), "{:?}", reads());
    let broken = BlockQuantized::deferred(
        held.format(),
        ROWS,
        COLS,
        BLOCK,
        Arc::new(Source {
            bytes: held.data().unwrap(),
            reads: Default::default(),
            broken: Some("model.gguf"),
        }),
        held.scale().unwrap(),
        None,
    )
    .unwrap();
    let e = broken.dequantize().unwrap_err().to_string();
    assert!(e.contains("model.gguf cannot be read"), "{e}");
    let mut row = vec![0.0; COLS];
    assert!(broken.dequantize_row(0, &mut row).is_err());
}

#[test]
fn bad_geometry_is_an_error() {
    let e = BlockQuantized::new(
        QuantFormat::U4,
        2,
        30,
        32,
        vec![0u8; 30],
        vec![1.0f32; 2],
        None,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("tile"), "{e}");
    let e = BlockQuantized::new(
        QuantFormat::I8,
        2,
        64,
        32,
        vec![0u8; 10],
        vec![1.0f32; 4],
        None,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("data bytes"), "{e}");
}

#[test]
fn linear_and_gather_on_a_quantized_constant() {
    let q = quantized(5);
    let dense = q.dequantize().unwrap();
    let w = constant(HostArray::from_block_quantized(q).unwrap());
    let x = input("x", &[3, COLS], DType::F32).unwrap();
    let ids = input("ids", &[2], DType::I32).unwrap();
    let y = x.linear(&w, None).unwrap();
    let rows = w.gather(&ids, 0).unwrap();
    let mut m = compile_named(&[("y", &y), ("rows", &rows)], &CompileOptions::default()).unwrap();
    let text = m.mil_text().to_string();
    assert!(
        text.contains("constexpr_blockwise_shift_scale(data = tensor<uint4, [12, 64]>(BLOBFILE"),
        "{text}"
    );
    assert_eq!(
        text.matches("constexpr_blockwise_shift_scale").count(),
        1,
        "{text}"
    );
    assert!(text.contains("linear("), "{text}");
    let xv: Vec<f32> = (0..3 * COLS)
        .map(|i| ((i * 37 % 19) as f32 - 9.0) / 9.0)
        .collect();
    let out = m
        .run_f32(&[
            ("x", HostSlice::F32(&xv)),
            ("ids", HostSlice::I32(&[11, 2])),
        ])
        .unwrap();
    for (g, r) in out[0].iter().zip(reference_linear(&xv, &dense, 3)) {
        assert!(
            (f64::from(*g) - r).abs() <= 1e-5 * r.abs().max(1.0),
            "{g} vs {r}"
        );
    }
    assert_eq!(out[1][..COLS], dense[11 * COLS..12 * COLS]);
    assert_eq!(out[1][COLS..], dense[2 * COLS..3 * COLS]);
}

#[test]
fn functions_share_quantized_blob_entries_and_ane_scales_are_fp16() {
    let q = HostArray::from_block_quantized(quantized(1)).unwrap();
    let x1 = input("x", &[1, COLS], DType::F32).unwrap();
    let x4 = input("x", &[4, COLS], DType::F32).unwrap();
    let y1 = x1.linear(&constant(q.clone()), None).unwrap();
    let y4 = x4.linear(&constant(q.clone()), None).unwrap();
    let one = compile_functions(
        &[FunctionSpec {
            name: "a",
            outputs: &[("y", &y1)],
        }],
        &ProgramOptions::new(&Target::Cpu, ParameterMode::Constant),
    )
    .unwrap();
    let two = compile_functions(
        &[
            FunctionSpec {
                name: "a",
                outputs: &[("y", &y1)],
            },
            FunctionSpec {
                name: "b",
                outputs: &[("y", &y4)],
            },
        ],
        &ProgramOptions::new(&Target::Cpu, ParameterMode::Constant),
    )
    .unwrap();
    assert_eq!(one.weights().len(), two.weights().len());
    let two = Arc::new(two);
    let mut b = Model::load_function(two, "b", Engine::Cpu).unwrap();
    let xv = vec![0.5f32; 4 * COLS];
    let out = b.run_f32(&[("x", HostSlice::F32(&xv))]).unwrap();
    let want = reference_linear(&xv, &q.to_f32_vec().unwrap(), 4);
    for (g, r) in out[0].iter().zip(want) {
        assert!((f64::from(*g) - r).abs() <= 1e-5 * r.abs().max(1.0));
    }
    let ane = CompileOptions {
        target: Target::Ane(AneArch::default()),
        ..CompileOptions::default()
    };
    let m = compile_named(&[("y", &y1)], &ane).unwrap();
    assert!(
        m.mil_text()
            .contains("scale = tensor<fp16, [12, 2]>(BLOBFILE"),
        "{}",
        m.mil_text()
    );
}

/// Deferred values stored as a model file's floats: fp16, bf16 (`HalfStorage` looked for by
/// `scaled_half_rows`) or f32.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Stored {
    F16,
    Bf16,
    F32,
}

#[derive(Debug)]
struct Halves {
    values: Arc<[f32]>,
    stored: Stored,
}

impl DeferredF32 for Halves {
    fn len(&self) -> usize {
        self.values.len()
    }

    fn read(&self, start: usize, out: &mut [f32]) -> Result<(), String> {
        out.copy_from_slice(&self.values[start..start + out.len()]);
        Ok(())
    }

    fn half_storage(&self, cols: usize) -> Option<HalfStorage> {
        match self.stored {
            Stored::F16 => Some(HalfStorage::Exact),
            Stored::Bf16 => scaled_half_rows(self, cols)
                .unwrap()
                .map(HalfStorage::Scaled),
            Stored::F32 => None,
        }
    }
}

/// `y = x·wᵀ` and `rows = w[ids]` over a deferred `[ROWS, COLS]` matrix, compiled for `target`.
fn deferred_matrix_program(values: &Arc<[f32]>, stored: Stored, target: Target) -> Model {
    let source = Arc::new(Halves {
        values: values.clone(),
        stored,
    });
    let w = constant(HostArray::from_deferred(&[ROWS, COLS], source).unwrap());
    let x = input("x", &[3, COLS], DType::F32).unwrap();
    let ids = input("ids", &[2], DType::I32).unwrap();
    let y = x.linear(&w, None).unwrap();
    let rows = w.gather(&ids, 0).unwrap();
    let options = CompileOptions {
        target,
        ..CompileOptions::default()
    };
    compile_named(&[("y", &y), ("rows", &rows)], &options).unwrap()
}

/// Runs [`deferred_matrix_program`] and checks the product against f64 and the picked rows bit
/// for bit.
fn check_deferred_matrix(m: &mut Model, values: &[f32]) {
    let xv: Vec<f32> = (0..3 * COLS)
        .map(|i| ((i * 37 % 19) as f32 - 9.0) / 9.0)
        .collect();
    let out = m
        .run_f32(&[
            ("x", HostSlice::F32(&xv)),
            ("ids", HostSlice::I32(&[11, 2])),
        ])
        .unwrap();
    for (g, r) in out[0].iter().zip(reference_linear(&xv, values, 3)) {
        assert!(
            (f64::from(*g) - r).abs() <= 1e-5 * r.abs().max(1.0),
            "{g} vs {r}"
        );
    }
    assert_eq!(out[1][..COLS], values[11 * COLS..12 * COLS]);
    assert_eq!(out[1][COLS..], values[2 * COLS..3 * COLS]);
}

#[test]
fn fp16_matrices_stay_fp16_in_fp32_programs() {
    let values: Arc<[f32]> = (0..ROWS * COLS)
        .map(|i| half::f16::from_f32(((i * 29 % 41) as f32 - 20.0) / 23.0).to_f32())
        .collect();
    let mut m = deferred_matrix_program(&values, Stored::F16, Target::Cpu);
    common::dump_corpus(&m, "fp16_matrix_cpu");
    let text = m.mil_text().to_string();
    assert_eq!(text.matches("constexpr_cast(").count(), 1, "{text}");
    assert!(text.contains("tensor<fp16, [12, 64]>(BLOBFILE"), "{text}");
    let f32_bytes = deferred_matrix_program(&values, Stored::F32, Target::Cpu)
        .weights()
        .len();
    assert!(
        m.weights().len() + ROWS * COLS * 2 <= f32_bytes,
        "{} vs {f32_bytes}",
        m.weights().len()
    );
    check_deferred_matrix(&mut m, &values);
    // fp16 programs hold every float constant as fp16 already
    let ane = deferred_matrix_program(&values, Stored::F16, Target::Ane(AneArch::default()));
    assert!(
        !ane.mil_text().contains("constexpr_cast"),
        "{}",
        ane.mil_text()
    );
}

/// bf16 values (8 significant bits) over magnitudes fp16 cannot hold: rows from 2^-30 to 2^25,
/// with values down to 2^-20 of each row's largest.
fn bf16_rows() -> Vec<f32> {
    (0..ROWS * COLS)
        .map(|i| {
            let (r, c) = (i / COLS, i % COLS);
            let magnitude = 2f32.powi(r as i32 * 5 - 30);
            let v = ((c * 29 % 41) as f32 - 20.0) / 20.0 * magnitude / 2f32.powi((c % 21) as i32);
            half::bf16::from_f32(v).to_f32()
        })
        .collect()
}

#[test]
fn bf16_matrices_stay_in_fp16_scaled_per_row() {
    let values: Arc<[f32]> = bf16_rows().into();
    let mut m = deferred_matrix_program(&values, Stored::Bf16, Target::Cpu);
    common::dump_corpus(&m, "bf16_matrix_cpu");
    let text = m.mil_text().to_string();
    assert_eq!(
        text.matches("constexpr_blockwise_shift_scale(").count(),
        1,
        "{text}"
    );
    assert!(
        text.contains("data = tensor<fp16, [12, 64]>(BLOBFILE"),
        "{text}"
    );
    assert!(
        text.contains("scale = tensor<fp32, [12, 1]>(BLOBFILE"),
        "{text}"
    );
    let f32_bytes = deferred_matrix_program(&values, Stored::F32, Target::Cpu)
        .weights()
        .len();
    // two bytes a value instead of four, and a scale a row
    assert!(
        m.weights().len() + ROWS * COLS < f32_bytes,
        "{} vs {f32_bytes}",
        m.weights().len()
    );
    check_deferred_matrix(&mut m, &values);
    // every row keeps its values: fp16 alone would have flushed the small rows to zero and the
    // large ones to infinity
    let exponents = scaled_half_rows(
        &Halves {
            values: values.clone(),
            stored: Stored::Bf16,
        },
        COLS,
    )
    .unwrap()
    .unwrap();
    assert!(exponents.iter().any(|&e| e < -30) && exponents.iter().any(|&e| e > 0));
}

/// A row whose values span more than fp16 holds under one scale (2^-40 beside 1) stays f32, as
/// does a non-finite value.
#[test]
fn bf16_matrices_fp16_cannot_hold_stay_f32() {
    for odd in [2f32.powi(-40), f32::INFINITY] {
        let mut values = bf16_rows();
        values[5 * COLS + 3] = 1.0;
        values[5 * COLS + 4] = odd;
        let values: Arc<[f32]> = values.into();
        let source = Halves {
            values: values.clone(),
            stored: Stored::Bf16,
        };
        assert_eq!(scaled_half_rows(&source, COLS).unwrap(), None);
        let m = deferred_matrix_program(&values, Stored::Bf16, Target::Cpu);
        let text = m.mil_text().to_string();
        assert!(!text.contains("constexpr_"), "{text}");
        assert!(text.contains("tensor<fp32, [12, 64]>(BLOBFILE"), "{text}");
    }
    let values: Arc<[f32]> = bf16_rows().into();
    // a column count that does not divide the values
    let source = Halves {
        values,
        stored: Stored::Bf16,
    };
    assert_eq!(scaled_half_rows(&source, COLS - 1).unwrap(), None);
}

/// Products with few activation rows run as a GEMV, with more as GEMMs over dequantized tiles of
/// weight rows, which widen with the row count (hundreds of rows: up to 512 weight rows a tile);
/// every way gives the dequantized weights' product, across tile boundaries included.
#[test]
fn quantized_products_of_every_row_count_follow_the_definition() {
    const N: usize = 600;
    let n_blocks = N * COLS / BLOCK;
    let q: Vec<u8> = (0..N * COLS).map(|i| ((i * 11 + 3) % 16) as u8).collect();
    let quant = BlockQuantized::new(
        QuantFormat::U4,
        N,
        COLS,
        BLOCK,
        q.chunks(2).map(|p| p[0] | (p[1] << 4)).collect::<Vec<u8>>(),
        (0..n_blocks)
            .map(|b| 0.02 + (b % 7) as f32 * 0.01)
            .collect::<Vec<f32>>(),
        Some(
            (0..n_blocks)
                .map(|b| 7.0 + (b % 3) as f32 * 0.5)
                .collect::<Vec<_>>()
                .into(),
        ),
    )
    .unwrap();
    let dense = quant.dequantize().unwrap();
    let w = constant(HostArray::from_block_quantized(quant).unwrap());
    for m in [3, 40, 300] {
        let x = input("x", &[m, COLS], DType::F32).unwrap();
        let y = x.linear(&w, None).unwrap();
        let mut model = compile_named(&[("y", &y)], &CompileOptions::default()).unwrap();
        let xv: Vec<f32> = (0..m * COLS)
            .map(|i| ((i * 37 % 19) as f32 - 9.0) / 9.0)
            .collect();
        let out = model.run_f32(&[("x", HostSlice::F32(&xv))]).unwrap();
        for (i, g) in out[0].iter().enumerate() {
            let (r, j) = (i / N, i % N);
            let want: f64 = (0..COLS)
                .map(|c| f64::from(xv[r * COLS + c]) * f64::from(dense[j * COLS + c]))
                .sum();
            assert!(
                (f64::from(*g) - want).abs() <= 1e-5 * want.abs().max(1.0),
                "{m} rows, [{r}, {j}]: {g} vs {want}"
            );
        }
    }
}
