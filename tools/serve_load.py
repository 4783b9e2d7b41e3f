"""A bounded loopback load test of `aneforge serve`: C concurrent clients (threads of the official
OpenAI client) each send R chat requests; prints errors, p50/p99 latency and the aggregate
generated tokens per second, with the machine's load (`uptime`) before and after.

usage: python3 tools/serve_load.py ANEFORGE_BINARY [--clients 16] [--requests 20]
       [--max-tokens 32] [--parallel 2] [--threads 2]
"""

import argparse
import concurrent.futures
import statistics
import subprocess
import sys
import threading
import time

import openai

LLM = "HuggingFaceTB/SmolLM2-135M-Instruct"
QUESTIONS = ["What is the capital of France?", "Name three colours.", "What is 2 + 2?",
             "Write one sentence about the sea.", "Who wrote Hamlet?"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    proc = subprocess.Popen(
        [args.binary, "serve", "-m", LLM, "--host", "127.0.0.1", "--port", "0", "--ctx", "512",
         "--parallel", str(args.parallel), "-t", str(args.threads)],
        stderr=subprocess.PIPE, text=True)
    base = None
    for line in proc.stderr:
        if "on http://" in line:
            base = "http://" + line.split("on http://", 1)[1].split()[0]
            break
    if base is None:
        raise SystemExit("the server did not start")
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=600)

    def one(i):
        t = time.perf_counter()
        r = client.chat.completions.create(
            model=LLM, messages=[{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}],
            temperature=0.7, seed=i, max_tokens=args.max_tokens)
        return time.perf_counter() - t, r.usage.completion_tokens

    def worker(c):
        out = []
        for j in range(args.requests):
            try:
                out.append(one(c * args.requests + j))
            except Exception as e:  # counted, reported
                out.append(e)
        return out

    load_before = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(args.clients) as pool:
        results = [r for rs in pool.map(worker, range(args.clients)) for r in rs]
    wall = time.perf_counter() - started
    load_after = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    proc.terminate()
    proc.wait(timeout=120)
    errors = [r for r in results if isinstance(r, Exception)]
    ok = sorted(r[0] for r in results if not isinstance(r, Exception))
    tokens = sum(r[1] for r in results if not isinstance(r, Exception))
    p = lambda q: ok[min(len(ok) - 1, int(q * len(ok)))]
    print(f"clients {args.clients} x requests {args.requests}, max_tokens {args.max_tokens}, "
          f"--parallel {args.parallel}, -t {args.threads}")
    print(f"requests: {len(results)}, errors: {len(errors)} {errors[:3]}")
    if ok:
        print(f"latency p50 {p(0.5):.2f} s, p99 {p(0.99):.2f} s, mean {statistics.mean(ok):.2f} s")
    print(f"generated tokens: {tokens} in {wall:.1f} s: {tokens / wall:.1f} tokens/s aggregate")
    print(f"uptime before: {load_before}\nuptime after:  {load_after}")
    if errors:
        sys.exit(1)


if __name__ == "__main__":
    main()
