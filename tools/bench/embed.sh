#!/usr/bin/env bash
# Sentence-embedding throughput of aneforge (CPU engine) next to sentence-transformers on PyTorch
# and on ONNX Runtime, in one session on the same sentences (256 of 5-60 words, batch 32, 2
# threads), each system in its own process. Prints one JSON line per system and a summary with
# the ratios; the figures in docs/performance.md come from this script. On a shared machine wall
# time is noisy, so every system also reports its median on-CPU time per pass (user + system of
# its process): aneforge's comes from a second process running the same encoder through the
# `embed_cpu_time` example of aneforge-models, the peers' from time.process_time.
# Usage: tools/bench/embed.sh [PYTHON]   (PYTHON: the argument, else $PYTHON, else python3 on the
# PATH; it needs tools/fixtures/requirements.txt; the model comes from scripts/fetch-models.sh minilm)
# Environment: MODEL, BATCH (32), RUNS (5), THREADS (2), SENTENCES (256).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${1:-${PYTHON:-python3}}"
MODEL="${MODEL:-sentence-transformers/all-MiniLM-L6-v2}"
BATCH="${BATCH:-32}" RUNS="${RUNS:-5}" THREADS="${THREADS:-2}" SENTENCES="${SENTENCES:-256}"
export MODEL BATCH RUNS
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

echo "# machine"
lscpu | grep -E "Model name|^CPU\(s\)" || true
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
cargo build --release -p aneforge-cli >/dev/null 2>&1
./target/release/aneforge targets | grep '^cpu engine' || true
cargo build --release -p aneforge-models --example embed_cpu_time >/dev/null 2>&1
"$PY" tools/bench/embed_peers.py corpus "$work/sentences.txt" "$SENTENCES"
"$PY" tools/bench/embed_peers.py export "$work/model.onnx" >/dev/null 2>&1

./target/release/aneforge bench embed -m "$MODEL" -f "$work/sentences.txt" --batch-size "$BATCH" \
    --runs "$RUNS" --threads "$THREADS" --format jsonl | tee "$work/results.jsonl"
./target/release/examples/embed_cpu_time "$MODEL" "$work/sentences.txt" "$BATCH" "$RUNS" \
    | tee "$work/cpu.jsonl"
"$PY" tools/bench/embed_peers.py torch "$work/sentences.txt" "$THREADS" 2>/dev/null | tee -a "$work/results.jsonl"
"$PY" tools/bench/embed_peers.py ort "$work/sentences.txt" "$work/model.onnx" "$THREADS" 2>/dev/null \
    | tee -a "$work/results.jsonl"
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"

"$PY" - "$work/results.jsonl" "$work/cpu.jsonl" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
cpu = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")]
ours = rows[0]
ours["median_cpu_s"] = cpu[0]["median_cpu_s"] if cpu else float("nan")
print(f"\n| system | sentences/s (median) | best | first pass s | peak RSS MiB | aneforge speed-up "
      f"| CPU s per pass (median) | aneforge CPU advantage |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for r in rows:
    ratio = ours["sentences_per_s"] / r["sentences_per_s"]
    cpu_ratio = r["median_cpu_s"] / ours["median_cpu_s"]
    print(f"| {r['system']} | {r['sentences_per_s']:.1f} | {r['best_sentences_per_s']:.1f} | "
          f"{r['first_pass_s']:.2f} | {r['peak_rss_mib']:.0f} | {ratio:.2f}x | "
          f"{r['median_cpu_s']:.2f} | {cpu_ratio:.2f}x |")
PYEOF
