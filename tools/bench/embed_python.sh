#!/usr/bin/env bash
# The Python package's sentence-embedding throughput next to the CLI it binds (`aneforge bench
# embed`), sentence-transformers on PyTorch and ONNX Runtime, in one session on the same sentences
# (embed.sh's corpus: 256 of 5-60 words, batch 32, 2 threads), each system in its own process, in
# the order CLI, package, PyTorch, ONNX Runtime, then PAIRS times package, CLI (adjacent pairs, so
# load that drifts between pairs cancels in each pair's ratio).
# Prints one JSON line per run and a table with the ratios; docs/python.md quotes it.
# Usage: tools/bench/embed_python.sh [PYTHON]   (a Python with tools/fixtures/requirements.txt;
# the package is built in release and installed into it first). Environment: MODEL, BATCH (32),
# RUNS (5), THREADS (2), SENTENCES (256), PAIRS (3), WHEEL (a release wheel to install instead).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${1:-${PYTHON:-python3}}"
MODEL="${MODEL:-sentence-transformers/all-MiniLM-L6-v2}"
BATCH="${BATCH:-32}" RUNS="${RUNS:-5}" THREADS="${THREADS:-2}" SENTENCES="${SENTENCES:-256}"
PAIRS="${PAIRS:-3}"
export MODEL BATCH RUNS
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

echo "# machine"
lscpu | grep -E "Model name|^CPU\(s\)" || true
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
cargo build --release -p aneforge-cli >/dev/null 2>&1
# WHEEL: an already built release wheel (maturin build --release) instead of building here
"$PY" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps "${WHEEL:-./crates/python}"
"$PY" tools/bench/embed_peers.py corpus "$work/sentences.txt" "$SENTENCES"
"$PY" tools/bench/embed_peers.py export "$work/model.onnx" >/dev/null 2>&1

cli() {
    ./target/release/aneforge bench embed -m "$MODEL" -f "$work/sentences.txt" --batch-size "$BATCH" \
        --runs "$RUNS" --threads "$THREADS" --format jsonl | tee -a "$work/results.jsonl"
}
package() {
    "$PY" tools/bench/embed_python.py "$work/sentences.txt" "$THREADS" | tee -a "$work/results.jsonl"
}
cli
package
"$PY" tools/bench/embed_peers.py torch "$work/sentences.txt" "$THREADS" 2>/dev/null | tee -a "$work/results.jsonl"
"$PY" tools/bench/embed_peers.py ort "$work/sentences.txt" "$work/model.onnx" "$THREADS" 2>/dev/null \
    | tee -a "$work/results.jsonl"
for _ in $(seq "$PAIRS"); do
    package
    cli
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"

"$PY" - "$work/results.jsonl" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
cli = [r for r in rows if "Python" not in r["system"] and r["system"].startswith("aneforge")]
pkg = [r for r in rows if "Python package" in r["system"]]
ref = max(r["sentences_per_s"] for r in cli)
print("\n| system | sentences/s (median) | best | CPU s per pass (median) | peak RSS MiB | ÷ best CLI run |")
print("|---|---:|---:|---:|---:|---:|")
for r in rows:
    print(f"| {r['system']} | {r['sentences_per_s']:.1f} | {r['best_sentences_per_s']:.1f} | "
          f"{r.get('median_cpu_s', float('nan')):.2f} | {r['peak_rss_mib']:.0f} | {r['sentences_per_s'] / ref:.3f} |")
# the i-th CLI and package runs are adjacent (first pair: CLI then package; later: package then CLI)
ratios = sorted(p["median_s"] / c["median_s"] for c, p in zip(cli, pkg))
best = sorted(p["best_s"] / c["best_s"] for c, p in zip(cli, pkg) if "best_s" in p and "best_s" in c)
print("\npackage time over CLI time per adjacent pair (medians): " + ", ".join(f"{r:.3f}" for r in ratios))
print(f"median over the {len(ratios)} pairs: {ratios[len(ratios) // 2]:.3f}")
if best:
    print(f"best runs, median over the pairs: {best[len(best) // 2]:.3f}")
PYEOF
