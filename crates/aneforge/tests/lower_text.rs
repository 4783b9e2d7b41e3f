//! Lowering output: program structure, naming, constants, round trip through the MIL parser.

use aneforge::graph::{constant, input, DType, HostArray};
use aneforge::lower::ParameterMode;
use aneforge::{compile_artifact, ProgramOptions};
use aneforge::{AneArch, Target};

#[test]
fn small_program_prints_and_parses() {
    let x = input("x", &[2, 3], DType::F32).unwrap();
    let w = constant(
        HostArray::from_f32(&[4, 3], (0..12).map(|i| i as f32 * 0.5).collect::<Vec<_>>()).unwrap(),
    );
    let y = x
        .linear(&w, None)
        .unwrap()
        .relu()
        .unwrap()
        .add_scalar(1.0)
        .unwrap();
    let a = compile_artifact(
        &[("y", &y)],
        &ProgramOptions::new(&Target::Cpu, ParameterMode::Input),
    )
    .unwrap();
    println!("{}", a.mil_text());
    let parsed = aneforge_mil::parse(a.mil_text()).unwrap();
    assert_eq!(&parsed, a.program());
    let h = compile_artifact(
        &[("y", &y)],
        &ProgramOptions::new(&Target::Ane(AneArch::default()), ParameterMode::Input),
    )
    .unwrap();
    println!("{}", h.mil_text());
}

/// A zero-constant pad of the spatial axes before a conv becomes the conv's own padding (no
/// `pad` op in the program) and computes the same as the padded conv, here against an f64 conv
/// of the explicitly padded input; other pads stay ops of their own.
#[test]
fn a_zero_spatial_pad_before_a_conv_becomes_its_padding() {
    use aneforge::engine::{HostSlice, HostTensor};
    use aneforge::graph::{ConvAttrs, PadMode};
    use aneforge::{compile, CompileOptions};
    let (c, h, w, o) = (3, 9, 10, 4);
    let x = input("x", &[1, c, h, w], DType::F32).unwrap();
    let wv: Vec<f32> = (0..o * c * 9)
        .map(|i| ((i * 37 % 23) as f32 - 11.0) / 16.0)
        .collect();
    let weight = constant(HostArray::from_f32(&[o, c, 3, 3], wv.clone()).unwrap());
    let attrs = ConvAttrs {
        strides: vec![2, 2],
        pads: vec![(1, 0), (0, 0)],
        dilations: vec![1, 1],
        groups: 1,
    };
    let spatial = [(0, 0), (0, 0), (0, 1), (1, 1)];
    let conv_of = |pads: &[(usize, usize)], mode, value| {
        x.pad(pads, mode, value)
            .unwrap()
            .conv(&weight, None, attrs.clone())
            .unwrap()
    };
    let mil = |y: &aneforge::graph::Tensor| {
        compile_artifact(
            &[("y", y)],
            &ProgramOptions::new(&Target::Cpu, ParameterMode::Input),
        )
        .unwrap()
        .mil_text()
        .to_string()
    };
    let folded = conv_of(&spatial, PadMode::Constant, 0.0);
    let text = mil(&folded);
    assert!(!text.contains(" pad("), "{text}");
    // [top, bottom, left, right]: the conv's (1, 0) and (0, 0) plus the pad's (0, 1) and (1, 1)
    assert!(text.contains("([1, 1, 1, 1])"), "{text}");
    for kept in [
        conv_of(&spatial, PadMode::Constant, 0.5),
        conv_of(&spatial, PadMode::Constant, -0.0),
        conv_of(&spatial, PadMode::Reflect, 0.0),
        conv_of(&[(1, 0), (0, 0), (0, 1), (1, 1)], PadMode::Constant, 0.0),
        // past the kernel's reach of 2: some output would read only padding
        conv_of(&[(0, 0), (0, 0), (0, 3), (1, 1)], PadMode::Constant, 0.0),
    ] {
        assert!(mil(&kept).contains(" pad("), "{}", mil(&kept));
    }
    let xv: Vec<f32> = (0..c * h * w)
        .map(|i| ((i * 53 % 29) as f32 - 14.0) / 8.0)
        .collect();
    let mut m = compile(&[&folded], &CompileOptions::default()).unwrap();
    let got = match &m.run(&[("x", HostSlice::F32(&xv))]).unwrap()[0] {
        HostTensor::F32(v) => v.clone(),
        other => panic!("{other:?}"),
    };
    // the padded input: rows 1 + h + 0 (conv top 1, pad bottom 1 → +1 row), columns 1 + w + 1
    let (pt, pl, hp, wp) = (1, 1, h + 2, w + 2);
    let at = |ci: usize, y: usize, x: usize| -> f64 {
        match (y.checked_sub(pt), x.checked_sub(pl)) {
            (Some(y), Some(x)) if y < h && x < w => xv[(ci * h + y) * w + x] as f64,
            _ => 0.0,
        }
    };
    let (oh, ow) = ((hp - 3) / 2 + 1, (wp - 3) / 2 + 1);
    assert_eq!(got.len(), o * oh * ow);
    for co in 0..o {
        for oy in 0..oh {
            for ox in 0..ow {
                let mut want = 0.0;
                for ci in 0..c {
                    for i in 0..3 {
                        for j in 0..3 {
                            want += at(ci, oy * 2 + i, ox * 2 + j)
                                * wv[((co * c + ci) * 3 + i) * 3 + j] as f64;
                        }
                    }
                }
                let g = got[(co * oh + oy) * ow + ox] as f64;
                assert!((g - want).abs() < 1e-5, "({co}, {oy}, {ox}): {g} vs {want}");
            }
        }
    }
}

/// A per-channel affine map after a conv with constant weights (a batch norm with constant
/// statistics; a product and then a sum by per-channel constants) is folded into the conv's
/// weights and bias: no `batch_norm`, `mul` or `add` op is left, and the program computes what
/// an f64 conv followed by the map does. A conv with a second reader, and a constant that varies
/// along a spatial axis, keep their ops.
#[test]
fn a_per_channel_affine_map_after_a_conv_folds_into_it() {
    use aneforge::engine::{HostSlice, HostTensor};
    use aneforge::graph::{ConvAttrs, Tensor};
    use aneforge::{compile, CompileOptions};
    let (c, h, w, o) = (3, 6, 7, 4);
    let values = |n: usize, seed: usize, scale: f32, offset: f32| -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 37 + seed * 11) % 23) as f32 / 23.0 * scale + offset)
            .collect()
    };
    let x = input("x", &[1, c, h, w], DType::F32).unwrap();
    let wv = values(o * c * 9, 1, 1.0, -0.5);
    let bv = values(o, 2, 0.4, -0.2);
    let weight = constant(HostArray::from_f32(&[o, c, 3, 3], wv.clone()).unwrap());
    let bias = constant(HostArray::from_f32(&[o], bv.clone()).unwrap());
    let attrs = ConvAttrs {
        strides: vec![1, 1],
        pads: vec![(1, 1), (1, 1)],
        dilations: vec![1, 1],
        groups: 1,
    };
    let conv = x.conv(&weight, Some(&bias), attrs).unwrap();
    let per_channel =
        |v: &[f32], shape: &[usize]| constant(HostArray::from_f32(shape, v.to_vec()).unwrap());
    let (mean, var) = (values(o, 3, 1.0, -0.5), values(o, 4, 2.0, 0.1));
    let (gamma, beta) = (values(o, 5, 1.5, 0.2), values(o, 6, 1.0, -0.5));
    let eps = 1e-3f32;
    let bn = conv
        .batch_norm(
            &per_channel(&mean, &[o]),
            &per_channel(&var, &[o]),
            Some(&per_channel(&gamma, &[o])),
            Some(&per_channel(&beta, &[o])),
            eps,
        )
        .unwrap();
    let (k, d) = (values(o, 7, 2.0, -1.0), values(o, 8, 1.0, -0.5));
    let affine = conv
        .mul(&per_channel(&k, &[o, 1, 1]))
        .unwrap()
        .add(&per_channel(&d, &[1, o, 1, 1]))
        .unwrap();
    let mil = |ys: &[&Tensor]| {
        let named: Vec<(String, &Tensor)> = ys
            .iter()
            .enumerate()
            .map(|(i, y)| (format!("y{i}"), *y))
            .collect();
        let named: Vec<(&str, &Tensor)> = named.iter().map(|(n, y)| (n.as_str(), *y)).collect();
        compile_artifact(
            &named,
            &ProgramOptions::new(&Target::Cpu, ParameterMode::Input),
        )
        .unwrap()
        .mil_text()
        .to_string()
    };
    for folded in [&bn, &affine] {
        let text = mil(&[folded]);
        for op in [" batch_norm(", " mul(", " add("] {
            assert!(!text.contains(op), "{op}: {text}");
        }
    }
    // the conv has a second reader (it is an output too): the batch norm stays
    let shared = mil(&[&bn, &conv]);
    assert!(shared.contains(" batch_norm("), "{shared}");
    // a constant along the rows is not per channel
    let rows = conv
        .mul(&per_channel(&values(h, 9, 1.0, 0.5), &[h, 1]))
        .unwrap();
    assert!(mil(&[&rows]).contains(" mul("));

    let xv = values(c * h * w, 10, 2.0, -1.0);
    let conv64 = |co: usize, y: usize, x: usize| -> f64 {
        let mut s = f64::from(bv[co]);
        for ci in 0..c {
            for i in 0..3 {
                for j in 0..3 {
                    let (yy, xx) = ((y + i).checked_sub(1), (x + j).checked_sub(1));
                    if let (Some(yy), Some(xx)) = (yy, xx) {
                        if yy < h && xx < w {
                            s += f64::from(xv[(ci * h + yy) * w + xx])
                                * f64::from(wv[((co * c + ci) * 3 + i) * 3 + j]);
                        }
                    }
                }
            }
        }
        s
    };
    let f = |v: &[f32], i: usize| f64::from(v[i]);
    type Map<'a> = Box<dyn Fn(usize, f64) -> f64 + 'a>;
    let maps: [(&Tensor, Map); 2] = [
        (
            &bn,
            Box::new(|co, v| {
                (v - f(&mean, co)) / (f(&var, co) + f64::from(eps)).sqrt() * f(&gamma, co)
                    + f(&beta, co)
            }),
        ),
        (&affine, Box::new(|co, v| v * f(&k, co) + f(&d, co))),
    ];
    for (y, map) in maps {
        let mut m = compile(&[y], &CompileOptions::default()).unwrap();
        let got = match &m.run(&[("x", HostSlice::F32(&xv))]).unwrap()[0] {
            HostTensor::F32(v) => v.clone(),
            other => panic!("{other:?}"),
        };
        for co in 0..o {
            for yy in 0..h {
                for xx in 0..w {
                    let want = map(co, conv64(co, yy, xx));
                    let g = f64::from(got[(co * h + yy) * w + xx]);
                    assert!(
                        (g - want).abs() < 1e-5 * (1.0 + want.abs()),
                        "({co}, {yy}, {xx}): {g} vs {want}"
                    );
                }
            }
        }
    }
}
