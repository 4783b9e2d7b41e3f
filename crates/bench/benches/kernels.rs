//! divan benches of the CPU engine (`cargo bench -p aneforge-cpu`). The side-by-side comparison with
//! NumPy/PyTorch lives in tools/bench/run.sh; these track regressions of the engine alone.

use aneforge_bench as bench;
use divan::Bencher;

fn main() {
    divan::main();
}

#[divan::bench(args = [1, 2])]
fn sgemm_512(b: Bencher, threads: usize) {
    let mut inst = bench::prepare(&bench::gemm_program(512), threads);
    b.bench_local(|| inst.execute().expect("execute"));
}

#[divan::bench(args = [1, 2])]
fn gemv_4096(b: Bencher, threads: usize) {
    let mut inst = bench::prepare(&bench::gemv_program(4096, 4096), threads);
    b.bench_local(|| inst.execute().expect("execute"));
}

#[divan::bench(args = [1, 2])]
fn conv3x3_128x28(b: Bencher, threads: usize) {
    let mut inst = bench::prepare(&bench::conv_program(1, 128, 28, 128, 3), threads);
    b.bench_local(|| inst.execute().expect("execute"));
}

#[divan::bench(args = [128, 512])]
fn sdpa_12x64(b: Bencher, s: usize) {
    let mut inst = bench::prepare(&bench::attention_program(s, 12, 64), 2);
    b.bench_local(|| inst.execute().expect("execute"));
}

#[divan::bench]
fn overhead_tiny(b: Bencher) {
    let mut inst = bench::prepare(&bench::tiny_program(), 1);
    b.bench_local(|| inst.execute().expect("execute"));
}
