#!/usr/bin/env bash
# ONNX models imported by aneforge (CPU engine, fp32) beside ONNX Runtime on the same inputs, at 1
# and 2 threads, one after another in one session (tools/bench/onnx_peers.py does the work and
# prints the table). The figures in docs/onnx.md come from this script.
# Usage: tools/bench/onnx.sh [PYTHON]   (a Python with onnxruntime, onnx, numpy, huggingface_hub
#   and torch: tools/fixtures/requirements.txt; the models from scripts/fetch-models.sh)
# Environment: THREADS ("1,2"), RUNS (50).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${1:-${PYTHON:-python3}}"
echo "# machine"
lscpu | grep -E "Model name|^CPU\(s\)" || true
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
cargo build --release -p aneforge-cli >/dev/null 2>&1
./target/release/aneforge targets | grep '^cpu engine' || true
HF_HUB_OFFLINE=1 "$PY" tools/bench/onnx_peers.py --aneforge ./target/release/aneforge \
    --threads "${THREADS:-1,2}" --runs "${RUNS:-50}"
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
