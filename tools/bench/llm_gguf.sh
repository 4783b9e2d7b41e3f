#!/usr/bin/env bash
# LLM prefill and decode speed of aneforge (CPU engine) next to llama.cpp's own llama-bench on the
# same GGUF files, one after another in one session, and greedy agreement with llama-completion.
# For the families with no small published GGUF (Qwen3-MoE, Mixtral, Phi-3, Gemma 2) the files
# come from tools/bench/llm_random_gguf.py (random weights, real architectures). Per file: aneforge
# `bench llm` (mixtures of experts twice: --experts sparse and dense), llama-bench (-p PROMPT
# -n DECODE -r REPEAT, its mean), each with peak RSS and the load average; then AGREE greedy tokens
# of a short prompt from `aneforge generate --temperature 0 --ignore-eos` and `llama-completion
# --temp 0 --ignore-eos`, compared as text (the length of the common prefix). Both systems use
# 8-bit activations against the quantized weights (llama.cpp's scheme; ACTIVATIONS=f32 for exact).
# Usage: LLAMA_CPP_BIN=DIR tools/bench/llm_gguf.sh FILE.gguf...
#   DIR holds llama-bench and llama-completion (a CMake build of llama.cpp).
# Environment: THREADS (2), PROMPT (128), DECODE (64), REPEAT (3), AGREE (32), ACTIVATIONS (int8).
set -euo pipefail
cd "$(dirname "$0")/../.."
THREADS="${THREADS:-2}" PROMPT="${PROMPT:-128}" DECODE="${DECODE:-64}" REPEAT="${REPEAT:-3}"
AGREE="${AGREE:-32}" ACTIVATIONS="${ACTIVATIONS:-int8}"
BIN="${LLAMA_CPP_BIN:?set LLAMA_CPP_BIN to the directory holding llama-bench and llama-completion}"
[[ $# -gt 0 ]] || { echo "usage: LLAMA_CPP_BIN=DIR $0 FILE.gguf..." >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
load() { cut -d' ' -f1-3 /proc/loadavg; }
results="$work/results.jsonl"

echo "# machine"
lscpu | grep -E "Model name|^CPU\(s\)" || true
echo "load average at start: $(load)"
cargo build --release -p aneforge-cli >/dev/null 2>&1
python3 tools/bench/llm_peers.py --print-prompt >"$work/prompt.txt"
short="ROMEO: But soft, what light through yonder window breaks?"

for gguf in "$@"; do
    name="$(basename "$gguf" .gguf)"
    modes="sparse"
    head -c 4000000 "$gguf" | grep -aq expert_count && modes="sparse dense"
    for mode in $modes; do
        echo "# $name, aneforge --experts $mode: load average $(load)"
        ./target/release/aneforge bench llm -m "$gguf" --threads "$THREADS" \
            --prompt-tokens "$PROMPT" --decode-tokens "$DECODE" --repeat "$REPEAT" \
            --prompt-file "$work/prompt.txt" --activations "$ACTIVATIONS" --experts "$mode" \
            --format jsonl | sed "s/^{/{\"file\": \"$name\", /" | tee -a "$results"
    done
    echo "# $name, llama-bench: load average $(load)"
    /usr/bin/time -f "%M" -o "$work/rss" "$BIN/llama-bench" -m "$gguf" -t "$THREADS" \
        -p "$PROMPT" -n "$DECODE" -r "$REPEAT" -o json >"$work/bench.json" 2>"$work/bench.err" \
        || { tail -5 "$work/bench.err" >&2; continue; }
    python3 - "$work/bench.json" "$work/rss" "$name" "$THREADS" <<'PYEOF' | tee -a "$results"
import json, sys
runs = json.load(open(sys.argv[1]))
rss_kb = int(open(sys.argv[2]).read().split()[-1])
pp = next(r for r in runs if r["n_prompt"] > 0 and r["n_gen"] == 0)
tg = next(r for r in runs if r["n_gen"] > 0 and r["n_prompt"] == 0)
print(json.dumps({"file": sys.argv[3], "peer": "llama.cpp", "experts": "sparse",
                  "threads": int(sys.argv[4]), "prefill_tok_s": pp["avg_ts"],
                  "decode_tok_s": tg["avg_ts"], "peak_rss_mb": rss_kb / 1024,
                  "version": pp.get("build_commit", "")}))
PYEOF
    ./target/release/aneforge generate -m "$gguf" --threads "$THREADS" -p "$short" -n "$AGREE" \
        --temperature 0 --ignore-eos --activations "$ACTIVATIONS" >"$work/ours.txt" 2>/dev/null
    "$BIN/llama-completion" -m "$gguf" -t "$THREADS" -p "$short" -n "$AGREE" --temp 0 \
        --ignore-eos -no-cnv --no-warmup >"$work/theirs.txt" 2>/dev/null </dev/null || true
    python3 - "$work/ours.txt" "$work/theirs.txt" "$short" "$name" <<'PYEOF' | tee -a "$work/agree.txt"
import sys
ours = open(sys.argv[1], encoding="utf-8", errors="replace").read().strip()
theirs = open(sys.argv[2], encoding="utf-8", errors="replace").read()
theirs = theirs.split(sys.argv[3], 1)[-1].strip()
n = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
print(f"{sys.argv[4]}: greedy text agrees for {n} of {len(ours)} characters "
      f"(aneforge {ours[:60]!r}; llama.cpp {theirs[:60]!r})")
PYEOF
done
echo "load average at end: $(load)"

python3 - "$results" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
print("\n| file | system | experts | prefill tok/s | decode tok/s | peak RSS MiB |")
print("|---|---|---|---:|---:|---:|")
for r in rows:
    print(f"| {r['file']} | {r['peer']} | {r.get('experts', '')} | {r['prefill_tok_s']:.1f} | "
          f"{r['decode_tok_s']:.1f} | {r['peak_rss_mb']:.0f} |")
PYEOF
cat "$work/agree.txt" 2>/dev/null || true
