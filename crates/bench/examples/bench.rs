//! Prints the CPU engine's benchmark figures. `cargo run --release -p aneforge-bench --example bench
//! [gemm|gemv|linear|decode|conv|attention|overhead|all]`.

use aneforge_bench as bench;
use aneforge_cpu::Activations;

fn main() {
    let what = std::env::args().nth(1).unwrap_or_else(|| "all".into());
    let threads_max = std::thread::available_parallelism().map_or(1, |n| n.get());
    let thread_counts: Vec<usize> = if threads_max > 1 { vec![1, 2] } else { vec![1] };
    let all = what == "all";
    println!("# cpu engine: {}", aneforge_cpu::simd::describe());
    if all || what == "overhead" {
        println!("{}", bench::overhead(50));
    }
    if all || what == "gemm" {
        for &t in &thread_counts {
            println!("{}", bench::gemm(1024, t, 10));
            println!("{}", bench::gemm(4096, t, 3));
        }
    }
    if all || what == "gemv" {
        for &t in &thread_counts {
            println!("{}", bench::gemv(4096, 4096, t, 50));
            println!("{}", bench::gemv_quant(4096, 4096, 8, t, 50));
            println!("{}", bench::gemv_quant(4096, 4096, 4, t, 50));
        }
    }
    if all || what == "linear" {
        // CLIP ViT-B/32's image tower at batch 1 (50 rows), ViT-B/16's (197 rows), MiniLM's at
        // batch 8 × 16 and 32 × 16 and × 64 tokens; weights read in place and packed at compile
        // time
        for &t in &thread_counts {
            for &(m, k, n) in &[
                (50, 768, 768),
                (50, 768, 3072),
                (50, 3072, 768),
                (197, 768, 768),
                (197, 768, 3072),
                (197, 3072, 768),
                (128, 384, 384),
                (128, 384, 1536),
                (128, 1536, 384),
                (512, 384, 384),
                (512, 384, 1536),
                (512, 1536, 384),
                (2048, 384, 384),
                (2048, 384, 1536),
                (2048, 1536, 384),
            ] {
                for blob in [true, false] {
                    println!("{}", bench::linear(m, k, n, blob, t, 10));
                }
            }
        }
    }
    if all || what == "decode" {
        for &t in &thread_counts {
            for bits in [8, 4] {
                for a in [Activations::F32, Activations::Int16, Activations::Int8] {
                    println!("{}", bench::decode_stack(576, 1536, 24, bits, a, t, 30));
                }
            }
        }
    }
    if all || what == "conv" {
        // ResNet-50 3x3 stages at batch 1
        for &(c, hw) in &[(64usize, 56usize), (128, 28), (256, 14), (512, 7)] {
            for &t in &thread_counts {
                println!("{}", bench::conv(1, c, hw, c, 3, t, 10));
            }
        }
        // pointwise convs of ResNet-50's bottlenecks and MobileNetV2's inverted residuals at
        // batch 1
        for &(c_in, hw, c_out) in &[
            (256usize, 56usize, 64usize),
            (64, 56, 256),
            (512, 28, 128),
            (128, 28, 512),
            (1024, 14, 256),
            (256, 14, 1024),
            (2048, 7, 512),
            (16, 112, 96),
            (144, 56, 24),
            (24, 56, 144),
            (192, 28, 32),
            (384, 14, 64),
            (960, 7, 160),
        ] {
            for &t in &thread_counts {
                println!("{}", bench::conv(1, c_in, hw, c_out, 1, t, 10));
            }
        }
    }
    if all || what == "attention" {
        for &s in &[128usize, 512] {
            for &t in &thread_counts {
                println!("{}", bench::attention(s, 12, 64, t, 20));
            }
        }
    }
}
