#!/usr/bin/env bash
# Runs the CPU engine's benchmarks and their peers (NumPy/OpenBLAS, PyTorch) in one session, so the
# figures in docs/performance.md are side by side on the same machine and load.
# Usage: tools/bench/run.sh [PYTHON]   (PYTHON: the argument, else $PYTHON, else python3 on the
# PATH; it needs the packages pinned in tools/bench/requirements.txt)
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${1:-${PYTHON:-python3}}"
echo "# machine"
lscpu | grep -E "Model name|^CPU\(s\)|Flags" | sed 's/Flags:.*avx512f.*/Flags: (avx512f avx512bw avx512vl fma f16c present)/'
grep -m1 "cpu MHz" /proc/cpuinfo
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
cargo build --release -p aneforge-bench --example bench >/dev/null 2>&1
echo "# aneforge-cpu"
./target/release/examples/bench all
if "$PY" -c "import numpy" 2>/dev/null; then
  echo "# peers"
  for t in 1 2; do "$PY" tools/bench/peer_numpy.py "$t"; done
  if "$PY" -c "import torch" 2>/dev/null; then
    for t in 1 2; do "$PY" tools/bench/peer_torch.py "$t"; done
  else
    echo "torch not available in $PY: conv/attention peers skipped"
  fi
else
  echo "numpy not available in $PY: peers skipped"
fi
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
