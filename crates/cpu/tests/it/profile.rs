//! `execute_profiled`: one timing per scheduled kernel, and the same results as `execute`.
use aneforge_cpu::{compile, BlobStore, CompileOptions, HostSlice};
use aneforge_mil::parse;

#[test]
fn profiled_execution_times_every_kernel_and_computes_the_same() {
    let text = r#"program(1.3)
{
    func main<ios18>(tensor<fp32, [2, 3]> x, tensor<fp32, [3, 4]> w) {
            tensor<fp32, [2, 4]> y = matmul(x = x, y = w, transpose_x = bool(false), transpose_y = bool(false))[name = string("y")];
            tensor<fp32, [4, 2]> t = transpose(x = y, perm = tensor<int32, [2]>([1, 0]))[name = string("t")];
            tensor<fp32, [4, 2]> e = exp(x = t)[name = string("e")];
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
    let x: Vec<f32> = (0..6).map(|i| i as f32 * 0.1).collect();
    let w: Vec<f32> = (0..12).map(|i| 0.2 - i as f32 * 0.03).collect();
    let mut plain = plan.instantiate();
    let mut timed = plan.instantiate();
    for inst in [&mut plain, &mut timed] {
        inst.set_input("x", HostSlice::F32(&x)).unwrap();
        inst.set_input("w", HostSlice::F32(&w)).unwrap();
    }
    plain.execute().unwrap();
    let times = timed.execute_profiled().unwrap();
    assert_eq!(
        plain.read_output_f32("e").unwrap(),
        timed.read_output_f32("e").unwrap()
    );
    let schedule = plan.schedule();
    assert_eq!(times.len(), schedule.len());
    for (t, line) in times.iter().zip(&schedule) {
        assert_eq!(line, &format!("{}: {}", t.name, t.kernel));
        assert!(t.seconds >= 0.0 && t.seconds.is_finite());
    }
    assert!(times.iter().any(|t| t.op_type == "matmul"));
}
