use aneforge::engine::HostSlice;
use aneforge::graph::{input, DType};
use aneforge::{compile_named, CompileOptions};
use std::time::Instant;

fn main() {
    let x = input("x", &[4096, 512], DType::F32).unwrap();
    let cases: Vec<(&str, aneforge::Tensor)> = vec![
        ("gelu", x.gelu().unwrap()),
        ("exp", x.exp().unwrap()),
        ("add1", x.add_scalar(1.0).unwrap()),
        ("erf", x.erf().unwrap()),
        ("tanh", x.tanh().unwrap()),
    ];
    let data: Vec<f32> = (0..4096 * 512)
        .map(|i| ((i % 1000) as f32 - 500.0) / 200.0)
        .collect();
    for (name, y) in cases {
        let mut m = compile_named(&[("y", &y)], &CompileOptions::default()).unwrap();
        m.set_input("x", HostSlice::F32(&data)).unwrap();
        m.execute().unwrap();
        let t = Instant::now();
        for _ in 0..20 {
            m.execute().unwrap();
        }
        println!("{name}: {:.2} ms", t.elapsed().as_secs_f64() * 1e3 / 20.0);
    }
}
