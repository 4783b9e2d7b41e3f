//! GGUF blocks kept quantized (`Matrix::from_gguf_blocks`) against gguf-py's dequantisation of
//! the same tensors (fixture: tools/fixtures/gguf_cases.py): types without an offset reconstruct
//! bit for bit; affine types within the bound matrix.rs states, `2⁻²²·(|s·q| + |s·o|)`. And
//! row-concatenations of different block types keep every value.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use aneforge::graph::{BlockQuantized, QuantFormat};
use aneforge_models::gguf::{GgmlType, GgufFile};
use aneforge_models::llm::Matrix;
use aneforge_models::weights::{SafeTensorsFiles, TensorSource};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/fixtures/out/gguf")
}

fn fixture() -> (Arc<GgufFile>, SafeTensorsFiles) {
    let file = Arc::new(GgufFile::open(dir().join("quants.gguf")).unwrap());
    let expected = SafeTensorsFiles::open(dir().join("quants_expected.safetensors")).unwrap();
    (file, expected)
}

fn kept(file: &Arc<GgufFile>, name: &str) -> BlockQuantized {
    let shape = file.tensor(name).unwrap().shape();
    match Matrix::from_gguf_blocks(file, name, &[shape[0], shape[1]]).unwrap() {
        Some(Matrix::Quant(q)) => q,
        other => panic!("{name}: not kept quantized: {other:?}"),
    }
}

const KEPT: [GgmlType; 12] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
];

#[test]
fn kept_blocks_reconstruct_gguf_py_values() {
    let (file, expected) = fixture();
    for ty in KEPT {
        let name = format!("q.{ty}");
        let q = kept(&file, &name);
        let want = expected.read_f32(&name).unwrap();
        let got = q.dequantize().unwrap();
        assert_eq!(got.len(), want.data().len(), "{name}");
        let (cols, nb) = (q.cols(), q.blocks_per_row());
        let (scale, offset) = (q.scale().unwrap(), q.offset().unwrap());
        let mut worst = 0.0f64;
        for (i, (&g, &w)) in got.iter().zip(want.data()).enumerate() {
            let (r, c) = (i / cols, i % cols);
            let b = r * nb + c / q.block();
            let s = f64::from(scale[b]);
            match &offset {
                None => assert_eq!(
                    g.to_bits(),
                    w.to_bits(),
                    "{name}: element {i}: {g} vs gguf-py {w}"
                ),
                Some(o) => {
                    let bound =
                        (s * f64::from(q.q(r, c).unwrap())).abs() + (s * f64::from(o[b])).abs();
                    let err = (f64::from(g) - f64::from(w)).abs();
                    assert!(
                        err <= bound * 2f64.powi(-22),
                        "{name}: element {i}: {g} vs gguf-py {w}, bound {bound:e}·2⁻²²"
                    );
                    if bound > 0.0 {
                        worst = worst.max(err / bound);
                    }
                }
            }
        }
        eprintln!(
            "{name}: {:?}, blocks of {}, offsets {}, worst |error| / (|s·q| + |s·o|) = {worst:e}",
            q.format(),
            q.block(),
            q.has_offset()
        );
    }
}

#[test]
fn storage_is_the_narrowest_exact_form() {
    use QuantFormat::*;
    let (file, _) = fixture();
    let forms = [
        (GgmlType::Q4_0, I4, 32, false),
        (GgmlType::Q4_1, U4, 32, true),
        (GgmlType::Q5_0, I8, 32, false),
        (GgmlType::Q5_1, U8, 32, true),
        (GgmlType::Q8_0, I8, 32, false),
        (GgmlType::Q2_K, U4, 16, true),
        (GgmlType::Q3_K, I4, 16, false),
        (GgmlType::Q4_K, U4, 32, true),
        (GgmlType::Q5_K, U8, 32, true),
        (GgmlType::Q6_K, I8, 16, false),
        (GgmlType::IQ4_NL, I8, 32, false),
        (GgmlType::IQ4_XS, I8, 32, false),
    ];
    for (ty, format, block, offset) in forms {
        let q = kept(&file, &format!("q.{ty}"));
        assert_eq!(
            (q.format(), q.block(), q.has_offset()),
            (format, block, offset),
            "{ty}"
        );
        // the integers, scales and offsets are converted from the file when a program is
        // compiled, not held
        assert!(q.is_deferred() && q.params_deferred(), "{ty}");
    }
}

fn values(m: &Matrix) -> Vec<f32> {
    match m {
        Matrix::Quant(q) => q.dequantize().unwrap(),
        Matrix::Dense(a) => a.as_f32().unwrap().to_vec(),
    }
}

#[test]
fn concatenating_different_block_types_keeps_every_value() {
    let (file, _) = fixture();
    let part = |ty: GgmlType| Matrix::Quant(kept(&file, &format!("q.{ty}")));
    // uint4 with offsets (blocks of 32), int8 (16), int4 (16), int8 (32): one int8 form with
    // offsets in blocks of 16
    let parts = [
        part(GgmlType::Q4_K),
        part(GgmlType::Q6_K),
        part(GgmlType::Q3_K),
        part(GgmlType::IQ4_XS),
    ];
    let cat = Matrix::concat_rows(&parts).unwrap();
    let Matrix::Quant(q) = &cat else {
        panic!("mixed block types concatenated densely");
    };
    assert_eq!(
        (q.format(), q.block(), q.has_offset()),
        (QuantFormat::I8, 16, true)
    );
    let want: Vec<u32> = parts.iter().flat_map(values).map(f32::to_bits).collect();
    let got: Vec<u32> = values(&cat).into_iter().map(f32::to_bits).collect();
    assert_eq!(got, want);

    // uint8 and signed integers have no common 8-bit form: dense, same values
    let parts = [part(GgmlType::Q5_K), part(GgmlType::Q6_K)];
    let cat = Matrix::concat_rows(&parts).unwrap();
    assert!(matches!(cat, Matrix::Dense(_)));
    let want: Vec<u32> = parts.iter().flat_map(values).map(f32::to_bits).collect();
    let got: Vec<u32> = values(&cat).into_iter().map(f32::to_bits).collect();
    assert_eq!(got, want);

    // uint4 and uint8: uint8
    let parts = [part(GgmlType::Q4_K), part(GgmlType::Q5_K)];
    let cat = Matrix::concat_rows(&parts).unwrap();
    let Matrix::Quant(q) = &cat else {
        panic!("uint4 and uint8 concatenated densely");
    };
    assert_eq!(q.format(), QuantFormat::U8);
    let want: Vec<u32> = parts.iter().flat_map(values).map(f32::to_bits).collect();
    let got: Vec<u32> = values(&cat).into_iter().map(f32::to_bits).collect();
    assert_eq!(got, want);
}

#[test]
fn other_types_and_shapes_are_not_kept() {
    let (file, _) = fixture();
    for name in ["q.F32", "q.F16", "q.BF16", "q.Q8_K"] {
        let shape = file.tensor(name).unwrap().shape();
        assert!(
            Matrix::from_gguf_blocks(&file, name, &[shape[0], shape[1]])
                .unwrap()
                .is_none(),
            "{name}"
        );
    }
    // a shape other than the file's: left to the dense path, which reports it
    let shape = file.tensor("q.Q4_K").unwrap().shape();
    assert!(
        Matrix::from_gguf_blocks(&file, "q.Q4_K", &[shape[1], shape[0]])
            .unwrap()
            .is_none()
    );
}
