//! `slice_update` and `slice_by_size` at a runtime position: a KV-cache write that stays in place
//! under `share_buffer`, window reads, and errors for positions outside the tensor.

use crate::common;
use aneforge_cpu::{compile, BlobStore, CompileOptions, CpuError, HostSlice};
use aneforge_mil::DType;
use common::*;

/// cache[1, H, CAP, D] ← k[1, H, T, D] at `pos`; `window` reads [1, H, T, D] back at `pos`.
fn program(d: DType, heads: usize, cap: usize, t: usize, hd: usize) -> (Prog, String, String) {
    let mut p = Prog::new();
    let cache = p.input("cache", d, &[1, heads, cap, hd]);
    let k = p.input("k", d, &[1, heads, t, hd]);
    let pos = p.input("pos", DType::Int32, &[4]);
    let end = p.op(
        "add",
        &[
            ("x", v(&pos)),
            ("y", A::Is(vec![1, heads as i64, t as i64, hd as i64])),
        ],
        DType::Int32,
        &[4],
    );
    let upd = p.op(
        "slice_update",
        &[
            ("x", v(&cache)),
            ("update", v(&k)),
            ("begin", v(&pos)),
            ("end", v(&end)),
        ],
        d,
        &[1, heads, cap, hd],
    );
    let window = p.op(
        "slice_by_size",
        &[
            ("x", v(&upd)),
            ("begin", v(&pos)),
            ("size", A::Is(vec![1, heads as i64, t as i64, hd as i64])),
        ],
        d,
        &[1, heads, t, hd],
    );
    p.output(&upd);
    p.output(&window);
    (p, upd, window)
}

#[test]
fn runtime_position_cache_write_is_in_place() {
    for d in [DType::Fp32, DType::Fp16] {
        let (heads, cap, t, hd) = (3, 10, 2, 4);
        let (p, upd, window) = program(d, heads, cap, t, hd);
        let plan = compile(
            &p.build(),
            "main",
            &BlobStore::new(),
            &CompileOptions::default(),
        )
        .unwrap();
        assert!(plan.shares_in_place(&upd, "cache"), "{:?}", plan.schedule());
        let mut inst = plan.instantiate();
        inst.set_input("cache", HostSlice::F32(&vec![-1.0; heads * cap * hd]))
            .unwrap();
        inst.share_buffer(&upd, "cache").unwrap();
        let mut want = vec![-1.0f32; heads * cap * hd];
        for (step, at) in [0usize, 2, 8, 4].into_iter().enumerate() {
            let k: Vec<f32> = (0..heads * t * hd)
                .map(|i| (step * 100 + i) as f32)
                .collect();
            inst.set_input("k", HostSlice::F32(&k)).unwrap();
            inst.set_input("pos", HostSlice::I32(&[0, 0, at as i32, 0]))
                .unwrap();
            inst.execute().unwrap();
            for h in 0..heads {
                for j in 0..t {
                    for e in 0..hd {
                        want[(h * cap + at + j) * hd + e] = k[(h * t + j) * hd + e];
                    }
                }
            }
            assert_eq!(inst.read_output_f32(&upd).unwrap(), want, "{d} step {step}");
            assert_eq!(inst.read_output_f32(&window).unwrap(), k, "{d} step {step}");
        }
    }
}

#[test]
fn positions_outside_the_tensor_are_errors() {
    let (heads, cap, t, hd) = (2, 6, 3, 2);
    let (p, _, _) = program(DType::Fp32, heads, cap, t, hd);
    let plan = compile(
        &p.build(),
        "main",
        &BlobStore::new(),
        &CompileOptions::default(),
    )
    .unwrap();
    let mut inst = plan.instantiate();
    inst.set_input("cache", HostSlice::F32(&vec![0.0; heads * cap * hd]))
        .unwrap();
    inst.set_input("k", HostSlice::F32(&vec![1.0; heads * t * hd]))
        .unwrap();
    for pos in [[0, 0, 4, 0], [0, 0, -2, 0], [0, 1, 0, 0], [0, 0, -9, 0]] {
        inst.set_input("pos", HostSlice::I32(&pos)).unwrap();
        let e = inst.execute().unwrap_err();
        assert!(matches!(e, CpuError::Execute(_)), "{e}");
        assert!(e.to_string().contains("outside the tensor"), "{e}");
    }
    // the last valid window
    inst.set_input("pos", HostSlice::I32(&[0, 0, 3, 0]))
        .unwrap();
    inst.execute().unwrap();
}

#[test]
fn runtime_begin_must_be_an_int32_vector() {
    let mut p = Prog::new();
    let x = p.input("x", DType::Fp32, &[4, 4]);
    let b = p.input("b", DType::Int32, &[3]);
    let y = p.op(
        "slice_by_size",
        &[("x", v(&x)), ("begin", v(&b)), ("size", A::Is(vec![2, 2]))],
        DType::Fp32,
        &[2, 2],
    );
    p.output(&y);
    let e = compile(
        &p.build(),
        "main",
        &BlobStore::new(),
        &CompileOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("int32 [2]"), "{e}");
}
