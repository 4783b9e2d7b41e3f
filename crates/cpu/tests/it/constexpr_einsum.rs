use crate::common;
use aneforge_cpu::{compile, BlobStore, CompileOptions};
use aneforge_mil::{BlobFile, BlobWriter, DType, Literal, TensorType};
use common::*;

fn run_consts(p: &Prog, blobs: &BlobStore) -> std::collections::HashMap<String, Vec<f64>> {
    let plan = compile(&p.build(), "main", blobs, &CompileOptions::default()).unwrap();
    let mut inst = plan.instantiate();
    inst.execute().unwrap();
    p.outputs
        .iter()
        .map(|o| (o.clone(), to_f64(&inst.read_output(o).unwrap())))
        .collect()
}

/// Packs values of `bits` each, least significant bit first (coremltools' layout).
fn pack(vals: &[u8], bits: usize) -> Vec<u8> {
    let mut out = vec![0u8; (vals.len() * bits).div_ceil(8)];
    for (i, &v) in vals.iter().enumerate() {
        for b in 0..bits {
            if v >> b & 1 == 1 {
                let bit = i * bits + b;
                out[bit / 8] |= 1 << (bit % 8);
            }
        }
    }
    out
}

#[test]
fn affine_dequantize_and_blockwise_shift_scale() {
    let mut rng = Rng(61);
    let q: Vec<f64> = (0..24).map(|_| rng.below(256) as f64).collect();
    let scale: Vec<f64> = quantize(DType::Fp16, &rng.vec(3, 0.01, 0.1));
    let zp: Vec<f64> = vec![128.0, 120.0, 130.0];
    let mut p = Prog::new();
    let qc = p.konst(DType::Uint8, &[2, 3, 4], &q);
    let zc = p.konst(DType::Uint8, &[3], &zp);
    let sc = p.konst(DType::Fp16, &[3], &scale);
    let y = p.op(
        "constexpr_affine_dequantize",
        &[
            ("quantized_data", v(&qc)),
            ("zero_point", v(&zc)),
            ("scale", v(&sc)),
            ("axis", A::I(1)),
        ],
        DType::Fp16,
        &[2, 3, 4],
    );
    p.output(&y);
    // int4 data through a blob (sub-byte payload), per-block scale [2, 2] over [4, 6] → blocks 2x3
    let d4: Vec<i64> = (0..24).map(|i| (i % 16) as i64 - 8).collect();
    let s4 = vec![0.5, 0.25, 2.0, 1.0];
    let o4 = vec![1.0, -1.0, 0.0, 2.0];
    let mut w = BlobWriter::new();
    let payload = pack(
        &d4.iter()
            .map(|&x| (x as i8 as u8) & 0xF)
            .collect::<Vec<_>>(),
        4,
    );
    let off = w.add(DType::Int4, 24, &payload).unwrap();
    let path = "@model_path/weights/weight.bin";
    let mut blobs = BlobStore::new();
    blobs.insert(
        path.into(),
        BlobFile::from_vec("weight.bin", w.finish()).unwrap(),
    );
    let dc = p.konst_lit(Literal::Blob {
        ty: TensorType::new(DType::Int4, &[4, 6]),
        path: path.into(),
        offset: off,
    });
    let scc = p.konst(DType::Fp32, &[2, 2], &s4);
    let occ = p.konst(DType::Fp32, &[2, 2], &o4);
    let z = p.op(
        "constexpr_blockwise_shift_scale",
        &[("data", v(&dc)), ("scale", v(&scc)), ("offset", v(&occ))],
        DType::Fp32,
        &[4, 6],
    );
    p.output(&z);
    let out = run_consts(&p, &blobs);
    let want_y: Vec<f64> = (0..24)
        .map(|i| {
            let c = (i / 4) % 3;
            quantize(DType::Fp16, &[scale[c] * (q[i] - zp[c])])[0]
        })
        .collect();
    assert_eq!(out[&y], want_y);
    let want_z: Vec<f64> = (0..24)
        .map(|i| {
            let b = (i / 6 / 2) * 2 + (i % 6) / 3;
            s4[b] * (d4[i] as f64 - o4[b])
        })
        .collect();
    assert_eq!(out[&z], want_z);
}

#[test]
fn lut_and_sparse_both_forms() {
    let mut rng = Rng(62);
    // iOS16 lut: 2-bit packed uint8 indices, 1-D lut, explicit shape
    let ids: Vec<u8> = (0..10).map(|_| rng.below(4) as u8).collect();
    let lut: Vec<f64> = vec![-1.5, 0.0, 0.25, 3.0];
    let mut p = Prog::new();
    let ic = p.konst(
        DType::Uint8,
        &[3],
        &pack(&ids, 2).iter().map(|&b| b as f64).collect::<Vec<_>>(),
    );
    let lc = p.konst(DType::Fp32, &[4], &lut);
    let shc = p.konst(DType::Uint32, &[2], &[2.0, 5.0]);
    let a = p.op(
        "constexpr_lut_to_dense",
        &[("indices", v(&ic)), ("lut", v(&lc)), ("shape", v(&shc))],
        DType::Fp32,
        &[2, 5],
    );
    p.output(&a);
    // iOS18 lut: uint2 [4, 2] indices, two tables along axis 0, vector size 2 along axis 1
    let ids18: Vec<f64> = (0..8).map(|_| rng.below(4) as f64).collect();
    let lut18: Vec<f64> = (0..16).map(|i| i as f64).collect(); // [2, 1, 4, 2]
    let i18 = p.konst(DType::Uint2, &[4, 2], &ids18);
    let l18 = p.konst(DType::Fp16, &[2, 1, 4, 2], &lut18);
    let b = p.op(
        "constexpr_lut_to_dense",
        &[
            ("indices", v(&i18)),
            ("lut", v(&l18)),
            ("vector_axis", A::I(1)),
        ],
        DType::Fp16,
        &[4, 4],
    );
    p.output(&b);
    // sparse: iOS16 packed mask + shape, iOS18 uint1 mask tensor
    let mask: Vec<u8> = (0..12).map(|_| (rng.below(3) == 0) as u8).collect();
    let nz: Vec<f64> = (0..mask.iter().filter(|&&m| m == 1).count())
        .map(|i| i as f64 + 1.0)
        .collect();
    let nzc = p.konst(DType::Fp32, &[nz.len()], &nz);
    let mc = p.konst(
        DType::Uint8,
        &[2],
        &pack(&mask, 1).iter().map(|&b| b as f64).collect::<Vec<_>>(),
    );
    let sh = p.konst(DType::Uint32, &[2], &[3.0, 4.0]);
    let s16 = p.op(
        "constexpr_sparse_to_dense",
        &[
            ("nonzero_data", v(&nzc)),
            ("mask", v(&mc)),
            ("shape", v(&sh)),
        ],
        DType::Fp32,
        &[3, 4],
    );
    let m18 = p.konst(
        DType::Uint1,
        &[3, 4],
        &mask.iter().map(|&b| b as f64).collect::<Vec<_>>(),
    );
    let s18 = p.op(
        "constexpr_sparse_to_dense",
        &[("nonzero_data", v(&nzc)), ("mask", v(&m18))],
        DType::Fp32,
        &[3, 4],
    );
    p.output(&s16);
    p.output(&s18);
    let out = run_consts(&p, &BlobStore::new());
    assert_eq!(
        out[&a],
        ids.iter().map(|&i| lut[i as usize]).collect::<Vec<_>>()
    );
    let mut want_b = vec![0.0; 16];
    for r in 0..4 {
        for c in 0..2 {
            let table = r / 2;
            let id = ids18[r * 2 + c] as usize;
            for e in 0..2 {
                want_b[r * 4 + c * 2 + e] = lut18[(table * 4 + id) * 2 + e];
            }
        }
    }
    assert_eq!(out[&b], want_b);
    let mut it = nz.iter();
    let want_s: Vec<f64> = mask
        .iter()
        .map(|&m| if m == 1 { *it.next().unwrap() } else { 0.0 })
        .collect();
    assert_eq!(out[&s16], want_s);
    assert_eq!(out[&s18], want_s);
}

type EinsumCase = (&'static str, Vec<usize>, Vec<usize>, Vec<usize>);

#[test]
fn einsum_equations_models_use() {
    let mut rng = Rng(63);
    // (equation, x shape, y shape, out shape)
    let cases: Vec<EinsumCase> = vec![
        (
            "nchw,nwhu->nchu",
            vec![2, 3, 4, 5],
            vec![2, 5, 4, 6],
            vec![2, 3, 4, 6],
        ),
        ("chw,whr->chr", vec![3, 1, 5], vec![5, 4, 2], vec![3, 4, 2]),
        (
            "bhqd,bhkd->bhqk",
            vec![1, 2, 3, 4],
            vec![1, 2, 5, 4],
            vec![1, 2, 3, 5],
        ),
        ("bij,bjk->bik", vec![2, 3, 4], vec![2, 4, 5], vec![2, 3, 5]),
        ("ij,kj->ki", vec![3, 4], vec![5, 4], vec![5, 3]),
    ];
    for (eq, xs, ys, os) in cases {
        let xv = quantize(DType::Fp32, &rng.vec(numel(&xs), -1.0, 1.0));
        let yv = quantize(DType::Fp32, &rng.vec(numel(&ys), -1.0, 1.0));
        let mut p = Prog::new();
        let x = p.input("x", DType::Fp32, &xs);
        let y = p.input("y", DType::Fp32, &ys);
        let z = p.op(
            "einsum",
            &[
                ("values", A::List(vec![x.clone(), y.clone()])),
                ("equation", A::S(eq)),
            ],
            DType::Fp32,
            &os,
        );
        p.output(&z);
        let got = &run(
            &p,
            &[
                ("x", DType::Fp32, xv.clone()),
                ("y", DType::Fp32, yv.clone()),
            ],
        )[&z];
        // naive: iterate over all subscript assignments
        let (lhs, out) = eq.split_once("->").unwrap();
        let (a, b) = lhs.split_once(',').unwrap();
        let (a, b, out): (Vec<char>, Vec<char>, Vec<char>) = (
            a.chars().collect(),
            b.chars().collect(),
            out.chars().collect(),
        );
        let mut letters: Vec<char> = a.iter().chain(&b).copied().collect();
        letters.sort();
        letters.dedup();
        let dim = |c: char| -> usize {
            let p1 = a.iter().position(|&d| d == c).map(|i| xs[i]).unwrap_or(1);
            let p2 = b.iter().position(|&d| d == c).map(|i| ys[i]).unwrap_or(1);
            p1.max(p2)
        };
        let sizes: Vec<usize> = letters.iter().map(|&c| dim(c)).collect();
        let mut want = vec![0.0; numel(&os)];
        for t in 0..numel(&sizes) {
            let idx = unravel(t, &sizes);
            let val = |c: char| idx[letters.iter().position(|&d| d == c).unwrap()];
            let xi: Vec<usize> = a
                .iter()
                .enumerate()
                .map(|(i, &c)| if xs[i] == 1 { 0 } else { val(c) })
                .collect();
            let yi: Vec<usize> = b
                .iter()
                .enumerate()
                .map(|(i, &c)| if ys[i] == 1 { 0 } else { val(c) })
                .collect();
            let oi: Vec<usize> = out.iter().map(|&c| val(c)).collect();
            want[ravel(&oi, &os)] += xv[ravel(&xi, &xs)] * yv[ravel(&yi, &ys)];
        }
        assert_close(eq, DType::Fp32, got, &want, 1.0);
    }
}
