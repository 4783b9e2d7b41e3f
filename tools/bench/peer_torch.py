"""PyTorch peer for the CPU engine's conv, attention and GEMV benchmarks (fp32, CPU).

Usage: python peer_torch.py THREADS
Shapes match crates/cpu/examples/bench.rs.
"""
import sys
import time

import torch
import torch.nn.functional as F

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
torch.set_num_threads(threads)
torch.manual_seed(7)


def best_of(fn, reps):
    """(best wall, median wall, mean on-CPU time of this thread) over >= reps runs and >= 0.3 s."""
    with torch.inference_mode():
        fn()
        times = []
        start = time.perf_counter()
        c0 = time.thread_time()
        while len(times) < reps or time.perf_counter() - start < 0.3:
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        cpu = (time.thread_time() - c0) / len(times)
    times.sort()
    return times[0], times[len(times) // 2], cpu


def line(name, stats, flops):
    best, med, cpu = stats
    gf = flops / best / 1e9
    oncpu = f"  on-cpu {cpu*1e3:9.3f} ms {flops / cpu / 1e9:7.1f} GFLOP/s" if threads == 1 else ""
    print(f"torch {torch.__version__} {name:<34} threads={threads} best {best*1e3:10.3f} ms  median {med*1e3:10.3f} ms  {gf:8.1f} GFLOP/s{oncpu}")


def main():
    for c, hw in ((64, 56), (128, 28), (256, 14), (512, 7)):
        x = torch.randn(1, c, hw, hw)
        w = torch.randn(c, c, 3, 3) * 0.1
        b = torch.full((c,), 0.01)
        line(f"conv3x3 1x{c}x{hw}x{hw} -> {c}", best_of(lambda: F.conv2d(x, w, b, padding=1), 10), 2 * c * hw * hw * c * 9)
    for s in (128, 512):
        q, k, v = (torch.randn(1, 12, s, 64) for _ in range(3))
        line(f"sdpa s={s} heads=12 d=64", best_of(lambda: F.scaled_dot_product_attention(q, k, v), 20), 4 * 12 * s * s * 64)
    x = torch.randn(1, 4096)
    w = torch.randn(4096, 4096)
    line("gemv linear 1x4096 -> 4096", best_of(lambda: F.linear(x, w), 50), 2 * 4096 * 4096)


if __name__ == "__main__":
    main()
