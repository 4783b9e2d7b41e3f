//! Resident state through `share_buffer`: accumulators and KV-cache-style writes, checked against
//! f64 references computed step by step.

mod common;

use aneforge::engine::HostSlice;
use aneforge::graph::{self, concat, input, parameter, sdpa, DType, HostArray};
use aneforge::{compile_named, AneArch, CompileOptions, Target};
use common::{compare, Nd, Prec};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

fn targets() -> [(Prec, Target); 2] {
    [
        (Prec::F32, Target::Cpu),
        (Prec::F16, Target::Ane(AneArch::default())),
    ]
}

fn options(target: Target) -> CompileOptions {
    let prec = match target {
        Target::Cpu => Prec::F32,
        _ => Prec::F16,
    };
    CompileOptions {
        target,
        engine: prec.engine(),
        ..CompileOptions::default()
    }
}

#[test]
fn accumulator_runs_n_steps() {
    for (prec, target) in targets() {
        let acc = input("acc", &[2, 3], DType::F32).unwrap();
        let x = input("x", &[2, 3], DType::F32).unwrap();
        let next = acc.add(&x).unwrap();
        let mut model = compile_named(&[("acc_next", &next)], &options(target)).unwrap();
        common::dump_corpus(&model, &format!("state-accumulator-{prec:?}"));
        model.set_input("acc", HostSlice::F32(&[0.0; 6])).unwrap();
        model.share_buffer("acc_next", "acc").unwrap();
        let mut rng = StdRng::seed_from_u64(1);
        let mut want = vec![0.0f64; 6];
        for _ in 0..25 {
            let step: Vec<f32> = (0..6).map(|_| rng.random_range(-1.0..1.0)).collect();
            for (w, s) in want.iter_mut().zip(&step) {
                *w = prec.round((*w + prec.round(*s)) as f32);
            }
            model.run(&[("x", HostSlice::F32(&step))]).unwrap();
        }
        let got: Vec<f64> = model
            .read_output_f32("acc_next")
            .unwrap()
            .into_iter()
            .map(f64::from)
            .collect();
        compare(
            &format!("accumulator {prec:?}"),
            &got,
            &Nd::new(&[2, 3], want),
            1e-6,
            1e-6,
            model.mil_text(),
        );
    }
}

#[test]
fn parameter_state_starts_at_its_initial_value() {
    for (prec, target) in targets() {
        let init: Vec<f32> = vec![0.5, -1.0, 2.0, 0.25];
        let w = parameter("w", HostArray::from_f32(&[4], init.clone()).unwrap()).unwrap();
        let updated = w.mul_scalar(0.5).unwrap().add_scalar(1.0).unwrap();
        let mut model = compile_named(&[("w_next", &updated)], &options(target)).unwrap();
        common::dump_corpus(&model, &format!("state-parameter-{prec:?}"));
        model.share_buffer("w_next", "w").unwrap();
        let mut want: Vec<f64> = init.iter().map(|&v| f64::from(v)).collect();
        for _ in 0..6 {
            model.run(&[]).unwrap();
            for v in want.iter_mut() {
                *v = *v * 0.5 + 1.0;
            }
        }
        let got: Vec<f64> = model
            .read_output_f32("w_next")
            .unwrap()
            .into_iter()
            .map(f64::from)
            .collect();
        compare(
            &format!("parameter state {prec:?}"),
            &got,
            &Nd::new(&[4], want),
            0.0,
            1e-6,
            model.mil_text(),
        );
    }
}

/// Decode loop with a resident KV cache written at a runtime position (`slice_update`), attention
/// over the filled prefix each step (CPU target: the position is data-dependent).
#[test]
#[ignore = "aneforge-cpu rejects a runtime slice_update begin (MIL iOS18 allows one); run with --ignored"]
fn kv_cache_dynamic_write() {
    let (h, s, d) = (2, 6, 4);
    let cache = input("cache", &[1, h, s, d], DType::F32).unwrap();
    let k_new = input("k_new", &[1, h, 1, d], DType::F32).unwrap();
    let q = input("q", &[1, h, 1, d], DType::F32).unwrap();
    let pos = input("pos", &[4], DType::I32).unwrap();
    let mask = input("mask", &[1, s], DType::F32).unwrap();
    let updated = cache.dynamic_slice_update(&k_new, &pos).unwrap();
    let attn = sdpa(&q, &updated, &updated, Some(&mask), false, None).unwrap();
    let mut model = compile_named(
        &[("cache_next", &updated), ("attn", &attn)],
        &options(Target::Cpu),
    )
    .unwrap();
    assert!(model.mil_text().contains("slice_update("));
    common::dump_corpus(&model, "state-kv-dynamic");
    model
        .set_input("cache", HostSlice::F32(&vec![0.0; h * s * d]))
        .unwrap();
    model.share_buffer("cache_next", "cache").unwrap();
    let mut rng = StdRng::seed_from_u64(2);
    let mut keys = Nd::new(&[1, h, s, d], vec![0.0; h * s * d]);
    for t in 0..s {
        let k: Vec<f32> = (0..h * d).map(|_| rng.random_range(-1.0..1.0)).collect();
        let qv: Vec<f32> = (0..h * d).map(|_| rng.random_range(-1.0..1.0)).collect();
        let m: Vec<f32> = (0..s)
            .map(|j| if j <= t { 0.0 } else { graph::nn::MASKED })
            .collect();
        let out = model
            .run_f32(&[
                ("k_new", HostSlice::F32(&k)),
                ("q", HostSlice::F32(&qv)),
                ("pos", HostSlice::I32(&[0, 0, t as i32, 0])),
                ("mask", HostSlice::F32(&m)),
            ])
            .unwrap();
        for hh in 0..h {
            for dd in 0..d {
                keys.data[(hh * s + t) * d + dd] = f64::from(k[hh * d + dd]);
            }
        }
        let qn = Nd::new(&[1, h, 1, d], qv.iter().map(|&v| f64::from(v)).collect());
        let keep = Nd::new(
            &[1, s],
            (0..s).map(|j| f64::from(u8::from(j <= t))).collect(),
        );
        let want = common::reference::sdpa(&qn, &keys, &keys, None, Some(&keep), false, None);
        let got: Vec<f64> = out[1].iter().map(|&v| f64::from(v)).collect();
        compare(
            &format!("kv attention step {t}"),
            &got,
            &want,
            1e-5,
            1e-4,
            "",
        );
        let cache_now: Vec<f64> = out[0].iter().map(|&v| f64::from(v)).collect();
        compare(
            &format!("kv cache step {t}"),
            &cache_now,
            &keys,
            0.0,
            0.0,
            "",
        );
    }
}

/// A shift-register cache (`concat(cache[:, :, 1:], k_new)`) needs no runtime position, so it also
/// lowers for the ANE target.
#[test]
fn kv_cache_shift_register() {
    let (h, s, d) = (2, 5, 3);
    for (prec, target) in targets() {
        let cache = input("cache", &[1, h, s, d], DType::F32).unwrap();
        let k_new = input("k_new", &[1, h, 1, d], DType::F32).unwrap();
        let kept = cache.slice(&[0, 0, 1, 0], &[1, h, s, d], &[1; 4]).unwrap();
        let next = concat(&[kept, k_new], 2).unwrap();
        let mut model = compile_named(&[("cache_next", &next)], &options(target)).unwrap();
        common::dump_corpus(&model, &format!("state-kv-shift-{prec:?}"));
        model
            .set_input("cache", HostSlice::F32(&vec![0.0; h * s * d]))
            .unwrap();
        model.share_buffer("cache_next", "cache").unwrap();
        let mut rng = StdRng::seed_from_u64(3);
        let mut history: Vec<Vec<f32>> = Vec::new();
        for _ in 0..8 {
            let k: Vec<f32> = (0..h * d).map(|_| rng.random_range(-1.0..1.0)).collect();
            model.run(&[("k_new", HostSlice::F32(&k))]).unwrap();
            history.push(k);
        }
        let want = Nd::from_fn(&[1, h, s, d], |i| {
            let step = history.len() - s + i[2];
            prec.round(history[step][i[1] * d + i[3]])
        });
        let got: Vec<f64> = model
            .read_output_f32("cache_next")
            .unwrap()
            .into_iter()
            .map(f64::from)
            .collect();
        compare(
            &format!("shift register {prec:?}"),
            &got,
            &want,
            0.0,
            0.0,
            model.mil_text(),
        );
    }
}

#[test]
fn dynamic_positions_are_legalized_or_rejected_for_the_ane_target() {
    let cache = input("cache", &[1, 4, 2], DType::F32).unwrap();
    let row = input("row", &[1, 1, 2], DType::F32).unwrap();
    let pos = input("pos", &[3], DType::I32).unwrap();
    let updated = cache.dynamic_slice_update(&row, &pos).unwrap();
    let mut model = compile_named(
        &[("y", &updated)],
        &options(Target::Ane(AneArch::default())),
    )
    .unwrap();
    model
        .set_input(
            "cache",
            HostSlice::F32(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]),
        )
        .unwrap();
    model
        .set_input("row", HostSlice::F32(&[-1.0, -2.0]))
        .unwrap();
    model.set_input("pos", HostSlice::I32(&[0, 2, 0])).unwrap();
    model.execute().unwrap();
    assert_eq!(
        model.read_output_f32("y").unwrap(),
        [1.0, 2.0, 3.0, 4.0, -1.0, -2.0, 7.0, 8.0]
    );
    let idx = input("idx", &[2], DType::I32).unwrap();
    let table = input("table", &[5000, 3], DType::F32).unwrap();
    let picked = table.gather(&idx, 0).unwrap();
    let err =
        compile_named(&[("y", &picked)], &options(Target::Ane(AneArch::default()))).unwrap_err();
    assert!(
        err.to_string().contains("gather") && err.to_string().contains("data-dependent"),
        "{err}"
    );
    assert!(compile_named(&[("y", &picked)], &options(Target::Cpu)).is_ok());
}

/// A state buffer released once its contents were copied elsewhere gives its memory back at once
/// (the CPU engine's port bytes drop by its size); the model then refuses to execute, naming the
/// input, until a buffer is moved back into it.
#[test]
fn released_state_frees_its_buffer_until_one_is_moved_back() {
    let build = || {
        let acc = input("acc", &[1024], DType::F32).unwrap();
        let x = input("x", &[1024], DType::F32).unwrap();
        let next = acc.add(&x).unwrap();
        let mut model = compile_named(&[("acc_next", &next)], &options(Target::Cpu)).unwrap();
        model
            .set_input("acc", HostSlice::F32(&[0.0; 1024]))
            .unwrap();
        model.share_buffer("acc_next", "acc").unwrap();
        model
    };
    let ports = |m: &aneforge::Model| m.memory().engine.unwrap().ports;
    let (mut a, mut b) = (build(), build());
    let ones = [1.0f32; 1024];
    a.run(&[("x", HostSlice::F32(&ones))]).unwrap();
    let held = ports(&a);
    assert!(a.release_state("acc").unwrap());
    assert_eq!(held - ports(&a), 4 * 1024);
    let err = a
        .run(&[("x", HostSlice::F32(&ones))])
        .unwrap_err()
        .to_string();
    assert!(err.contains("`acc`") && err.contains("taken"), "{err}");
    b.run(&[("x", HostSlice::F32(&ones))]).unwrap();
    assert!(b.move_state("acc", &mut a).unwrap());
    a.run(&[("x", HostSlice::F32(&ones))]).unwrap();
    assert_eq!(a.read_output_f32("acc_next").unwrap(), vec![2.0; 1024]);
}
