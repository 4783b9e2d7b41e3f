#!/usr/bin/env bash
# Whisper transcription speed and accuracy of aneforge (CPU engine, fp32 CPU target, greedy; with
# f32 and with bf16 products) next
# to faster-whisper (CTranslate2, int8 and float32, greedy), HF transformers (fp32 greedy) and, when
# WHISPER_CPP_CLI names its whisper-cli, whisper.cpp (fp16 matrices, its default, greedy), one
# after another in one session, on the same CTranslate2 weights (scripts/fetch-models.sh), THREADS
# threads, on speech clips with reference transcripts (CLIP.wav beside CLIP.txt). Per system:
# seconds per clip (aneforge: each clip's transcription time inside one process after a warm-up
# pass, the model's load and compile time printed apart; peers: best of REPEAT after a warm-up run)
# and the word error rate against the references (lowercased, punctuation dropped, hyphens as
# spaces, "mr"/"mrs" spelled out as the references do).
# Usage: tools/bench/whisper.sh SPEECH_DIR [MODEL]   (MODEL: openai/whisper-tiny.en by default)
# Environment: THREADS (2), REPEAT (3), WHISPER_CPP_CLI (a whisper.cpp build's whisper-cli), PYTHON (a Python with faster-whisper, jiwer, transformers,
#   torch; default python3 on the PATH).
set -euo pipefail
cd "$(dirname "$0")/../.."
SPEECH="${1:?usage: tools/bench/whisper.sh SPEECH_DIR [MODEL]}"
MODEL="${2:-openai/whisper-tiny.en}"
THREADS="${THREADS:-2}" REPEAT="${REPEAT:-3}"
PYTHON="${PYTHON:-python3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
clips=("$SPEECH"/*.wav)
echo "# machine"
lscpu | grep -E "Model name|^CPU\(s\)" || true
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
cargo build --release -p aneforge-cli >/dev/null 2>&1
./target/release/aneforge targets | grep '^cpu engine' || true
results="$work/results.jsonl"
# aneforge: the clip list twice in one process; the second pass is timed. Once with exact f32
# products, once with bf16 products (--matmul-precision bf16: AMX tiles where the CPU has them).
for precision in f32 bf16; do
    label=aneforge; [[ $precision == bf16 ]] && label=aneforge-bf16
    ./target/release/aneforge transcribe -m "$MODEL" -q -t "$THREADS" --timings --format json \
        --matmul-precision "$precision" "${clips[@]}" "${clips[@]}" \
        2>"$work/$label.timings" >"$work/$label.json"
    "$PYTHON" - "$work/$label.timings" "$work/$label.json" "${#clips[@]}" "$label" >>"$results" <<'PY'
import json, os, sys
timings = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
texts = json.load(open(sys.argv[2]))
n, label = int(sys.argv[3]), sys.argv[4]
print(json.dumps({"system": label + "-load", "clip": "-", "seconds": timings[0]["load_seconds"],
                  "audio_seconds": 0, "text": ""}))
for t, doc in zip(timings[1 + n:], texts[n:]):
    print(json.dumps({"system": label, "clip": os.path.basename(t["file"]),
                      "seconds": t["seconds"], "audio_seconds": t["audio_seconds"], "text": doc["text"]}))
PY
done
systems="faster-whisper-int8 faster-whisper-fp32 transformers"
[[ -n "${WHISPER_CPP_CLI:-}" ]] && systems="$systems whisper.cpp"
for system in $systems; do
    echo "running $system (load average $(cut -d' ' -f1-3 /proc/loadavg))" >&2
    "$PYTHON" tools/bench/whisper_peers.py "$system" "$MODEL" "${clips[@]}" \
        --threads "$THREADS" --repeat "$REPEAT" ${WHISPER_CPP_CLI:+--whisper-cli "$WHISPER_CPP_CLI"} >>"$results"
done
"$PYTHON" - "$results" "$SPEECH" <<'PY'
import collections, json, os, re, sys
import jiwer
def norm(t):
    t = t.lower().replace("-", " ")
    t = re.sub(r"\bmr\b\.?", "mister", t)
    t = re.sub(r"\bmrs\b\.?", "missus", t)
    t = re.sub(r"[^a-z0-9' ]+", " ", t)
    return " ".join(t.split())
rows = [json.loads(l) for l in open(sys.argv[1])]
by = collections.defaultdict(list)
for r in rows:
    by[r["system"]].append(r)
print(f"{'system':22} {'s/clip':>8} {'x realtime':>10} {'WER':>6}")
for system, rs in by.items():
    if system.endswith("-load"):
        print(f"{system[:-5] + ' load+compile':22} {rs[0]['seconds']:8.3f}")
        continue
    refs = [norm(open(os.path.join(sys.argv[2], r["clip"][:-4] + ".txt")).read()) for r in rs]
    hyps = [norm(r["text"]) for r in rs]
    secs = sum(r["seconds"] for r in rs) / len(rs)
    audio = sum(r["audio_seconds"] for r in rs) / len(rs)
    print(f"{system:22} {secs:8.3f} {audio / secs:10.1f} {jiwer.wer(refs, hyps):6.3f}")
for r in rows:
    if not r["system"].endswith("-load"):
        print(json.dumps(r))
PY
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
