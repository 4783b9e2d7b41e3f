#!/usr/bin/env bash
# LLM prefill and decode speed of aneforge (CPU engine) next to llama.cpp (llama-cpp-python, the
# same GGUF) and HF transformers (fp32, KV cache), one after another in one session: batch 1, each
# thread count of THREADS, a PROMPT-token prompt (Shakespeare, the same text for every system) and
# DECODE greedy tokens with EOS ignored, best of REPEAT timed runs after a warm-up run (the first
# run, timed separately with the load). Weight formats: SmolLM2-135M-Instruct's Q4_1 GGUF from
# scripts/fetch-models.sh, Q8_0 and F16 GGUFs that llama.cpp's quantizer makes from it
# (requantized, so both systems read identical blocks), and Gemma 3 270M's Q4_K_M GGUF (Q4_K, Q6_K, Q5_0 and
# Q8_0 blocks; scripts/fetch-models.sh gemma3-270m). Each system runs in its own process; wall and
# CPU seconds, peak RSS, load, time to first token (load, setup and the cold prefill, in a fresh
# process) and first-run seconds and the load average are printed, then a table
# with the ratios. The figures in docs/performance.md come from this script.
# Usage: tools/bench/llm.sh
# Environment: THREADS ("1 2"), PROMPT (128), DECODE (128), REPEAT (3), FORMATS ("q4_1 q8_0 f16
#   gemma3_q4_k_m"),
#   ACTIVATIONS (aneforge's modes to run, "int16": the CLI's default; f32 is the exact mode, int8
#   llama.cpp's scheme), CACHE_TYPES (unset: each system's default KV cache, aneforge f32 and
#   llama.cpp f16; else e.g. "f16 q8_0": both systems with each cache type, llama.cpp with flash
#   attention), CTX (both systems' context; unset: aneforge the prompt and decoded tokens,
#   llama.cpp 512), LLAMACPP_PYTHON (a Python with llama-cpp-python)
#   and REF_PYTHON (one with transformers), both defaulting to $PYTHON, else python3 on the PATH.
set -euo pipefail
cd "$(dirname "$0")/../.."
THREADS="${THREADS:-1 2}" PROMPT="${PROMPT:-128}" DECODE="${DECODE:-128}" REPEAT="${REPEAT:-3}"
FORMATS="${FORMATS:-q4_1 q8_0 f16 gemma3_q4_k_m}"
PYTHON="${PYTHON:-python3}"
LLAMACPP_PYTHON="${LLAMACPP_PYTHON:-$PYTHON}"
export LLAMACPP_PYTHON REF_PYTHON="${REF_PYTHON:-$PYTHON}"
MODEL=HuggingFaceTB/SmolLM2-135M-Instruct
HUB="${HF_HUB_CACHE:-${HF_HOME:-$HOME/.cache/huggingface}/hub}"
Q4_1="$(find "$HUB/models--HuggingFaceTB--SmolLM2-135M-Instruct/snapshots" -name 'SmolLM2-135M-Instruct.Q4_1.gguf' 2>/dev/null | head -n1)"
[[ -n "$Q4_1" ]] || { echo "SmolLM2 Q4_1 GGUF not found under $HUB; run scripts/fetch-models.sh smollm2" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
load() { cut -d' ' -f1-3 /proc/loadavg; }

echo "# machine"
lscpu | grep -E "Model name|^CPU\(s\)|Flags" | sed 's/\(Flags:\).*\(avx512f\).*/\1 ... \2 .../' || true
echo "load average at start: $(load)"
cargo build --release -p aneforge-cli >/dev/null 2>&1
./target/release/aneforge targets | grep '^cpu engine' || true
python3 tools/bench/llm_peers.py --print-prompt --prompt "$PROMPT" >"$work/prompt.txt"
results="$work/results.jsonl"

for format in $FORMATS; do
    case "$format" in
        q4_1) gguf="$Q4_1" ;;
        gemma3_q4_k_m)
            gguf="$(find "$HUB/models--hugginllam--gemma-3-270m-Q4_K_M-GGUF/snapshots" -name 'gemma-3-270m-q4_k_m.gguf' 2>/dev/null | head -n1)"
            [[ -n "$gguf" ]] || { echo "Gemma 3 270M GGUF not found under $HUB; run scripts/fetch-models.sh gemma3-270m" >&2; exit 1; }
            ;;
        q8_0 | f16)
            gguf="$work/SmolLM2-135M-Instruct.${format^^}.gguf"
            "$LLAMACPP_PYTHON" - "$Q4_1" "$gguf" "$format" >/dev/null 2>&1 <<'PYEOF'
import sys

import llama_cpp

p = llama_cpp.llama_model_quantize_default_params()
p.ftype = {"q8_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0, "f16": llama_cpp.LLAMA_FTYPE_MOSTLY_F16}[sys.argv[3]]
p.allow_requantize = True
sys.exit(llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), p))
PYEOF
            ;;
        *) echo "unknown format $format (q4_1, q8_0, f16, gemma3_q4_k_m)" >&2; exit 1 ;;
    esac
    for threads in $THREADS; do
        tag="{\"format\": \"$format\", \"run_threads\": $threads, "
        echo "# $format, $threads threads: load average $(load)"
        for cache in ${CACHE_TYPES:-default}; do
            ctag="$tag\"run_cache\": \"$cache\", "
            ours=() theirs=()
            [[ -n "${CTX:-}" ]] && ours+=(--ctx "$CTX") && theirs+=(--ctx "$CTX")
            [[ "$cache" != default ]] && ours+=(--cache-type "$cache") && theirs+=(--cache-type "$cache" --flash-attn)
            for activations in ${ACTIVATIONS:-int16}; do
                ./target/release/aneforge bench llm -m "$gguf" --threads "$threads" \
                    --prompt-tokens "$PROMPT" --decode-tokens "$DECODE" --repeat "$REPEAT" \
                    --prompt-file "$work/prompt.txt" --activations "$activations" --format jsonl \
                    "${ours[@]}" | sed "s/^{/$ctag/" | tee -a "$results"
            done
            peers="llama.cpp"
            [[ "$format" == q4_1 && "$cache" == default ]] && peers="llama.cpp,transformers"
            python3 tools/bench/llm_peers.py --gguf "$gguf" --peers "$peers" --threads "$threads" \
                --prompt "$PROMPT" --decode "$DECODE" --repeat "$REPEAT" "${theirs[@]}" \
                | sed "s/^{/$ctag/" | tee -a "$results"
        done
    done
done
echo "load average at end: $(load)"

python3 - "$results" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
print("\n| weights | threads | system | activations | KV cache | prefill tok/s | decode tok/s | decode CPU s / wall s | peak RSS MiB "
      "| load s | first token s | first run s | ÷ llama.cpp prefill / decode | RSS ÷ llama.cpp |")
print("|---|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
fmt2 = lambda v: "n/a" if v is None else f"{v:.2f}"
run = lambda r: (r["format"], r["run_threads"], r["run_cache"])
for key in dict.fromkeys(run(r) for r in rows):
    group = [r for r in rows if run(r) == key]
    cpp = next((r for r in group if r.get("peer") == "llama.cpp" and "decode_tok_s" in r), None)
    for r in group:
        if "error" in r:
            print(f"| {key[0]} | {key[1]} | {r['peer']} | | | error: {r['error'][-200:]!r} | | | | | | | | |")
            continue
        # each aneforge mode against llama.cpp, each peer against llama.cpp
        if cpp and r is not cpp:
            speed = f"{r['prefill_tok_s'] / cpp['prefill_tok_s']:.2f}x / {r['decode_tok_s'] / cpp['decode_tok_s']:.2f}x"
            rss = f"{r['peak_rss_mb'] / cpp['peak_rss_mb']:.2f}x"
        else:
            speed = rss = "n/a"
        cpu = r.get("decode_cpu_s")
        cpu = f"{cpu:.2f} / {r['decode_wall_s']:.2f}" if cpu is not None else "n/a"
        name = r["peer"] if r["peer"] != "transformers" else "transformers fp32"
        print(f"| {key[0]} | {key[1]} | {name} | {r.get('activations', '')} | {r.get('cache_type', '')} | {r['prefill_tok_s']:.1f} | {r['decode_tok_s']:.1f} | {cpu} | "
              f"{r['peak_rss_mb']:.0f} | {fmt2(r.get('load_s'))} | {fmt2(r.get('ttft_s'))} | {fmt2(r.get('first_run_s'))} | {speed} | {rss} |")
PYEOF
