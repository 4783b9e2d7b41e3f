//! Weight encoders, checked by an independent decoder that reads the blob file the way the MIL op
//! definitions (coremltools) describe, and by error figures recomputed here in f64.

use aneforge_mil::encode::{
    encode, encode_first, DeclineReason, EncodeError, EncodeOptions, Encoded, Scheme, Weight,
    WEIGHT_BLOB_PATH,
};
use aneforge_mil::{Argument, BlobFile, BlobWriter, DType, Literal, TensorData, TensorType};
use half::f16;

/// splitmix64: deterministic test data without a dependency.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    fn uniform(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f64 / (1u64 << 23) as f64 - 1.0) as f32
    }

    /// Roughly normal (sum of uniforms), scaled.
    fn normalish(&mut self, std: f32) -> f32 {
        let s: f32 = (0..4).map(|_| self.uniform()).sum();
        s * std * 0.866
    }
}

fn values(seed: u64, n: usize, std: f32) -> Vec<f32> {
    let mut rng = Rng(seed);
    (0..n).map(|_| rng.normalish(std)).collect()
}

/// A named parameter of the encoded op: attribute (iOS16 form) or literal input (iOS18 form).
fn param<'a>(encoded: &'a Encoded, name: &str) -> &'a Literal {
    let op = &encoded.operations[0];
    if let Some(lit) = op.attribute(name) {
        return lit;
    }
    match op.input(name) {
        Some(Argument::Literal(lit)) => lit,
        other => panic!("{} has no literal parameter {name}: {other:?}", op.op_type),
    }
}

fn blob<'a>(file: &'a BlobFile, lit: &Literal) -> (&'a [u8], TensorType) {
    match lit {
        Literal::Blob { ty, path, offset } => {
            assert_eq!(path, WEIGHT_BLOB_PATH);
            (file.payload(*offset, ty).expect("payload"), ty.clone())
        }
        other => panic!("expected a BLOBFILE literal, got {other:?}"),
    }
}

fn f16s(bytes: &[u8]) -> Vec<f64> {
    bytes
        .chunks_exact(2)
        .map(|c| f16::from_le_bytes([c[0], c[1]]).to_f64())
        .collect()
}

fn shape_of(ty: &TensorType) -> Vec<usize> {
    ty.static_shape().expect("static shape")
}

/// Independent decoder: what the op produces, from the blob file alone.
fn decode(file: &BlobFile, encoded: &Encoded) -> Vec<f64> {
    let op = &encoded.operations[0];
    let out_shape = shape_of(encoded.output.ty.tensor().unwrap());
    let n: usize = out_shape.iter().product();
    match op.op_type.as_str() {
        "const" => {
            let (bytes, ty) = blob(file, param(encoded, "val"));
            assert_eq!(ty.dtype, DType::Fp16);
            f16s(bytes)
        }
        "constexpr_affine_dequantize" => {
            let (q, qty) = blob(file, param(encoded, "quantized_data"));
            assert_eq!(qty.dtype, DType::Int8);
            let (s, sty) = blob(file, param(encoded, "scale"));
            assert_eq!(shape_of(&sty), vec![out_shape[0]]);
            let scales = f16s(s);
            let zero_point = match param(encoded, "zero_point") {
                Literal::Tensor {
                    ty,
                    data: TensorData::Int(v),
                } if ty.dtype == DType::Int8 && ty.is_scalar() => v[0],
                other => panic!("zero_point {other:?}"),
            };
            match param(encoded, "axis") {
                Literal::Tensor {
                    ty,
                    data: TensorData::Int(v),
                } => assert_eq!((ty.dtype, v.as_slice()), (DType::Int32, &[0i64][..])),
                other => panic!("axis {other:?}"),
            }
            let row = n / out_shape[0];
            (0..n)
                .map(|i| {
                    let qi = q[i] as i8 as i64 - zero_point;
                    f16::from_f64(scales[i / row] * qi as f64).to_f64()
                })
                .collect()
        }
        "constexpr_lut_to_dense" => {
            let (idx, ity) = blob(file, param(encoded, "indices"));
            assert_eq!(ity.dtype, DType::Uint4);
            assert_eq!(shape_of(&ity), out_shape);
            let (lut, lty) = blob(file, param(encoded, "lut"));
            let mut expected_lut_shape = vec![1; out_shape.len()];
            expected_lut_shape.extend([16, 1]);
            assert_eq!(shape_of(&lty), expected_lut_shape);
            let lut = f16s(lut);
            (0..n)
                .map(|i| lut[((idx[i / 2] >> (4 * (i % 2))) & 0xF) as usize])
                .collect()
        }
        "constexpr_sparse_to_dense" => {
            let (mask, mty) = blob(file, param(encoded, "mask"));
            assert_eq!(mty.dtype, DType::Uint1);
            assert_eq!(shape_of(&mty), out_shape);
            let (nz, _) = blob(file, param(encoded, "nonzero_data"));
            let mut nz = f16s(nz).into_iter();
            let out = (0..n)
                .map(|i| {
                    if mask[i / 8] >> (i % 8) & 1 == 1 {
                        nz.next().expect("enough nonzero values")
                    } else {
                        0.0
                    }
                })
                .collect();
            assert!(nz.next().is_none(), "more nonzero values than mask bits");
            out
        }
        other => panic!("unexpected op {other}"),
    }
}

fn reference_errors(original: &[f32], decoded: &[f64]) -> (f64, f64) {
    let mut num = 0.0;
    let mut den = 0.0;
    let mut max = 0.0f64;
    for (&w, &d) in original.iter().zip(decoded) {
        let e = d - w as f64;
        num += e * e;
        den += (w as f64) * (w as f64);
        max = max.max(e.abs());
    }
    ((num / den).sqrt(), max)
}

fn round_trip(scheme: Scheme, shape: &[usize], data: &[f32]) -> (Encoded, Vec<f64>) {
    let mut writer = BlobWriter::new();
    let weight = Weight {
        name: "w",
        shape,
        values: data,
    };
    let encoded = encode(&mut writer, &weight, scheme, &EncodeOptions::default())
        .unwrap_or_else(|e| panic!("{scheme}: {e}"));
    let bytes = writer.finish();
    assert_eq!(encoded.report.blob_bytes, bytes.len() as u64 - 64);
    let file = BlobFile::from_vec("weight.bin", bytes).expect("valid blob file");
    let decoded = decode(&file, &encoded);
    assert_eq!(decoded.len(), data.len());
    let (rel, max) = reference_errors(data, &decoded);
    assert_eq!(encoded.report.max_abs, max, "{scheme} max abs");
    assert!(
        (encoded.report.rel_l2 - rel).abs() <= 1e-12 * rel.max(1e-300),
        "{scheme} rel l2 {} vs {rel}",
        encoded.report.rel_l2
    );
    assert!(max <= 0.05, "{scheme}: gate let {max} through");
    let op = &encoded.operations[0];
    assert_eq!(op.name(), Some("w"));
    assert_eq!(op.op_type, scheme.op_type());
    assert_eq!(op.outputs[0].ty, TensorType::new(DType::Fp16, shape).into());
    (encoded, decoded)
}

#[test]
fn fp16_round_trip_is_fp16_rounding() {
    let data = values(1, 6 * 10, 0.5);
    let (_, decoded) = round_trip(Scheme::Fp16, &[6, 10], &data);
    for (&w, &d) in data.iter().zip(&decoded) {
        assert_eq!(d, f16::from_f32(w).to_f64());
    }
}

#[test]
fn int8_round_trip_within_half_a_step_per_row() {
    let shape = [16, 3, 5];
    let mut data = values(2, 16 * 15, 0.3);
    // One all-zero output channel and one with a large range.
    data[15..30].iter_mut().for_each(|v| *v = 0.0);
    data[30..45]
        .iter_mut()
        .enumerate()
        .for_each(|(i, v)| *v *= 1.0 + i as f32 * 0.02);
    let (encoded, decoded) = round_trip(Scheme::Int8, &shape, &data);
    assert!(encoded.report.rel_l2 < 0.01, "{:?}", encoded.report);
    for (r, (row, dec)) in data.chunks(15).zip(decoded.chunks(15)).enumerate() {
        let max = row.iter().fold(0.0f64, |m, &v| m.max((v as f64).abs()));
        let step = f16::from_f64(max / 127.0).to_f64();
        for (&w, &d) in row.iter().zip(dec) {
            // Half a quantization step plus the fp16 rounding of the product.
            let bound = step / 2.0 + d.abs() * 2f64.powi(-11) + 1e-12;
            assert!((d - w as f64).abs() <= bound, "row {r}: {w} -> {d}");
        }
    }
}

#[test]
fn int4_lut_entries_are_nearest_and_kmeans_beats_uniform_grid() {
    let shape = [8, 32];
    // A clustered weight: values near 16 centres, so a 16-entry LUT is accurate.
    let mut rng = Rng(3);
    let data: Vec<f32> = (0..256)
        .map(|i| (i % 16) as f32 * 0.125 - 1.0 + rng.uniform() * 0.01)
        .collect();
    let (encoded, decoded) = round_trip(Scheme::Int4Lut, &shape, &data);
    let mut file_writer = BlobWriter::new();
    let enc2 = encode(
        &mut file_writer,
        &Weight {
            name: "w",
            shape: &shape,
            values: &data,
        },
        Scheme::Int4Lut,
        &EncodeOptions::default(),
    )
    .unwrap();
    let file = BlobFile::from_vec("weight.bin", file_writer.finish()).unwrap();
    let (lut, _) = blob(&file, param(&enc2, "lut"));
    let lut = f16s(lut);
    // Every weight decodes to its nearest LUT entry (brute force).
    for (&w, &d) in data.iter().zip(&decoded) {
        let best = lut
            .iter()
            .map(|&c| (c - w as f64).abs())
            .fold(f64::INFINITY, f64::min);
        assert_eq!((d - w as f64).abs(), best);
    }
    // 16 clusters 0.125 apart, each 0.02 wide: k-means must find all of them, so no weight is
    // further than a cluster's width from its entry.
    assert!(encoded.report.max_abs <= 0.02, "{:?}", encoded.report);

    // On smooth data, k-means does at least as well as a uniform 16-level grid over the range.
    let smooth = values(4, 4096, 0.1);
    let (enc, _) = {
        let mut w = BlobWriter::new();
        let weight = Weight {
            name: "w",
            shape: &[64, 64],
            values: &smooth,
        };
        let options = EncodeOptions {
            atol: 1.0,
            ..EncodeOptions::default()
        };
        (
            encode(&mut w, &weight, Scheme::Int4Lut, &options).unwrap(),
            (),
        )
    };
    let lo = smooth.iter().cloned().fold(f32::INFINITY, f32::min) as f64;
    let hi = smooth.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
    let grid: Vec<f64> = (0..16).map(|j| lo + (hi - lo) * j as f64 / 15.0).collect();
    let grid_decoded: Vec<f64> = smooth
        .iter()
        .map(|&w| {
            *grid
                .iter()
                .min_by(|a, b| (*a - w as f64).abs().total_cmp(&(*b - w as f64).abs()))
                .unwrap()
        })
        .collect();
    let (grid_rel, _) = reference_errors(&smooth, &grid_decoded);
    assert!(
        enc.report.rel_l2 < grid_rel,
        "k-means {} vs grid {grid_rel}",
        enc.report.rel_l2
    );
}

#[test]
fn int4_few_distinct_values_are_exact() {
    let data: Vec<f32> = (0..30).map(|i| [0.0, 0.5, -0.25, 1.5][i % 4]).collect();
    let (encoded, _) = round_trip(Scheme::Int4Lut, &[30], &data);
    assert_eq!(encoded.report.max_abs, 0.0);
}

#[test]
fn sparse_round_trip_and_mask_layout() {
    let shape = [7, 9];
    let mut data = values(5, 63, 0.4);
    for (i, v) in data.iter_mut().enumerate() {
        if i % 3 != 0 {
            *v = 0.0;
        }
    }
    let (encoded, decoded) = round_trip(Scheme::Sparse, &shape, &data);
    for (&w, &d) in data.iter().zip(&decoded) {
        assert_eq!(d, f16::from_f32(w).to_f64());
    }
    assert_eq!(
        param(&encoded, "nonzero_data").value_type(),
        TensorType::new(DType::Fp16, &[21]).into()
    );
}

#[test]
fn declines_name_the_reason_and_leave_the_writer_untouched() {
    let mut writer = BlobWriter::new();
    let data: Vec<f32> = {
        let mut rng = Rng(6);
        (0..1000).map(|_| rng.uniform()).collect()
    };
    let weight = Weight {
        name: "wide",
        shape: &[10, 100],
        values: &data,
    };
    let options = EncodeOptions::default();
    let err = encode(&mut writer, &weight, Scheme::Int4Lut, &options).unwrap_err();
    let decline = err.decline().expect("declined").clone();
    let DeclineReason::Inaccurate { max_abs, atol } = decline.reason else {
        panic!("{decline:?}")
    };
    assert!(max_abs > atol);
    assert_eq!(
        decline.to_string(),
        format!("int4: max abs error {max_abs:.3} > atol 0.05")
    );
    let err = encode(&mut writer, &weight, Scheme::Sparse, &options).unwrap_err();
    let zeros = data.iter().filter(|&&v| v == 0.0).count();
    assert_eq!(
        err.decline().unwrap().reason,
        DeclineReason::TooDense {
            zero_fraction: zeros as f64 / 1000.0
        }
    );
    let mut partly = data.clone();
    partly[..120].iter_mut().for_each(|v| *v = 0.0);
    let sparse_weight = Weight {
        values: &partly,
        ..weight
    };
    let err = encode(&mut writer, &sparse_weight, Scheme::Sparse, &options).unwrap_err();
    assert_eq!(
        err.decline().unwrap().to_string(),
        "sparse: only 12% zeros, needs ≥50%"
    );
    assert!(writer.is_empty());
    assert_eq!(writer.len(), 64);

    let (encoded, declines) = encode_first(
        &mut writer,
        &weight,
        &[Scheme::Sparse, Scheme::Int4Lut, Scheme::Int8],
        &options,
    )
    .unwrap();
    assert_eq!(encoded.report.scheme, Scheme::Int8);
    assert_eq!(declines.len(), 2);
    assert_eq!(writer.blob_count(), 2);
}

#[test]
fn bad_weights_are_errors() {
    let mut writer = BlobWriter::new();
    let options = EncodeOptions::default();
    let err = encode(
        &mut writer,
        &Weight {
            name: "w",
            shape: &[2, 3],
            values: &[0.0; 5],
        },
        Scheme::Fp16,
        &options,
    )
    .unwrap_err();
    assert!(matches!(
        err,
        EncodeError::ShapeMismatch {
            expected: 6,
            found: 5,
            ..
        }
    ));
    let err = encode(
        &mut writer,
        &Weight {
            name: "w",
            shape: &[2],
            values: &[1.0, f32::NAN],
        },
        Scheme::Int8,
        &options,
    )
    .unwrap_err();
    assert!(matches!(err, EncodeError::NonFinite { index: 1, .. }));
    // fp16 overflow is an inaccuracy, not a silent infinity.
    let err = encode(
        &mut writer,
        &Weight {
            name: "w",
            shape: &[2],
            values: &[1.0, 1e6],
        },
        Scheme::Fp16,
        &options,
    )
    .unwrap_err();
    assert!(err.to_string().contains("fp16: max abs error inf"), "{err}");
    let err = encode(
        &mut writer,
        &Weight {
            name: "w",
            shape: &[],
            values: &[1.0],
        },
        Scheme::Int8,
        &options,
    )
    .unwrap_err();
    assert_eq!(err.decline().unwrap().reason, DeclineReason::NeedsRank1);
    assert!(writer.is_empty());
}

#[test]
fn encodings_are_deterministic() {
    let data = values(7, 40 * 24, 0.05);
    for scheme in [Scheme::Fp16, Scheme::Int8, Scheme::Int4Lut] {
        let run = || {
            let mut w = BlobWriter::new();
            let weight = Weight {
                name: "w",
                shape: &[40, 24],
                values: &data,
            };
            let e = encode(&mut w, &weight, scheme, &EncodeOptions::default()).unwrap();
            (e, w.finish())
        };
        assert_eq!(run(), run());
    }
}

/// Sizes from the weights.bin layout: a 64-byte header, then per blob a 64-byte descriptor and
/// the payload padded to 64 bytes. int8 1024×1024: 64 + (64 + 1048576) + (64 + 2048 fp16 scales);
/// fp16: 64 + 64 + 2097152.
#[test]
fn weights_bin_sizes_for_a_1024_square_matrix() {
    let data = values(8, 1024 * 1024, 0.02);
    let weight = Weight {
        name: "w",
        shape: &[1024, 1024],
        values: &data,
    };
    let size = |scheme| {
        let mut w = BlobWriter::new();
        encode(&mut w, &weight, scheme, &EncodeOptions::default()).unwrap();
        w.finish().len()
    };
    assert_eq!(size(Scheme::Int8), 1_050_816);
    assert_eq!(size(Scheme::Fp16), 2_097_280);
}

/// A payload written in place, and an entry removed again, leave the file `add` alone writes.
#[test]
fn in_place_and_removed_entries_leave_the_file_add_writes() {
    let payload: Vec<u8> = (0..100u8).collect();
    let mut plain = BlobWriter::new();
    let at = plain.add(DType::Uint8, 100, &payload).unwrap();
    let mut w = BlobWriter::new();
    let (at_in_place, bytes) = w.add_in_place(DType::Uint8, 100, 100).unwrap();
    bytes.copy_from_slice(&payload);
    let (repeated, _) = w.add_in_place(DType::Fp16, 8, 16).unwrap();
    w.remove_last(repeated);
    assert_eq!(at, at_in_place);
    assert_eq!(w.blob_count(), 1);
    let (plain, w) = (plain.finish(), w.finish());
    assert_eq!(plain, w);
    BlobFile::from_vec("weight.bin", w).expect("valid blob file");
}
