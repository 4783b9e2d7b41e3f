#!/usr/bin/env bash
# `aneforge finetune` (full fine-tune, AdamW) beside transformers/PyTorch on the same model, data,
# batch, sequence length, steps and threads, in one session; reports tokens/s (steps after the
# first) and peak RSS of each, with the load average.
# Usage: tools/bench/finetune.sh [PYTHON] (needs the model in the HF cache: scripts/fetch-models.sh)
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${1:-${PYTHON:-python3}}"
MODEL=HuggingFaceTB/SmolLM2-135M-Instruct
GGUF=SmolLM2-135M-Instruct.Q4_1.gguf
BATCH=${BATCH:-4} SEQ=${SEQ:-128} STEPS=${STEPS:-6} THREADS=${THREADS:-2}
SNAP=$("$PY" -c "from huggingface_hub import snapshot_download as s; print(s('$MODEL', local_files_only=True))")
DATA=data/shakespeare.txt
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
echo "batch $BATCH, seq $SEQ, steps $STEPS, threads $THREADS; load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
cargo build --release -p aneforge-cli >/dev/null 2>&1
./target/release/aneforge targets | grep '^cpu engine' || true
# each layer's activations kept, then recomputed in the backward (--checkpointing)
for recompute in "" --checkpointing; do
  echo "aneforge finetune ${recompute:-(activations kept)}"
  /usr/bin/time -f "aneforge peak RSS %M KiB" ./target/release/aneforge finetune -t "$THREADS" -m "$MODEL" \
    --data "$DATA" --batch "$BATCH" --seq "$SEQ" --steps "$STEPS" $recompute -o "$OUT/full" 2>&1 |
    awk '/tokens\/s/ { n++; if (n > 1) { s += $(NF-1); k++ } } /peak RSS/ { print } END { if (k) printf "aneforge: %.0f tokens/s (mean of steps 2..)\n", s / k }'
done
OMP_NUM_THREADS=$THREADS "$PY" tools/bench/finetune_peer.py "$SNAP" "$GGUF" "$DATA" "$BATCH" "$SEQ" "$STEPS" "$THREADS" 2>/dev/null
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
