//! Steady-state executes must not allocate: a counting global allocator around `execute()`.
//!
//! The counter is process-wide, so this binary has its own `main` (`harness = false`) that runs the
//! checks one after another on one thread: under libtest's parallel runner one test's setup was
//! counted inside another's measured window.
mod common;
use aneforge_cpu::{compile, BlobStore, CompileOptions, HostSlice};
use aneforge_mil::DType;
use common::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        System.alloc(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        System.realloc(p, l, n)
    }
}

#[global_allocator]
static A: Counting = Counting;

fn allocations_per_execute(p: &Prog, threads: usize, n_in: usize) -> usize {
    let plan = compile(
        &p.build(),
        "main",
        &BlobStore::new(),
        &CompileOptions {
            threads: Some(threads),
            ..Default::default()
        },
    )
    .unwrap();
    let mut inst = plan.instantiate();
    inst.set_input("x", HostSlice::F32(&vec![0.5; n_in]))
        .unwrap();
    inst.execute().unwrap();
    inst.execute().unwrap();
    let before = ALLOCS.load(Ordering::Relaxed);
    for _ in 0..10 {
        inst.execute().unwrap();
    }
    (ALLOCS.load(Ordering::Relaxed) - before) / 10
}

/// Everything but the gemm-crate GEMM calls: elementwise chains, norms, reductions, layout copies,
/// the flash attention kernel, few-row attention split into key parts and the own GEMV path
/// allocate nothing per execute.
fn engine_kernels_do_not_allocate_per_execute() {
    let mut rng = Rng(71);
    for &d in &[DType::Fp32, DType::Fp16] {
        let mut p = Prog::new();
        let x = p.input("x", d, &[1, 24, 32]);
        let g = p.op("silu", &[("x", v(&x))], d, &[1, 24, 32]);
        let n = p.op(
            "layer_norm",
            &[
                ("x", v(&g)),
                ("axes", A::Is(vec![-1])),
                ("epsilon", A::F(d, 1e-5)),
            ],
            d,
            &[1, 24, 32],
        );
        let r = p.op(
            "reshape",
            &[("x", v(&n)), ("shape", A::Is(vec![1, 24, 2, 16]))],
            d,
            &[1, 24, 2, 16],
        );
        let t = p.op(
            "transpose",
            &[("x", v(&r)), ("perm", A::Is(vec![0, 2, 1, 3]))],
            d,
            &[1, 2, 24, 16],
        );
        let a = p.op(
            "scaled_dot_product_attention",
            &[("query", v(&t)), ("key", v(&t)), ("value", v(&t))],
            d,
            &[1, 2, 24, 16],
        );
        let s = p.op(
            "reduce_sum",
            &[
                ("x", v(&a)),
                ("axes", A::Is(vec![-1])),
                ("keep_dims", A::B(false)),
            ],
            d,
            &[1, 2, 24],
        );
        let last = p.op(
            "slice_by_index",
            &[
                ("x", v(&n)),
                ("begin", A::Is(vec![0, 23, 0])),
                ("end", A::Is(vec![1, 24, 32])),
            ],
            d,
            &[1, 1, 32],
        );
        let w = p.konst(d, &[64, 32], &quantize(d, &rng.vec(64 * 32, -0.2, 0.2)));
        let y = p.op(
            "linear",
            &[("x", v(&last)), ("weight", v(&w))],
            d,
            &[1, 1, 64],
        );
        p.output(&s);
        p.output(&y);
        for threads in [1, 2] {
            assert_eq!(
                allocations_per_execute(&p, threads, 24 * 32),
                0,
                "{d} threads={threads}"
            );
        }
    }
    // decode-style attention of 3 query rows over 2,100 keys: split into key parts and merged
    let d = DType::Fp32;
    let mut p = Prog::new();
    let x = p.input("x", d, &[2, 2100, 32]);
    let q = p.op(
        "slice_by_index",
        &[
            ("x", v(&x)),
            ("begin", A::Is(vec![0, 0, 0])),
            ("end", A::Is(vec![2, 3, 32])),
        ],
        d,
        &[2, 3, 32],
    );
    let a = p.op(
        "scaled_dot_product_attention",
        &[("query", v(&q)), ("key", v(&x)), ("value", v(&x))],
        d,
        &[2, 3, 32],
    );
    p.output(&a);
    for threads in [1, 2] {
        assert_eq!(
            allocations_per_execute(&p, threads, 2 * 2100 * 32),
            0,
            "split few-row attention, threads={threads}"
        );
    }
}

/// GEMM and conv go through the gemm crate, which allocates its packing buffers on every call
/// (gemm-common 0.19 `gemm_basic_generic`): a bounded, documented cost.
fn gemm_calls_allocate_only_the_gemm_crates_packing_buffers() {
    let mut rng = Rng(72);
    let d = DType::Fp32;
    let mut p = Prog::new();
    let x = p.input("x", d, &[1, 24, 32]);
    let w = p.konst(d, &[32, 32], &quantize(d, &rng.vec(1024, -0.2, 0.2)));
    let h = p.op(
        "linear",
        &[("x", v(&x)), ("weight", v(&w))],
        d,
        &[1, 24, 32],
    );
    let img = p.op(
        "reshape",
        &[("x", v(&h)), ("shape", A::Is(vec![1, 24, 4, 8]))],
        d,
        &[1, 24, 4, 8],
    );
    let cw = p.konst(
        d,
        &[8, 24, 3, 3],
        &quantize(d, &rng.vec(8 * 24 * 9, -0.1, 0.1)),
    );
    let c = p.op(
        "conv",
        &[
            ("x", v(&img)),
            ("weight", v(&cw)),
            ("pad_type", A::S("same")),
        ],
        d,
        &[1, 8, 4, 8],
    );
    p.output(&c);
    let n = allocations_per_execute(&p, 1, 24 * 32);
    assert!(n <= 2 * 3, "{n} allocations per execute for two gemm calls");
}

/// The direct and Winograd 3×3 conv kernels (AVX-512) keep all their state in the plan's scratch
/// and on the stack: no allocation per execute at one thread.
fn direct_and_winograd_convs_do_not_allocate_per_execute() {
    if !aneforge_cpu::simd::has_avx512() {
        return;
    }
    let mut rng = Rng(73);
    let d = DType::Fp32;
    for (stride, cout) in [(1, 32), (2, 16)] {
        let mut p = Prog::new();
        let x = p.input("x", d, &[1, 32, 12, 12]);
        let w = p.konst(
            d,
            &[cout, 32, 3, 3],
            &quantize(d, &rng.vec(cout * 32 * 9, -0.1, 0.1)),
        );
        let b = p.konst(d, &[cout], &quantize(d, &rng.vec(cout, -0.1, 0.1)));
        let o = 12 / stride;
        let c = p.op(
            "conv",
            &[
                ("x", v(&x)),
                ("weight", v(&w)),
                ("bias", v(&b)),
                ("strides", A::Is(vec![stride as i64; 2])),
                ("pad_type", A::S("same")),
            ],
            d,
            &[1, cout, o, o],
        );
        let r = p.op("relu", &[("x", v(&c))], d, &[1, cout, o, o]);
        p.output(&r);
        let n = allocations_per_execute(&p, 1, 32 * 144);
        assert_eq!(n, 0, "stride {stride}: {n} allocations per execute");
    }
}

/// Depthwise convs keep their phase planes in the plan's scratch and their tap offsets in the
/// plan, with the epilogue fused (relu6) or run plane batch by plane batch (sigmoid).
fn depthwise_convs_do_not_allocate_per_execute() {
    let mut rng = Rng(74);
    let d = DType::Fp32;
    for (stride, act) in [(1, "relu6"), (2, "relu6"), (1, "sigmoid"), (2, "sigmoid")] {
        let mut p = Prog::new();
        let x = p.input("x", d, &[1, 16, 14, 14]);
        let w = p.konst(d, &[16, 1, 3, 3], &quantize(d, &rng.vec(16 * 9, -0.5, 0.5)));
        let b = p.konst(d, &[16], &quantize(d, &rng.vec(16, -0.1, 0.1)));
        let o = 14 / stride;
        let c = p.op(
            "conv",
            &[
                ("x", v(&x)),
                ("weight", v(&w)),
                ("bias", v(&b)),
                ("strides", A::Is(vec![stride as i64; 2])),
                ("pad_type", A::S("same")),
                ("groups", A::I(16)),
            ],
            d,
            &[1, 16, o, o],
        );
        let y = p.op(act, &[("x", v(&c))], d, &[1, 16, o, o]);
        p.output(&y);
        for threads in [1, 2] {
            let n = allocations_per_execute(&p, threads, 16 * 196);
            assert_eq!(
                n, 0,
                "stride {stride}, {act}, {threads} threads: {n} allocations per execute"
            );
        }
    }
}

fn main() {
    let checks: [(&str, fn()); 4] = [
        (
            "engine_kernels_do_not_allocate_per_execute",
            engine_kernels_do_not_allocate_per_execute,
        ),
        (
            "gemm_calls_allocate_only_the_gemm_crates_packing_buffers",
            gemm_calls_allocate_only_the_gemm_crates_packing_buffers,
        ),
        (
            "direct_and_winograd_convs_do_not_allocate_per_execute",
            direct_and_winograd_convs_do_not_allocate_per_execute,
        ),
        (
            "depthwise_convs_do_not_allocate_per_execute",
            depthwise_convs_do_not_allocate_per_execute,
        ),
    ];
    // `cargo test -p aneforge-cpu --test no_alloc -- NAME` runs the checks whose name contains NAME.
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let (mut passed, mut filtered) = (0, 0);
    println!("\nrunning {} tests", checks.len());
    for (name, check) in checks {
        if filter.as_deref().is_some_and(|f| !name.contains(f)) {
            filtered += 1;
            continue;
        }
        check();
        println!("test {name} ... ok");
        passed += 1;
    }
    println!(
        "\ntest result: ok. {passed} passed; 0 failed; 0 ignored; 0 measured; {filtered} filtered out\n"
    );
}
