"""PyTorch peer for the CPU engine's conv, attention and GEMV benchmarks (fp32, CPU).

Usage: python peer_torch.py THREADS [--cases conv,attention,gemv] [--conv 64x56,...]
       [--seq 128,512] [--heads 12] [--head-dim 64] [--gemv 4096x4096] [--json]
Default shapes match crates/bench/examples/bench.rs. With --json, one JSON object per figure (read by
`aneforge bench conv|attention|gemv --peer-python`); case names match the CPU engine's.
"""
import argparse
import json
import time

import torch
import torch.nn.functional as F

parser = argparse.ArgumentParser()
parser.add_argument("threads", nargs="?", type=int, default=1)
parser.add_argument("--cases", default="conv,attention,gemv")
parser.add_argument("--conv", default="64x56,128x28,256x14,512x7", help="CHANNELSxSIZE, batch 1")
parser.add_argument("--seq", default="128,512")
parser.add_argument("--heads", type=int, default=12)
parser.add_argument("--head-dim", type=int, default=64)
parser.add_argument("--gemv", default="4096x4096", help="KxN")
parser.add_argument("--json", action="store_true")
args = parser.parse_args()
threads = args.threads
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
    if args.json:
        print(json.dumps({"system": f"torch {torch.__version__}", "case": name, "threads": threads,
                          "best_s": best, "median_s": med, "cpu_s": cpu, "flops": flops}))
        return
    gf = flops / best / 1e9
    oncpu = f"  on-cpu {cpu*1e3:9.3f} ms {flops / cpu / 1e9:7.1f} GFLOP/s" if threads == 1 else ""
    print(f"torch {torch.__version__} {name:<34} threads={threads} best {best*1e3:10.3f} ms  median {med*1e3:10.3f} ms  {gf:8.1f} GFLOP/s{oncpu}")


def main():
    cases = args.cases.split(",")
    if "conv" in cases:
        for c, hw in (map(int, s.split("x")) for s in args.conv.split(",")):
            x = torch.randn(1, c, hw, hw)
            w = torch.randn(c, c, 3, 3) * 0.1
            b = torch.full((c,), 0.01)
            line(f"conv3x3 1x{c}x{hw}x{hw} -> {c}", best_of(lambda: F.conv2d(x, w, b, padding=1), 10), 2 * c * hw * hw * c * 9)
    if "attention" in cases:
        h, d = args.heads, args.head_dim
        for s in (int(v) for v in args.seq.split(",")):
            q, k, v = (torch.randn(1, h, s, d) for _ in range(3))
            line(f"sdpa s={s} heads={h} d={d}", best_of(lambda: F.scaled_dot_product_attention(q, k, v), 20), 4 * h * s * s * d)
    if "gemv" in cases:
        kk, n = map(int, args.gemv.split("x"))
        x = torch.randn(1, kk)
        w = torch.randn(n, kk)
        line(f"gemv linear 1x{kk} -> {n}", best_of(lambda: F.linear(x, w), 50), 2 * kk * n)


if __name__ == "__main__":
    main()
