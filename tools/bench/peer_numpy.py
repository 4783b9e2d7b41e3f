"""NumPy/OpenBLAS peer for the CPU engine's SGEMM benchmark.

Usage: python peer_numpy.py THREADS [--sizes 1024,4096] [--json]
The BLAS thread count must be fixed before numpy is imported, so each thread count runs in its own
process. Prints one line per figure in the same layout as `cargo run --example bench`, or with
--json one JSON object per figure (read by `aneforge bench gemm --peer-python`).
"""
import argparse
import json
import os

parser = argparse.ArgumentParser()
parser.add_argument("threads", nargs="?", default="1")
parser.add_argument("--sizes", default="1024,4096")
parser.add_argument("--json", action="store_true")
args = parser.parse_args()
threads = args.threads
for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = threads

import time  # noqa: E402

import numpy as np  # noqa: E402


def best_of(fn, reps):
    """(best wall, median wall, mean on-CPU time of this thread) over >= reps runs and >= 0.3 s."""
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


def main():
    rng = np.random.default_rng(7)
    for n in (int(s) for s in args.sizes.split(",")):
        reps = 3 if n >= 2048 else 10
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        c = np.empty((n, n), dtype=np.float32)
        best, med, cpu = best_of(lambda: np.matmul(a, b, out=c), reps)
        if args.json:
            print(json.dumps({"system": f"numpy {np.__version__}", "case": f"sgemm {n}x{n}x{n}",
                              "threads": int(threads), "best_s": best, "median_s": med,
                              "cpu_s": cpu, "flops": 2 * n**3}))
            continue
        gf = 2 * n**3 / best / 1e9
        oncpu = f"  on-cpu {cpu*1e3:9.3f} ms {2 * n**3 / cpu / 1e9:7.1f} GFLOP/s" if threads == "1" else ""
        print(f"numpy {np.__version__} sgemm {n}x{n}x{n}  threads={threads} best {best*1e3:10.3f} ms  median {med*1e3:10.3f} ms  {gf:8.1f} GFLOP/s{oncpu}")


if __name__ == "__main__":
    main()
