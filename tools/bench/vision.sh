#!/usr/bin/env bash
# Image-classifier throughput of aneforge (CPU engine, fp32) next to PyTorch and ONNX Runtime, in
# one session on the same synthetic inputs: EfficientNet-Lite0 (real weights), ResNet-50,
# MobileNetV2 and MobileNetV3-Large (torchvision), ViT-B/16 (Hugging Face, google/vit-base-patch16-224's
# configuration) and CLIP ViT-B/32's image embeddings (openai/clip-vit-base-patch32's
# configuration), all but Lite0 with random weights (ImageNet weights are not available here;
# speed does not depend on them), batch 1 and 8, 1 and 2 threads, each system in its own process.
# Prints one JSON line per measurement and a table with images/s and on-CPU ms per image.
# Usage: tools/bench/vision.sh [PYTHON]   (PYTHON: the argument, else $PYTHON, else python3 on the
# PATH; it needs torch, torchvision, transformers, onnx, onnxruntime and efficientnet-lite-pytorch;
# Lite0's weights come from scripts/fetch-models.sh efficientnet-lite0)
# Environment: RUNS (10), BATCHES ("1 8"), THREADS ("1 2"), MODELS ("efficientnet-lite0 resnet50
# mobilenet_v2 mobilenet_v3_large vit-b16 clip-b32"), PRECISIONS ("f32 bf16": aneforge's --matmul-precision runs; the
# bf16 one, bf16 products on AMX where the CPU has them, is the row "aneforge-bf16").
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${1:-${PYTHON:-python3}}"
RUNS="${RUNS:-10}" BATCHES="${BATCHES:-1 8}" THREADS="${THREADS:-1 2}" PRECISIONS="${PRECISIONS:-f32 bf16}"
MODELS="${MODELS:-efficientnet-lite0 resnet50 mobilenet_v2 mobilenet_v3_large vit-b16 clip-b32}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

echo "# machine"
lscpu | grep -E "Model name|^CPU\(s\)" || true
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
cargo build --release -p aneforge-cli >/dev/null 2>&1
./target/release/aneforge targets | grep '^cpu engine' || true
"$PY" tools/bench/vision_peers.py checkpoint resnet50 "$work/resnet50.pth"
"$PY" tools/bench/vision_peers.py checkpoint mobilenet_v2 "$work/mobilenet_v2.pth"
"$PY" tools/bench/vision_peers.py checkpoint mobilenet_v3_large "$work/mobilenet_v3_large.pth"
"$PY" tools/bench/vision_peers.py checkpoint vit-b16 "$work/vit-b16"
"$PY" tools/bench/vision_peers.py checkpoint clip-b32 "$work/clip-b32" tools/fixtures/vision/out/hf_vit/clip
lite0="$("$PY" - <<'PYEOF'
import glob, os
hub = os.environ.get("HF_HUB_CACHE") or os.path.join(os.environ.get("HF_HOME") or os.path.expanduser("~/.cache/huggingface"), "hub")
hits = glob.glob(os.path.join(hub, "models--ml-illustrated--efficientnet-lite0", "snapshots", "*", "*.pth"))
print(hits[0] if hits else "")
PYEOF
)"
[[ -n "$lite0" ]] || { echo "run scripts/fetch-models.sh efficientnet-lite0 first" >&2; exit 1; }

declare -A path=([efficientnet-lite0]="$lite0" [resnet50]="$work/resnet50.pth"
    [mobilenet_v2]="$work/mobilenet_v2.pth" [mobilenet_v3_large]="$work/mobilenet_v3_large.pth"
    [vit-b16]="$work/vit-b16" [clip-b32]="$work/clip-b32")
for kind in $MODELS; do
    ckpt="${path[$kind]}"
    model="$kind:$ckpt"
    for t in $THREADS; do
        batches="$(tr ' ' ',' <<<"$BATCHES")"
        for precision in $PRECISIONS; do
            label=aneforge; [[ $precision == bf16 ]] && label=aneforge-bf16
            ./target/release/aneforge bench vision -m "$ckpt" --batch-sizes "$batches" --runs "$RUNS" \
                -t "$t" --format jsonl --matmul-precision "$precision" \
                | sed "s/\"system\":\"aneforge\"/\"system\":\"$label\"/" | tee -a "$work/results.jsonl"
        done
        for b in $BATCHES; do
            "$PY" tools/bench/vision_peers.py torch "$model" "$b" "$t" "$RUNS" 2>/dev/null | tee -a "$work/results.jsonl"
            "$PY" tools/bench/vision_peers.py ort "$model" "$b" "$t" "$RUNS" 2>/dev/null | tee -a "$work/results.jsonl"
        done
    done
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"

"$PY" - "$work/results.jsonl" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
def family(name):
    for f in ("efficientnet", "resnet", "mobilenet-v2", "mobilenet_v2", "mobilenet-v3", "mobilenet_v3", "vit", "clip"):
        if name.startswith(f):
            return f.replace("_", "-")
    return name
def key(r):
    return (family(r["model"]), r["batch"], r["threads"])
ours = {key(r): r for r in rows if r["system"] == "aneforge"}
bf16 = {key(r): r for r in rows if r["system"] == "aneforge-bf16"}
print("\n| model | batch | threads | system | images/s (median) | CPU ms/image | aneforge images/s ratio | aneforge CPU advantage | aneforge-bf16 images/s ratio |")
print("|---|---:|---:|---|---:|---:|---:|---:|---:|")
for r in sorted(rows, key=lambda r: (key(r), not r["system"].startswith("aneforge"), r["system"])):
    a, b = ours.get(key(r)), bf16.get(key(r))
    ratio = a["images_per_s"] / r["images_per_s"] if a else float("nan")
    cpu = r["cpu_ms_per_image"] / a["cpu_ms_per_image"] if a else float("nan")
    bratio = b["images_per_s"] / r["images_per_s"] if b else float("nan")
    print(f"| {key(r)[0]} | {r['batch']} | {r['threads']} | {r['system']} | {r['images_per_s']:.1f} | "
          f"{r['cpu_ms_per_image']:.1f} | {ratio:.2f}x | {cpu:.2f}x | {bratio:.2f}x |")
PYEOF
