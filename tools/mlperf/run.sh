#!/usr/bin/env bash
# MLPerf Inference ResNet-50, SingleStream and Offline in performance mode, on MLPerf's LoadGen
# with aneforge (the Python package, release build, CPU engine, fp32) as the system under test.
# Usage: tools/mlperf/run.sh PYTHON TORCH_PYTHON CACHE_DIR IMAGES_DIR [OUT_DIR]
#   PYTHON        a virtualenv's python with tools/mlperf/requirements.txt installed; the aneforge
#                 package is built into it here (maturin develop --release)
#   TORCH_PYTHON  a python with torch and torchvision (tools/fixtures/requirements.txt), which
#                 writes the random-weight ResNet-50 into CACHE_DIR once
#   IMAGES_DIR    the query sample library's photos (e.g. scikit-image's data folder:
#                 scripts/fetch-models.sh skimage-data)
#   OUT_DIR       LoadGen's logs, one folder per scenario (default tools/mlperf/results)
# Environment: MIN_DURATION (seconds per scenario, 30; MLPerf's rules ask 600), THREADS (the CPU
# engine's worker threads, every core by default), BATCH (Offline's batch, 8).
set -euo pipefail
cd "$(dirname "$0")/../.."
[[ $# -ge 4 ]] || { sed -n 2,14p "$0" >&2; exit 2; }
PY="$1" TORCH_PY="$2" CACHE="$3" IMAGES="$4" OUT="${5:-tools/mlperf/results}"
MIN_DURATION="${MIN_DURATION:-30}" BATCH="${BATCH:-8}"
threads=()
[[ -n "${THREADS:-}" ]] && threads=(--threads "$THREADS")

venv="$(dirname "$(dirname "$PY")")"
VIRTUAL_ENV="$venv" "$venv/bin/maturin" develop --release --quiet --manifest-path crates/python/Cargo.toml
model="$CACHE/resnet50_random.pth"
[[ -f "$model" ]] || "$TORCH_PY" tools/mlperf/make_resnet50.py "$CACHE"

# Offline's rules ask at least 24576 samples; here its sample count follows user.conf's
# target_qps × MIN_DURATION instead (--min-query-count 1). SingleStream keeps the rules' 100.
declare -A extra=([SingleStream]="--batch-size 1" [Offline]="--batch-size $BATCH --min-query-count 1")
for scenario in SingleStream Offline; do
    dir="$OUT/$(tr '[:upper:]' '[:lower:]' <<<"$scenario")"
    echo "# $scenario: load average at start $(cut -d' ' -f1-3 /proc/loadavg)"
    "$PY" tools/mlperf/harness.py --model "$model" --images "$IMAGES" --scenario "$scenario" \
        --min-duration "$MIN_DURATION" ${extra[$scenario]} --output-dir "$dir" "${threads[@]}" >/dev/null
    echo "# $scenario: load average at end $(cut -d' ' -f1-3 /proc/loadavg)"
    grep -E "Scenario|Mode|Result is|90th percentile latency|Samples per second|Min duration satisfied|Min queries satisfied" \
        "$dir/mlperf_log_summary.txt"
done
