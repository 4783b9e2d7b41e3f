//! Programs written as MIL text (the form the lowering and Core ML emit), parsed by aneforge-mil.
use aneforge_cpu::{compile, BlobStore, CompileOptions, HostSlice};
use aneforge_mil::{parse, BlobFile, BlobWriter};

#[test]
fn core_ml_style_constexpr_attributes_and_linear() {
    // int8 weights with zero point -3 and scale 2^-7, written as Core ML compiles them: the
    // constexpr arguments are attributes.
    let q: Vec<i8> = (0..16).map(|i| (i * 7 % 23) as i8 - 11).collect();
    let mut w = BlobWriter::new();
    let off = w
        .add(aneforge_mil::DType::Int8, 16, bytemuck::cast_slice(&q))
        .unwrap();
    assert_eq!(off, 64);
    let text = r#"program(1.3)
[buildInfo = dict<string, string>({{"coremltools-version", "9.0"}})]
{
    func main<ios17>(tensor<fp32, [1, 4]> x) {
            tensor<fp32, [4, 4]> w = constexpr_affine_dequantize()[axis = int32(0), name = string("w"), quantized_data = tensor<int8, [4, 4]>(BLOBFILE(path = string("@model_path/weights/weight.bin"), offset = uint64(64))), scale = fp32(0x1p-7), zero_point = int8(-3)];
            tensor<fp32, [1, 4]> y = linear(weight = w, x = x)[name = string("y")];
            int32 ax = const()[name = string("ax"), val = int32(-1)];
            tensor<fp32, [1, 4]> s = softmax(axis = ax, x = y)[name = string("s")];
        } -> (y, s);
}
"#;
    let program = parse(text).expect("parses");
    let mut blobs = BlobStore::new();
    blobs.insert(
        "@model_path/weights/weight.bin".into(),
        BlobFile::from_vec("weight.bin", w.finish()).unwrap(),
    );
    let plan = compile(&program, "main", &blobs, &CompileOptions::default()).unwrap();
    let mut inst = plan.instantiate();
    let x = [0.5f32, -1.0, 2.0, 0.25];
    inst.set_input("x", HostSlice::F32(&x)).unwrap();
    inst.execute().unwrap();
    let y = inst.read_output_f32("y").unwrap();
    let s = inst.read_output_f32("s").unwrap();
    let want: Vec<f64> = (0..4)
        .map(|j| {
            (0..4)
                .map(|k| (q[j * 4 + k] as f64 + 3.0) / 128.0 * x[k] as f64)
                .sum()
        })
        .collect();
    for j in 0..4 {
        assert!(
            (y[j] as f64 - want[j]).abs() < 1e-5,
            "y[{j}] {} vs {}",
            y[j],
            want[j]
        );
    }
    let m = want.iter().cloned().fold(f64::MIN, f64::max);
    let z: f64 = want.iter().map(|v| (v - m).exp()).sum();
    for j in 0..4 {
        assert!((s[j] as f64 - (want[j] - m).exp() / z).abs() < 1e-6);
    }
}

#[test]
fn fp16_program_from_text_with_inline_scalars() {
    let text = r#"program(1.3)
{
    func main<ios18>(tensor<fp16, [2, 3]> a, tensor<fp16, [3]> b) {
            tensor<fp16, [2, 3]> c = add(x = a, y = b)[name = string("c")];
            tensor<fp16, [2, 3]> d = mul(x = c, y = fp16(0x1.8p+0))[name = string("d")];
            tensor<int32, [2]> perm = const()[name = string("perm"), val = tensor<int32, [2]>([1, 0])];
            tensor<fp16, [3, 2]> e = transpose(perm = perm, x = d)[name = string("e")];
        } -> (e);
}
"#;
    let program = parse(text).expect("parses");
    let plan = compile(
        &program,
        "main",
        &BlobStore::new(),
        &CompileOptions::default(),
    )
    .unwrap();
    let mut inst = plan.instantiate();
    inst.set_input("a", HostSlice::F32(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]))
        .unwrap();
    inst.set_input("b", HostSlice::F32(&[0.5, 0.25, -1.0]))
        .unwrap();
    inst.execute().unwrap();
    let e = inst.read_output_f32("e").unwrap();
    // d = (a + b) * 1.5 ; e = dᵀ
    assert_eq!(e, vec![2.25, 6.75, 3.375, 7.875, 3.0, 7.5]);
}

fn fixture(name: &str) -> aneforge_mil::Program {
    let path = format!(
        "{}/../mil/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    parse(&std::fs::read_to_string(&path).expect("fixture")).expect("fixture parses")
}

/// One synthetic blob at offset 64 holding `n` values of `dtype` (0.01·i pattern).
fn one_blob(dtype: aneforge_mil::DType, n: usize) -> BlobStore {
    let mut w = BlobWriter::new();
    match dtype {
        aneforge_mil::DType::Fp16 => w.add_f16(
            &(0..n)
                .map(|i| half::f16::from_f32(0.01 * i as f32 - 0.1))
                .collect::<Vec<_>>(),
        ),
        aneforge_mil::DType::Fp32 => {
            w.add_f32(&(0..n).map(|i| 0.01 * i as f32 - 0.1).collect::<Vec<_>>())
        }
        _ => w.add(dtype, n, &vec![1u8; n]).unwrap(),
    };
    let mut blobs = BlobStore::new();
    blobs.insert(
        "@model_path/weights/weight.bin".into(),
        BlobFile::from_vec("weight.bin", w.finish()).unwrap(),
    );
    blobs
}

#[test]
fn compiled_core_ml_fixtures_run() {
    // coremltools 7.1 / iOS16 program: cast → conv (custom pad) → reduce_mean → cast
    let p = fixture("compiled_ios16_legacy.mil");
    let plan = compile(
        &p,
        "main",
        &one_blob(aneforge_mil::DType::Fp16, 4 * 3 * 9),
        &CompileOptions::default(),
    )
    .unwrap();
    let mut inst = plan.instantiate();
    inst.set_input("image", HostSlice::F32(&vec![0.5; 3 * 64]))
        .unwrap();
    inst.execute().unwrap();
    let out = inst.read_output_f32("pooled").unwrap();
    assert_eq!(out.len(), 4);
    assert!(out.iter().all(|v| v.is_finite()));
    // iOS18 program with layer_norm, split, concat, inline fp16 literals incl. inf
    let p = fixture("compiled_ios18.mil");
    let plan = compile(
        &p,
        "main",
        &one_blob(aneforge_mil::DType::Fp16, 32),
        &CompileOptions::default(),
    )
    .unwrap();
    let mut inst = plan.instantiate();
    inst.set_input("input_ids", HostSlice::I32(&[1, 2, 3, 4, 5, 6, 7, 8]))
        .unwrap();
    inst.set_input(
        "hidden",
        HostSlice::F32(&(0..256).map(|i| (i % 17) as f32 * 0.1).collect::<Vec<_>>()),
    )
    .unwrap();
    inst.execute().unwrap();
    assert_eq!(
        inst.read_output_f32("var_9").unwrap(),
        vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    );
    assert!(inst
        .read_output_f32("scaled")
        .unwrap()
        .iter()
        .all(|v| v.is_finite()));
    // symbolic (flexible) shapes are refused with a clear error
    let p = fixture("flexible_multifunction.mil");
    let f = p.functions[0].name.clone();
    let e = compile(
        &p,
        &f,
        &one_blob(aneforge_mil::DType::Fp32, 16),
        &CompileOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("symbolic") || e.contains("static"), "{e}");
}

/// A program reading a [64, 64] linear weight and its bias from its blob file, and that file's bytes.
fn linear_program(weight: &[f32], bias: &[f32]) -> (aneforge_mil::Program, Vec<u8>) {
    let (n, k) = (bias.len(), weight.len() / bias.len());
    let mut w = BlobWriter::new();
    let dt = aneforge_mil::DType::Fp32;
    let w_off = w.add(dt, n * k, bytemuck::cast_slice(weight)).unwrap();
    let b_off = w.add(dt, n, bytemuck::cast_slice(bias)).unwrap();
    let blob = |ty: String, off: u64| {
        format!("{ty}(BLOBFILE(path = string(\"@model_path/weights/weight.bin\"), offset = uint64({off})))")
    };
    let text = format!(
        r#"program(1.3)
{{
    func main<ios17>(tensor<fp32, [1, {k}]> x) {{
            tensor<fp32, [{n}, {k}]> w = const()[name = string("w"), val = {w}];
            tensor<fp32, [{n}]> b = const()[name = string("b"), val = {b}];
            tensor<fp32, [1, {n}]> y = linear(bias = b, weight = w, x = x)[name = string("y")];
        }} -> (y);
}}
"#,
        w = blob(format!("tensor<fp32, [{n}, {k}]>"), w_off),
        b = blob(format!("tensor<fp32, [{n}]>"), b_off),
    );
    (parse(&text).expect("parses"), w.finish())
}

#[test]
fn plans_of_programs_with_equal_weight_files_share_one_copy() {
    let (n, k) = (64usize, 64usize);
    let weight: Vec<f32> = (0..n * k)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 64.0)
        .collect();
    let bias: Vec<f32> = (0..n).map(|i| (i as f32 - 30.0) / 16.0).collect();
    let x: Vec<f32> = (0..k).map(|i| (i as f32 - 20.0) / 10.0).collect();
    let want: Vec<f64> = (0..n)
        .map(|j| {
            (0..k)
                .map(|c| weight[j * k + c] as f64 * x[c] as f64)
                .sum::<f64>()
                + bias[j] as f64
        })
        .collect();
    // two programs with the same contents in two separate buffers, as two bucket programs of one
    // encoder are compiled
    let load = |bytes: &std::sync::Arc<dyn AsRef<[u8]> + Send + Sync>| {
        let (program, _) = linear_program(&weight, &bias);
        let mut blobs = std::collections::BTreeMap::new();
        blobs.insert(
            "@model_path/weights/weight.bin".to_string(),
            BlobFile::parse("weight.bin", bytes.clone()).unwrap(),
        );
        aneforge_cpu::compile_dir(
            &aneforge_mil::ProgramDir { program, blobs },
            "main",
            &CompileOptions::default(),
        )
        .unwrap()
    };
    let file = || -> std::sync::Arc<dyn AsRef<[u8]> + Send + Sync> {
        std::sync::Arc::new(linear_program(&weight, &bias).1)
    };
    let (first, second) = (file(), file());
    let plans = [load(&first), load(&second)];
    assert!(
        std::sync::Arc::strong_count(&first) > 1,
        "the first plan reads its weights in place"
    );
    assert_eq!(
        std::sync::Arc::strong_count(&second),
        1,
        "the second plan keeps its own copy of the same weights"
    );
    for plan in &plans {
        let mut inst = plan.instantiate();
        inst.set_input("x", HostSlice::F32(&x)).unwrap();
        inst.execute().unwrap();
        let y = inst.read_output_f32("y").unwrap();
        for (j, (&a, &b)) in y.iter().zip(&want).enumerate() {
            assert!(
                (a as f64 - b).abs() < 1e-4 * b.abs().max(1.0),
                "y[{j}] {a} vs {b}"
            );
        }
    }
}
